#pragma once
// Flags for tenant isolation of the prefix cache, shared by `strata router` and `strata worker`
// (the mixed role serves the API itself): the cluster's block hash key, per-API-key default
// cache salts, and hiding cached_tokens from clients.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "args.h"
#include "strata/common/block_hash.h"
#include "strata/openai/rate_limit.h"

namespace strata::cli {

struct TenantFlags {
  std::string kv_hash_key_file;
  std::vector<std::string> api_key_cache_salts;  // "key-N=SALT" as given
  bool hide_cached_tokens = false;
  std::string rate_limit;                        // "rpm:N,tpm:M" as given
  std::vector<std::string> api_key_rate_limits;  // "key-N=rpm:..,tpm:.." as given
};

// Registers --kv-hash-key-file, --api-key-cache-salt, --hide-cached-tokens, --rate-limit and
// --api-key-rate-limit.
void AddTenantFlags(ArgParser& parser, TenantFlags* flags);

struct TenantSettings {
  std::shared_ptr<const BlockHashKey> kv_hash_key;  // null without --kv-hash-key-file
  std::vector<std::string> api_key_cache_salts;     // parallel to the API keys; "" : none
  bool hide_cached_tokens = false;
  openai::RateLimit rate_limit;
  std::vector<std::optional<openai::RateLimit>> api_key_rate_limits;  // parallel to the keys
};

// Reads the key file (and notes its fingerprint on stderr) and maps each "key-N=SALT" onto the N-th of `num_api_keys` keys.
// InvalidArgument (naming the flag) for a malformed or out-of-range entry, a salt that is empty
// or too long, or a bad key file.
absl::StatusOr<TenantSettings> ResolveTenantFlags(const TenantFlags& flags, size_t num_api_keys);

}  // namespace strata::cli
