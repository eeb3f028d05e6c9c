"""The ``fast`` decode path: the whole model in one compiled C++ call.

At d=128 a decode step is about 0.7 million multiply-adds, microseconds of arithmetic, yet
eager PyTorch spends hundreds of microseconds dispatching its ~40 small ops. This path does
the same arithmetic (embedding, pre-LayerNorm blocks with cached attention, tanh GELU, tied
lm head) in plain loops over raw float pointers, single-threaded (threads only cost at this
size), compiled once per machine with the system C++ compiler (``torch.utils.cpp_extension``,
cached under ~/.cache/torch_extensions). Reductions keep their order per lane, so logits agree
with the eager path to float rounding, not bit for bit.

Three entry points: ``forward`` feeds m positions in one pass over the weights (a prompt, or a
speculative verification of k + 1 positions); ``sample`` runs a whole generation, choosing each
token in C++ from a given uniform (inverse CDF, as the eager loops choose); ``step`` is
``forward`` of one token.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, cast

import torch

from runner.model import Block, CharGPT, KVCache

SOURCE = r"""
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
    const float* w0 = w + r * cols; const float* w1 = w0 + cols;
    const float* w2 = w1 + cols; const float* w3 = w2 + cols;
    for (int64_t j = 0; j < m; ++j) {
      const float* xj = x + j * cols;
      float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
      for (int64_t i = 0; i < cols; ++i) {
        const float xi = xj[i];
        a0 += w0[i] * xi; a1 += w1[i] * xi; a2 += w2[i] * xi; a3 += w3[i] * xi;
      }
      float* o = out + j * rows + r;
      o[0] = a0 + (bias ? bias[r] : 0.f); o[1] = a1 + (bias ? bias[r + 1] : 0.f);
      o[2] = a2 + (bias ? bias[r + 2] : 0.f); o[3] = a3 + (bias ? bias[r + 3] : 0.f);
    }
  }
  for (; r < rows; ++r) {
    for (int64_t j = 0; j < m; ++j) {
      const float* xj = x + j * cols; const float* wr = w + r * cols;
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
  for (int64_t i = 0; i < d; ++i) { float c = x[i] - mean; var += c * c; }
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
  auto take = [&cursor](int64_t n) { const float* at = cursor; cursor += n; return at; };
  const float* wte = take(vocab * d);
  const float* wpe = take(context * d);
  for (int64_t j = 0; j < m; ++j)
    for (int64_t i = 0; i < d; ++i) x[j * d + i] = wte[tokens[j] * d + i] + wpe[(start + j) * d + i];
  float* kc = keys.data_ptr<float>();
  float* vc = values.data_ptr<float>();
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  for (int64_t l = 0; l < layers; ++l) {
    const float* ln1_w = take(d); const float* ln1_b = take(d);
    const float* attn_w = take(3 * d * d); const float* attn_b = take(3 * d);
    const float* proj_w = take(d * d); const float* proj_b = take(d);
    const float* ln2_w = take(d); const float* ln2_b = take(d);
    const float* fc_w = take(4 * d * d); const float* fc_b = take(4 * d);
    const float* fc2_w = take(4 * d * d); const float* fc2_b = take(d);
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
        for (int64_t t = 0; t <= pos; ++t) { scores[t] = std::exp(scores[t] - top); total += scores[t]; }
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
  const float* lnf_w = take(d); const float* lnf_b = take(d);
  TORCH_CHECK(cursor == flat.data_ptr<float>() + flat.numel(), "weights do not match the cache's shape");
  for (int64_t j = 0; j < m; ++j) layer_norm(&x[j * d], lnf_w, lnf_b, &h[j * d], d);
  linear(wte, nullptr, h.data(), logits, m, vocab, d);
}

torch::Tensor forward_positions(std::vector<int64_t> tokens, int64_t start, torch::Tensor flat, int64_t vocab,
                                int64_t context, torch::Tensor keys, torch::Tensor values) {
  const int64_t m = static_cast<int64_t>(tokens.size());
  torch::Tensor logits = torch::empty({m, vocab}, torch::kFloat32);
  forward(tokens.data(), m, start, flat, vocab, context, keys, values, logits.data_ptr<float>());
  return logits;
}

// The sampling distribution softmax(logits / temperature) into `probabilities` (one-hot argmax at
// temperature 0, the first maximum on ties as torch.argmax), and the token where its cumulative sum
// first exceeds `uniform` (inverse CDF: one uniform per token, as the eager loops draw them).
static int64_t choose(const float* logits, int64_t vocab, double temperature, double uniform, float* probabilities) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v) if (logits[v] > logits[best]) best = v;
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

// Feed `feed` from cache position `start`, then choose n tokens, feeding each but the last. Returns the
// tokens and the n x vocab distributions they were drawn from.
std::vector<torch::Tensor> sample(std::vector<int64_t> feed, int64_t start, int64_t n, double temperature,
                                  torch::Tensor uniforms, torch::Tensor flat, int64_t vocab, int64_t context,
                                  torch::Tensor keys, torch::Tensor values) {
  TORCH_CHECK(uniforms.scalar_type() == torch::kFloat64 && uniforms.numel() >= n, "need n float64 uniforms");
  const int64_t m = static_cast<int64_t>(feed.size());
  std::vector<float> logits(m * vocab);
  torch::Tensor tokens = torch::empty({n}, torch::kInt64);
  torch::Tensor distributions = torch::empty({n, vocab}, torch::kFloat32);
  int64_t* out = tokens.data_ptr<int64_t>();
  float* rows = distributions.data_ptr<float>();
  const double* u = uniforms.data_ptr<double>();
  forward(feed.data(), m, start, flat, vocab, context, keys, values, logits.data());
  const float* last = logits.data() + (m - 1) * vocab;
  int64_t pos = start + m;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = choose(last, vocab, temperature, u[i], rows + i * vocab);
    if (i + 1 < n) {
      forward(&out[i], 1, pos++, flat, vocab, context, keys, values, logits.data());
      last = logits.data();
    }
  }
  return {tokens, distributions};
}
"""


@functools.cache
def extension() -> Any:
    """Compile (once per machine; cached) and load the C++ decode path."""
    from torch.utils.cpp_extension import load_inline

    return load_inline(
        name="decodelab_fast_decode",
        cpp_sources=SOURCE,
        functions=["forward_positions", "sample"],
        extra_cflags=["-O3", "-march=native", "-fopenmp-simd"],
        verbose=False,
    )


def flat_weights(model: CharGPT) -> torch.Tensor:
    """The model's float32 weights, flattened into one buffer in the order the C++ step reads them
    (one tensor to hand over per call instead of forty)."""
    if model.device.type != "cpu" or hasattr(model, "quantization"):
        raise ValueError("the fast path runs float32 models on the CPU")
    tensors = [model.wte.weight, model.wpe.weight]
    for block in cast(list[Block], model.blocks):
        attention, mlp = block.attn, block.mlp
        tensors += [block.ln_1.weight, block.ln_1.bias, attention.c_attn.weight, attention.c_attn.bias]
        tensors += [attention.c_proj.weight, attention.c_proj.bias, block.ln_2.weight, block.ln_2.bias]
        tensors += [mlp.c_fc.weight, mlp.c_fc.bias, mlp.c_proj.weight, mlp.c_proj.bias]
    tensors += [model.ln_f.weight, model.ln_f.bias]
    return torch.cat([tensor.detach().float().reshape(-1) for tensor in tensors])


class FastDecoder:
    """The compiled path for one model, writing into a KVCache."""

    def __init__(self, model: CharGPT) -> None:
        self.model = model
        self.weights = flat_weights(model)
        self.vocab_size, self.context_length = model.config.vocab_size, model.config.context_length
        compiled = extension()
        self._forward, self._sample = compiled.forward_positions, compiled.sample

    def forward(self, tokens: list[int], cache: KVCache) -> torch.Tensor:
        """Logits (len(tokens) × vocab) after feeding ``tokens`` from position ``cache.length``, in
        one pass over the weights."""
        logits = self._forward(
            tokens, cache.length, self.weights, self.vocab_size, self.context_length, cache.keys, cache.values
        )
        cache.length += len(tokens)
        return logits

    def step(self, token: int, cache: KVCache) -> torch.Tensor:
        """Logits (vocab) after feeding ``token`` at position ``cache.length``."""
        return self.forward([token], cache)[0]

    def sample(
        self, feed: list[int], new_tokens: int, temperature: float, uniforms: torch.Tensor, cache: KVCache
    ) -> tuple[list[int], torch.Tensor]:
        """Feed ``feed``, then choose ``new_tokens`` tokens in C++ (no Python between steps), the i-th
        by inverse CDF at ``uniforms[i]`` (argmax at temperature 0), feeding every one but the last.
        Returns the tokens and the distributions they were drawn from (new_tokens × vocab)."""
        tokens, distributions = self._sample(
            feed,
            cache.length,
            new_tokens,
            temperature,
            uniforms,
            self.weights,
            self.vocab_size,
            self.context_length,
            cache.keys,
            cache.values,
        )
        cache.length += len(feed) + new_tokens - 1
        return tokens.tolist(), distributions


_DECODERS: weakref.WeakKeyDictionary[CharGPT, tuple[tuple[int, ...], FastDecoder]] = weakref.WeakKeyDictionary()


def decoder_for(model: CharGPT) -> FastDecoder:
    """The model's decoder, flattening its weights again only when a parameter changed
    (a generation should not copy the whole model before its first token)."""
    versions = tuple(parameter._version for parameter in model.parameters())
    cached = _DECODERS.get(model)
    if cached is None or cached[0] != versions:
        cached = (versions, FastDecoder(model))
        _DECODERS[model] = cached
    return cached[1]
