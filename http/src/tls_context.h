#pragma once
// The server's TLS settings (OpenSSL SSL_CTX) built from its PEM files, and their rotation: the
// files are checked for change at most every reload_interval, and a changed set that loads
// replaces the context for connections accepted after it. Open connections keep the context
// they were made with (each SSL object holds a reference to its SSL_CTX).
#include <openssl/ssl.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "strata/http/server.h"

namespace strata::http::internal {

struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;

class TlsContext {
 public:
  // Loads the files; InvalidArgument naming the file and the reason (missing, not PEM, the key
  // does not match the certificate, the certificate is expired or not yet valid).
  static absl::StatusOr<std::unique_ptr<TlsContext>> Load(const TlsOptions& options);

  // A new reference to the context for a connection accepted now (the caller frees it with
  // SSL_CTX_free, or hands it to SSL_new and frees its own). Reloads first if the check is due
  // and the files changed. Thread-safe.
  SslCtxPtr ForNewConnection();

  // "HTTPS, certificate <subject>, expires <time>" for the context in use.
  std::string description() const;

 private:
  // What identifies a version of one file: a rename or rewrite changes one of these.
  struct Stamp {
    dev_t device = 0;
    ino_t inode = 0;
    int64_t size = -1;
    int64_t mtime_ns = -1;
    bool operator==(const Stamp&) const = default;
  };
  struct Built {
    SslCtxPtr ctx;
    std::string subject;
    absl::Time not_after;
  };

  explicit TlsContext(const TlsOptions& options) : options_(options) {}
  static absl::StatusOr<Built> Build(const TlsOptions& options);
  std::vector<Stamp> StampFiles() const;
  void MaybeReload() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TlsOptions options_;
  mutable absl::Mutex mu_;
  Built current_ ABSL_GUARDED_BY(mu_);
  std::vector<Stamp> stamps_ ABSL_GUARDED_BY(mu_);         // of the files current_ came from
  std::vector<Stamp> failed_stamps_ ABSL_GUARDED_BY(mu_);  // last set that did not load
  absl::Time next_check_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::http::internal
