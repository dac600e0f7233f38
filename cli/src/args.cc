#include "args.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata::cli {

void ArgParser::AddString(const std::string& name, std::string* out, const std::string& help) {
  flags_.push_back({name, help, true, out->empty() ? "" : *out, [out](const std::string& v) {
                      *out = v;
                      return absl::OkStatus();
                    }});
}

void ArgParser::AddInt(const std::string& name, int* out, const std::string& help) {
  flags_.push_back({name, help, true, std::to_string(*out), [out, name](const std::string& v) {
                      if (!absl::SimpleAtoi(v, out)) {
                        return absl::InvalidArgumentError(
                            absl::StrCat(name, " expects an integer, got '", v, "'"));
                      }
                      return absl::OkStatus();
                    }});
}

void ArgParser::AddInt64(const std::string& name, long long* out, const std::string& help) {
  flags_.push_back({name, help, true, std::to_string(*out), [out, name](const std::string& v) {
                      int64_t parsed;
                      if (!absl::SimpleAtoi(v, &parsed)) {
                        return absl::InvalidArgumentError(
                            absl::StrCat(name, " expects an integer, got '", v, "'"));
                      }
                      *out = parsed;
                      return absl::OkStatus();
                    }});
}

void ArgParser::AddDouble(const std::string& name, double* out, const std::string& help) {
  flags_.push_back(
      {name, help, true, absl::StrFormat("%g", *out), [out, name](const std::string& v) {
         if (!absl::SimpleAtod(v, out)) {
           return absl::InvalidArgumentError(
               absl::StrCat(name, " expects a number, got '", v, "'"));
         }
         return absl::OkStatus();
       }});
}

void ArgParser::AddBool(const std::string& name, bool* out, const std::string& help) {
  flags_.push_back({name, help, false, "", [out](const std::string&) {
                      *out = true;
                      return absl::OkStatus();
                    }});
}

void ArgParser::AddRepeated(const std::string& name, std::vector<std::string>* out,
                            const std::string& help) {
  flags_.push_back({name, help + " (repeatable)", true, "", [out](const std::string& v) {
                      out->push_back(v);
                      return absl::OkStatus();
                    }});
}

void ArgParser::AllowPositional(std::vector<std::string>* out, const std::string& help) {
  positional_ = out;
  positional_help_ = help;
}

absl::Status ArgParser::Parse(const std::vector<std::string>& args) {
  given_.clear();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return absl::OkStatus();
    }
    if (!arg.starts_with("--")) {
      if (positional_ == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
      }
      positional_->push_back(arg);
      continue;
    }
    std::string name = arg;
    std::string value;
    bool has_inline_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_inline_value = true;
    }
    const Flag* flag = nullptr;
    for (const auto& f : flags_) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", name, " (see --help)"));
    }
    if (flag->takes_value && !has_inline_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      }
      value = args[++i];
    } else if (!flag->takes_value && has_inline_value) {
      return absl::InvalidArgumentError(absl::StrCat(name, " takes no value"));
    }
    if (absl::Status st = flag->set(value); !st.ok()) return st;
    given_.insert(name);
  }
  return absl::OkStatus();
}

std::string ArgParser::Help() const {
  std::string out = absl::StrCat("usage: ", usage_, "\n\n", description_, "\n");
  if (positional_ != nullptr) absl::StrAppend(&out, "\n  ", positional_help_, "\n");
  if (!flags_.empty()) absl::StrAppend(&out, "\nflags:\n");
  for (const auto& f : flags_) {
    std::string left = f.takes_value ? absl::StrCat(f.name, " VALUE") : f.name;
    absl::StrAppend(&out, absl::StrFormat("  %-24s %s", left, f.help));
    if (!f.default_text.empty()) absl::StrAppend(&out, " [default: ", f.default_text, "]");
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, absl::StrFormat("  %-24s %s\n", "--help", "show this help"));
  return out;
}

}  // namespace strata::cli
