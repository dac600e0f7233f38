// Paged causal attention (attention_prefill / attention_decode) over the KV pool.
//
// Work is split over (sequence, tile of query rows, range of kv heads): one work item handles
// every query head of its kv heads' groups for up to kMaxLanes (head, row) "lanes", so each key
// and value row is read from memory once per item and used by all lanes of its group. Prefill
// tiles have many rows and one kv head per item; decode items take all kv heads of a sequence,
// so they stream each block's K and V planes front to back. Keys are visited in chunks of at
// most one block; each chunk is scored, folded into a per-lane online softmax (running max m,
// running sum l, fp32 accumulator), then its values are accumulated.
//
// When there are fewer items than threads (decode at small batch), each item's key range is
// also split, the pieces write (m, l, acc) partials and a merge step combines them, so long
// contexts still use every core.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "cpu_ops.h"
#include "strata/plugin_common/op_args.h"

namespace strata::cpu {
namespace {

constexpr int kMaxLanes = 64;             // (query row, head) pairs per work item
constexpr int kChunkTokens = 64;          // keys scored at once (never more than one block)
constexpr int64_t kMinSplitTokens = 256;  // a key-range piece is at least this long
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct SeqInfo {
  int64_t q_begin = 0;  // first row of q/out
  int64_t q_len = 0;
  int64_t kv_len = 0;
  const int32_t* blocks = nullptr;
};

// Validated inputs of one call.
struct Problem {
  CacheView cache;
  TensorView q, out;
  int64_t layer = 0;
  float scale = 1.0f;
  int64_t window = 0;
  int64_t group = 1;  // query heads per kv head
  int64_t head_dim = 0;
  std::vector<SeqInfo> seqs;

  // Absolute position of query row `row` (relative to the sequence's first row).
  int64_t Position(const SeqInfo& s, int64_t row) const { return s.kv_len - s.q_len + row; }
  // First key position a query at `pos` may attend to.
  int64_t FirstKey(int64_t pos) const {
    return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  }
};

struct Work {
  int32_t seq = 0;
  int32_t head_begin = 0;  // kv heads [head_begin, head_end)
  int32_t head_end = 0;
  int32_t row_begin = 0;  // query rows [row_begin, row_end) of the sequence
  int32_t row_end = 0;
  int64_t kv_begin = 0;  // key positions [kv_begin, kv_end)
  int64_t kv_end = 0;
  int64_t partial = -1;  // partial-result slot, or -1: write `out` directly
};

// A run of work items whose partials are merged into one (seq, kv head, row tile).
struct MergeGroup {
  int64_t first_slot = 0;
  int64_t count = 0;
};

// ---- validation ----------------------------------------------------------------------

Status CheckShapes(const char* op, const strata_kv_cache* cache,
                   const strata_attention_params* params, const strata_tensor* q,
                   strata_tensor* out, Problem* p) {
  plugin_common::AttentionViews a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckAttention(op, kFloatDtype, cache, params, q, out, &a));
  p->cache = a.cache;
  p->q = a.q;
  p->out = a.out;
  p->layer = params->layer;
  p->scale = params->scale;
  p->window = params->sliding_window;
  p->group = a.q_heads / p->cache.num_kv_heads;
  p->head_dim = p->cache.head_dim;
  return Status();
}

// Checks the block table entries sequence `s` will read.
Status CheckBlocks(const char* op, const Problem& p, int64_t s, const SeqInfo& seq) {
  if (seq.q_len == 0) return Status();
  const int64_t bs = p.cache.block_size;
  const int64_t first = p.FirstKey(p.Position(seq, 0)) / bs;
  for (int64_t i = first; i <= (seq.kv_len - 1) / bs; ++i) {
    const int32_t b = seq.blocks[i];
    if (b < 0 || b >= p.cache.num_blocks) {
      return InvalidArgument(op, "block_tables[", s, "][", i, "] = ", b, " is out of range [0, ",
                             p.cache.num_blocks, ")");
    }
  }
  return Status();
}

Status CheckSequence(const char* op, bool decode, const strata_attention_batch& batch, int64_t s,
                     Problem* p) {
  const int64_t begin = batch.q_start[s], end = batch.q_start[s + 1];
  if (begin < 0 || end < begin || end > p->q.rows) {
    return InvalidArgument(op, "q_start[", s, "..", s + 1, "] = [", begin, ", ", end,
                           ") is not an increasing range within the ", p->q.rows, " rows of q");
  }
  if (decode && (begin != s || end != s + 1)) {
    return InvalidArgument(op, "q_start[", s, "] = ", begin, ": decode takes exactly one ",
                           "query row per sequence (q_start[s] == s)");
  }
  SeqInfo seq;
  seq.q_begin = begin;
  seq.q_len = end - begin;
  seq.kv_len = batch.kv_len[s];
  seq.blocks = batch.block_tables + s * static_cast<int64_t>(batch.max_blocks_per_seq);
  const int64_t capacity = int64_t{batch.max_blocks_per_seq} * p->cache.block_size;
  if (seq.kv_len < seq.q_len || seq.kv_len > capacity) {
    return InvalidArgument(op, "kv_len[", s, "] = ", seq.kv_len, " must cover its ", seq.q_len,
                           " query rows and fit its block table (", capacity, " tokens)");
  }
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckBlocks(op, *p, s, seq));
  p->seqs.push_back(seq);
  return Status();
}

Status CheckBatch(const char* op, bool decode, const strata_attention_batch* batch, Problem* p) {
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckAttentionBatch(op, batch));
  p->seqs.reserve(batch->num_seqs);
  for (int64_t s = 0; s < batch->num_seqs; ++s) {
    STRATA_PLUGIN_RETURN_IF_ERROR(CheckSequence(op, decode, *batch, s, p));
  }
  return Status();
}

// ---- planning ------------------------------------------------------------------------

// Adds the items of one row tile: as many kv heads per item as fit in kMaxLanes lanes.
void TileHeads(const Problem& p, int32_t s, int64_t r0, int64_t r1, std::vector<Work>* items) {
  const SeqInfo& seq = p.seqs[s];
  const int64_t heads = p.cache.num_kv_heads;
  const int64_t per_item = std::clamp<int64_t>(kMaxLanes / ((r1 - r0) * p.group), 1, heads);
  for (int64_t h = 0; h < heads; h += per_item) {
    Work w;
    w.seq = s;
    w.head_begin = static_cast<int32_t>(h);
    w.head_end = static_cast<int32_t>(std::min(heads, h + per_item));
    w.row_begin = static_cast<int32_t>(r0);
    w.row_end = static_cast<int32_t>(r1);
    w.kv_begin = p.FirstKey(p.Position(seq, r0));
    w.kv_end = p.Position(seq, r1 - 1) + 1;
    items->push_back(w);
  }
}

std::vector<Work> TileWork(const Problem& p) {
  const int64_t rows_per_item = std::max<int64_t>(1, kMaxLanes / p.group);
  std::vector<Work> items;
  for (size_t s = 0; s < p.seqs.size(); ++s) {
    const int64_t q_len = p.seqs[s].q_len;
    for (int64_t r0 = 0; r0 < q_len; r0 += rows_per_item) {
      TileHeads(p, static_cast<int32_t>(s), r0, std::min(q_len, r0 + rows_per_item), &items);
    }
  }
  return items;
}

// Splits key ranges so that about 2 pieces per thread exist; fills `groups` for the merge.
std::vector<Work> SplitWork(const Problem& p, std::vector<Work> items, int threads,
                            std::vector<MergeGroup>* groups) {
  const int64_t want = 2 * static_cast<int64_t>(threads);
  const int64_t n = static_cast<int64_t>(items.size());
  if (n == 0 || n >= want) return items;
  const int64_t max_pieces = (want + n - 1) / n;
  const int64_t bs = p.cache.block_size;
  std::vector<Work> out;
  int64_t slot = 0;
  for (const Work& w : items) {
    const int64_t span = w.kv_end - w.kv_begin;
    const int64_t pieces = std::clamp<int64_t>(span / kMinSplitTokens, 1, max_pieces);
    if (pieces == 1) {
      out.push_back(w);
      continue;
    }
    const int64_t chunk = ((span + pieces - 1) / pieces + bs - 1) / bs * bs;
    groups->push_back({slot, 0});
    for (int64_t b = w.kv_begin; b < w.kv_end; b += chunk) {
      Work piece = w;
      piece.kv_begin = b;
      piece.kv_end = std::min(w.kv_end, b + chunk);
      piece.partial = slot++;
      out.push_back(piece);
      ++groups->back().count;
    }
  }
  return out;
}

// ---- one work item -----------------------------------------------------------------------

struct Scratch {
  std::vector<float> q, acc, m, l, scores;
  std::vector<int64_t> first, last;  // valid key positions [first, last] per lane
};

// Lanes are ordered (kv head, row, query head of the group), so the lanes of one kv head are
// contiguous: [h * LanesPerHead, (h + 1) * LanesPerHead) for the item's h-th kv head.
int LanesPerHead(const Problem& p, const Work& w) {
  return static_cast<int>((w.row_end - w.row_begin) * p.group);
}

int Lanes(const Problem& p, const Work& w) {
  return LanesPerHead(p, w) * (w.head_end - w.head_begin);
}

// The query row (relative to the sequence) and the query head of a lane.
struct LaneIndex {
  int64_t row;
  int64_t head;
};

LaneIndex LaneAt(const Problem& p, const Work& w, int lane) {
  const int per_head = LanesPerHead(p, w);
  const int64_t kv_head = w.head_begin + lane / per_head;
  const int64_t in_head = lane % per_head;
  return {w.row_begin + in_head / p.group, kv_head * p.group + in_head % p.group};
}

// Loads the item's queries (pre-scaled) and resets its softmax state.
void StartItem(const Problem& p, const Work& w, Scratch& sc) {
  const SeqInfo& seq = p.seqs[w.seq];
  const int lanes = Lanes(p, w);
  const int64_t d = p.head_dim;
  sc.q.resize(lanes * d);
  sc.acc.assign(lanes * d, 0.0f);
  sc.m.assign(lanes, kNegInf);
  sc.l.assign(lanes, 0.0f);
  sc.scores.resize(static_cast<size_t>(lanes) * kChunkTokens);
  sc.first.resize(lanes);
  sc.last.resize(lanes);
  for (int lane = 0; lane < lanes; ++lane) {
    const LaneIndex at = LaneAt(p, w, lane);
    const float* src = p.q.Row<float>(seq.q_begin + at.row) + at.head * d;
    for (int64_t i = 0; i < d; ++i) sc.q[lane * d + i] = src[i] * p.scale;
    const int64_t pos = p.Position(seq, at.row);
    sc.first[lane] = p.FirstKey(pos);
    sc.last[lane] = pos;
  }
}

// Masks keys [pos0, pos0 + n) outside each lane's range, turns scores into exp(s - m) with an
// updated running max, and rescales the lane's sum and accumulator.
void SoftmaxChunk(const Problem& p, int lanes, int64_t pos0, int n, Scratch& sc) {
  const int64_t d = p.head_dim;
  for (int lane = 0; lane < lanes; ++lane) {
    float* s = sc.scores.data() + lane * n;
    const int64_t lo = sc.first[lane] - pos0, hi = sc.last[lane] - pos0;
    if (lo > 0 || hi < n - 1) {
      for (int t = 0; t < n; ++t) {
        if (t < lo || t > hi) s[t] = kNegInf;
      }
    }
    float chunk_max = kNegInf;
    for (int t = 0; t < n; ++t) chunk_max = std::max(chunk_max, s[t]);
    if (chunk_max == kNegInf) {
      std::fill(s, s + n, 0.0f);
      continue;
    }
    const float m_new = std::max(sc.m[lane], chunk_max);
    if (m_new > sc.m[lane]) {
      const float f = std::exp(sc.m[lane] - m_new);
      sc.l[lane] *= f;
      float* acc = sc.acc.data() + lane * d;
      for (int64_t i = 0; i < d; ++i) acc[i] *= f;
      sc.m[lane] = m_new;
    }
    sc.l[lane] += ExpShiftSum(s, n, m_new);
  }
}

// The keys [pos, pos + n) that lie in one block, at most kChunkTokens long; k and v point at
// the item's first kv head.
struct KeyChunk {
  int64_t pos = 0;
  int n = 0;
  const float* k = nullptr;
  const float* v = nullptr;
};

KeyChunk ChunkAt(const Problem& p, const Work& w, int64_t pos) {
  const SeqInfo& seq = p.seqs[w.seq];
  const int64_t bs = p.cache.block_size, offset = pos % bs;
  const int64_t block = seq.blocks[pos / bs];
  const int64_t at = offset * p.cache.token_elems() + w.head_begin * p.head_dim;
  KeyChunk c;
  c.pos = pos;
  c.n = static_cast<int>(std::min<int64_t>({bs - offset, w.kv_end - pos, kChunkTokens}));
  c.k = p.cache.Plane<float>(block, p.layer, 0) + at;
  c.v = p.cache.Plane<float>(block, p.layer, 1) + at;
  return c;
}

// The item's rows of each token are (head_end - head_begin) * head_dim floats every
// token_elems floats; for one head they sit a page apart and the hardware prefetchers miss
// them, so the next chunk is fetched while this one is computed.
void PrefetchChunk(const KeyChunk& c, int64_t stride, int64_t row_floats) {
  constexpr int64_t kLineFloats = 64 / sizeof(float);
  for (int t = 0; t < c.n; ++t) {
    for (int64_t i = 0; i < row_floats; i += kLineFloats) {
      __builtin_prefetch(c.k + t * stride + i);
      __builtin_prefetch(c.v + t * stride + i);
    }
  }
}

void ComputeChunk(const Problem& p, const Work& w, const KeyChunk& c, Scratch& sc) {
  const int per_head = LanesPerHead(p, w);
  const int heads = w.head_end - w.head_begin;
  const int64_t stride = p.cache.token_elems();
  const int d = static_cast<int>(p.head_dim);
  for (int h = 0; h < heads; ++h) {
    AttentionScores(sc.q.data() + h * per_head * d, per_head, d, c.k + h * d, stride, c.n,
                    sc.scores.data() + h * per_head * c.n);
  }
  SoftmaxChunk(p, per_head * heads, c.pos, c.n, sc);
  for (int h = 0; h < heads; ++h) {
    AttentionAccumulate(sc.scores.data() + h * per_head * c.n, per_head, d, c.v + h * d, stride,
                        c.n, sc.acc.data() + h * per_head * d);
  }
}

void RunKeys(const Problem& p, const Work& w, Scratch& sc) {
  if (w.kv_begin >= w.kv_end) return;
  const int64_t stride = p.cache.token_elems();
  const int64_t row_floats = (w.head_end - w.head_begin) * p.head_dim;
  KeyChunk cur = ChunkAt(p, w, w.kv_begin);
  PrefetchChunk(cur, stride, row_floats);
  for (;;) {
    const int64_t next_pos = cur.pos + cur.n;
    KeyChunk next;
    if (next_pos < w.kv_end) {
      next = ChunkAt(p, w, next_pos);
      PrefetchChunk(next, stride, row_floats);
    }
    ComputeChunk(p, w, cur, sc);
    if (next.n == 0) return;
    cur = next;
  }
}

// Output rows of one lane of an item.
float* OutLane(const Problem& p, const Work& w, int lane) {
  const LaneIndex at = LaneAt(p, w, lane);
  return p.out.Row<float>(p.seqs[w.seq].q_begin + at.row) + at.head * p.head_dim;
}

// Writes acc / l into out, or (acc, m, l) into the item's partial slot.
void FinishItem(const Problem& p, const Work& w, const Scratch& sc, float* slot) {
  const int lanes = Lanes(p, w);
  const int64_t d = p.head_dim;
  if (slot != nullptr) {
    std::copy(sc.acc.begin(), sc.acc.begin() + lanes * d, slot);
    std::copy(sc.m.begin(), sc.m.begin() + lanes, slot + lanes * d);
    std::copy(sc.l.begin(), sc.l.begin() + lanes, slot + lanes * (d + 1));
    return;
  }
  for (int lane = 0; lane < lanes; ++lane) {
    float* dst = OutLane(p, w, lane);
    const float inv = sc.l[lane] > 0.0f ? 1.0f / sc.l[lane] : 0.0f;
    for (int64_t i = 0; i < d; ++i) dst[i] = sc.acc[lane * d + i] * inv;
  }
}

struct Plan {
  std::vector<Work> items;
  std::vector<MergeGroup> groups;
  int64_t slot_floats = 0;  // floats per partial slot: lanes * (head_dim + 2)
  int64_t num_slots = 0;
};

Plan MakePlan(const Problem& p, int threads) {
  Plan plan;
  plan.items = SplitWork(p, TileWork(p), threads, &plan.groups);
  for (const Work& w : plan.items) {
    if (w.partial < 0) continue;
    plan.num_slots = std::max(plan.num_slots, w.partial + 1);
    plan.slot_floats = std::max<int64_t>(plan.slot_floats, Lanes(p, w) * (p.head_dim + 2));
  }
  // Longest key ranges first: causal tiles late in a prompt cost the most.
  std::stable_sort(plan.items.begin(), plan.items.end(), [](const Work& a, const Work& b) {
    return a.kv_end - a.kv_begin > b.kv_end - b.kv_begin;
  });
  return plan;
}

// Combines the partial (acc, m, l) of each split item group into out.
void MergeGroupPartials(const Problem& p, const Plan& plan, const std::vector<Work>& pieces,
                        const float* partials) {
  const Work& w = pieces.front();
  const int lanes = Lanes(p, w);
  const int64_t d = p.head_dim;
  std::vector<float> weight(pieces.size());
  for (int lane = 0; lane < lanes; ++lane) {
    float m_max = kNegInf;
    for (const Work& piece : pieces) {
      m_max = std::max(m_max, partials[piece.partial * plan.slot_floats + lanes * d + lane]);
    }
    float total = 0.0f;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const float* slot = partials + pieces[i].partial * plan.slot_floats;
      const float m = slot[lanes * d + lane];
      weight[i] = m == kNegInf ? 0.0f : std::exp(m - m_max);
      total += weight[i] * slot[lanes * (d + 1) + lane];
    }
    float* dst = OutLane(p, w, lane);
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (int64_t j = 0; j < d; ++j) {
      float sum = 0.0f;
      for (size_t i = 0; i < pieces.size(); ++i) {
        sum += weight[i] * partials[pieces[i].partial * plan.slot_floats + lane * d + j];
      }
      dst[j] = sum * inv;
    }
  }
}

void RunPlan(CpuBackend& be, const Problem& p, const Plan& plan) {
  std::vector<float> partials(plan.num_slots * plan.slot_floats);
  const int64_t n = static_cast<int64_t>(plan.items.size());
  be.pool().ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
    Scratch sc;
    for (int64_t i = begin; i < end; ++i) {
      const Work& w = plan.items[i];
      StartItem(p, w, sc);
      RunKeys(p, w, sc);
      FinishItem(p, w, sc, w.partial >= 0 ? &partials[w.partial * plan.slot_floats] : nullptr);
    }
  });
  if (plan.groups.empty()) return;
  // Partial slots were numbered in split order, so each group's pieces hold consecutive slots.
  std::vector<std::vector<Work>> pieces(plan.groups.size());
  std::vector<int64_t> group_of_slot(plan.num_slots);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    for (int64_t i = 0; i < plan.groups[g].count; ++i) {
      group_of_slot[plan.groups[g].first_slot + i] = static_cast<int64_t>(g);
    }
  }
  for (const Work& w : plan.items) {
    if (w.partial >= 0) pieces[group_of_slot[w.partial]].push_back(w);
  }
  const int64_t groups = static_cast<int64_t>(pieces.size());
  be.pool().ParallelFor(groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) MergeGroupPartials(p, plan, pieces[g], partials.data());
  });
}

}  // namespace

Status Attention(CpuBackend& be, bool decode, const strata_kv_cache* cache,
                 const strata_attention_batch* batch, const strata_attention_params* params,
                 const strata_tensor* q, strata_tensor* out) {
  const char* op = decode ? "attention_decode" : "attention_prefill";
  Problem p;
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckShapes(op, cache, params, q, out, &p));
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckBatch(op, decode, batch, &p));
  if (p.seqs.empty()) return Status();
  RunPlan(be, p, MakePlan(p, be.threads()));
  return Status();
}

}  // namespace strata::cpu
