// Built only into ThreadSanitizer builds (STRATA_SANITIZE_THREAD), linked into every
// executable: makes the locking of an abseil that was not built with TSan (Debian's) visible to
// TSan. Each of absl::Mutex's, absl::CondVar's and absl::Notification's out-of-line operations is
// defined here, ahead of the shared library's in symbol lookup (the executable's definitions
// interpose on every caller, gRPC's calls into abseil included), and calls the library's own
// through dlsym(RTLD_NEXT) between TSan's mutex annotations. Without them TSan sees none of these
// locks, and every value handed from one thread to another under an absl::Mutex is reported as
// a race.
//
// Memory accesses between a __tsan_mutex_pre_* and its __tsan_mutex_post_* are ignored: the
// abseil code itself, and the Condition functions it evaluates while it holds the lock.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

#define STRATA_STRINGIFY2(x) #x
#define STRATA_STRINGIFY(x) STRATA_STRINGIFY2(x)

// The library's definition of the member function whose mangled name is "_ZN" (or "_ZNK", for a
// const one) + "4absl" + the inline namespace + `rest`: the symbol this file defines again.
void* Next(bool is_const, const char* rest) {
  const std::string ns = STRATA_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string mangled = std::string(is_const ? "_ZNK" : "_ZN") + "4absl" +
                              std::to_string(ns.size()) + ns + rest;
  void* f = dlsym(RTLD_NEXT, mangled.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "absl_tsan_annotations: %s not found in abseil\n", mangled.c_str());
    std::abort();
  }
  return f;
}

// A pointer to the library's version of the member function (see Next).
#define STRATA_REAL(type, rest) static const auto real = reinterpret_cast<type>(Next(false, rest))
#define STRATA_REAL_CONST(type, rest) \
  static const auto real = reinterpret_cast<type>(Next(true, rest))

// Abseil's own operations call one another (AwaitWithTimeout calls AwaitWithDeadline, through
// the symbols defined here): only the outermost call on a thread is annotated.
thread_local int t_depth = 0;
class Outermost {
 public:
  Outermost() : outer_(t_depth++ == 0) {}
  ~Outermost() { --t_depth; }
  explicit operator bool() const { return outer_; }

 private:
  const bool outer_;
};

// Where a Notification keeps its flag (after its Mutex): the inline HasBeenNotified reads it with
// an acquire load that TSan sees, so Notify releases there too.
const void* NotifiedFlag(const absl::Notification* n) {
  static_assert(sizeof(absl::Notification) == 2 * sizeof(absl::Mutex));
  return reinterpret_cast<const char*>(n) + sizeof(absl::Mutex);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  STRATA_REAL(void (*)(Mutex*), "5MutexD1Ev");
  const Outermost outer;
  if (outer) __tsan_mutex_destroy(this, 0);
  real(this);
}

void Mutex::Lock() {
  STRATA_REAL(void (*)(Mutex*), "5Mutex4LockEv");
  const Outermost outer;
  if (outer) __tsan_mutex_pre_lock(this, 0);
  real(this);
  if (outer) __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::ReaderLock() {
  STRATA_REAL(void (*)(Mutex*), "5Mutex10ReaderLockEv");
  const Outermost outer;
  if (outer) __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  real(this);
  if (outer) __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
}

bool Mutex::TryLock() {
  STRATA_REAL(bool (*)(Mutex*), "5Mutex7TryLockEv");
  const Outermost outer;
  if (outer) __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool ok = real(this);
  if (outer) {
    __tsan_mutex_post_lock(this, ok ? __tsan_mutex_try_lock : __tsan_mutex_try_lock_failed, 0);
  }
  return ok;
}

bool Mutex::ReaderTryLock() {
  STRATA_REAL(bool (*)(Mutex*), "5Mutex13ReaderTryLockEv");
  const Outermost outer;
  if (outer) __tsan_mutex_pre_lock(this, __tsan_mutex_try_read_lock);
  const bool ok = real(this);
  if (outer) {
    __tsan_mutex_post_lock(this, ok ? __tsan_mutex_try_read_lock : __tsan_mutex_try_read_lock_failed,
                           0);
  }
  return ok;
}

void Mutex::Unlock() {
  STRATA_REAL(void (*)(Mutex*), "5Mutex6UnlockEv");
  const Outermost outer;
  if (outer) __tsan_mutex_pre_unlock(this, 0);
  real(this);
  if (outer) __tsan_mutex_post_unlock(this, 0);
}

void Mutex::ReaderUnlock() {
  STRATA_REAL(void (*)(Mutex*), "5Mutex12ReaderUnlockEv");
  const Outermost outer;
  if (outer) __tsan_mutex_pre_unlock(this, __tsan_mutex_read_lock);
  real(this);
  if (outer) __tsan_mutex_post_unlock(this, __tsan_mutex_read_lock);
}

void Mutex::LockWhen(const Condition& cond) {
  STRATA_REAL(void (*)(Mutex*, const Condition&), "5Mutex8LockWhenERKNS0_9ConditionE");
  const Outermost outer;
  if (outer) __tsan_mutex_pre_lock(this, 0);
  real(this, cond);
  if (outer) __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  STRATA_REAL(void (*)(Mutex*, const Condition&),
              "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  const Outermost outer;
  if (outer) __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  real(this, cond);
  if (outer) __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  STRATA_REAL(bool (*)(Mutex*, const Condition&, absl::Duration),
              "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const Outermost outer;
  if (outer) __tsan_mutex_pre_lock(this, 0);
  const bool met = real(this, cond, timeout);
  if (outer) __tsan_mutex_post_lock(this, 0, 0);  // held either way
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  STRATA_REAL(bool (*)(Mutex*, const Condition&, absl::Time),
              "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const Outermost outer;
  if (outer) __tsan_mutex_pre_lock(this, 0);
  const bool met = real(this, cond, deadline);
  if (outer) __tsan_mutex_post_lock(this, 0, 0);
  return met;
}

// Await and CondVar::Wait give the lock up while they wait and hold it again when they return:
// to TSan, an unlock before and a lock after.
namespace {
void ReleaseForWait(Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  __tsan_mutex_pre_lock(mu, 0);
}
void AcquireAfterWait(Mutex* mu) { __tsan_mutex_post_lock(mu, 0, 0); }
}  // namespace

void Mutex::Await(const Condition& cond) {
  STRATA_REAL(void (*)(Mutex*, const Condition&), "5Mutex5AwaitERKNS0_9ConditionE");
  const Outermost outer;
  if (outer) ReleaseForWait(this);
  real(this, cond);
  if (outer) AcquireAfterWait(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  STRATA_REAL(bool (*)(Mutex*, const Condition&, absl::Duration),
              "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const Outermost outer;
  if (outer) ReleaseForWait(this);
  const bool met = real(this, cond, timeout);
  if (outer) AcquireAfterWait(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  STRATA_REAL(bool (*)(Mutex*, const Condition&, absl::Time),
              "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const Outermost outer;
  if (outer) ReleaseForWait(this);
  const bool met = real(this, cond, deadline);
  if (outer) AcquireAfterWait(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  STRATA_REAL(void (*)(CondVar*, Mutex*), "7CondVar4WaitEPNS0_5MutexE");
  const Outermost outer;
  if (outer) ReleaseForWait(mu);
  real(this, mu);
  if (outer) AcquireAfterWait(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  STRATA_REAL(bool (*)(CondVar*, Mutex*, absl::Duration),
              "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  const Outermost outer;
  if (outer) ReleaseForWait(mu);
  const bool timed_out = real(this, mu, timeout);
  if (outer) AcquireAfterWait(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  STRATA_REAL(bool (*)(CondVar*, Mutex*, absl::Time),
              "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  const Outermost outer;
  if (outer) ReleaseForWait(mu);
  const bool timed_out = real(this, mu, deadline);
  if (outer) AcquireAfterWait(mu);
  return timed_out;
}

void Notification::Notify() {
  STRATA_REAL(void (*)(Notification*), "12Notification6NotifyEv");
  const Outermost outer;
  if (outer) __tsan_release(this);
  if (outer) __tsan_release(const_cast<void*>(NotifiedFlag(this)));
  real(this);
}

void Notification::WaitForNotification() const {
  STRATA_REAL_CONST(void (*)(const Notification*),
              "12Notification19WaitForNotificationEv");
  const Outermost outer;
  real(this);
  if (outer) __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  STRATA_REAL_CONST(bool (*)(const Notification*, absl::Duration),
              "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const Outermost outer;
  const bool notified = real(this, timeout);
  if (outer && notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(absl::Time deadline) const {
  STRATA_REAL_CONST(bool (*)(const Notification*, absl::Time),
              "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const Outermost outer;
  const bool notified = real(this, deadline);
  if (outer && notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
