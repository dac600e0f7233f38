#pragma once
// A small persistent thread pool for the CPU plugin's row-wise and attention work.
//
// ParallelFor splits [0, n) into chunks of `grain` indices that the calling thread and the
// pool's workers claim dynamically; it returns when every chunk has run and rethrows the first
// exception a chunk threw. Workers spin briefly after a job (decode issues many short ops in a
// row) and then sleep on a condition variable.
//
// Threading: ParallelFor may be called from any thread. One job runs on the pool at a time; a
// call made while another thread's job is running, or from inside a chunk, runs inline on the
// calling thread instead of waiting, so concurrent streams never deadlock or oversubscribe.
// OpenBLAS must not be called from inside a chunk: it has its own threads.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace strata::cpu {

// A non-owning reference to a callable void(int64_t begin, int64_t end).
class RangeFn {
 public:
  template <typename F>
  RangeFn(F&& f)  // NOLINT(google-explicit-constructor): used like a function parameter.
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* obj, int64_t begin, int64_t end) {
          (*static_cast<std::remove_reference_t<F>*>(obj))(begin, end);
        }) {}
  void operator()(int64_t begin, int64_t end) const { call_(obj_, begin, end); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

class ThreadPool {
 public:
  // `num_threads` counts the calling thread: num_threads - 1 workers are started.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  void ParallelFor(int64_t n, int64_t grain, RangeFn fn);

  // A grain that yields about `chunks_per_thread` chunks per thread, at least `min_grain`.
  int64_t GrainFor(int64_t n, int64_t min_grain, int chunks_per_thread = 4) const;

 private:
  enum class Wake { kRun, kSkip, kStop };
  void Stop();  // wakes and joins every worker
  void WorkerLoop(int index);
  Wake WaitForJob(int index, uint64_t* seen);
  void RunChunks();
  void WaitForWorkers();

  std::vector<std::thread> workers_;
  std::mutex submit_mu_;  // held by the thread whose job is on the pool

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;  // guarded by mu_

  // The current job; written by the submitter before generation_ is bumped.
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t grain_ = 1;
  int participants_ = 0;  // workers [0, participants_) take part in the current job
  std::atomic<int64_t> next_{0};
  std::atomic<int> pending_{0};  // participating workers not yet done
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace strata::cpu
