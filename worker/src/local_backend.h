#pragma once
// openai::Backend over this worker's own engine: a `mixed` worker serving the API itself.
#include "strata/engine/engine_loop.h"
#include "strata/openai/backend.h"

namespace strata::worker {

class LocalBackend final : public openai::Backend {
 public:
  // `block_size`: tokens per KV block (Load's capacity). `max_waiting`: a request that finds
  // this many waiting in the engine already is refused as overloaded (429 with Retry-After);
  // 0 = no limit.
  // `problem` (optional): Problem()'s answer (e.g. the engine's stall).
  LocalBackend(EngineLoop* loop, std::function<bool()> ready, int block_size, int max_waiting = 0,
               std::function<std::optional<openai::BackendProblem>()> problem = nullptr)
      : loop_(loop),
        ready_(std::move(ready)),
        problem_(std::move(problem)),
        block_size_(block_size),
        max_waiting_(max_waiting) {}
  std::unique_ptr<openai::GenerationHandle> Generate(openai::GenerateRequest request,
                                                     openai::EventCallback on_event) override;
  bool Ready() const override { return ready_(); }
  std::optional<openai::BackendProblem> Problem() const override {
    return problem_ ? problem_() : std::nullopt;
  }
  openai::BackendLoad Load() const override;

 private:
  EngineLoop* loop_;
  std::function<bool()> ready_;
  std::function<std::optional<openai::BackendProblem>()> problem_;
  int block_size_;
  int max_waiting_;
};

// The event a backend reports for one engine output.
openai::GenerateEvent ToEvent(const RequestOutput& out);

}  // namespace strata::worker
