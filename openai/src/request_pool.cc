#include "request_pool.h"

#include <algorithm>

namespace strata::openai::internal {

RequestPool::RequestPool(int threads, size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Run(); });
}

RequestPool::~RequestPool() {
  std::deque<Task> left;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
  {
    absl::MutexLock lock(&mu_);
    left.swap(queue_);
  }
  for (Task& t : left) {
    if (t.dropped) t.dropped();
  }
}

bool RequestPool::Submit(Task task) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || queue_.size() >= max_queued_) return false;
  queue_.push_back(std::move(task));
  return true;
}

void RequestPool::Run() {
  for (;;) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RequestPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->queue_.empty();
          },
          this));
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task.run();
  }
}

}  // namespace strata::openai::internal
