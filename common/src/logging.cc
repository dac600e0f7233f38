#include "strata/common/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace strata {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("STRATA_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  std::string_view v(env);
  if (v == "debug") return LogLevel::kDebug;
  if (v == "warning") return LogLevel::kWarning;
  if (v == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& MinLevelStorage() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "D";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kWarning:
      return "W";
    case LogLevel::kError:
      return "E";
    case LogLevel::kFatal:
      return "F";
  }
  return "?";
}

}  // namespace

LogLevel MinLogLevel() { return static_cast<LogLevel>(MinLevelStorage().load()); }
void SetMinLogLevel(LogLevel level) { MinLevelStorage().store(static_cast<int>(level)); }

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  stream_ << LevelName(level) << " " << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  std::string text = stream_.str();
  std::fwrite(text.data(), 1, text.size(), stderr);
  if (level_ == LogLevel::kFatal) {
    std::fflush(stderr);
    std::abort();
  }
}

}  // namespace strata
