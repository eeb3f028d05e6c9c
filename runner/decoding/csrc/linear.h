// Packed linear layers for runner/decoding/csrc: out[j] = W x[j] + b for m inputs, with W in float32, bfloat16 or
// int8 (one scale per output row).
//
// Layout: output rows in panels of kLanes (one vector), four panels to a chunk. Within a chunk the
// weights go column group by column group: for each group, every panel's vector of kLanes rows x
// (1 float32 | 2 bfloat16 | 4 int8) columns, 32 bits per row. One pass over a chunk reads each weight once
// and multiplies it into up to kRowBlock inputs (a verification of k + 1 positions reads the weights
// once), with no horizontal sums: each lane is one output row, summed in column order, so a row's result
// does not depend on how many inputs share the pass.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "simd.h"

namespace linear {

using simd::kLanes;
using simd::Vec;

enum Format : int32_t { kFloat32 = 0, kBfloat16 = 1, kInt8 = 2 };
enum Epilogue { kStore, kGelu, kAccumulate };  // out = y, out = gelu(y), out += y

constexpr int kPanels = 4;
constexpr int64_t kChunkRows = kPanels * kLanes;
#if defined(__AVX512F__)
constexpr int kRowBlock = 6;  // 6 x 4 accumulators + 4 weight vectors + 1 broadcast: 29 of 32 registers
#elif defined(__AVX2__)
constexpr int kRowBlock = 3;  // 3 x 4 accumulators + 3 broadcasts of 16 registers (see below)
#else
constexpr int kRowBlock = 4;
#endif
// With 16 registers a whole chunk's four panels leave room for three inputs only with each multiply-add reading
// its weight vector itself (12 accumulators, 3 broadcasts; of the three reads of a vector the first comes from L3,
// the two after it from L1), so a pass of more inputs (a verification of k + 1 positions) would read the weights
// from L3 once per three.
// From four inputs it goes over half a chunk at a time instead (two panels: one cache line per column group),
// with each format's Op::kHalfChunkRows inputs. Measured on a Zen 3 EPYC (float32, quick model): five inputs 2.40
// plain steps against 2.76 in blocks of two; three inputs as one block 0.87-0.89 of a block of two and one
// (benchmarks/library_ab.py, 1.64 plain steps against 1.85), where half chunks of three were no quicker.
#if defined(SIMD_AVX2)
constexpr bool kHalfChunks = true;
#else
constexpr bool kHalfChunks = false;
#endif
constexpr int64_t kHalfChunkPanels = kPanels / 2;
constexpr int64_t kHalfChunkFromInputs = 4;

inline int columns_per_word(Format format) {
  return format == kFloat32 ? 1 : format == kBfloat16 ? 2 : 4;
}

// Memory aligned to a cache line, freed with free().
struct Buffer {
  std::unique_ptr<uint8_t, decltype(&std::free)> data{nullptr, &std::free};
  void allocate(int64_t bytes) {
    const int64_t rounded = (std::max<int64_t>(bytes, 1) + 63) / 64 * 64;
    data.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
    std::fill(data.get(), data.get() + rounded, 0);
  }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data.get());
  }
};

struct Packed {
  Format format = kFloat32;
  int64_t rows = 0, cols = 0, words = 0;  // words: column groups of 32 bits per row
  Buffer weights;
  Buffer bias;     // rows floats (zeros when the layer has none)
  Buffer scales;   // int8: rows floats
  Buffer offsets;  // int8 with VNNI: 128 x the row's weight sum (the activations' unsigned shift)
};

// Packs a row-major rows x cols weight: float32 values, bfloat16 bit patterns (uint16) or int8 values with
// one float scale per row.
inline void pack(Packed& out, Format format, const void* weight, const float* scales, const float* bias, int64_t rows,
                 int64_t cols) {
  const int per_word = columns_per_word(format);
  out.format = format;
  out.rows = rows;
  out.cols = cols;
  out.words = (cols + per_word - 1) / per_word;
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  out.weights.allocate(chunks * out.words * kChunkRows * 4);
  uint8_t* bytes = out.weights.as<uint8_t>();
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t first = chunk * kChunkRows;
    const int64_t panels = std::min<int64_t>(kPanels, (rows - first + kLanes - 1) / kLanes);
    uint8_t* base = bytes + chunk * out.words * kChunkRows * 4;
    for (int64_t word = 0; word < out.words; ++word)
      for (int64_t lane = 0; lane < panels * kLanes; ++lane) {
        const int64_t row = first + lane;
        uint8_t* slot = base + (word * panels * kLanes + lane) * 4;
        for (int e = 0; e < per_word; ++e) {
          const int64_t col = word * per_word + e;
          if (row >= rows || col >= cols) continue;  // padding stays zero
          if (format == kFloat32) {
            std::memcpy(slot, static_cast<const float*>(weight) + row * cols + col, 4);
          } else if (format == kBfloat16) {
            std::memcpy(slot + 2 * e, static_cast<const uint16_t*>(weight) + row * cols + col, 2);
          } else {
            slot[e] = static_cast<uint8_t>(static_cast<const int8_t*>(weight)[row * cols + col]);
          }
        }
      }
  }
  out.bias.allocate(rows * 4);
  if (bias) std::memcpy(out.bias.as<float>(), bias, rows * 4);
  if (format == kInt8) {
    out.scales.allocate(rows * 4);
    std::memcpy(out.scales.as<float>(), scales, rows * 4);
    out.offsets.allocate(rows * 4);
    for (int64_t row = 0; row < rows; ++row) {
      int32_t total = 0;
      for (int64_t col = 0; col < cols; ++col) total += static_cast<const int8_t*>(weight)[row * cols + col];
      out.offsets.as<int32_t>()[row] = 128 * total;
    }
  }
}

// float -> bfloat16 bits, round to nearest even (as torch's .to(torch.bfloat16) for finite values).
inline uint16_t to_bfloat16(float value) {
  const uint32_t bits = simd::float_to_bits(value);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// One format's inner step: how a word of activations is broadcast and multiplied into an accumulator, and
// how an accumulator becomes the float32 sums of its kLanes rows.
struct Float32Op {
  static constexpr int kHalfChunkRows = 6;  // 6 x 2 accumulators + 2 weights + 1 broadcast: 15 of 16
  using Acc = Vec;
  using Weights = Vec;
  using Broadcast = Vec;
  static Acc zero() { return simd::zero(); }
  static Weights load(const uint8_t* p) { return simd::load(reinterpret_cast<const float*>(p)); }
  static Broadcast broadcast(uint32_t word) { return simd::set1(simd::bits_to_float(word)); }
  static Acc step(Acc acc, Weights w, Broadcast x) { return simd::fmadd(w, x, acc); }
  static Vec sums(Acc acc, const Packed&, int64_t, int64_t) { return acc; }
};

#if defined(__AVX512BF16__)
struct Bfloat16Op {  // vdpbf16ps: two bfloat16 products per lane into a float32 sum
  static constexpr int kHalfChunkRows = 6;
  using Acc = __m512;
  using Weights = __m512i;
  using Broadcast = __m512i;
  static Acc zero() { return _mm512_setzero_ps(); }
  static Weights load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static Broadcast broadcast(uint32_t word) { return _mm512_set1_epi32(static_cast<int>(word)); }
  static Acc step(Acc acc, Weights w, Broadcast x) { return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x); }
  static Vec sums(Acc acc, const Packed&, int64_t, int64_t) { return acc; }
};
#else
struct Bfloat16Op {  // bfloat16 widened to float32 (exact), then two float32 multiply-adds
  static constexpr int kHalfChunkRows = 4;  // 4 x 2 + 2 x 2 weights + 2 broadcasts: 14 of 16
  using Acc = Vec;
  struct Weights {
    Vec low, high;
  };
  using Broadcast = Weights;
  static Acc zero() { return simd::zero(); }
  static Weights load(const uint8_t* p) { return {simd::widen_bfloat16(p, 0), simd::widen_bfloat16(p, 1)}; }
  static Broadcast broadcast(uint32_t word) {
    return {simd::set1(simd::bits_to_float(word << 16)), simd::set1(simd::bits_to_float(word & 0xffff0000u))};
  }
  static Acc step(Acc acc, Weights w, Broadcast x) {
    return simd::fmadd(w.high, x.high, simd::fmadd(w.low, x.low, acc));
  }
  static Vec sums(Acc acc, const Packed&, int64_t, int64_t) { return acc; }
};
#endif

#if defined(__AVX512VNNI__)
constexpr bool kUnsignedActivations = true;  // vpdpbusd multiplies unsigned by signed bytes
struct Int8Op {
  static constexpr int kHalfChunkRows = 6;
  using Acc = __m512i;
  using Weights = __m512i;
  using Broadcast = __m512i;
  static Acc zero() { return _mm512_setzero_si512(); }
  static Weights load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static Broadcast broadcast(uint32_t word) { return _mm512_set1_epi32(static_cast<int>(word)); }
  // In place, through asm: GCC 12 gave the intrinsic's result a register of its own and copied it back,
  // which at 20 accumulators spilled half of them to the stack on every column group (on the EPYC a
  // 5-position int8 verification took 67 us instead of 51, a plain int8 step 21 instead of 18).
  static Acc step(Acc acc, Weights w, Broadcast x) {
    asm("vpdpbusd %[w], %[x], %[acc]" : [acc] "+v"(acc) : [x] "v"(x), [w] "v"(w));
    return acc;
  }
  // The activations were shifted by 128 to be unsigned: take 128 x the row's weight sum back off.
  static Vec sums(Acc acc, const Packed& layer, int64_t row, int64_t valid) {
    const __m512i offsets = _mm512_maskz_loadu_epi32(simd::tail_mask(valid), layer.offsets.as<int32_t>() + row);
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, offsets));
  }
};
#elif defined(SIMD_AVX2)
constexpr bool kUnsignedActivations = false;
// AVX2 without VNNI: vpmaddubsw multiplies unsigned by signed bytes and sums pairs into 16 bits, saturating.
// Each activation's magnitude (0..127) times the weight carrying the activation's sign (-127..127): a pair
// sums to at most 2 x 127 x 127 = 32258 < 2^15, so nothing saturates and the result is exact; vpmaddwd then
// sums the pairs into the 32-bit lanes. Four instructions for 32 products, where widening each int8 to
// float32 took sixteen.
struct Int8Op {
  static constexpr int kHalfChunkRows = 4;  // 4 x 2 + 2 weights + 2 broadcasts + the ones + 2 products: 15 of 16
  using Acc = __m256i;
  using Weights = __m256i;
  struct Broadcast {
    __m256i magnitude, sign;
  };
  static Acc zero() { return _mm256_setzero_si256(); }
  static Weights load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static Broadcast broadcast(uint32_t word) {
    const __m256i x = _mm256_set1_epi32(static_cast<int>(word));
    return {_mm256_abs_epi8(x), x};
  }
  static Acc step(Acc acc, Weights w, const Broadcast& x) {
    const __m256i pairs = _mm256_maddubs_epi16(x.magnitude, _mm256_sign_epi8(w, x.sign));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  static Vec sums(Acc acc, const Packed&, int64_t, int64_t) { return _mm256_cvtepi32_ps(acc); }
};
#else
constexpr bool kUnsignedActivations = false;
struct Int8Op {  // int8 widened to float32: every partial sum is an integer below 2^24, so exact
  static constexpr int kHalfChunkRows = 2;
  using Acc = Vec;
  struct Weights {
    Vec part[4];
  };
  using Broadcast = Weights;
  static Acc zero() { return simd::zero(); }
  static Weights load(const uint8_t* p) {
    return {{simd::widen_int8(p, 0), simd::widen_int8(p, 1), simd::widen_int8(p, 2), simd::widen_int8(p, 3)}};
  }
  static Broadcast broadcast(uint32_t word) {
    Weights x;
    for (int e = 0; e < 4; ++e) x.part[e] = simd::set1(static_cast<float>(static_cast<int8_t>(word >> (8 * e))));
    return x;
  }
  static Acc step(Acc acc, Weights w, Broadcast x) {
    for (int e = 0; e < 4; ++e) acc = simd::fmadd(w.part[e], x.part[e], acc);
    return acc;
  }
  static Vec sums(Acc acc, const Packed&, int64_t, int64_t) { return acc; }
};
#endif

// Activations of m rows in the layer's format: 32-bit words, `words` per row, and for int8 one scale per
// row (symmetric, max |x| / 127, as runner/model/quantize.py's eager emulation).
inline void prepare(const Packed& layer, const float* x, int64_t m, uint32_t* words, float* row_scales) {
  const int64_t cols = layer.cols;
  for (int64_t j = 0; j < m; ++j) {
    const float* row = x + j * cols;
    uint32_t* out = words + j * layer.words;
    if (layer.format == kFloat32) {
      std::memcpy(out, row, cols * 4);
      continue;
    }
    // Padding past the last column meets zero weights; zeroed, so that it is no bfloat16 NaN.
    out[layer.words - 1] = 0;
    if (layer.format == kBfloat16) {
      uint16_t* halves = reinterpret_cast<uint16_t*>(out);
      int64_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
      for (; i + 16 <= cols; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(halves + i), (__m256i)_mm512_cvtneps_pbh(simd::load(row + i)));
#endif
      for (; i < cols; ++i) halves[i] = to_bfloat16(row[i]);
      continue;
    }
    const float scale = std::max(simd::max_abs(row, cols), 1e-12f) / 127.f;
    row_scales[j] = scale;
    uint8_t* bytes = reinterpret_cast<uint8_t*>(out);
    int64_t i = 0;
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    const __m512 divisor = _mm512_set1_ps(scale), low = _mm512_set1_ps(-127.f), high = _mm512_set1_ps(127.f);
    for (; i + 16 <= cols; i += 16) {
      const __m512 rounded = simd::round_nearest(_mm512_div_ps(simd::load(row + i), divisor));
      __m128i values = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(rounded, low), high)));
      if (kUnsignedActivations) values = _mm_xor_si128(values, _mm_set1_epi8(static_cast<char>(0x80)));  // + 128
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes + i), values);
    }
#elif defined(SIMD_AVX2)
    const Vec divisor = simd::set1(scale), low = simd::set1(-127.f), high = simd::set1(127.f);
    for (; i + 8 <= cols; i += 8) {
      const Vec rounded = simd::round_nearest(simd::div(simd::load(row + i), divisor));
      const __m256i values = _mm256_cvtps_epi32(simd::min(simd::max(rounded, low), high));
      const __m128i halves = _mm_packs_epi32(_mm256_castsi256_si128(values), _mm256_extracti128_si256(values, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(bytes + i), _mm_packs_epi16(halves, halves));
    }
#endif
    for (; i < cols; ++i) {
      const int value = static_cast<int>(std::min(127.f, std::max(-127.f, std::nearbyint(row[i] / scale))));
      bytes[i] = kUnsignedActivations ? static_cast<uint8_t>(value + 128) : static_cast<uint8_t>(value);
    }
  }
}

// Keeps a float32 weight vector in a register for every input it meets. GCC folds the load into each multiply-add
// instead where it sees registers run short, so each weight is read once per input: on the Zen 3 EPYC (AVX2) a
// tile of four inputs loaded 8 vectors a column group for 8 multiply-adds, and the whole model's linear layers
// for four inputs took 110 us against 84 with the loads kept apart (two inputs 63 against 57; five, not folded, the
// same). The int8 tiles gained nothing measurable from it and keep GCC's choice, and so does a tile that would not
// fit: three inputs over four panels (12 accumulators, 4 weights, a broadcast) would spill an accumulator a column.
template <typename T>
inline void in_register(T&) {}
#if defined(SIMD_AVX2)
inline void in_register(__m256& value) {
  asm("" : "+x"(value));
}
#endif

// Rows [first, first + NP * kLanes) of MR inputs: the accumulators, then the epilogue. `chunk` points at the
// tile's first panel in a chunk of `chunk_panels` panels per column group.
template <typename Op, int MR, int NP>
inline void tile(const Packed& layer, const uint8_t* chunk, int64_t chunk_panels, int64_t first,
                 const uint32_t* words, const float* row_scales, float* out, int64_t out_stride, Epilogue epilogue) {
  typename Op::Acc acc[MR][NP];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p] = Op::zero();
  const int64_t stride = layer.words;
  // Only half-chunk tiles cover fewer panels than their chunk holds; elsewhere the stride stays a constant.
  const int64_t panel_stride = kHalfChunks ? chunk_panels : NP;
  for (int64_t w = 0; w < stride; ++w) {
    typename Op::Weights weights[NP];
    for (int p = 0; p < NP; ++p) {
      weights[p] = Op::load(chunk + (w * panel_stride + p) * kLanes * 4);
      if constexpr (kHalfChunks && MR > 1 && (MR + 1) * NP + 1 <= 16 && std::is_same_v<Op, Float32Op>)
        in_register(weights[p]);
    }
    for (int r = 0; r < MR; ++r) {
      const typename Op::Broadcast x = Op::broadcast(words[r * stride + w]);
      for (int p = 0; p < NP; ++p) acc[r][p] = Op::step(acc[r][p], weights[p], x);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const int64_t row = first + p * kLanes;
    const int64_t valid = std::min<int64_t>(kLanes, layer.rows - row);
    const Vec bias = simd::load_tail(layer.bias.as<float>() + row, valid, 0.f);
    for (int r = 0; r < MR; ++r) {
      Vec y = Op::sums(acc[r][p], layer, row, valid);
      if (layer.format == kInt8) {
        const Vec scales = simd::load_tail(layer.scales.as<float>() + row, valid, 0.f);
        y = simd::mul(y, simd::mul(simd::set1(row_scales[r]), scales));
      }
      y = simd::add(y, bias);
      float* target = out + r * out_stride + row;
      if (epilogue == kGelu) y = simd::gelu(y);
      if (epilogue == kAccumulate) y = simd::add(y, simd::load_tail(target, valid, 0.f));
      if (valid == kLanes) {
        simd::store(target, y);
      } else {
        simd::store_tail(target, y, valid);
      }
    }
  }
}

template <typename Op, int MR>
inline void tile_panels(const Packed& layer, const uint8_t* chunk, int64_t chunk_panels, int64_t first,
                        int64_t panels, const uint32_t* words, const float* row_scales, float* out,
                        int64_t out_stride, Epilogue epilogue) {
  switch (panels) {
    case 4:
      return tile<Op, MR, 4>(layer, chunk, chunk_panels, first, words, row_scales, out, out_stride, epilogue);
    case 3:
      return tile<Op, MR, 3>(layer, chunk, chunk_panels, first, words, row_scales, out, out_stride, epilogue);
    case 2:
      return tile<Op, MR, 2>(layer, chunk, chunk_panels, first, words, row_scales, out, out_stride, epilogue);
    default:
      return tile<Op, MR, 1>(layer, chunk, chunk_panels, first, words, row_scales, out, out_stride, epilogue);
  }
}

template <typename Op, int MR>
inline void tile_rows(const Packed& layer, const uint8_t* chunk, int64_t chunk_panels, int64_t first,
                      int64_t panels, int64_t rows, const uint32_t* words, const float* row_scales, float* out,
                      int64_t out_stride, Epilogue epilogue) {
  if constexpr (MR > 1) {
    if (rows < MR)
      return tile_rows<Op, MR - 1>(layer, chunk, chunk_panels, first, panels, rows, words, row_scales, out,
                                   out_stride, epilogue);
  }
  tile_panels<Op, MR>(layer, chunk, chunk_panels, first, panels, words, row_scales, out, out_stride, epilogue);
}

// Inputs [0, m) in blocks of MR over panels [panel, panel + panels) of one chunk.
template <typename Op, int MR>
inline void row_blocks(const Packed& layer, const uint8_t* base, int64_t chunk_panels, int64_t first, int64_t panel,
                       int64_t panels, const uint32_t* words, const float* row_scales, int64_t m, float* out,
                       Epilogue epilogue) {
  for (int64_t j = 0; j < m; j += MR) {
    const int64_t rows = std::min<int64_t>(MR, m - j);
    tile_rows<Op, MR>(layer, base + panel * kLanes * 4, chunk_panels, first + panel * kLanes, panels, rows,
                      words + j * layer.words, row_scales ? row_scales + j : nullptr, out + j * layer.rows,
                      layer.rows, epilogue);
  }
}

// Chunks [chunk_begin, chunk_end) of the layer for m prepared inputs; out is m x rows (row stride rows).
template <typename Op>
inline void run_chunks(const Packed& layer, int64_t chunk_begin, int64_t chunk_end, const uint32_t* words,
                       const float* row_scales, int64_t m, float* out, Epilogue epilogue) {
  for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
    const int64_t first = chunk * kChunkRows;
    const int64_t panels = std::min<int64_t>(kPanels, (layer.rows - first + kLanes - 1) / kLanes);
    const uint8_t* base = layer.weights.as<uint8_t>() + chunk * layer.words * kChunkRows * 4;
    if constexpr (kHalfChunks) {
      if (m >= kHalfChunkFromInputs) {
        for (int64_t panel = 0; panel < panels; panel += kHalfChunkPanels) {
          const int64_t count = std::min<int64_t>(kHalfChunkPanels, panels - panel);
          row_blocks<Op, Op::kHalfChunkRows>(layer, base, panels, first, panel, count, words, row_scales, m, out,
                                             epilogue);
        }
        continue;
      }
    }
    row_blocks<Op, kRowBlock>(layer, base, panels, first, 0, panels, words, row_scales, m, out, epilogue);
  }
}

inline int64_t chunk_count(const Packed& layer) {
  return (layer.rows + kChunkRows - 1) / kChunkRows;
}

inline void run(const Packed& layer, int64_t chunk_begin, int64_t chunk_end, const uint32_t* words,
                const float* row_scales, int64_t m, float* out, Epilogue epilogue) {
  if (layer.format == kFloat32)
    return run_chunks<Float32Op>(layer, chunk_begin, chunk_end, words, row_scales, m, out, epilogue);
  if (layer.format == kBfloat16)
    return run_chunks<Bfloat16Op>(layer, chunk_begin, chunk_end, words, row_scales, m, out, epilogue);
  run_chunks<Int8Op>(layer, chunk_begin, chunk_end, words, row_scales, m, out, epilogue);
}

}  // namespace linear
