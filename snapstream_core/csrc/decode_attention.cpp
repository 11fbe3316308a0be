// Decode attention on CPU for the compiled static decode step: a few query rows per KV head over all slots of a
// fixed-size cache, masked per slot. Built on first use by snapstream_core/cpu_attention.py (torch.utils.cpp_extension)
// and registered as the operator snapstream::decode_attention.
//
// Why: ATen's CPU flash attention runs these shapes (3 query rows per KV head, 1-8 KV heads) through small GEMM calls
// and parallelises over (batch, head) only, so with fewer heads than 2x the threads one thread does most of the work.
// Here the keys are split into blocks of BLOCK slots; each (row, KV head, block) is one unit of the thread pool that
// computes its scores, their max, the exponentials and the weighted sum of values (split-KV, "flash-decoding");
// a second pass rescales and adds the blocks of each row by their maxima. Inner loops run over the head dimension with
// compile-time length, so the compiler vectorises them for the ISA the build was made for.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

constexpr int64_t BLOCK = 256;  // key slots per unit of work
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();

// exp(x) for x <= 0 (scores minus their max): 2^n * p(r) with a degree-7 polynomial (Cephes expf), relative error
// < 2e-7, in plain arithmetic the compiler vectorises. NaN passes through; x < -87 gives ~0.
inline float exp_nonpositive(float x) {
  const float xc = x < -87.0f ? -87.0f : (x > 0.0f ? 0.0f : x);
  const float n = std::nearbyint(xc * 1.44269504088896341f);
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += static_cast<int32_t>(n) * (1 << 23);
  std::memcpy(&p, &bits, sizeof p);
  return x != x ? x : p;
}

// One unit: G query rows (G, D) over n <= BLOCK slots of one KV head. Writes per row the max score m, the sum of
// exp(score - m) and the unnormalised output (D,) = sum exp(score - m) * value. scores: G * BLOCK scratch.
template <int D>
void block(const float* q, const float* k, const float* v, const bool* visible, int64_t G, int64_t n,
           int64_t k_row, int64_t v_row, float scale, float* scores, float* m_out, float* l_out, float* o_out) {
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = k + j * k_row;
    for (int64_t r = 0; r < G; ++r) {
      const float* qr = q + r * D;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int d = 0; d < D; ++d) s += qr[d] * kj[d];
      scores[r * BLOCK + j] = visible[j] ? s * scale : NEG_INF;
    }
  }
  for (int64_t r = 0; r < G; ++r) {
    float* sr = scores + r * BLOCK;
    float m = NEG_INF;
    int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
    for (int64_t j = 0; j < n; ++j) {
      m = std::max(m, sr[j]);
      nan |= sr[j] != sr[j];
    }
    if (nan) m = std::numeric_limits<float>::quiet_NaN();  // a NaN score makes the row NaN, as in SDPA
    float sum = 0.0f;
    float acc[D];
    for (int d = 0; d < D; ++d) acc[d] = 0.0f;
    if (m != NEG_INF) {
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < n; ++j) {
        const float p = visible[j] ? exp_nonpositive(sr[j] - m) : 0.0f;
        sr[j] = p;
        sum += p;
      }
      for (int64_t j = 0; j < n; ++j) {
        const float p = sr[j];
        const float* vj = v + j * v_row;
#pragma omp simd
        for (int d = 0; d < D; ++d) acc[d] += p * vj[d];
      }
    }
    m_out[r] = m;
    l_out[r] = sum;
    std::memcpy(o_out + r * D, acc, sizeof acc);
  }
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

  at::parallel_for(0, B * H * G, 1, [&](int64_t begin, int64_t end) {
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
