#pragma once
// A small status type for the CPU plugin's internals. The plugin links nothing of strata's C++
// libraries (it only sees the C ABI), so it carries its own: an ABI status code plus a message
// that the entry points copy into the backend's last_error.
#include <sstream>
#include <string>
#include <utility>

#include "strata/plugin/abi.h"

namespace strata::cpu {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(strata_status code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == STRATA_OK; }
  strata_status code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  strata_status code_ = STRATA_OK;
  std::string message_;
};

// Concatenates anything streamable; only used to build error messages.
template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// "<op>: <message>" with code INVALID_ARGUMENT.
template <typename... Args>
Status InvalidArgument(const char* op, const Args&... args) {
  return Status(STRATA_ERR_INVALID_ARGUMENT, Cat(op, ": ", args...));
}

template <typename... Args>
Status Unsupported(const char* op, const Args&... args) {
  return Status(STRATA_ERR_UNSUPPORTED, Cat(op, ": ", args...));
}

}  // namespace strata::cpu

#define STRATA_CPU_RETURN_IF_ERROR(expr)           \
  do {                                             \
    ::strata::cpu::Status strata_cpu_s_ = (expr);  \
    if (!strata_cpu_s_.ok()) return strata_cpu_s_; \
  } while (0)
