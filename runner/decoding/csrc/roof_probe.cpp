// Micro-kernels that measure this machine's roof for runner/cost/machine_profile.py: peak multiply-add throughput
// of one core per precision, with the instructions the fast path's kernels use (linear.h: vdpbf16ps for
// bfloat16 and vpdpbusd for int8 where the CPU has them, vpmaddubsw for int8 on AVX2 without AVX-512, else
// both widened to float32 multiply-adds), and read bandwidth over a buffer of a chosen size, on one thread
// or several. Python times each call with runner/measure/timing.py and divides the work counted here by the time.
#include <immintrin.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "simd.h"

namespace {

// Independent accumulators per kernel: enough chains to cover the multiply-add latency (4 cycles) on two
// ports, few enough to stay in registers (16 of 32 zmm, or of 16 ymm with the two inputs spilled never).
constexpr int kChains = 12;

enum Precision : int32_t { kFloat32 = 0, kBfloat16 = 1, kInt8 = 2 };

double float32_multiply_adds(int64_t iterations) {
  simd::Vec chains[kChains];
  for (int c = 0; c < kChains; ++c) chains[c] = simd::set1(1e-3f * static_cast<float>(c));
  const simd::Vec a = simd::set1(0.999f), b = simd::set1(1e-6f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) chains[c] = simd::fmadd(chains[c], a, b);
  }
  simd::Vec total = simd::zero();
  for (int c = 0; c < kChains; ++c) total = simd::add(total, chains[c]);
  return simd::reduce_add(total);
}

#if defined(__AVX512BF16__)
double bfloat16_multiply_adds(int64_t iterations) {
  __m512 chains[kChains];
  for (int c = 0; c < kChains; ++c) chains[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512i a = _mm512_set1_epi32(0x3f803f80), b = _mm512_set1_epi32(0x33d633d6);  // 1.0 and ~1e-7
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) chains[c] = _mm512_dpbf16_ps(chains[c], (__m512bh)a, (__m512bh)b);
  }
  __m512 total = _mm512_setzero_ps();
  for (int c = 0; c < kChains; ++c) total = _mm512_add_ps(total, chains[c]);
  return _mm512_reduce_add_ps(total);
}
#endif

#if defined(__AVX512VNNI__)
double int8_multiply_adds(int64_t iterations) {
  __m512i chains[kChains];
  for (int c = 0; c < kChains; ++c) chains[c] = _mm512_set1_epi32(c);
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(-1);  // the sums stay bounded
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) chains[c] = _mm512_dpbusd_epi32(chains[c], a, b);
  }
  __m512i total = _mm512_setzero_si512();
  for (int c = 0; c < kChains; ++c) total = _mm512_add_epi32(total, chains[c]);
  return static_cast<double>(_mm512_reduce_add_epi32(total));
}
#elif defined(SIMD_AVX2)
// linear.h's AVX2 int8 step: the weights take the activations' signs, vpmaddubsw multiplies them by the
// activations' magnitudes into pairs, vpmaddwd sums the pairs into 32-bit lanes, vpaddd accumulates.
// Each chain's weights pass through an empty asm every iteration, so the compiler cannot hoist the
// products out of the loop as it could for constants; the chain's only dependency is the add.
constexpr int kInt8Chains = 8;  // 8 sums, 4 constant inputs and a product or two: 16 ymm, none spilled
double int8_multiply_adds(int64_t iterations) {
  __m256i chains[kInt8Chains];
  for (int c = 0; c < kInt8Chains; ++c) chains[c] = _mm256_set1_epi32(c);
  const __m256i magnitude = _mm256_set1_epi8(1), sign = _mm256_set1_epi8(-1), ones = _mm256_set1_epi16(1);
  __m256i weights = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < iterations; ++i) {
    asm volatile("" : "+x"(weights));
    for (int c = 0; c < kInt8Chains; ++c) {
      const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(weights, sign));
      chains[c] = _mm256_add_epi32(chains[c], _mm256_madd_epi16(pairs, ones));
      asm volatile("" : "+x"(weights));
    }
  }
  __m256i total = _mm256_setzero_si256();
  for (int c = 0; c < kInt8Chains; ++c) total = _mm256_add_epi32(total, chains[c]);
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), total);
  double sum = 0;
  for (int32_t lane : lanes) sum += lane;
  return sum;
}
#endif

// Reads `floats` floats (a multiple of 8 vectors) `passes` times with eight accumulators.
double read(const float* buffer, int64_t floats, int64_t passes) {
  simd::Vec sums[8];
  for (simd::Vec& sum : sums) sum = simd::zero();
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (int64_t i = 0; i + 8 * simd::kLanes <= floats; i += 8 * simd::kLanes) {
      for (int k = 0; k < 8; ++k) sums[k] = simd::add(sums[k], simd::load(buffer + i + k * simd::kLanes));
    }
  }
  simd::Vec total = simd::zero();
  for (const simd::Vec& sum : sums) total = simd::add(total, sum);
  return simd::reduce_add(total);
}

}  // namespace

extern "C" {

const char* rp_isa() {
  return SIMD_ISA
#if defined(__AVX512VNNI__)
      "+vnni"
#endif
#if defined(__AVX512BF16__)
      "+bf16"
#endif
      ;
}

// Floating-point or integer operations (a multiply-add counting two) of one iteration of a precision's kernel.
int64_t rp_operations_per_iteration(int32_t precision) {
  int64_t multiply_adds = static_cast<int64_t>(kChains) * simd::kLanes;  // float32: one per lane
#if defined(__AVX512BF16__)
  if (precision == kBfloat16) multiply_adds = kChains * 16 * 2;  // two bfloat16 products per lane
#endif
#if defined(__AVX512VNNI__)
  if (precision == kInt8) multiply_adds = kChains * 16 * 4;  // four int8 products per lane
#elif defined(SIMD_AVX2)
  if (precision == kInt8) multiply_adds = kInt8Chains * 8 * 4;  // four int8 products per 32-bit lane
#endif
  return 2 * multiply_adds;
}

// Runs `iterations` of the precision's multiply-add kernel on this thread; returns a checksum.
double rp_multiply_adds(int32_t precision, int64_t iterations) {
#if defined(__AVX512BF16__)
  if (precision == kBfloat16) return bfloat16_multiply_adds(iterations);
#endif
#if defined(__AVX512VNNI__) || defined(SIMD_AVX2)
  if (precision == kInt8) return int8_multiply_adds(iterations);
#endif
  (void)precision;  // no native instruction: the fast path widens to float32, so its roof is float32's
  return float32_multiply_adds(iterations);
}

// The floats one read step covers: buffers are sized in multiples of it.
int64_t rp_read_granule() {
  return 8 * simd::kLanes;
}

// Reads `floats` floats of `buffer` `passes` times on this thread; returns their sum.
double rp_read(const float* buffer, int64_t floats, int64_t passes) {
  return read(buffer, floats, passes);
}

// `threads` threads each read their own `floats` floats (buffer + t * floats) `passes` times, started and
// joined within the call; returns the sum of their sums.
double rp_read_threads(const float* buffer, int64_t floats, int64_t passes, int32_t threads) {
  std::vector<double> sums(threads, 0.0);
  std::vector<std::thread> workers;
  for (int32_t t = 1; t < threads; ++t)
    workers.emplace_back([&, t] { sums[t] = read(buffer + t * floats, floats, passes); });
  sums[0] = read(buffer, floats, passes);
  for (std::thread& worker : workers) worker.join();
  double total = 0.0;
  for (double sum : sums) total += sum;
  return total;
}
}
