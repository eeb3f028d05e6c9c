// An independent check of the machine profile's read bandwidth (benchmarks/aligned_read_check.py):
// its own 64-byte aligned buffer (posix_memalign), its own clock, its own loop of eight independent
// vector accumulators, sharing no code with runner/decoding/csrc/roof_probe.cpp.
//   aligned_read BYTES REPEATS  ->  prints the best repeat's bytes per second
#include <immintrin.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
static inline Vec zero() { return _mm512_setzero_ps(); }
static inline Vec load(const float* p) { return _mm512_load_ps(p); }  // aligned load: faults if not
static inline Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
static inline float total(Vec v) { return _mm512_reduce_add_ps(v); }
#else
using Vec = __m256;
constexpr int kLanes = 8;
static inline Vec zero() { return _mm256_setzero_ps(); }
static inline Vec load(const float* p) { return _mm256_load_ps(p); }
static inline Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
static inline float total(Vec v) {
  float out[8];
  _mm256_storeu_ps(out, v);
  float sum = 0;
  for (float x : out) sum += x;
  return sum;
}
#endif

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: aligned_read BYTES REPEATS\n");
    return 2;
  }
  const int64_t block = 8 * kLanes;
  int64_t floats = std::atoll(argv[1]) / 4 / block * block;
  if (floats < block) floats = block;
  const int repeats = std::atoi(argv[2]);
  float* buffer = nullptr;
  if (posix_memalign(reinterpret_cast<void**>(&buffer), 64, floats * 4) != 0) return 1;
  for (int64_t i = 0; i < floats; ++i) buffer[i] = 1e-30f;
  // Enough passes that a repeat reads about 20 MB (a few hundred microseconds to a few milliseconds).
  int64_t passes = 20'000'000 / (floats * 4);
  if (passes < 1) passes = 1;
  double best = 0, checksum = 0;
  for (int r = 0; r < repeats + 1; ++r) {  // the first repeat warms the caches and is not counted
    Vec sums[8];
    for (Vec& s : sums) s = zero();
    auto start = std::chrono::steady_clock::now();
    for (int64_t p = 0; p < passes; ++p) {
      for (int64_t i = 0; i < floats; i += block) {
        for (int k = 0; k < 8; ++k) sums[k] = add(sums[k], load(buffer + i + k * kLanes));
      }
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Vec all = zero();
    for (Vec& s : sums) all = add(all, s);
    checksum += total(all);
    if (r > 0 && seconds > 0) {
      double rate = 4.0 * floats * passes / seconds;
      if (rate > best) best = rate;
    }
  }
  std::printf("%.6g %g\n", best, checksum);
  free(buffer);
  return 0;
}
