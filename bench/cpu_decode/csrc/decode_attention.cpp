// Decode attention on CPU for the compiled static decode step: a few query rows per KV head over all slots of a
// fixed-size cache, masked per slot. Built on first use by bench/cpu_decode/cpu_attention.py (torch.utils.cpp_extension)
// and registered as the operator snapstream::decode_attention.
//
// Why: ATen's CPU flash attention runs these shapes (3 query rows per KV head, 1-8 KV heads) through small GEMM calls
// and parallelises over (batch, head) only, so with fewer heads than 2x the threads one thread does most of the work.
// Here the keys are split into blocks of BLOCK slots; each (batch, KV head, block) is one unit of the thread pool that
// computes its scores, their max, the exponentials and the weighted sum of values (split-KV, "flash-decoding");
// a second pass rescales and adds the blocks of each row by their maxima.
//
// Inner loops use ATen's portable vectors (at::vec::Vectorized<float>, for the ISA the build was made for) over the
// head dimension, whose length is a compile-time constant:
// - scores: several keys and all rows of a block at once, one accumulator per (row, key), so the multiply-adds do not
//   wait on each other; the next keys' cache lines are prefetched;
// - exponentials: ATen's exp_u20, the one its CPU flash attention uses;
// - weighted values: a few keys at a time for all rows, so each value is read from memory once;
// - sub-blocks of SUB slots with no visible slot (a ring not full yet, the slots of tokens not decoded yet) are not
//   read at all. Their keys and values do not count, even NaN ones, where SDPA's 0 x NaN would give NaN.
// Measured in bench/README.md ("Compiled decode and the bandwidth floor (CPU, bench/cpu_decode)").

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t BLOCK = 256;  // key slots per unit of work
constexpr int64_t SUB = 32;  // key slots read together: skipped whole when none is visible; values go SUB at a time
constexpr int64_t PREFETCH = 8;  // keys ahead whose cache lines the score loop asks for
constexpr int64_t MAX_ROWS = 64;  // query heads per KV head (GQA group size) the kernel takes
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
const auto vec_add = [](Vec& a, Vec& b) { return a + b; };  // the lane reductions' operation

// Lane sums of n <= 8 vectors: out[i] = sum of the lanes of a[i]. On AVX2 one tree of horizontal adds reduces all
// eight at once (9 instructions for 8 sums, instead of ~6 shuffles and adds for each); elsewhere one reduction each.
template <int N>
inline void lane_sums(const Vec* a, float* out) {
  static_assert(N >= 1 && N <= 8, "at most 8 vectors");
#if defined(CPU_CAPABILITY_AVX2) && !defined(CPU_CAPABILITY_AVX512)
  __m256 v[8];
  for (int i = 0; i < 8; ++i) v[i] = i < N ? __m256(a[i]) : _mm256_setzero_ps();
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  alignas(32) float sums[8];
  _mm256_store_ps(sums, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
  for (int i = 0; i < N; ++i) out[i] = sums[i];
#else
  for (int i = 0; i < N; ++i) out[i] = at::vec::vec_reduce_all<float>(vec_add, a[i]);
#endif
}

// Scores of R query rows (R, D) against n keys: scores[r * BLOCK + j] = q_r . k_j. Keys go J at a time, and each
// (row, key) pair has its own vector accumulator over D, so the R * J fused multiply-adds of a D chunk are
// independent (a single accumulator per dot product would wait on the FMA latency at every chunk); the R * J
// accumulators are then reduced across their lanes together (lane_sums).
template <int D, int R>
inline void scores_rows(const float* q, const float* k, int64_t n, int64_t k_row, float* scores) {
  constexpr int64_t V = Vec::size();
  constexpr int64_t C = D / V;
  constexpr int64_t J = R >= 3 ? 2 : 4;
  static_assert(D % V == 0, "head dim must be a multiple of the vector width");
  int64_t j = 0;
  for (; j + J <= n; j += J) {
    for (int t = 0; t < J; ++t) {  // the keys PREFETCH ahead, into cache while these are multiplied
      const char* ahead = reinterpret_cast<const char*>(k + std::min(j + t + PREFETCH, n - 1) * k_row);
      for (int64_t b = 0; b < D * static_cast<int64_t>(sizeof(float)); b += 64) __builtin_prefetch(ahead + b, 0, 3);
    }
    Vec acc[R][J];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < J; ++t) acc[r][t] = Vec(0.0f);
    for (int64_t c = 0; c < C; ++c) {
      Vec kv[J];
      for (int t = 0; t < J; ++t) kv[t] = Vec::loadu(k + (j + t) * k_row + c * V);
      for (int r = 0; r < R; ++r) {
        const Vec qv = Vec::loadu(q + r * D + c * V);
        for (int t = 0; t < J; ++t) acc[r][t] = at::vec::fmadd(qv, kv[t], acc[r][t]);
      }
    }
    float sums[R * J];
    lane_sums<R * J>(&acc[0][0], sums);
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < J; ++t) scores[r * BLOCK + j + t] = sums[r * J + t];
  }
  for (; j < n; ++j) {
    for (int r = 0; r < R; ++r) {
      Vec acc(0.0f);
      for (int64_t c = 0; c < C; ++c) acc = at::vec::fmadd(Vec::loadu(q + r * D + c * V), Vec::loadu(k + j * k_row + c * V), acc);
      scores[r * BLOCK + j] = at::vec::vec_reduce_all<float>(vec_add, acc);
    }
  }
}

// Unnormalised outputs of G rows: out[r] (D,) += sum_j p[r * BLOCK + j] * v_j for the rows with live[r], with D / V
// independent accumulators per row. Keys go SUB at a time for all rows, so that the SUB values (SUB * D floats) are
// read from memory once and stay in L1 for the other rows; sub-blocks without a visible slot (read[s] false, where
// every p is 0) are not read.
template <int D>
inline void weighted_values(const float* p, const float* v, int64_t G, const bool* live, const bool* read, int64_t n,
                            int64_t v_row, float* out) {
  constexpr int64_t V = Vec::size();
  constexpr int64_t C = D / V;
  for (int64_t r = 0; r < G; ++r)
    if (live[r]) std::fill(out + r * D, out + (r + 1) * D, 0.0f);
  for (int64_t j0 = 0; j0 < n; j0 += SUB) {
    if (!read[j0 / SUB]) continue;
    const int64_t j1 = std::min(n, j0 + SUB);
    for (int64_t r = 0; r < G; ++r) {
      if (!live[r]) continue;
      const float* pr = p + r * BLOCK;
      float* o = out + r * D;
      Vec acc[C];
      for (int64_t c = 0; c < C; ++c) acc[c] = Vec::loadu(o + c * V);
      for (int64_t j = j0; j < j1; ++j) {
        const Vec pj(pr[j]);
        const float* vj = v + j * v_row;
        for (int64_t c = 0; c < C; ++c) acc[c] = at::vec::fmadd(pj, Vec::loadu(vj + c * V), acc[c]);
      }
      for (int64_t c = 0; c < C; ++c) acc[c].store(o + c * V);
    }
  }
}

// One unit: G query rows (G, D) over n <= BLOCK slots of one KV head. Writes per row the max score m, the sum of
// exp(score - m) and the unnormalised output (D,) = sum exp(score - m) * value. scores: G * BLOCK scratch.
template <int D>
void block(const float* q, const float* k, const float* v, const bool* visible, int64_t G, int64_t n,
           int64_t k_row, int64_t v_row, float scale, float* scores, float* m_out, float* l_out, float* o_out) {
  // Sub-blocks of SUB slots with a visible slot: only their keys and values are read (a ring that is not full yet,
  // the slots of tokens not yet decoded). Scores of the others stay unset: the mask pass below makes them -inf.
  bool read[BLOCK / SUB];
  for (int64_t j0 = 0; j0 < n; j0 += SUB)
    read[j0 / SUB] = std::any_of(visible + j0, visible + std::min(n, j0 + SUB), [](bool b) { return b; });
  for (int64_t a = 0, b = 0; a < n; a = b) {  // each run [a, b) of sub-blocks to read, then the sub-block after it
    b = std::min(n, a + SUB);
    if (!read[a / SUB]) continue;
    while (b < n && read[b / SUB]) b = std::min(n, b + SUB);
    for (int64_t r0 = 0; r0 < G; r0 += 4) {  // rows four at a time
      const float* qr = q + r0 * D;
      const float* ka = k + a * k_row;
      float* sr = scores + r0 * BLOCK + a;
      switch (std::min<int64_t>(4, G - r0)) {
        case 1: scores_rows<D, 1>(qr, ka, b - a, k_row, sr); break;
        case 2: scores_rows<D, 2>(qr, ka, b - a, k_row, sr); break;
        case 3: scores_rows<D, 3>(qr, ka, b - a, k_row, sr); break;
        default: scores_rows<D, 4>(qr, ka, b - a, k_row, sr); break;
      }
    }
  }
  bool live[MAX_ROWS];  // rows with a visible slot and no NaN score: their outputs are the weighted values
  for (int64_t r = 0; r < G; ++r) {
    float* sr = scores + r * BLOCK;
    float m = NEG_INF;
    int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
    for (int64_t j = 0; j < n; ++j) {
      const float s = visible[j] ? sr[j] * scale : NEG_INF;
      sr[j] = s;
      m = std::max(m, s);
      nan |= s != s;
    }
    if (nan) m = std::numeric_limits<float>::quiet_NaN();
    live[r] = m != NEG_INF && m == m;
    float sum = 0.0f;
    if (live[r]) {
      // p = exp(score - m): ATen's exp_u20 (the exponential of its CPU flash attention), 0 for masked slots (-inf)
      constexpr int64_t V = Vec::size();
      const Vec mv(m);
      Vec acc(0.0f);
      int64_t j = 0;
      for (; j + V <= n; j += V) {
        const Vec p = (Vec::loadu(sr + j) - mv).exp_u20();
        p.store(sr + j);
        acc = acc + p;
      }
      sum = at::vec::vec_reduce_all<float>(vec_add, acc);
      for (; j < n; ++j) {
        sr[j] = std::exp(sr[j] - m);
        sum += sr[j];
      }
    } else {  // nothing visible (zeros), or a NaN score (NaN, as in SDPA)
      std::fill(o_out + r * D, o_out + (r + 1) * D, m == m ? 0.0f : m);
      sum = m == m ? 0.0f : m;
    }
    m_out[r] = m;
    l_out[r] = sum;
  }
  weighted_values<D>(scores, v, G, live, read, n, v_row, o_out);
}

// query (B, Hkv, G, D); key, value (B, Hkv, S, D) with unit stride in D; visible (B, Hkv, S) bool -> (B, Hkv, G, D).
// Rows with no visible slot get zeros.
at::Tensor decode_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                            const at::Tensor& visible, double scale) {
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4 && visible.dim() == 3,
              "decode_attention: query, key, value must be 4-D and visible 3-D");
  TORCH_CHECK(query.scalar_type() == at::kFloat && key.scalar_type() == at::kFloat &&
                  value.scalar_type() == at::kFloat && visible.scalar_type() == at::kBool,
              "decode_attention: float32 query/key/value and bool visible only");
  const int64_t B = query.size(0), H = query.size(1), G = query.size(2), D = query.size(3), S = key.size(2);
  using Block = decltype(&block<64>);
  Block run = D == 16 ? &block<16> : D == 32 ? &block<32> : D == 64 ? &block<64> : D == 96 ? &block<96>
            : D == 128 ? &block<128> : nullptr;
  TORCH_CHECK(run != nullptr, "decode_attention: head dim 16, 32, 64, 96 or 128 only, got ", D);
  TORCH_CHECK(G >= 1 && G <= MAX_ROWS, "decode_attention: 1 to ", MAX_ROWS, " query rows per KV head, got ", G);
  TORCH_CHECK(key.size(0) == B && key.size(1) == H && key.size(3) == D && value.sizes() == key.sizes(),
              "decode_attention: key/value shape ", key.sizes(), " does not match query ", query.sizes());
  TORCH_CHECK(visible.size(0) == B && visible.size(1) == H && visible.size(2) == S,
              "decode_attention: visible shape ", visible.sizes(), " is not (B, Hkv, S)");
  TORCH_CHECK(key.stride(3) == 1 && value.stride(3) == 1, "decode_attention: key/value need unit stride in D");

  const at::Tensor q = query.contiguous();
  const at::Tensor vis = visible.contiguous();
  const int64_t n_blocks = (S + BLOCK - 1) / BLOCK;
  const int64_t units = B * H * n_blocks;
  at::Tensor m = at::empty({units, G}, q.options());
  at::Tensor l = at::empty({units, G}, q.options());
  at::Tensor o = at::empty({units, G, D}, q.options());
  at::Tensor out = at::empty({B, H, G, D}, q.options());

  const float* qp = q.data_ptr<float>();
  const float* kp = key.data_ptr<float>();
  const float* vp = value.data_ptr<float>();
  const bool* visp = vis.data_ptr<bool>();
  float* mp = m.data_ptr<float>();
  float* lp = l.data_ptr<float>();
  float* op = o.data_ptr<float>();
  float* outp = out.data_ptr<float>();
  const float s = static_cast<float>(scale);

  at::parallel_for(0, units, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(G * BLOCK);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t c = u % n_blocks, bh = u / n_blocks, b = bh / H, h = bh % H;
      const int64_t j0 = c * BLOCK, n = std::min(BLOCK, S - j0);
      const float* ku = kp + b * key.stride(0) + h * key.stride(1) + j0 * key.stride(2);
      const float* vu = vp + b * value.stride(0) + h * value.stride(1) + j0 * value.stride(2);
      run(qp + bh * G * D, ku, vu, visp + bh * S + j0, G, n, key.stride(2), value.stride(2), s, scores.data(),
          mp + u * G, lp + u * G, op + u * G * D);
    }
  });

  // The combine is small (n_blocks * D multiply-adds per row): below ~32k of them it runs on this thread, without a
  // second parallel region. With no slots at all (S = 0) every row gets zeros, as from SDPA.
  const int64_t combine_grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n_blocks * D));  // S = 0: no blocks
  at::parallel_for(0, B * H * G, combine_grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t bh = row / G, r = row % G;
      float top = NEG_INF;
      for (int64_t c = 0; c < n_blocks; ++c) top = std::max(top, mp[(bh * n_blocks + c) * G + r]);
      float* dst = outp + row * D;
      std::fill(dst, dst + D, 0.0f);
      float total = 0.0f;
      for (int64_t c = 0; c < n_blocks; ++c) {
        const int64_t u = bh * n_blocks + c;
        const float mc = mp[u * G + r];
        if (mc == NEG_INF) continue;
        const float w = std::exp(mc - top);
        total += w * lp[u * G + r];
        const float* src = op + (u * G + r) * D;
        for (int64_t d = 0; d < D; ++d) dst[d] += w * src[d];
      }
      const float inv = total > 0.0f ? 1.0f / total : (total != total ? total : 0.0f);  // NaN stays NaN
      for (int64_t d = 0; d < D; ++d) dst[d] *= inv;
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(snapstream, lib) {
  lib.def("decode_attention(Tensor query, Tensor key, Tensor value, Tensor visible, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(snapstream, CPU, lib) { lib.impl("decode_attention", &decode_attention); }
