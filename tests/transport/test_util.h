#pragma once
// Helpers shared by the transport tests and their peer process: length-prefixed frames over a
// stream socket (the stand-in for the gRPC control plane) and a content hash.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace strata::transport::testing {

inline bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

inline bool SendFrame(int fd, std::string_view bytes) {
  const uint32_t n = static_cast<uint32_t>(bytes.size());
  return WriteAll(fd, &n, sizeof(n)) && WriteAll(fd, bytes.data(), bytes.size());
}

inline std::optional<std::string> RecvFrame(int fd) {
  uint32_t n = 0;
  if (!ReadAll(fd, &n, sizeof(n))) return std::nullopt;
  std::string out(n, '\0');
  if (!ReadAll(fd, out.data(), n)) return std::nullopt;
  return out;
}

// FNV-1a over a byte range: the peer reports what it sees, the test compares.
inline uint64_t Fnv1a(const char* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ull;
  }
  return h;
}

// Deterministic non-trivial byte pattern: byte i of stream `seed`.
inline char PatternByte(uint64_t seed, uint64_t i) {
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ (seed * 0xbf58476d1ce4e5b9ull);
  x ^= x >> 29;
  return static_cast<char>(x & 0xff);
}

}  // namespace strata::transport::testing
