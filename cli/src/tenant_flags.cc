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
}

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
    const size_t eq = entry.find('=');
    absl::string_view id = absl::string_view(entry).substr(0, eq);
    size_t index = 0;
    const bool ok_id = eq != std::string::npos && absl::ConsumePrefix(&id, "key-") &&
                       absl::SimpleAtoi(id, &index) && index < num_api_keys;
    if (!ok_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--api-key-cache-salt: expected key-N=SALT with N below the number of --api-key (",
          num_api_keys, "), got '", entry, "'"));
    }
    const std::string salt = entry.substr(eq + 1);
    if (salt.empty() || salt.size() > SamplingParams::kMaxCacheSaltBytes) {
      return absl::InvalidArgumentError(absl::StrCat("--api-key-cache-salt: the salt of key-",
                                                     index, " must be 1 to ",
                                                     SamplingParams::kMaxCacheSaltBytes, " bytes"));
    }
    if (out.api_key_cache_salts.size() <= index) out.api_key_cache_salts.resize(index + 1);
    out.api_key_cache_salts[index] = salt;
  }
  return out;
}

}  // namespace strata::cli
