#pragma once
// A small declarative flag parser for subcommands: `--name value`, `--name=value`, boolean
// `--flag`, repeatable flags. Unknown flags and bad values are errors with a one-line reason.
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace strata::cli {

class ArgParser {
 public:
  ArgParser(std::string usage, std::string description)
      : usage_(std::move(usage)), description_(std::move(description)) {}

  void AddString(const std::string& name, std::string* out, const std::string& help);
  void AddInt(const std::string& name, int* out, const std::string& help);
  void AddInt64(const std::string& name, long long* out, const std::string& help);
  void AddDouble(const std::string& name, double* out, const std::string& help);
  void AddBool(const std::string& name, bool* out, const std::string& help);  // no value
  void AddRepeated(const std::string& name, std::vector<std::string>* out, const std::string& help);
  // Positional arguments (anything not starting with "--"); default: none allowed.
  void AllowPositional(std::vector<std::string>* out, const std::string& help);

  // Returns InvalidArgument with a one-line reason. Sets help_requested() on --help / -h.
  absl::Status Parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_requested_; }
  // Whether the last Parse() saw flag `name` ("--kv-cache-mb"), so a default can be told apart
  // from the same value given explicitly.
  bool given(const std::string& name) const { return given_.contains(name); }
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    bool takes_value = true;
    std::string default_text;
    std::function<absl::Status(const std::string&)> set;
  };
  std::string usage_;
  std::string description_;
  std::vector<Flag> flags_;
  std::vector<std::string>* positional_ = nullptr;
  std::string positional_help_;
  bool help_requested_ = false;
  std::set<std::string> given_;
};

}  // namespace strata::cli
