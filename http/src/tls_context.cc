#include "tls_context.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "strata/common/logging.h"

namespace strata::http::internal {
namespace {

// The latest OpenSSL error as text ("" if none), and the queue cleared.
std::string OpenSslError() {
  const unsigned long error = ERR_peek_last_error();
  ERR_clear_error();
  if (error == 0) return "unknown error";
  const char* reason = ERR_reason_error_string(error);
  return reason != nullptr ? reason : absl::StrCat("error ", error);
}

absl::Status FileError(const std::string& what, const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": ", why));
}

// A clearer reason than OpenSSL's for the common case of a missing or unreadable file.
absl::Status CheckReadable(const std::string& what, const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return FileError(what, path, std::strerror(errno));
  std::fclose(file);
  return absl::OkStatus();
}

std::string Subject(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return "?";
  X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string out(data, size > 0 ? size_t(size) : 0);
  BIO_free(bio);
  return out.empty() ? "(empty subject)" : out;
}

absl::Time NotAfter(X509* cert) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return absl::InfinitePast();
  return absl::FromTimeT(timegm(&tm));
}

// ALPN: HTTP/1.1 is the only protocol this server speaks. A client offering none of it
// continues without ALPN (it may still speak HTTP/1.1).
int SelectAlpn(SSL*, const unsigned char** out, unsigned char* out_len, const unsigned char* in,
               unsigned int in_len, void*) {
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, out_len, kHttp11, sizeof(kHttp11), in, in_len) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

absl::Status UseClientCa(SSL_CTX* ctx, const std::string& path) {
  if (auto s = CheckReadable("--http-tls-client-ca", path); !s.ok()) return s;
  if (SSL_CTX_load_verify_locations(ctx, path.c_str(), nullptr) != 1) {
    return FileError("--http-tls-client-ca", path, OpenSslError());
  }
  STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(path.c_str());
  if (names == nullptr) {
    return FileError("--http-tls-client-ca", path, "no CA certificate in the file");
  }
  SSL_CTX_set_client_CA_list(ctx, names);  // takes ownership
  // Asked for, verified when sent, required per request (Session): see TlsOptions.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  return absl::OkStatus();
}

absl::Status UseKey(SSL_CTX* ctx, X509* leaf, const TlsOptions& options) {
  BIO* bio = BIO_new_file(options.key_file.c_str(), "rb");
  EVP_PKEY* key =
      bio != nullptr ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(bio);
  if (key == nullptr) {
    return FileError("--http-tls-key", options.key_file,
                     "not a PEM private key (" + OpenSslError() + ")");
  }
  absl::Status status;
  if (X509_check_private_key(leaf, key) != 1) {
    status = FileError("--http-tls-key", options.key_file,
                       "the key does not belong to the certificate " + options.cert_file);
  } else if (SSL_CTX_use_PrivateKey(ctx, key) != 1) {
    status = FileError("--http-tls-key", options.key_file, OpenSslError());
  }
  EVP_PKEY_free(key);
  ERR_clear_error();
  return status;
}

}  // namespace

absl::StatusOr<TlsContext::Built> TlsContext::Build(const TlsOptions& options) {
  if (options.cert_file.empty() || options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "HTTPS needs both --http-tls-cert and --http-tls-key (PEM files)");
  }
  if (auto s = CheckReadable("--http-tls-cert", options.cert_file); !s.ok()) return s;
  if (auto s = CheckReadable("--http-tls-key", options.key_file); !s.ok()) return s;
  ERR_clear_error();
  Built built;
  built.ctx.reset(SSL_CTX_new(TLS_server_method()));
  SSL_CTX* ctx = built.ctx.get();
  if (ctx == nullptr) return absl::InternalError("http: SSL_CTX_new failed: " + OpenSslError());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // A client closing without close_notify is an ordinary end of the connection (HTTP frames
  // its own messages); renegotiation is a denial-of-service lever nobody needs.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION);
  // Partial writes and a moving buffer fit asio's write loop; idle connections give their
  // buffers back (thousands of keep-alive connections).
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  static const unsigned char kSessionContext[] = "strata-http";
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof(kSessionContext) - 1);
  SSL_CTX_set_alpn_select_cb(ctx, SelectAlpn, nullptr);
  if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1) {
    return FileError("--http-tls-cert", options.cert_file, OpenSslError());
  }
  X509* leaf = SSL_CTX_get0_certificate(ctx);
  if (auto s = UseKey(ctx, leaf, options); !s.ok()) return s;
  if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
    return FileError("--http-tls-cert", options.cert_file, "the certificate is not valid yet");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
    return FileError("--http-tls-cert", options.cert_file, "the certificate has expired");
  }
  if (!options.client_ca_file.empty()) {
    if (auto s = UseClientCa(ctx, options.client_ca_file); !s.ok()) return s;
  }
  built.subject = Subject(leaf);
  built.not_after = NotAfter(leaf);
  return built;
}

absl::StatusOr<std::unique_ptr<TlsContext>> TlsContext::Load(const TlsOptions& options) {
  if (options.handshake_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("http: the TLS handshake timeout must be positive");
  }
  std::unique_ptr<TlsContext> context(new TlsContext(options));
  auto built = Build(options);
  if (!built.ok()) return built.status();
  absl::MutexLock lock(&context->mu_);
  context->stamps_ = context->StampFiles();
  context->current_ = *std::move(built);
  context->next_check_ = absl::Now() + options.reload_interval;
  return context;
}

std::vector<TlsContext::Stamp> TlsContext::StampFiles() const {
  std::vector<Stamp> stamps;
  for (const std::string* path :
       {&options_.cert_file, &options_.key_file, &options_.client_ca_file}) {
    Stamp stamp;
    struct stat st {};
    // stat follows symbolic links: a Kubernetes Secret volume swaps the directory they point to.
    if (!path->empty() && ::stat(path->c_str(), &st) == 0) {
      stamp = Stamp{st.st_dev, st.st_ino, int64_t(st.st_size),
                    int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    }
    stamps.push_back(stamp);
  }
  return stamps;
}

void TlsContext::MaybeReload() {
  const absl::Time now = absl::Now();
  if (now < next_check_) return;
  next_check_ = now + options_.reload_interval;
  std::vector<Stamp> stamps = StampFiles();
  if (stamps == stamps_ || stamps == failed_stamps_) return;
  auto built = Build(options_);
  if (!built.ok()) {
    // Often a rotation caught half way; tried again once the files change once more.
    STRATA_LOG(Warning) << "http: TLS files changed but do not load (keeping the previous "
                           "certificate): "
                        << built.status().message();
    failed_stamps_ = std::move(stamps);
    return;
  }
  current_ = *std::move(built);
  stamps_ = std::move(stamps);
  failed_stamps_.clear();
  STRATA_LOG(Info) << "http: TLS certificate reloaded: " << current_.subject << ", expires "
                   << absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", current_.not_after,
                                       absl::UTCTimeZone());
}

SslCtxPtr TlsContext::ForNewConnection() {
  absl::MutexLock lock(&mu_);
  MaybeReload();
  SSL_CTX_up_ref(current_.ctx.get());
  return SslCtxPtr(current_.ctx.get());
}

std::string TlsContext::description() const {
  absl::MutexLock lock(&mu_);
  return absl::StrCat(
      "HTTPS, certificate ", current_.subject, ", expires ",
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", current_.not_after, absl::UTCTimeZone()),
      options_.client_ca_file.empty() ? "" : ", client certificates required");
}

}  // namespace strata::http::internal
