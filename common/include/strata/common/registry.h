#pragma once
// A typed by-name registry of factories: the in-process extension points (routing policies,
// eviction policies) register a factory under a name and are created by the name their config
// gives. A component keeps one registry in a function-local static whose initializer adds the
// built-ins, so a static library's registrations cannot be dropped by the linker.
//
// Thread-safety: every method is thread-safe; a factory is called outside the registry's lock.
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"

namespace strata {

namespace registry_internal {
template <typename T>
struct IsStatusOr : std::false_type {};
template <typename T>
struct IsStatusOr<absl::StatusOr<T>> : std::true_type {};
}  // namespace registry_internal

// `Factory` is a callable type such as std::function<std::unique_ptr<Policy>(int64_t)>.
template <typename Factory>
class FactoryRegistry {
 public:
  // `kind` names what is registered in error messages ("routing policy").
  explicit FactoryRegistry(std::string kind) : kind_(std::move(kind)) {}
  FactoryRegistry(const FactoryRegistry&) = delete;
  FactoryRegistry& operator=(const FactoryRegistry&) = delete;

  // AlreadyExists when `name` is taken.
  absl::Status Register(std::string name, Factory factory) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (factories_.contains(name)) {
      return absl::AlreadyExistsError(absl::StrCat(kind_, " \"", name, "\" exists"));
    }
    factories_.emplace(std::move(name), std::move(factory));
    return absl::OkStatus();
  }

  // Adds `name` or replaces its factory; true when the name was new.
  bool RegisterOrReplace(std::string name, Factory factory) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return factories_.insert_or_assign(std::move(name), std::move(factory)).second;
  }

  // The registered names, sorted.
  std::vector<std::string> Names() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> names;
    names.reserve(factories_.size());
    for (const auto& [name, factory] : factories_) names.push_back(name);
    return names;
  }

  // The factory registered under `name`; InvalidArgument naming the known ones when there is
  // none (or it is empty).
  absl::StatusOr<Factory> Find(std::string_view name) const ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      auto it = factories_.find(name);
      if (it != factories_.end() && IsSet(it->second)) return it->second;
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown ", kind_, " \"", std::string(name),
                                                   "\"; known: ", absl::StrJoin(Names(), ", ")));
  }

  // Finds `name`'s factory and calls it with `args`. A factory that returns a StatusOr has its
  // answer passed through; any other result is wrapped.
  template <typename... Args>
  auto Create(std::string_view name, Args&&... args) const {
    using Result = std::invoke_result_t<const Factory&, Args...>;
    using Out = std::conditional_t<registry_internal::IsStatusOr<Result>::value, Result,
                                   absl::StatusOr<Result>>;
    absl::StatusOr<Factory> factory = Find(name);
    if (!factory.ok()) return Out(factory.status());
    return Out(std::invoke(*factory, std::forward<Args>(args)...));
  }

 private:
  static bool IsSet(const Factory& factory) {
    if constexpr (std::is_constructible_v<bool, const Factory&>) {
      return static_cast<bool>(factory);
    } else {
      return true;
    }
  }

  const std::string kind_;
  mutable absl::Mutex mu_;
  std::map<std::string, Factory, std::less<>> factories_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata
