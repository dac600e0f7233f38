#include "tenant_flags.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "strata/types/sampling.h"

namespace strata::cli {

void AddTenantFlags(ArgParser& parser, TenantFlags* flags) {
  parser.AddString("--kv-hash-key-file", &flags->kv_hash_key_file,
                   "file holding the cluster's secret block hash key (16 to 4096 bytes; the "
                   "router and every worker need the same one; empty: unkeyed hashes)");
  parser.AddRepeated("--api-key-cache-salt", &flags->api_key_cache_salts,
                     "key-N=SALT: requests authorized by the N-th --api-key (from 0) that send no "
                     "cache_salt use SALT (repeatable)");
  parser.AddBool("--hide-cached-tokens", &flags->hide_cached_tokens,
                 "report usage.prompt_tokens_details.cached_tokens as 0 to clients");
  parser.AddString("--rate-limit", &flags->rate_limit,
                   "rpm:N,tpm:M: requests and tokens (prompt + max_tokens) per minute for each API "
                   "key (all requests together without keys); 429 with Retry-After beyond");
  parser.AddRepeated("--api-key-rate-limit", &flags->api_key_rate_limits,
                     "key-N=rpm:..,tpm:..: the N-th --api-key's own limits instead of "
                     "--rate-limit (repeatable)");
}

namespace {

// "key-N=VALUE" with N below `num_api_keys`: N and VALUE; InvalidArgument naming `flag`.
absl::Status SplitKeyEntry(const std::string& flag, const std::string& entry, size_t num_api_keys,
                           const char* value_name, size_t* index, std::string* value) {
  const size_t eq = entry.find('=');
  absl::string_view id = absl::string_view(entry).substr(0, eq);
  const bool ok_id = eq != std::string::npos && absl::ConsumePrefix(&id, "key-") &&
                     absl::SimpleAtoi(id, index) && *index < num_api_keys;
  if (!ok_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": expected key-N=", value_name, " with N below the number of --api-key (",
        num_api_keys, "), got '", entry, "'"));
  }
  *value = entry.substr(eq + 1);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TenantSettings> ResolveTenantFlags(const TenantFlags& flags, size_t num_api_keys) {
  TenantSettings out;
  out.hide_cached_tokens = flags.hide_cached_tokens;
  if (!flags.kv_hash_key_file.empty()) {
    auto key = BlockHashKey::FromFile(flags.kv_hash_key_file);
    if (!key.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv-hash-key-file: ", key.status().message()));
    }
    out.kv_hash_key = *std::move(key);
    // The fingerprint, never the key: what to compare when a worker is refused.
    std::fprintf(stderr, "block hashes keyed with %s (key fingerprint %s)\n",
                 flags.kv_hash_key_file.c_str(), out.kv_hash_key->fingerprint().c_str());
  }
  for (const std::string& entry : flags.api_key_cache_salts) {
    size_t index = 0;
    std::string salt;
    if (absl::Status s = SplitKeyEntry("--api-key-cache-salt", entry, num_api_keys, "SALT",
                                       &index, &salt);
        !s.ok()) {
      return s;
    }
    if (salt.empty() || salt.size() > SamplingParams::kMaxCacheSaltBytes) {
      return absl::InvalidArgumentError(absl::StrCat("--api-key-cache-salt: the salt of key-",
                                                     index, " must be 1 to ",
                                                     SamplingParams::kMaxCacheSaltBytes, " bytes"));
    }
    if (out.api_key_cache_salts.size() <= index) out.api_key_cache_salts.resize(index + 1);
    out.api_key_cache_salts[index] = salt;
  }
  if (!flags.rate_limit.empty()) {
    auto limit = ParseRateLimit(flags.rate_limit);
    if (!limit.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--rate-limit: ", limit.status().message()));
    }
    out.rate_limit = *limit;
  }
  for (const std::string& entry : flags.api_key_rate_limits) {
    size_t index = 0;
    std::string spec;
    if (absl::Status s = SplitKeyEntry("--api-key-rate-limit", entry, num_api_keys,
                                       "rpm:N,tpm:M", &index, &spec);
        !s.ok()) {
      return s;
    }
    auto limit = ParseRateLimit(spec);
    if (!limit.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--api-key-rate-limit: key-", index, ": ",
                                                     limit.status().message()));
    }
    if (out.api_key_rate_limits.size() <= index) out.api_key_rate_limits.resize(index + 1);
    out.api_key_rate_limits[index] = *limit;
  }
  return out;
}

}  // namespace strata::cli
