#pragma once
// The status type shared by the in-tree plugins (plugins/cpu, plugins/cuda). A plugin links no
// strata C++ library (it sees only the C ABI), so it carries this small one: an ABI status code
// plus a message that the entry points copy into the backend's last_error.
#include <sstream>
#include <string>
#include <utility>

#include "strata/plugin/abi.h"

namespace strata::plugin_common {

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

// "<op>: <message>" with code INVALID_ARGUMENT (the caller's fault).
template <typename... Args>
Status InvalidArgument(const char* op, const Args&... args) {
  return Status(STRATA_ERR_INVALID_ARGUMENT, Cat(op, ": ", args...));
}

// "<op>: <message>" with code UNSUPPORTED (valid, but this backend does not implement it).
template <typename... Args>
Status Unsupported(const char* op, const Args&... args) {
  return Status(STRATA_ERR_UNSUPPORTED, Cat(op, ": ", args...));
}

}  // namespace strata::plugin_common

#define STRATA_PLUGIN_RETURN_IF_ERROR(expr)                    \
  do {                                                         \
    ::strata::plugin_common::Status strata_plugin_s_ = (expr); \
    if (!strata_plugin_s_.ok()) return strata_plugin_s_;       \
  } while (0)
