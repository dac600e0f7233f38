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
  LocalBackend(EngineLoop* loop, std::function<bool()> ready, int block_size, int max_waiting = 0)
      : loop_(loop), ready_(std::move(ready)), block_size_(block_size), max_waiting_(max_waiting) {}
  std::unique_ptr<openai::GenerationHandle> Generate(openai::GenerateRequest request,
                                                     openai::EventCallback on_event) override;
  bool Ready() const override { return ready_(); }
  openai::BackendLoad Load() const override;

 private:
  EngineLoop* loop_;
  std::function<bool()> ready_;
  int block_size_;
  int max_waiting_;
};

// The event a backend reports for one engine output.
openai::GenerateEvent ToEvent(const RequestOutput& out);

}  // namespace strata::worker
