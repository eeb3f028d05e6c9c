// Causal attention over the KV cache for runner/decoding/csrc/fast_decode.cpp: one head, m new positions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "simd.h"

namespace attention {

// A row of hd floats as V vectors, the last one partial (`tail` floats): V is a template argument so
// that the vectors live in registers, not in an array on the stack.
template <int V>
struct Rows {
  int64_t hd, tail;
  simd::Vec load(const float* p, int i) const {
    return i + 1 < V ? simd::load(p + i * simd::kLanes) : simd::load_tail(p + i * simd::kLanes, tail, 0.f);
  }
  void store(float* p, int i, simd::Vec v) const {
    if (i + 1 < V) {
      simd::store(p + i * simd::kLanes, v);
    } else {
      simd::store_tail(p + i * simd::kLanes, v, tail);
    }
  }
};

// out (hd) += sum over t < count of weights[t] * v[t], v rows of hd floats; two sets of accumulators for
// alternate positions (independent sums hide the FMA latency).
template <int V>
void mix_values(Rows<V> rows, const float* weights, const float* v, int64_t count, float* out) {
  const int64_t hd = rows.hd;
  simd::Vec even[V], odd[V];
  for (int i = 0; i < V; ++i) {
    even[i] = rows.load(out, i);
    odd[i] = simd::zero();
  }
  int64_t t = 0;
  for (; t + 2 <= count; t += 2) {
    const simd::Vec a = simd::set1(weights[t]), b = simd::set1(weights[t + 1]);
    for (int i = 0; i < V; ++i) {
      even[i] = simd::fmadd(a, rows.load(v + t * hd, i), even[i]);
      odd[i] = simd::fmadd(b, rows.load(v + (t + 1) * hd, i), odd[i]);
    }
  }
  if (t < count) {
    const simd::Vec a = simd::set1(weights[t]);
    for (int i = 0; i < V; ++i) even[i] = simd::fmadd(a, rows.load(v + t * hd, i), even[i]);
  }
  for (int i = 0; i < V; ++i) rows.store(out, i, simd::add(even[i], odd[i]));
}

// scores[t] = scale * q . k[t] for t < count, k rows of hd floats.
template <int V>
void attention_scores(Rows<V> rows, const float* q, const float* k, int64_t count, float scale, float* scores) {
  const int64_t hd = rows.hd;
  simd::Vec query[V];
  for (int i = 0; i < V; ++i) query[i] = rows.load(q, i);
  int64_t t = 0;
#if defined(__AVX512F__)
  // Sixteen positions at a time: one vector of partial sums per position, then a transposing reduction
  // (four rounds of shuffles and adds) that leaves the sixteen dot products in one vector, instead of a
  // horizontal sum per position. Slot j holds position (j % 4) * 4 + j / 4, which the shuffles put back
  // in order.
  for (; t + 16 <= count; t += 16) {
    __m512 partial[16];
    for (int j = 0; j < 16; ++j) {
      const float* row = k + (t + (j & 3) * 4 + (j >> 2)) * hd;
      __m512 acc = _mm512_mul_ps(query[0], rows.load(row, 0));
      for (int i = 1; i < V; ++i) acc = simd::fmadd(query[i], rows.load(row, i), acc);
      partial[j] = acc;
    }
    __m512 halves[8], quarters[4], eighths[2];
    for (int j = 0; j < 8; ++j) {
      const __m512 a = partial[2 * j], b = partial[2 * j + 1];
      halves[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    for (int j = 0; j < 4; ++j) {
      const __m512 a = halves[2 * j], b = halves[2 * j + 1];
      quarters[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
    }
    for (int j = 0; j < 2; ++j) {
      const __m512 a = quarters[2 * j], b = quarters[2 * j + 1];
      eighths[j] = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
    }
    const __m512 a = eighths[0], b = eighths[1];
    const __m512 dots = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xDD));
    simd::store(scores + t, _mm512_mul_ps(dots, _mm512_set1_ps(scale)));
  }
#elif defined(SIMD_AVX2)
  // The same eight positions at a time: two rounds of horizontal adds leave each position's four partial
  // sums of either 128-bit half side by side, and one add of the halves the eight dot products in order.
  for (; t + 8 <= count; t += 8) {
    __m256 partial[8];
    for (int j = 0; j < 8; ++j) {
      const float* row = k + (t + j) * hd;
      __m256 acc = _mm256_mul_ps(query[0], rows.load(row, 0));
      for (int i = 1; i < V; ++i) acc = simd::fmadd(query[i], rows.load(row, i), acc);
      partial[j] = acc;
    }
    const __m256 low = _mm256_hadd_ps(_mm256_hadd_ps(partial[0], partial[1]), _mm256_hadd_ps(partial[2], partial[3]));
    const __m256 high = _mm256_hadd_ps(_mm256_hadd_ps(partial[4], partial[5]), _mm256_hadd_ps(partial[6], partial[7]));
    const __m256 dots = _mm256_add_ps(_mm256_permute2f128_ps(low, high, 0x20), _mm256_permute2f128_ps(low, high, 0x31));
    simd::store(scores + t, _mm256_mul_ps(dots, _mm256_set1_ps(scale)));
  }
#endif
  for (; t < count; ++t) {
    simd::Vec acc = simd::mul(query[0], rows.load(k + t * hd, 0));
    for (int i = 1; i < V; ++i) acc = simd::fmadd(query[i], rows.load(k + t * hd, i), acc);
    scores[t] = simd::reduce_add(acc) * scale;
  }
}

// Causal attention of one head for m new positions from `start`, its K and V already in the cache, for
// heads of V vectors: scores in blocks of positions whose K (then V) stay in L1 while every new position
// reads them, softmax, then the values mixed block by block.
template <int V>
void attend(int64_t hd, const float* qkv, int64_t q_stride, int64_t m, int64_t start, const float* kh, const float* vh,
            float* att, int64_t att_stride, float* scores) {
  constexpr int64_t kBlock = 64;
  const Rows<V> rows{hd, hd - (V - 1) * simd::kLanes};
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int64_t end = start + m;
  for (int64_t block = 0; block < end; block += kBlock)
    for (int64_t j = 0; j < m; ++j) {
      const int64_t count = std::min(block + kBlock, start + j + 1) - block;
      if (count > 0)
        attention_scores(rows, qkv + j * q_stride, kh + block * hd, count, scale, scores + j * end + block);
    }
  for (int64_t j = 0; j < m; ++j) {
    float* row = scores + j * end;
    const int64_t seen = start + j + 1;
    const float top = simd::max_of(row, seen);
    simd::map_inplace(row, seen, [top](simd::Vec v) { return simd::exp(simd::sub(v, simd::set1(top))); });
    std::fill(att + j * att_stride, att + j * att_stride + hd, 0.f);
  }
  for (int64_t block = 0; block < end; block += kBlock)
    for (int64_t j = 0; j < m; ++j) {
      const int64_t count = std::min(block + kBlock, start + j + 1) - block;
      if (count > 0) mix_values(rows, scores + j * end + block, vh + block * hd, count, att + j * att_stride);
    }
  for (int64_t j = 0; j < m; ++j) {
    const float inverse = 1.f / simd::sum(scores + j * end, start + j + 1);
    simd::map_inplace(att + j * att_stride, hd, [inverse](simd::Vec v) { return simd::mul(v, simd::set1(inverse)); });
  }
}

// The same for heads wider than four vectors: one head_dim-long pass per row, no register blocking.
inline void attend_wide(int64_t hd, const float* qkv, int64_t q_stride, int64_t m, int64_t start, const float* kh,
                        const float* vh, float* att, int64_t att_stride, float* scores) {
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  for (int64_t j = 0; j < m; ++j) {
    const int64_t seen = start + j + 1;
    for (int64_t t = 0; t < seen; ++t) scores[t] = simd::dot(qkv + j * q_stride, kh + t * hd, hd) * scale;
    const float top = simd::max_of(scores, seen);
    simd::map_inplace(scores, seen, [top](simd::Vec v) { return simd::exp(simd::sub(v, simd::set1(top))); });
    const float inverse = 1.f / simd::sum(scores, seen);
    float* out = att + j * att_stride;
    std::fill(out, out + hd, 0.f);
    for (int64_t t = 0; t < seen; ++t) simd::axpy(scores[t] * inverse, vh + t * hd, out, hd);
  }
}

}  // namespace attention
