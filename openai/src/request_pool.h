#pragma once
// The threads that turn an API request into work for the backend: JSON parsing, the chat
// template and tokenization, which take milliseconds for long prompts and would otherwise stall
// every connection of an HTTP I/O thread. A bounded queue: past `max_queued` waiting requests,
// Submit refuses and the caller answers at once (503), so a burst holds bounded memory.
//
// Thread-safety: Submit from any thread. The destructor runs no queued task: each is handed to
// `dropped` (on the destructing thread) so its client gets an answer.
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace strata::openai::internal {

class RequestPool {
 public:
  // A task runs `run` on a pool thread, or `dropped` if the pool is destroyed first.
  struct Task {
    std::function<void()> run;
    std::function<void()> dropped;
  };

  RequestPool(int threads, size_t max_queued);
  ~RequestPool();
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // False (the task is not taken) when max_queued tasks wait already.
  bool Submit(Task task);

 private:
  void Run();

  const size_t max_queued_;
  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata::openai::internal
