#include "cpu_thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace strata::cpu {
namespace {

// True on pool workers and on a submitter while it runs its own job's chunks.
thread_local bool tls_in_pool = false;

// How long an idle worker (or a submitter waiting for workers) spins before sleeping.
constexpr auto kSpin = std::chrono::microseconds(50);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins (yielding now and then, so a busy machine's other threads can run) until `done()`
// or kSpin has passed. Returns done().
template <typename Pred>
bool SpinUntil(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (done()) return true;
    CpuRelax();
    if (i % 64 == 0) {
      if (std::chrono::steady_clock::now() > deadline) return done();
      sched_yield();
    }
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  const int workers = std::max(0, num_threads - 1);
  workers_.reserve(workers);
  try {
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
  } catch (...) {  // could not start a thread: stop the ones that did start
    Stop();
    throw;
  }
}

ThreadPool::~ThreadPool() { Stop(); }

void ThreadPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int64_t ThreadPool::GrainFor(int64_t n, int64_t min_grain, int chunks_per_thread) const {
  const int64_t chunks = static_cast<int64_t>(num_threads()) * chunks_per_thread;
  return std::max<int64_t>({min_grain, (n + chunks - 1) / chunks, 1});
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, RangeFn fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (n + grain - 1) / grain;
  if (chunks == 1 || workers_.empty() || tls_in_pool) {
    fn(0, n);
    return;
  }
  std::unique_lock<std::mutex> submit(submit_mu_, std::try_to_lock);
  if (!submit.owns_lock()) {  // another thread's job is on the pool
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    participants_ = static_cast<int>(std::min<int64_t>(workers_.size(), chunks - 1));
    next_.store(0, std::memory_order_relaxed);
    pending_.store(participants_, std::memory_order_relaxed);
    error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.notify_all();
  tls_in_pool = true;
  RunChunks();
  tls_in_pool = false;
  WaitForWorkers();
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::RunChunks() {
  for (;;) {
    const int64_t begin = next_.fetch_add(grain_, std::memory_order_relaxed);
    if (begin >= n_) return;
    try {
      (*fn_)(begin, std::min(n_, begin + grain_));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
      next_.store(n_, std::memory_order_relaxed);  // stop handing out chunks
    }
  }
}

void ThreadPool::WaitForWorkers() {
  auto done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (SpinUntil(done)) return;
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, done);
}

ThreadPool::Wake ThreadPool::WaitForJob(int index, uint64_t* seen) {
  auto changed = [&] { return generation_.load(std::memory_order_acquire) != *seen; };
  if (!SpinUntil(changed)) {
    std::unique_lock<std::mutex> lock(mu_);
    work_cv_.wait(lock, [&] { return stop_ || changed(); });
  }
  // Generation and participation are read together under mu_: a participant's job cannot be
  // replaced before it reports done, so the job fields stay valid while it runs chunks.
  std::lock_guard<std::mutex> lock(mu_);
  *seen = generation_.load(std::memory_order_relaxed);
  if (stop_) return Wake::kStop;
  return index < participants_ ? Wake::kRun : Wake::kSkip;
}

void ThreadPool::WorkerLoop(int index) {
  tls_in_pool = true;
  uint64_t seen = 0;
  for (;;) {
    const Wake wake = WaitForJob(index, &seen);
    if (wake == Wake::kStop) return;
    if (wake == Wake::kSkip) continue;
    RunChunks();
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace strata::cpu
