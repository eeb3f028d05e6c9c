// The `fast` decode path of runner/decoding/fast.py: the whole model over packed weights (linear.h) and
// vector primitives (simd.h), behind a C interface that runner/decoding/fast_library.py loads with ctypes. The
// caller checks every pointer and shape; the entry points only refuse positions past the cache.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "attention.h"
#include "linear.h"
#include "pool.h"
#include "sampling.h"
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

// Nanoseconds this thread has spent inside dl_forward, dl_sample and dl_verify since the library loaded:
// a loop around them spends its wall time less this outside the kernels (benchmarks/decode_vs_transformers.py's
// speculative_loop_overhead_fraction). Per thread, so that another caller's passes never count.
// Two clock reads a call, tens of nanoseconds against microseconds.
thread_local int64_t kernel_nanoseconds = 0;
// The same per entry point (EntryPoint): what a speculative loop spent drafting (dl_sample) and verifying
// (dl_verify), for the cost sessions that replay its passes (runner.decoding.fast_library.entry_point_seconds).
enum EntryPoint : int32_t { kForward = 0, kSample = 1, kVerify = 2 };
thread_local int64_t entry_point_nanoseconds[3] = {0, 0, 0};

// Times one entry point's call into kernel_nanoseconds (the entry points never call each other; dl_speculate,
// which has none, calls dl_sample and dl_verify).
struct KernelClock {
  const EntryPoint entry_point;
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  explicit KernelClock(EntryPoint entry) : entry_point(entry) {}
  ~KernelClock() {
    const auto elapsed = std::chrono::steady_clock::now() - started;
    const int64_t nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
    kernel_nanoseconds += nanoseconds;
    entry_point_nanoseconds[entry_point] += nanoseconds;
  }
};

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
      return attention::attend<1>(hd, q, 3 * d, m, start, kh, vh, out, d, buffer.data());
    case 2:
      return attention::attend<2>(hd, q, 3 * d, m, start, kh, vh, out, d, buffer.data());
    case 3:
      return attention::attend<3>(hd, q, 3 * d, m, start, kh, vh, out, d, buffer.data());
    case 4:
      return attention::attend<4>(hd, q, 3 * d, m, start, kh, vh, out, d, buffer.data());
    default:
      return attention::attend_wide(hd, q, 3 * d, m, start, kh, vh, out, d, buffer.data());
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

// Threads a pass may use, this one included (1: no helpers, the default). Not to be called during a pass.
void dl_set_threads(int32_t threads) {
  if (!helpers || helpers->helpers() != threads - 1) {
    helpers.reset();
    if (threads > 1) helpers = std::make_unique<pool::Pool>(threads - 1);
  }
}

int64_t dl_entry_point_nanoseconds(int32_t entry_point) {
  return entry_point >= kForward && entry_point <= kVerify ? entry_point_nanoseconds[entry_point] : -1;
}

int64_t dl_kernel_nanoseconds() {
  return kernel_nanoseconds;
}

int32_t dl_threads() {
  return helpers ? helpers->helpers() + 1 : 1;
}

// Logits (m x vocab) of m tokens fed from cache position `start`. 0, or -1 for positions past the cache.
int32_t dl_forward(const void* handle, const int64_t* tokens, int64_t m, int64_t start, float* keys, float* values,
                   int64_t capacity, float* logits) {
  KernelClock clock(kForward);
  const Model& model = *static_cast<const Model*>(handle);
  if (!fits(model, start, m, capacity)) return -1;
  forward(model, tokens, m, start, keys, values, capacity, logits);
  return 0;
}

// What the confidence schedule reads: the top probability of the distribution `row` drawn from the logits;
// greedy (temperature 0, a one-hot row), of the logits' softmax, as runner.decoding.accept_rule.top_probability.
static float top_probability(const float* logits, const float* row, int64_t vocab, double temperature) {
  if (temperature > 0.0) return *std::max_element(row, row + vocab);
  const float top = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int64_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(logits[j]) - top);
  return static_cast<float>(1.0 / sum);
}

// Feeds `feed` (m tokens) from cache position `start`, then chooses n tokens, feeding each but the last.
// Writes the tokens and, unless `distributions` is null, the n x vocab distributions they were drawn from.
// Returns how many were chosen (n), or -1 for positions past the cache. With p_min > 0 (a draft's
// confidence schedule) it stops before a token whose distribution's top probability (top_probability) is
// below p_min (never before the first), having fed every token chosen.
//
// With no_cache the cache is only the pass's scratch space: every step feeds the whole sequence again from
// position 0 (the prefix's K/V recomputed, as a decoder without a cache does).
int32_t dl_sample(const void* handle, const int64_t* feed, int64_t m, int64_t start, int64_t n, double temperature,
                  const double* uniforms, float* keys, float* values, int64_t capacity, int32_t no_cache,
                  int64_t* tokens, float* distributions, double p_min) {
  KernelClock clock(kSample);
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
    const int64_t token = sampling::choose(last, vocab, temperature, uniforms[i], row);
    if (i > 0 && p_min > 0.0 && top_probability(last, row, vocab, temperature) < p_min) return static_cast<int32_t>(i);
    tokens[i] = token;
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
  return static_cast<int32_t>(n);
}

// One speculative verification: feeds tokens[0] (the last committed token) and the k proposals
// tokens[1..k] from cache position `start`, then applies the accept rule (sampling::accept) against the
// draft's distributions q (k x vocab). Writes the emitted tokens (the kept proposals, then the
// correction or bonus token) and TV(p, q) per decided row; returns the number of proposals kept, or -1
// for positions past the cache. The cache keeps all k + 1 new positions: the caller rolls it back.
// `variant` (sampling::Variant) runs a deliberately broken rule, for the distribution check's controls.
int64_t dl_verify(const void* handle, const int64_t* tokens, int64_t k, int64_t start, float* keys, float* values,
                  int64_t capacity, const float* q, double temperature, const double* randoms, int64_t* emitted,
                  float* variations, int32_t variant) {
  KernelClock clock(kVerify);
  const Model& model = *static_cast<const Model*>(handle);
  const int64_t vocab = model.vocab;
  if (!fits(model, start, k + 1, capacity)) return -1;
  Scratch& s = scratch();
  grow(s.logits, (k + 1) * vocab);
  grow(s.probabilities, (k + 1) * vocab);
  forward(model, tokens, k + 1, start, keys, values, capacity, s.logits.data());
  for (int64_t row = 0; row <= k; ++row)
    sampling::distribution(s.logits.data() + row * vocab, vocab, temperature, s.probabilities.data() + row * vocab);
  std::vector<double> residual(vocab);
  return sampling::accept(s.probabilities.data(), q, tokens + 1, k, vocab, temperature, randoms, emitted, variations,
                          residual.data(), variant);
}

}  // extern "C"

#include "speculative_loop.h"  // dl_speculate: the loop around dl_sample and dl_verify
