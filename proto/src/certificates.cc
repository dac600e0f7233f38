#include "strata/proto/certificates.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace strata::proto {
namespace {

template <auto Free>
struct Deleter {
  template <typename T>
  void operator()(T* p) const {
    Free(p);
  }
};
using Bio = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509_free>>;
using Store = std::unique_ptr<X509_STORE, Deleter<X509_STORE_free>>;
using StoreCtx = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX_free>>;
using CertStack =
    std::unique_ptr<STACK_OF(X509),
                    Deleter<[](STACK_OF(X509) * s) { sk_X509_pop_free(s, X509_free); }>>;

// The oldest error OpenSSL queued (the root cause), and clears the queue.
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

absl::Status Failed(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", OpenSslError()));
}

Bio ReadBio(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

// Every certificate in a PEM text, in order; empty when none parses.
std::vector<Cert> ReadCerts(const std::string& pem) {
  std::vector<Cert> out;
  Bio bio = ReadBio(pem);
  while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(c);
  ERR_clear_error();  // the end of the text reads as an error
  return out;
}

Key ReadKey(const std::string& pem) {
  Bio bio = ReadBio(pem);
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return key;
}

absl::StatusOr<PemKeyPair> ToPem(X509* cert, EVP_PKEY* key) {
  Bio c(BIO_new(BIO_s_mem())), k(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_X509(c.get(), cert) != 1) return Failed("writing a certificate");
  if (PEM_write_bio_PrivateKey(k.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Failed("writing a private key");
  }
  return PemKeyPair{BioText(c.get()), BioText(k.get())};
}

absl::Status AddName(X509_NAME* name, const char* field, const std::string& value) {
  if (X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(value.c_str()), -1, -1,
                                 0) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("certificate name ", field, "='", value, "': ", OpenSslError()));
  }
  return absl::OkStatus();
}

absl::Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const std::string& value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value.c_str());
  if (ext == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("certificate extension ", OBJ_nid2sn(nid), "='",
                                                   value, "': ", OpenSslError()));
  }
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? absl::OkStatus() : Failed("adding a certificate extension");
}

// A new certificate for `key` with a random 127-bit serial, valid from five minutes ago (clock
// skew between machines) for `validity`, named CN=`common_name`,O=strata.
absl::StatusOr<Cert> NewCert(EVP_PKEY* key, const std::string& common_name,
                             absl::Duration validity) {
  Cert cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return Failed("creating a certificate");
  std::unique_ptr<BIGNUM, Deleter<BN_free>> serial(BN_new());
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return Failed("drawing a serial number");
  }
  const long seconds = static_cast<long>(absl::ToInt64Seconds(validity));
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), -300) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), seconds) == nullptr) {
    return Failed("setting the validity");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (auto s = AddName(name, "O", "strata"); !s.ok()) return s;
  if (auto s = AddName(name, "CN", common_name); !s.ok()) return s;
  if (X509_set_pubkey(cert.get(), key) != 1) return Failed("setting the public key");
  return cert;
}

absl::StatusOr<Key> NewKey() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) return Failed("generating a P-256 key");
  return key;
}

std::string SanList(const LeafSpec& spec) {
  std::vector<std::string> parts;
  for (const auto& d : spec.dns_names) parts.push_back("DNS:" + d);
  for (const auto& ip : spec.ip_addresses) parts.push_back("IP:" + ip);
  for (const auto& uri : spec.uris) parts.push_back("URI:" + uri);
  return absl::StrJoin(parts, ",");
}

std::string NameText(X509_NAME* name) {
  Bio bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253);
  return BioText(bio.get());
}

std::vector<std::string> UriNames(X509* cert) {
  std::vector<std::string> out;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type != GEN_URI) continue;
    const ASN1_STRING* s = n->d.uniformResourceIdentifier;
    out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
  }
  GENERAL_NAMES_free(names);
  return out;
}

absl::Time NotAfter(X509* cert) {
  struct tm tm {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return absl::InfinitePast();
  return absl::FromTimeT(timegm(&tm));
}

}  // namespace

absl::StatusOr<PemKeyPair> MakeCertificateAuthority(const std::string& common_name,
                                                    absl::Duration validity) {
  absl::StatusOr<Key> key = NewKey();
  if (!key.ok()) return key.status();
  absl::StatusOr<Cert> cert = NewCert(key->get(), common_name, validity);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(c)) != 1) return Failed("setting the issuer");
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, c, c, nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                                   {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                   {NID_subject_key_identifier, "hash"}}) {
    if (auto s = AddExtension(c, &ctx, nid, value); !s.ok()) return s;
  }
  if (X509_sign(c, key->get(), EVP_sha256()) == 0) return Failed("signing the CA certificate");
  return ToPem(c, key->get());
}

absl::StatusOr<PemKeyPair> IssueLeafCertificate(const PemKeyPair& ca, const LeafSpec& spec) {
  std::vector<Cert> ca_certs = ReadCerts(ca.cert_pem);
  Key ca_key = ReadKey(ca.key_pem);
  if (ca_certs.empty() || !ca_key) {
    return absl::InvalidArgumentError("the CA certificate or its key does not parse");
  }
  X509* issuer = ca_certs.front().get();
  absl::StatusOr<Key> key = NewKey();
  if (!key.ok()) return key.status();
  absl::StatusOr<Cert> cert = NewCert(key->get(), spec.common_name, spec.validity);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(issuer)) != 1) {
    return Failed("setting the issuer");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, c, nullptr, nullptr, 0);
  std::vector<std::pair<int, std::string>> extensions = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
      {NID_ext_key_usage, "serverAuth,clientAuth"},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid:always"}};
  if (const std::string san = SanList(spec); !san.empty()) {
    extensions.emplace_back(NID_subject_alt_name, san);
  }
  for (const auto& [nid, value] : extensions) {
    if (auto s = AddExtension(c, &ctx, nid, value); !s.ok()) return s;
  }
  if (X509_sign(c, ca_key.get(), EVP_sha256()) == 0) return Failed("signing a certificate");
  return ToPem(c, key->get());
}

absl::StatusOr<CertificateSummary> CheckCertificateChain(const std::string& ca_pem,
                                                         const std::string& cert_pem,
                                                         const std::string& key_pem) {
  std::vector<Cert> cas = ReadCerts(ca_pem);
  if (cas.empty()) return absl::InvalidArgumentError("the CA file holds no PEM certificate");
  std::vector<Cert> chain = ReadCerts(cert_pem);
  if (chain.empty()) {
    return absl::InvalidArgumentError("the certificate file holds no PEM certificate");
  }
  Key key = ReadKey(key_pem);
  if (!key) return absl::InvalidArgumentError("the key file holds no PEM private key");
  X509* leaf = chain.front().get();
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the private key does not belong to the certificate");
  }
  Store store(X509_STORE_new());
  for (const Cert& ca : cas) X509_STORE_add_cert(store.get(), ca.get());
  CertStack intermediates(sk_X509_new_null());
  for (size_t i = 1; i < chain.size(); ++i) {
    X509_up_ref(chain[i].get());
    sk_X509_push(intermediates.get(), chain[i].get());
  }
  StoreCtx ctx(X509_STORE_CTX_new());
  if (!store || !ctx || !intermediates ||
      X509_STORE_CTX_init(ctx.get(), store.get(), leaf, intermediates.get()) != 1) {
    return Failed("setting up certificate verification");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "the certificate does not verify against the CA: ", X509_verify_cert_error_string(err)));
  }
  return CertificateSummary{NameText(X509_get_subject_name(leaf)), UriNames(leaf), NotAfter(leaf)};
}

absl::Status WritePrivateFile(const std::string& path, const std::string& text, int mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(e)));
    }
    done += static_cast<size_t>(n);
  }
  // The mode of a file that existed before is not changed by open().
  const bool chmod_ok = fchmod(fd, static_cast<mode_t>(mode)) == 0;
  const int chmod_errno = errno;
  if (close(fd) != 0 || !chmod_ok) {
    return absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(chmod_ok ? errno : chmod_errno)));
  }
  return absl::OkStatus();
}

}  // namespace strata::proto
