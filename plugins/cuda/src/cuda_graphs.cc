// Step replay (abi.h graph_*): CUDA stream capture of the ops the host enqueues, instantiated
// once and launched again per step. Captured in cudaStreamCaptureModeThreadLocal, so another
// thread's CUDA calls (e.g. a KV export on another stream) do not break the recording.
#include <memory>

#include "cuda_ops.h"

namespace strata::cuda {
namespace {

struct Graph {
  cudaGraphExec_t exec = nullptr;
  Stream* stream = nullptr;  // the stream it was recorded on
  void* workspace = nullptr;  // that stream's workspace then (the recorded ops point into it)
};

}  // namespace

Status GraphBegin(Stream& s) {
  constexpr const char* kOp = "graph_capture_begin";
  if (s.capturing) return InvalidArgument(kOp, "the stream is already recording");
  STRATA_PLUGIN_RETURN_IF_ERROR(CudaStatus(
      kOp, cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal),
      "cudaStreamBeginCapture"));
  s.capturing = true;
  return Status();
}

Status GraphEnd(Stream& s, strata_graph* out) {
  constexpr const char* kOp = "graph_capture_end";
  if (out == nullptr) return InvalidArgument(kOp, "out is NULL");
  *out = nullptr;
  if (!s.capturing) return InvalidArgument(kOp, "the stream is not recording");
  s.capturing = false;
  cudaGraph_t graph = nullptr;
  // A failed op inside the recording invalidates it: EndCapture then reports the error.
  STRATA_PLUGIN_RETURN_IF_ERROR(
      CudaStatus(kOp, cudaStreamEndCapture(s.stream, &graph), "cudaStreamEndCapture"));
  auto g = std::make_unique<Graph>();
  const cudaError_t err = cudaGraphInstantiate(&g->exec, graph, 0);
  cudaGraphDestroy(graph);
  STRATA_PLUGIN_RETURN_IF_ERROR(CudaStatus(kOp, err, "cudaGraphInstantiate"));
  g->stream = &s;
  g->workspace = s.workspace();
  *out = reinterpret_cast<strata_graph>(g.release());
  return Status();
}

Status GraphLaunch(Stream& s, strata_graph handle) {
  constexpr const char* kOp = "graph_launch";
  auto* g = reinterpret_cast<Graph*>(handle);
  if (g == nullptr) return InvalidArgument(kOp, "graph is NULL");
  if (g->stream != &s) return InvalidArgument(kOp, "the graph was recorded on another stream");
  if (g->workspace != s.workspace()) {
    return Unsupported(kOp, "the stream's workspace was reallocated since the recording");
  }
  return CudaStatus(kOp, cudaGraphLaunch(g->exec, s.stream), "cudaGraphLaunch");
}

void GraphDestroy(strata_graph handle) {
  auto* g = reinterpret_cast<Graph*>(handle);
  if (g == nullptr) return;
  if (g->exec != nullptr) cudaGraphExecDestroy(g->exec);
  delete g;
}

}  // namespace strata::cuda
