#pragma once
// Wiring between the policy registry (placement.cc) and the built-in policies
// (placement_policies.cc, placement_goodput.cc).
#include <functional>
#include <string>

#include "strata/router/placement_policy.h"

namespace strata::router::internal {

using RegisterFn = std::function<void(const std::string&, PlacementPolicyFactory)>;

// round-robin, least-loaded, kv-aware, kv-cost.
void RegisterBuiltinPolicies(const RegisterFn& add);
// goodput.
void RegisterGoodputPolicy(const RegisterFn& add);

}  // namespace strata::router::internal
