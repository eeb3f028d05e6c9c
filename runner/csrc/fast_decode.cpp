// The `fast` decode path of runner/fast_decode.py: the whole model over packed weights (linear.h) and
// vector primitives (simd.h), behind a C interface that runner/fast_decode.py loads with ctypes. The
// caller checks every pointer and shape; the entry points only refuse positions past the cache.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "linear.h"
#include "pool.h"
#include "simd.h"

namespace {

using linear::Packed;

struct Layer {
  const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
  Packed attn, proj, fc, fc2;
};

struct Model {
  int64_t vocab, context, d, layers, heads, hd;
  std::vector<float> wte, wpe, lnf_w, lnf_b, norms;  // norms: every layer's four LayerNorm vectors
  std::vector<Layer> blocks;
  Packed head;  // the tied lm head (wte), always float32
};

// Per-thread scratch, grown as needed: a call allocates nothing once warm.
struct Scratch {
  std::vector<float> x, h, qkv, att, up, scores, row_scales, logits, probabilities;
  std::vector<uint32_t> words;
};

Scratch& scratch() {
  thread_local Scratch instance;
  return instance;
}

void grow(std::vector<float>& buffer, int64_t size) {
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(size);
}

// The helpers (dl_set_threads), shared by every model; a call that finds them busy with another
// caller's pass runs its loops alone.
std::unique_ptr<pool::Pool> helpers;
std::atomic<bool> helpers_busy{false};

struct Parallel {
  pool::Pool* pool = nullptr;
  Parallel() {
    if (helpers && !helpers_busy.exchange(true, std::memory_order_acquire)) pool = helpers.get();
  }
  ~Parallel() {
    if (pool) helpers_busy.store(false, std::memory_order_release);
  }
  template <typename Context>
  void run(const Context& context, int64_t count) {
    auto task = [](const void* c, int64_t item) { (*static_cast<const Context*>(c))(item); };
    if (pool) {
      pool->run(task, &context, count);
    } else {
      for (int64_t i = 0; i < count; ++i) context(i);
    }
  }
};

void layer_norm(const float* x, const float* g, const float* b, float* out, int64_t d) {
  const float mean = simd::sum(x, d) / d;
  std::copy(x, x + d, out);
  simd::map_inplace(out, d, [mean](simd::Vec v) { return simd::sub(v, simd::set1(mean)); });
  const float variance = simd::dot(out, out, d) / d;
  const float inverse = 1.f / std::sqrt(variance + 1e-5f);
  for (int64_t i = 0; i < d; ++i) out[i] = out[i] * inverse * g[i] + b[i];
}

// out (m x layer.rows) = layer(x) for m rows of x (m x layer.cols), then the epilogue; chunks of rows
// shared with the helpers.
void apply(Parallel& parallel, const Packed& layer, const float* x, int64_t m, float* out, linear::Epilogue epilogue) {
  Scratch& s = scratch();
  const uint32_t* words = reinterpret_cast<const uint32_t*>(x);
  if (layer.format != linear::kFloat32) {
    if (static_cast<int64_t>(s.words.size()) < m * layer.words) s.words.resize(m * layer.words);
    grow(s.row_scales, m);
    linear::prepare(layer, x, m, s.words.data(), s.row_scales.data());
    words = s.words.data();
  }
  const float* row_scales = s.row_scales.data();
  parallel.run([&](int64_t chunk) { linear::run(layer, chunk, chunk + 1, words, row_scales, m, out, epilogue); },
               linear::chunk_count(layer));
}

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
void attend_wide(int64_t hd, const float* qkv, int64_t q_stride, int64_t m, int64_t start, const float* kh,
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

// Causal attention of m new positions from `start` for one layer and head: writes their K/V into the
// cache (heads x capacity x hd) and the head's output into att (m x d).
void attention_head(const Model& model, int64_t head, const float* qkv, int64_t m, int64_t start, float* keys,
                    float* values, int64_t capacity, float* att) {
  const int64_t d = model.d, hd = model.hd;
  float* kh = keys + head * capacity * hd;
  float* vh = values + head * capacity * hd;
  for (int64_t j = 0; j < m; ++j) {
    std::memcpy(kh + (start + j) * hd, qkv + j * 3 * d + d + head * hd, hd * sizeof(float));
    std::memcpy(vh + (start + j) * hd, qkv + j * 3 * d + 2 * d + head * hd, hd * sizeof(float));
  }
  std::vector<float>& buffer = scratch().scores;  // this thread's
  grow(buffer, m * (start + m));
  const float* q = qkv + head * hd;
  float* out = att + head * hd;
  switch ((hd + simd::kLanes - 1) / simd::kLanes) {
    case 1:
      return attend<1>(hd, q, 3 * d, m, start, kh, vh, out, d, buffer.data());
    case 2:
      return attend<2>(hd, q, 3 * d, m, start, kh, vh, out, d, buffer.data());
    case 3:
      return attend<3>(hd, q, 3 * d, m, start, kh, vh, out, d, buffer.data());
    case 4:
      return attend<4>(hd, q, 3 * d, m, start, kh, vh, out, d, buffer.data());
    default:
      return attend_wide(hd, q, 3 * d, m, start, kh, vh, out, d, buffer.data());
  }
}

// Feeds m tokens at positions start .. start + m - 1 (each sees the cache and the new positions up to
// itself), writes their K/V into the cache (layers x heads x capacity x hd) and the m x vocab logits.
void forward(const Model& model, const int64_t* tokens, int64_t m, int64_t start, float* keys, float* values,
             int64_t capacity, float* logits) {
  const int64_t d = model.d;
  Scratch& s = scratch();
  grow(s.x, m * d);
  grow(s.h, m * d);
  grow(s.qkv, m * 3 * d);
  grow(s.att, m * d);
  grow(s.up, m * 4 * d);
  float *x = s.x.data(), *h = s.h.data();
  Parallel parallel;
  for (int64_t j = 0; j < m; ++j)
    for (int64_t i = 0; i < d; ++i) x[j * d + i] = model.wte[tokens[j] * d + i] + model.wpe[(start + j) * d + i];
  const int64_t per_layer = model.heads * capacity * model.hd;
  for (int64_t l = 0; l < model.layers; ++l) {
    const Layer& layer = model.blocks[l];
    for (int64_t j = 0; j < m; ++j) layer_norm(x + j * d, layer.ln1_w, layer.ln1_b, h + j * d, d);
    apply(parallel, layer.attn, h, m, s.qkv.data(), linear::kStore);
    const float* qkv = s.qkv.data();
    float *layer_keys = keys + l * per_layer, *layer_values = values + l * per_layer, *att = s.att.data();
    parallel.run(
        [&](int64_t head) { attention_head(model, head, qkv, m, start, layer_keys, layer_values, capacity, att); },
        model.heads);
    apply(parallel, layer.proj, s.att.data(), m, x, linear::kAccumulate);
    for (int64_t j = 0; j < m; ++j) layer_norm(x + j * d, layer.ln2_w, layer.ln2_b, h + j * d, d);
    apply(parallel, layer.fc, h, m, s.up.data(), linear::kGelu);
    apply(parallel, layer.fc2, s.up.data(), m, x, linear::kAccumulate);
  }
  for (int64_t j = 0; j < m; ++j) layer_norm(x + j * d, model.lnf_w.data(), model.lnf_b.data(), h + j * d, d);
  apply(parallel, model.head, h, m, logits, linear::kStore);
}

// The sampling distribution softmax(logits / temperature) into `probabilities` (one-hot argmax at
// temperature 0, the first maximum on ties as torch.argmax), and the token where its cumulative sum
// first exceeds `uniform` (inverse CDF: one uniform per token, as the eager loops draw them).
int64_t choose(const float* logits, int64_t vocab, double temperature, double uniform, float* probabilities) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (logits[v] > logits[best]) best = v;
  if (temperature == 0.0) {
    for (int64_t v = 0; v < vocab; ++v) probabilities[v] = v == best ? 1.f : 0.f;
    return best;
  }
  const float inverse = static_cast<float>(1.0 / temperature);
  float total = 0.f;
  for (int64_t v = 0; v < vocab; ++v) {
    probabilities[v] = std::exp((logits[v] - logits[best]) * inverse);
    total += probabilities[v];
  }
  double cumulative_total = 0.0;
  for (int64_t v = 0; v < vocab; ++v) {
    probabilities[v] /= total;
    cumulative_total += probabilities[v];
  }
  const double threshold = uniform * cumulative_total;
  double cumulative = 0.0;
  for (int64_t v = 0; v < vocab; ++v) {
    cumulative += probabilities[v];
    if (probabilities[v] > 0.f && cumulative > threshold) return v;
  }
  return best;  // rounding left the threshold unreached
}

bool fits(const Model& model, int64_t start, int64_t m, int64_t capacity) {
  return m >= 1 && start >= 0 && start + m <= capacity && start + m <= model.context;
}

}  // namespace

extern "C" {

// The instruction set the kernels were built for, e.g. "avx512+vnni+bf16".
const char* dl_isa() {
  return SIMD_ISA
#if defined(__AVX512VNNI__)
      "+vnni"
#endif
#if defined(__AVX512BF16__)
      "+bf16"
#endif
      ;
}

// A model packed for `format` (linear::Format) from its tensors: per layer 16 pointers, in order ln1
// weight and bias, then for attn, proj, fc and fc2 the weight (float32, bfloat16 bits or int8 in that
// format), its per-row scales (int8 only, else null) and bias, with ln2 weight and bias after proj.
void* dl_model_new(int64_t vocab, int64_t context, int64_t d, int64_t layers, int64_t heads, int32_t format,
                   const float* wte, const float* wpe, const float* lnf_w, const float* lnf_b,
                   const void* const* layer_tensors) {
  Model* model = new Model();
  model->vocab = vocab;
  model->context = context;
  model->d = d;
  model->layers = layers;
  model->heads = heads;
  model->hd = d / heads;
  model->wte.assign(wte, wte + vocab * d);
  model->wpe.assign(wpe, wpe + context * d);
  model->lnf_w.assign(lnf_w, lnf_w + d);
  model->lnf_b.assign(lnf_b, lnf_b + d);
  model->norms.resize(layers * 4 * d);
  model->blocks.resize(layers);
  const auto f = linear::Format(format);
  for (int64_t l = 0; l < layers; ++l) {
    const void* const* t = layer_tensors + l * 16;
    float* norms = model->norms.data() + l * 4 * d;
    for (int i = 0; i < 4; ++i) {
      const int slot = i < 2 ? i : i + 6;  // ln1 at 0, 1; ln2 at 8, 9
      std::memcpy(norms + i * d, t[slot], d * sizeof(float));
    }
    Layer& layer = model->blocks[l];
    layer.ln1_w = norms;
    layer.ln1_b = norms + d;
    layer.ln2_w = norms + 2 * d;
    layer.ln2_b = norms + 3 * d;
    auto scales = [](const void* p) { return static_cast<const float*>(p); };
    linear::pack(layer.attn, f, t[2], scales(t[3]), scales(t[4]), 3 * d, d);
    linear::pack(layer.proj, f, t[5], scales(t[6]), scales(t[7]), d, d);
    linear::pack(layer.fc, f, t[10], scales(t[11]), scales(t[12]), 4 * d, d);
    linear::pack(layer.fc2, f, t[13], scales(t[14]), scales(t[15]), d, 4 * d);
  }
  linear::pack(model->head, linear::kFloat32, wte, nullptr, nullptr, vocab, d);
  return model;
}

void dl_model_free(void* model) {
  delete static_cast<Model*>(model);
}

// Threads a pass may use, this one included (1: no helpers). Not to be called during a pass.
void dl_set_threads(int32_t threads) {
  helpers.reset();
  if (threads > 1) helpers = std::make_unique<pool::Pool>(threads - 1);
}

// Logits (m x vocab) of m tokens fed from cache position `start`. 0, or -1 for positions past the cache.
int32_t dl_forward(const void* handle, const int64_t* tokens, int64_t m, int64_t start, float* keys, float* values,
                   int64_t capacity, float* logits) {
  const Model& model = *static_cast<const Model*>(handle);
  if (!fits(model, start, m, capacity)) return -1;
  forward(model, tokens, m, start, keys, values, capacity, logits);
  return 0;
}

// Feeds `feed` (m tokens) from cache position `start`, then chooses n tokens, feeding each but the last.
// Writes the tokens and, unless `distributions` is null, the n x vocab distributions they were drawn from.
//
// With no_cache the cache is only the pass's scratch space: every step feeds the whole sequence again from
// position 0 (the prefix's K/V recomputed, as a decoder without a cache does).
int32_t dl_sample(const void* handle, const int64_t* feed, int64_t m, int64_t start, int64_t n, double temperature,
                  const double* uniforms, float* keys, float* values, int64_t capacity, int32_t no_cache,
                  int64_t* tokens, float* distributions) {
  const Model& model = *static_cast<const Model*>(handle);
  const int64_t vocab = model.vocab;
  if (!fits(model, start, m + std::max<int64_t>(n - 1, 0), capacity) || (no_cache && start != 0)) return -1;
  Scratch& s = scratch();
  grow(s.logits, (no_cache ? m + n : m) * vocab);
  grow(s.probabilities, vocab);
  std::vector<int64_t> sequence(feed, feed + m);
  forward(model, feed, m, start, keys, values, capacity, s.logits.data());
  const float* last = s.logits.data() + (m - 1) * vocab;
  int64_t position = start + m;
  for (int64_t i = 0; i < n; ++i) {
    float* row = distributions ? distributions + i * vocab : s.probabilities.data();
    tokens[i] = choose(last, vocab, temperature, uniforms[i], row);
    if (i + 1 == n) break;
    if (no_cache) {
      sequence.push_back(tokens[i]);
      const int64_t length = static_cast<int64_t>(sequence.size());
      forward(model, sequence.data(), length, 0, keys, values, capacity, s.logits.data());
      last = s.logits.data() + (length - 1) * vocab;
    } else {
      forward(model, &tokens[i], 1, position++, keys, values, capacity, s.logits.data());
      last = s.logits.data();
    }
  }
  return 0;
}

}  // extern "C"
