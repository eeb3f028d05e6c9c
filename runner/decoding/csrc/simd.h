// Vector primitives for runner/decoding/csrc: AVX-512, AVX2 + FMA, or plain floats, chosen when the library is
// built (-march=native). Every routine takes any length: tails are masked (AVX-512) or scalar.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace simd {

inline float bits_to_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline uint32_t float_to_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#define SIMD_ISA "avx512"
using Vec = __m512;
inline __mmask16 tail_mask(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}
inline Vec zero() {
  return _mm512_setzero_ps();
}
inline Vec set1(float x) {
  return _mm512_set1_ps(x);
}
inline Vec load(const float* p) {
  return _mm512_loadu_ps(p);
}
inline Vec load_tail(const float* p, int64_t n, float fill) {
  return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p);
}
inline void store(float* p, Vec v) {
  _mm512_storeu_ps(p, v);
}
inline void store_tail(float* p, Vec v, int64_t n) {
  _mm512_mask_storeu_ps(p, tail_mask(n), v);
}
inline Vec add(Vec a, Vec b) {
  return _mm512_add_ps(a, b);
}
inline Vec sub(Vec a, Vec b) {
  return _mm512_sub_ps(a, b);
}
inline Vec mul(Vec a, Vec b) {
  return _mm512_mul_ps(a, b);
}
inline Vec div(Vec a, Vec b) {
  return _mm512_div_ps(a, b);
}
inline Vec fmadd(Vec a, Vec b, Vec c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline Vec fnmadd(Vec a, Vec b, Vec c) {
  return _mm512_fnmadd_ps(a, b, c);
}
inline Vec max(Vec a, Vec b) {
  return _mm512_max_ps(a, b);
}
inline Vec min(Vec a, Vec b) {
  return _mm512_min_ps(a, b);
}
inline Vec round_nearest(Vec v) {
  return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline Vec scale_by_power_of_two(Vec v, Vec n) {
  return _mm512_scalef_ps(v, n);
}
inline float reduce_add(Vec v) {
  return _mm512_reduce_add_ps(v);
}
inline float reduce_max(Vec v) {
  return _mm512_reduce_max_ps(v);
}
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kLanes = 8;
#define SIMD_ISA "avx2"
#define SIMD_AVX2 1  // these 8-float vectors were chosen: AVX2 with FMA and no AVX-512
using Vec = __m256;
inline __m256i tail_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline Vec zero() {
  return _mm256_setzero_ps();
}
inline Vec set1(float x) {
  return _mm256_set1_ps(x);
}
inline Vec load(const float* p) {
  return _mm256_loadu_ps(p);
}
inline Vec load_tail(const float* p, int64_t n, float fill) {
  const __m256i mask = tail_mask(n);
  return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, mask), _mm256_castsi256_ps(mask));
}
inline void store(float* p, Vec v) {
  _mm256_storeu_ps(p, v);
}
inline void store_tail(float* p, Vec v, int64_t n) {
  _mm256_maskstore_ps(p, tail_mask(n), v);
}
inline Vec add(Vec a, Vec b) {
  return _mm256_add_ps(a, b);
}
inline Vec sub(Vec a, Vec b) {
  return _mm256_sub_ps(a, b);
}
inline Vec mul(Vec a, Vec b) {
  return _mm256_mul_ps(a, b);
}
inline Vec div(Vec a, Vec b) {
  return _mm256_div_ps(a, b);
}
inline Vec fmadd(Vec a, Vec b, Vec c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline Vec fnmadd(Vec a, Vec b, Vec c) {
  return _mm256_fnmadd_ps(a, b, c);
}
inline Vec max(Vec a, Vec b) {
  return _mm256_max_ps(a, b);
}
inline Vec min(Vec a, Vec b) {
  return _mm256_min_ps(a, b);
}
inline Vec round_nearest(Vec v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline Vec scale_by_power_of_two(Vec v, Vec n) {
  // n is a whole number in [-126, 127] here: build 2^n in the exponent field.
  const __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(v, _mm256_castsi256_ps(exponent));
}
inline float reduce_add(Vec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
inline float reduce_max(Vec v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
#else
constexpr int kLanes = 1;
#define SIMD_ISA "scalar"
using Vec = float;
inline Vec zero() {
  return 0.f;
}
inline Vec set1(float x) {
  return x;
}
inline Vec load(const float* p) {
  return *p;
}
inline Vec load_tail(const float* p, int64_t, float) {
  return *p;
}
inline void store(float* p, Vec v) {
  *p = v;
}
inline void store_tail(float* p, Vec v, int64_t) {
  *p = v;
}
inline Vec add(Vec a, Vec b) {
  return a + b;
}
inline Vec sub(Vec a, Vec b) {
  return a - b;
}
inline Vec mul(Vec a, Vec b) {
  return a * b;
}
inline Vec div(Vec a, Vec b) {
  return a / b;
}
inline Vec fmadd(Vec a, Vec b, Vec c) {
  return std::fma(a, b, c);
}
inline Vec fnmadd(Vec a, Vec b, Vec c) {
  return std::fma(-a, b, c);
}
inline Vec max(Vec a, Vec b) {
  return a > b ? a : b;
}
inline Vec min(Vec a, Vec b) {
  return a < b ? a : b;
}
inline Vec round_nearest(Vec v) {
  return std::nearbyint(v);
}
inline Vec scale_by_power_of_two(Vec v, Vec n) {
  return std::ldexp(v, static_cast<int>(n));
}
inline float reduce_add(Vec v) {
  return v;
}
inline float reduce_max(Vec v) {
  return v;
}
#endif

// Widening loads of packed low-precision weights (one 32-bit word per lane): the `part`-th bfloat16
// (0: low half, 1: high half) or int8 (0..3, lowest byte first) of each word, as exact float32.
#if defined(__AVX512F__)
inline Vec widen_bfloat16(const uint8_t* p, int part) {
  const __m512i words = _mm512_loadu_si512(p);
  return _mm512_castsi512_ps(part == 0 ? _mm512_slli_epi32(words, 16)
                                       : _mm512_and_si512(words, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline Vec widen_int8(const uint8_t* p, int part) {
  const __m512i words = _mm512_loadu_si512(p);
  const __m512i shifted = _mm512_sllv_epi32(words, _mm512_set1_epi32(24 - 8 * part));
  return _mm512_cvtepi32_ps(_mm512_srai_epi32(shifted, 24));
}
#elif defined(__AVX2__) && defined(__FMA__)
inline Vec widen_bfloat16(const uint8_t* p, int part) {
  const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm256_castsi256_ps(part == 0 ? _mm256_slli_epi32(words, 16)
                                       : _mm256_and_si256(words, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline Vec widen_int8(const uint8_t* p, int part) {
  const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i shifted = _mm256_sllv_epi32(words, _mm256_set1_epi32(24 - 8 * part));
  return _mm256_cvtepi32_ps(_mm256_srai_epi32(shifted, 24));
}
#else
inline Vec widen_bfloat16(const uint8_t* p, int part) {
  uint32_t word;
  std::memcpy(&word, p, 4);
  return bits_to_float(part == 0 ? word << 16 : word & 0xffff0000u);
}
inline Vec widen_int8(const uint8_t* p, int part) {
  return static_cast<float>(static_cast<int8_t>(p[part]));
}
#endif

// e^x for x <= 88 (Cephes expf): x = n ln 2 + r with |r| <= ln 2 / 2, e^r by a degree-6 polynomial
// (within 2 ulp of std::exp), then 2^n into the exponent. Below -87 the result flushes towards 0.
inline Vec exp(Vec x) {
  x = max(min(x, set1(88.f)), set1(-87.f));
  const Vec n = round_nearest(mul(x, set1(1.44269504088896341f)));
  Vec r = fnmadd(n, set1(0.693359375f), x);
  r = fnmadd(n, set1(-2.12194440e-4f), r);
  Vec p = set1(1.9875691500e-4f);
  p = fmadd(p, r, set1(1.3981999507e-3f));
  p = fmadd(p, r, set1(8.3334519073e-3f));
  p = fmadd(p, r, set1(4.1665795894e-2f));
  p = fmadd(p, r, set1(1.6666665459e-1f));
  p = fmadd(p, r, set1(5.0000001201e-1f));
  const Vec y = fmadd(p, mul(r, r), add(r, set1(1.f)));
  return scale_by_power_of_two(y, n);
}

// tanh(x) = 1 - 2 / (e^(2x) + 1); |x| is clamped to 9, where tanh is 1 to float precision. Absolute
// error about 1e-7 near 0 (the relative error there does not matter: GELU multiplies it by x / 2).
inline Vec tanh(Vec x) {
  x = max(min(x, set1(9.f)), set1(-9.f));
  const Vec e = exp(add(x, x));
  return sub(set1(1.f), div(set1(2.f), add(e, set1(1.f))));
}

// GPT-2's tanh-approximated GELU.
inline Vec gelu(Vec u) {
  const Vec inner = mul(set1(0.7978845608028654f), fmadd(mul(set1(0.044715f), mul(u, u)), u, u));
  return mul(mul(set1(0.5f), u), add(set1(1.f), tanh(inner)));
}

// Applies `f` (Vec -> Vec) to n floats in place.
template <typename F>
inline void map_inplace(float* x, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(x + i, f(load(x + i)));
  if (i < n) store_tail(x + i, f(load_tail(x + i, n - i, 0.f)), n - i);
}

inline float sum(const float* x, int64_t n) {
  Vec acc = zero();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc = add(acc, load(x + i));
  if (i < n) acc = add(acc, load_tail(x + i, n - i, 0.f));
  return reduce_add(acc);
}

inline float dot(const float* a, const float* b, int64_t n) {
  Vec acc = zero();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc = fmadd(load(a + i), load(b + i), acc);
  if (i < n) acc = fmadd(load_tail(a + i, n - i, 0.f), load_tail(b + i, n - i, 0.f), acc);
  return reduce_add(acc);
}

inline float max_abs(const float* x, int64_t n) {
  float largest = 0.f;
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) acc = _mm512_max_ps(acc, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  largest = _mm512_reduce_max_ps(acc);
#endif
  for (; i < n; ++i) largest = std::max(largest, std::fabs(x[i]));
  return largest;
}

inline float max_of(const float* x, int64_t n) {
  Vec acc = set1(-INFINITY);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc = max(acc, load(x + i));
  if (i < n) acc = max(acc, load_tail(x + i, n - i, -INFINITY));
  return reduce_max(acc);
}

// y += a * x over n floats.
inline void axpy(float a, const float* x, float* y, int64_t n) {
  const Vec va = set1(a);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(y + i, fmadd(va, load(x + i), load(y + i)));
  if (i < n) store_tail(y + i, fmadd(va, load_tail(x + i, n - i, 0.f), load_tail(y + i, n - i, 0.f)), n - i);
}

}  // namespace simd
