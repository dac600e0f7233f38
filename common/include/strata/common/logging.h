#pragma once
// Minimal leveled logging to stderr and loud crashes for impossible states.
// Thread-safe: each message is written with one fwrite.
#include <sstream>
#include <string_view>

namespace strata {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Messages below this level are dropped. Default kInfo; STRATA_LOG_LEVEL=debug|info|warning|error.
LogLevel MinLogLevel();
void SetMinLogLevel(LogLevel level);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // flushes; aborts for kFatal
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace strata

#define STRATA_LOG(level)                                       \
  if (::strata::LogLevel::k##level < ::strata::MinLogLevel()) { \
  } else                                                        \
    ::strata::LogMessage(::strata::LogLevel::k##level, __FILE__, __LINE__).stream()

// An impossible state: crash with a message, in every build type.
#define STRATA_CHECK(cond)                                                        \
  if (cond) {                                                                     \
  } else                                                                          \
    ::strata::LogMessage(::strata::LogLevel::kFatal, __FILE__, __LINE__).stream() \
        << "Check failed: " #cond " "
