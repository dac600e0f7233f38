// Lexer for the chat-template Jinja subset: template text, {{ }}, {% %}, {# #}, and the
// expression tokens inside tags.
#include <cctype>

#include "absl/strings/str_cat.h"
#include "chat_template_ast.h"

namespace strata::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  explicit Lexer(absl::string_view src) : src_(src) {}

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      size_t start = FindTagStart(pos_);
      std::string text(src_.substr(pos_, start - pos_));
      if (start == src_.size()) {
        Emit(Token::Type::kText, std::move(text), pos_);
        break;
      }
      char kind = src_[start + 1];
      char marker = start + 2 < src_.size() ? src_[start + 2] : '\0';
      StripBeforeTag(kind, marker, &text);
      Emit(Token::Type::kText, std::move(text), pos_);
      pos_ = start + 2 + ((marker == '-' || marker == '+') ? 1 : 0);
      absl::Status st = kind == '#' ? SkipComment(start) : LexTag(kind, start);
      if (!st.ok()) return st;
    }
    tokens_.push_back({Token::Type::kEof, "", src_.size()});
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) {
        return k;
      }
    }
    return src_.size();
  }

  void Emit(Token::Type type, std::string text, size_t pos) {
    if (type == Token::Type::kText && text.empty()) return;
    tokens_.push_back({type, std::move(text), pos});
  }

  // `{%-` strips all preceding whitespace; lstrip_blocks strips spaces and tabs between the
  // start of the line and a block or comment tag unless the tag opens with `+`.
  void StripBeforeTag(char kind, char marker, std::string* text) const {
    if (marker == '-') {
      size_t end = text->size();
      while (end > 0 && IsSpace((*text)[end - 1])) --end;
      text->resize(end);
      return;
    }
    if (kind == '{' || marker == '+') return;
    size_t line_start = text->rfind('\n');
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    bool line_starting = pos_ == 0 || src_[pos_ - 1] == '\n';
    if (line_start == 0 && !line_starting) return;
    for (size_t k = line_start; k < text->size(); ++k) {
      if ((*text)[k] != ' ' && (*text)[k] != '\t') return;
    }
    text->resize(line_start);
  }

  // After a tag: `-` strips all following whitespace; trim_blocks drops one newline after a
  // block or comment tag unless it closes with `+`.
  void AfterTag(char kind, bool dash, bool plus) {
    if (dash) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
    } else if (kind != '{' && !plus) {
      if (src_.substr(pos_, 1) == "\n") {
        pos_ += 1;
      } else if (src_.substr(pos_, 2) == "\r\n") {
        pos_ += 2;
      }
    }
  }

  absl::Status SkipComment(size_t start) {
    size_t end = src_.find("#}", pos_);
    if (end == absl::string_view::npos) return SyntaxError(src_, start, "unclosed comment");
    bool dash = end > pos_ && src_[end - 1] == '-';
    bool plus = end > pos_ && src_[end - 1] == '+';
    pos_ = end + 2;
    AfterTag('#', dash, plus);
    return absl::OkStatus();
  }

  absl::Status LexTag(char kind, size_t start) {
    Emit(kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", start);
    const char close = kind == '{' ? '}' : '%';
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) return SyntaxError(src_, start, "unclosed tag");
      char c = src_[pos_];
      bool dash = c == '-' || c == '+';
      size_t at = pos_ + (dash ? 1 : 0);
      if (depth == 0 && src_.substr(at, 2) == std::string({close, '}'})) {
        pos_ = at + 2;
        Emit(kind == '{' ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", at);
        AfterTag(kind, c == '-', c == '+');
        return absl::OkStatus();
      }
      absl::Status st = LexToken(&depth);
      if (!st.ok()) return st;
    }
  }

  absl::Status LexToken(int* depth) {
    size_t start = pos_;
    char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        ++pos_;
      }
      Emit(Token::Type::kName, std::string(src_.substr(start, pos_ - start)), start);
      return absl::OkStatus();
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return LexNumber();
    if (c == '\'' || c == '"') return LexString();
    static constexpr absl::string_view kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
    for (absl::string_view op : kTwo) {
      if (src_.substr(pos_, 2) == op) {
        pos_ += 2;
        Emit(Token::Type::kOp, std::string(op), start);
        return absl::OkStatus();
      }
    }
    if (absl::string_view("+-*/%~<>=()[]{}.,:|").find(c) == absl::string_view::npos) {
      return SyntaxError(src_, start,
                         absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') ++*depth;
    if (c == ')' || c == ']' || c == '}') --*depth;
    ++pos_;
    Emit(Token::Type::kOp, std::string(1, c), start);
    return absl::OkStatus();
  }

  absl::Status LexNumber() {
    size_t start = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (pos_ < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        ++pos_;
      }
    };
    digits();
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t save = pos_++;
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
      if (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        is_float = true;
        digits();
      } else {
        pos_ = save;
      }
    }
    std::string text;
    for (char d : src_.substr(start, pos_ - start)) {
      if (d != '_') text += d;
    }
    Emit(is_float ? Token::Type::kFloat : Token::Type::kInt, std::move(text), start);
    return absl::OkStatus();
  }

  absl::Status LexString() {
    size_t start = pos_;
    char quote = src_[pos_++];
    std::string out;
    while (pos_ < src_.size() && src_[pos_] != quote) {
      char c = src_[pos_++];
      if (c != '\\' || pos_ >= src_.size()) {
        out += c;
        continue;
      }
      char e = src_[pos_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
        case '\'':
        case '"':
          out += e;
          break;
        case '\n':
          break;
        default:
          out += '\\';
          out += e;
      }
    }
    if (pos_ >= src_.size()) return SyntaxError(src_, start, "unterminated string literal");
    ++pos_;
    Emit(Token::Type::kString, std::move(out), start);
    return absl::OkStatus();
  }

  absl::string_view src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

absl::Status SyntaxError(absl::string_view source, size_t pos, absl::string_view msg) {
  size_t line = 1, col = 1;
  for (size_t k = 0; k < pos && k < source.size(); ++k) {
    if (source[k] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("chat template line ", line, " column ", col, ": ", msg));
}

absl::StatusOr<std::vector<Token>> Lex(absl::string_view source) { return Lexer(source).Run(); }

}  // namespace strata::jinja
