// The `fast` decode path of runner/fast_decode.py: the whole model in plain loops over raw float pointers.
#include <torch/extension.h>

#include <cmath>
#include <vector>

// out[j * rows + r] = w[r] . x[j] + bias[r] for m inputs x (m x cols). Four rows at a time: a lone
// dot product waits on the latency of its one running sum; four independent sums keep the FMA
// units busy, and the four weight rows stay in L1 while every input passes over them (a
// verification pass of k + 1 positions reads the weights once).
static void linear(const float* w, const float* bias, const float* x, float* out, int64_t m, int64_t rows,
                   int64_t cols) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* w0 = w + r * cols;
    const float* w1 = w0 + cols;
    const float* w2 = w1 + cols;
    const float* w3 = w2 + cols;
    for (int64_t j = 0; j < m; ++j) {
      const float* xj = x + j * cols;
      float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
      for (int64_t i = 0; i < cols; ++i) {
        const float xi = xj[i];
        a0 += w0[i] * xi;
        a1 += w1[i] * xi;
        a2 += w2[i] * xi;
        a3 += w3[i] * xi;
      }
      float* o = out + j * rows + r;
      o[0] = a0 + (bias ? bias[r] : 0.f);
      o[1] = a1 + (bias ? bias[r + 1] : 0.f);
      o[2] = a2 + (bias ? bias[r + 2] : 0.f);
      o[3] = a3 + (bias ? bias[r + 3] : 0.f);
    }
  }
  for (; r < rows; ++r) {
    for (int64_t j = 0; j < m; ++j) {
      const float* xj = x + j * cols;
      const float* wr = w + r * cols;
      float acc = 0.f;
#pragma omp simd reduction(+ : acc)
      for (int64_t i = 0; i < cols; ++i) acc += wr[i] * xj[i];
      out[j * rows + r] = acc + (bias ? bias[r] : 0.f);
    }
  }
}

static void layer_norm(const float* x, const float* g, const float* b, float* out, int64_t d) {
  float mean = 0.f, var = 0.f;
  for (int64_t i = 0; i < d; ++i) mean += x[i];
  mean /= d;
  for (int64_t i = 0; i < d; ++i) {
    float c = x[i] - mean;
    var += c * c;
  }
  float inv = 1.f / std::sqrt(var / d + 1e-5f);
  for (int64_t i = 0; i < d; ++i) out[i] = (x[i] - mean) * inv * g[i] + b[i];
}

// flat: every weight in one float32 buffer, in this order: wte (vocab x d), wpe (context x d), then per
// layer ln1 w/b, attn w (3d x d)/b, proj w (d x d)/b, ln2 w/b, fc w (4d x d)/b, fc2 w (d x 4d)/b, then ln_f
// w/b. keys/values: (layers, 1, heads, capacity, head_dim), contiguous float32.
//
// Feeds m tokens at positions start .. start + m - 1 (each sees the cache and the new positions up to
// itself), writes their K/V into the cache and the m x vocab logits into `logits`. noipa: GCC would
// otherwise clone it for sample()'s constant m = 1 and, in that clone, drop the vectorization of
// `linear` (measured: 0.23 instead of 0.12 ms per token).
__attribute__((noipa)) static void forward(const int64_t* tokens, int64_t m, int64_t start, const torch::Tensor& flat,
                                           int64_t vocab, int64_t context, torch::Tensor& keys, torch::Tensor& values,
                                           float* logits) {
  const int64_t layers = keys.size(0), n_head = keys.size(2), capacity = keys.size(3), hd = keys.size(4);
  const int64_t d = n_head * hd, end = start + m;
  TORCH_CHECK(m >= 1, "nothing to feed");
  TORCH_CHECK(end <= capacity && end <= context, "positions past the cache or the model context");
  for (int64_t j = 0; j < m; ++j) TORCH_CHECK(tokens[j] >= 0 && tokens[j] < vocab, "token outside the vocabulary");
  std::vector<float> x(m * d), h(m * d), qkv(m * 3 * d), att(m * d), up(m * 4 * d), tmp(m * d), scores(end);
  const float* cursor = flat.data_ptr<float>();
  auto take = [&cursor](int64_t n) {
    const float* at = cursor;
    cursor += n;
    return at;
  };
  const float* wte = take(vocab * d);
  const float* wpe = take(context * d);
  for (int64_t j = 0; j < m; ++j)
    for (int64_t i = 0; i < d; ++i) x[j * d + i] = wte[tokens[j] * d + i] + wpe[(start + j) * d + i];
  float* kc = keys.data_ptr<float>();
  float* vc = values.data_ptr<float>();
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  for (int64_t l = 0; l < layers; ++l) {
    const float* ln1_w = take(d);
    const float* ln1_b = take(d);
    const float* attn_w = take(3 * d * d);
    const float* attn_b = take(3 * d);
    const float* proj_w = take(d * d);
    const float* proj_b = take(d);
    const float* ln2_w = take(d);
    const float* ln2_b = take(d);
    const float* fc_w = take(4 * d * d);
    const float* fc_b = take(4 * d);
    const float* fc2_w = take(4 * d * d);
    const float* fc2_b = take(d);
    for (int64_t j = 0; j < m; ++j) layer_norm(&x[j * d], ln1_w, ln1_b, &h[j * d], d);
    linear(attn_w, attn_b, h.data(), qkv.data(), m, 3 * d, d);
    for (int64_t head = 0; head < n_head; ++head) {
      float* kh = kc + ((l * n_head + head) * capacity) * hd;
      float* vh = vc + ((l * n_head + head) * capacity) * hd;
      for (int64_t j = 0; j < m; ++j)
        for (int64_t i = 0; i < hd; ++i) {
          kh[(start + j) * hd + i] = qkv[j * 3 * d + d + head * hd + i];
          vh[(start + j) * hd + i] = qkv[j * 3 * d + 2 * d + head * hd + i];
        }
      for (int64_t j = 0; j < m; ++j) {
        const int64_t pos = start + j;
        const float* q = &qkv[j * 3 * d + head * hd];
        float top = -INFINITY;
        for (int64_t t = 0; t <= pos; ++t) {
          float s = 0.f;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < hd; ++i) s += q[i] * kh[t * hd + i];
          scores[t] = s * scale;
          top = std::max(top, scores[t]);
        }
        float total = 0.f;
        for (int64_t t = 0; t <= pos; ++t) {
          scores[t] = std::exp(scores[t] - top);
          total += scores[t];
        }
        float* out = &att[j * d + head * hd];
        for (int64_t i = 0; i < hd; ++i) out[i] = 0.f;
        for (int64_t t = 0; t <= pos; ++t) {
          const float weight = scores[t] / total;
          const float* v = vh + t * hd;
#pragma omp simd
          for (int64_t i = 0; i < hd; ++i) out[i] += weight * v[i];
        }
      }
    }
    linear(proj_w, proj_b, att.data(), tmp.data(), m, d, d);
    for (int64_t i = 0; i < m * d; ++i) x[i] += tmp[i];
    for (int64_t j = 0; j < m; ++j) layer_norm(&x[j * d], ln2_w, ln2_b, &h[j * d], d);
    linear(fc_w, fc_b, h.data(), up.data(), m, 4 * d, d);
    for (int64_t i = 0; i < m * 4 * d; ++i) {
      const float u = up[i];
      up[i] = 0.5f * u * (1.f + std::tanh(0.7978845608028654f * (u + 0.044715f * u * u * u)));
    }
    linear(fc2_w, fc2_b, up.data(), tmp.data(), m, d, 4 * d);
    for (int64_t i = 0; i < m * d; ++i) x[i] += tmp[i];
  }
  const float* lnf_w = take(d);
  const float* lnf_b = take(d);
  TORCH_CHECK(cursor == flat.data_ptr<float>() + flat.numel(), "weights do not match the cache's shape");
  for (int64_t j = 0; j < m; ++j) layer_norm(&x[j * d], lnf_w, lnf_b, &h[j * d], d);
  linear(wte, nullptr, h.data(), logits, m, vocab, d);
}

// The sampling distribution softmax(logits / temperature) into `probabilities` (one-hot argmax at
// temperature 0, the first maximum on ties as torch.argmax), and the token where its cumulative sum
// first exceeds `uniform` (inverse CDF: one uniform per token, as the eager loops draw them).
static int64_t choose(const float* logits, int64_t vocab, double temperature, double uniform, float* probabilities) {
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

// Checks every tensor a public entry point receives: the C++ reads raw pointers, so a wrong dtype, device,
// layout or shape must fail here with a message instead of reading out of bounds.
static void check_inputs(const torch::Tensor& flat, int64_t vocab, int64_t context, const torch::Tensor& keys,
                         const torch::Tensor& values) {
  TORCH_CHECK(
      flat.device().is_cpu() && flat.scalar_type() == torch::kFloat32 && flat.is_contiguous() && flat.dim() == 1,
      "flat weights: a contiguous 1-D float32 CPU tensor");
  for (const torch::Tensor* cache : {&keys, &values}) {
    TORCH_CHECK(cache->device().is_cpu() && cache->scalar_type() == torch::kFloat32 && cache->is_contiguous(),
                "keys/values: contiguous float32 CPU tensors");
    TORCH_CHECK(cache->dim() == 5 && cache->size(1) == 1,
                "keys/values: (layers, 1, heads, capacity, head_dim), batch 1");
  }
  TORCH_CHECK(keys.sizes() == values.sizes(), "keys and values differ in shape");
  TORCH_CHECK(vocab >= 1 && context >= 1, "vocab and context must be positive");
  const int64_t layers = keys.size(0), d = keys.size(2) * keys.size(4);
  const int64_t per_layer = 2 * d + 3 * d * d + 3 * d + d * d + d + 2 * d + 4 * d * d + 4 * d + 4 * d * d + d;
  TORCH_CHECK(flat.numel() == vocab * d + context * d + layers * per_layer + 2 * d,
              "flat weights do not match the cache's shape (", flat.numel(), " floats)");
}

torch::Tensor forward_positions(std::vector<int64_t> tokens, int64_t start, torch::Tensor flat, int64_t vocab,
                                int64_t context, torch::Tensor keys, torch::Tensor values) {
  check_inputs(flat, vocab, context, keys, values);
  TORCH_CHECK(start >= 0, "start must be non-negative");
  const int64_t m = static_cast<int64_t>(tokens.size());
  torch::Tensor logits = torch::empty({m, vocab}, torch::kFloat32);
  forward(tokens.data(), m, start, flat, vocab, context, keys, values, logits.data_ptr<float>());
  return logits;
}

// Feed `feed` from cache position `start`, then choose n tokens, feeding each but the last. Returns the
// tokens and the n x vocab distributions they were drawn from.
//
// With no_cache the cache is only the pass's scratch space: every step feeds the whole sequence again from
// position 0 (the prefix's K/V recomputed, as a decoder without a cache does), so the compiled path has a
// no-cache baseline of its own.
std::vector<torch::Tensor> sample(std::vector<int64_t> feed, int64_t start, int64_t n, double temperature,
                                  torch::Tensor uniforms, torch::Tensor flat, int64_t vocab, int64_t context,
                                  torch::Tensor keys, torch::Tensor values, bool no_cache) {
  check_inputs(flat, vocab, context, keys, values);
  TORCH_CHECK(uniforms.device().is_cpu() && uniforms.scalar_type() == torch::kFloat64 && uniforms.is_contiguous() &&
                  uniforms.numel() >= n,
              "need n contiguous float64 CPU uniforms");
  TORCH_CHECK(!feed.empty() && n >= 0 && start >= 0, "feed at least one token; n and start non-negative");
  TORCH_CHECK(!no_cache || start == 0, "a no-cache generation starts at position 0");
  const int64_t m = static_cast<int64_t>(feed.size());
  std::vector<float> logits((no_cache ? m + n : m) * vocab);
  torch::Tensor tokens = torch::empty({n}, torch::kInt64);
  torch::Tensor distributions = torch::empty({n, vocab}, torch::kFloat32);
  int64_t* out = tokens.data_ptr<int64_t>();
  float* rows = distributions.data_ptr<float>();
  const double* u = uniforms.data_ptr<double>();
  std::vector<int64_t> sequence(feed);
  forward(feed.data(), m, start, flat, vocab, context, keys, values, logits.data());
  const float* last = logits.data() + (m - 1) * vocab;
  int64_t pos = start + m;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = choose(last, vocab, temperature, u[i], rows + i * vocab);
    if (i + 1 < n) {
      if (no_cache) {
        sequence.push_back(out[i]);
        const int64_t length = static_cast<int64_t>(sequence.size());
        forward(sequence.data(), length, 0, flat, vocab, context, keys, values, logits.data());
        last = logits.data() + (length - 1) * vocab;
      } else {
        forward(&out[i], 1, pos++, flat, vocab, context, keys, values, logits.data());
        last = logits.data();
      }
    }
  }
  return {tokens, distributions};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("forward_positions", &forward_positions, "logits of m positions fed from `start`, K/V cached");
  module.def("sample", &sample, "a whole generation, each token chosen by inverse CDF from a given uniform");
}
