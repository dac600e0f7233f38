/*
 * A plugin table for the loader tests, compiled several times with one defect each:
 *   LOADER_TEST_API_VERSION=N   reports API version N
 *   LOADER_TEST_OMIT_GEMM       leaves the required `gemm` entry NULL
 *   LOADER_TEST_SHORT_TABLE     reports a struct_size smaller than the v1 table
 *   LOADER_TEST_PRE_SAMPLE      reports the struct_size of a table built before the optional
 *                               `sample` entry (which it fills anyway: the host must ignore it)
 *   LOADER_TEST_NULL_TABLE      strata_plugin_get_api() returns NULL
 *   LOADER_TEST_NO_ENTRY        exports no strata_plugin_get_api at all
 * The loader must refuse every variant before calling any entry, so the entries only need
 * the right types; each reports STRATA_ERR_UNSUPPORTED. (C files get no -Wunused-parameter.)
 */
#include "strata/plugin/abi.h"

#ifndef LOADER_TEST_API_VERSION
#define LOADER_TEST_API_VERSION STRATA_PLUGIN_API_VERSION
#endif

static strata_status Create(const char* c, strata_backend* o) { return STRATA_ERR_UNSUPPORTED; }
static void Destroy(strata_backend b) {}
static const char* LastError(strata_backend b) { return "loader test plugin"; }
static strata_status GetInfo(strata_backend b, strata_backend_info* o) {
  return STRATA_ERR_UNSUPPORTED;
}
static strata_status Alloc(strata_backend b, size_t n, void** o) { return STRATA_ERR_UNSUPPORTED; }
static void Free(strata_backend b, void* p) {}
static strata_status StreamCreate(strata_backend b, strata_stream* o) {
  return STRATA_ERR_UNSUPPORTED;
}
static void StreamDestroy(strata_backend b, strata_stream s) {}
static strata_status StreamSync(strata_backend b, strata_stream s) {
  return STRATA_ERR_UNSUPPORTED;
}
static strata_status Copy(strata_backend b, strata_stream s, void* d, const void* src, size_t n) {
  return STRATA_ERR_UNSUPPORTED;
}
static strata_status TwoTensors(strata_backend b, strata_stream s, const strata_tensor* x,
                                strata_tensor* o) {
  return STRATA_ERR_UNSUPPORTED;
}
static strata_status ThreeTensors(strata_backend b, strata_stream s, const strata_tensor* x,
                                  const strata_tensor* y, strata_tensor* o) {
  return STRATA_ERR_UNSUPPORTED;
}
static strata_status RmsNorm(strata_backend b, strata_stream s, const strata_tensor* x,
                             strata_tensor* r, const strata_tensor* w, float eps,
                             strata_tensor* o) {
  return STRATA_ERR_UNSUPPORTED;
}
#ifndef LOADER_TEST_OMIT_GEMM
static strata_status Gemm(strata_backend b, strata_stream s, const strata_tensor* x,
                          const strata_tensor* w, const strata_tensor* bias, int32_t acc,
                          strata_tensor* o) {
  return STRATA_ERR_UNSUPPORTED;
}
#endif
static strata_status Rope(strata_backend b, strata_stream s, strata_tensor* q, strata_tensor* k,
                          const strata_tensor* p, const strata_tensor* f, float m) {
  return STRATA_ERR_UNSUPPORTED;
}
static strata_status KvAppend(strata_backend b, strata_stream s, const strata_kv_cache* c,
                              int32_t l, const strata_tensor* k, const strata_tensor* v,
                              const strata_tensor* slots) {
  return STRATA_ERR_UNSUPPORTED;
}
static strata_status Attention(strata_backend b, strata_stream s, const strata_kv_cache* c,
                               const strata_attention_batch* batch,
                               const strata_attention_params* p, const strata_tensor* q,
                               strata_tensor* o) {
  return STRATA_ERR_UNSUPPORTED;
}
static strata_status CopyBlocks(strata_backend b, strata_stream s, const strata_kv_cache* c,
                                const strata_tensor* src, const strata_tensor* dst) {
  return STRATA_ERR_UNSUPPORTED;
}
static strata_status Gather(strata_backend b, strata_stream s, const strata_kv_cache* c,
                            const strata_tensor* blocks, void* dst) {
  return STRATA_ERR_UNSUPPORTED;
}
static strata_status Scatter(strata_backend b, strata_stream s, const strata_kv_cache* c,
                             const strata_tensor* blocks, const void* src) {
  return STRATA_ERR_UNSUPPORTED;
}
static strata_status Sample(strata_backend b, strata_stream s, const strata_tensor* l,
                            const strata_sample_params* p, strata_tensor* t, strata_tensor* lp,
                            strata_tensor* ti) {
  return STRATA_ERR_UNSUPPORTED;
}

static const strata_plugin_api_v1 kTable = {
    .api_version = LOADER_TEST_API_VERSION,
#if defined(LOADER_TEST_SHORT_TABLE)
    .struct_size = (uint32_t)offsetof(strata_plugin_api_v1, moe_route),
#elif defined(LOADER_TEST_PRE_SAMPLE)
    .struct_size = (uint32_t)offsetof(strata_plugin_api_v1, sample),
#else
    .struct_size = sizeof(strata_plugin_api_v1),
#endif
    .plugin_name = "loader_test",
    .create = Create,
    .destroy = Destroy,
    .last_error = LastError,
    .get_info = GetInfo,
    .alloc = Alloc,
    .free = Free,
    .stream_create = StreamCreate,
    .stream_destroy = StreamDestroy,
    .stream_synchronize = StreamSync,
    .copy_h2d = Copy,
    .copy_d2h = Copy,
    .copy_d2d = Copy,
    .embedding = ThreeTensors,
    .rms_norm = RmsNorm,
#ifndef LOADER_TEST_OMIT_GEMM
    .gemm = Gemm,
#endif
    .rope = Rope,
    .silu_mul = TwoTensors,
    .gather_rows = ThreeTensors,
    .kv_append = KvAppend,
    .attention_prefill = Attention,
    .attention_decode = Attention,
    .kv_copy_blocks = CopyBlocks,
    .kv_gather = Gather,
    .kv_scatter = Scatter,
    .sample = Sample,
};

#ifdef LOADER_TEST_NO_ENTRY
/* Some other exported function: a shared library, but not a strata plugin. */
STRATA_PLUGIN_EXPORT const strata_plugin_api_v1* some_other_library_get_api(void) {
  return &kTable;
}
#else
STRATA_PLUGIN_EXPORT const strata_plugin_api_v1* strata_plugin_get_api(void) {
#ifdef LOADER_TEST_NULL_TABLE
  return NULL;
#else
  return &kTable;
#endif
}
#endif
