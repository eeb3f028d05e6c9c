"""The ``fast`` decode path: one compiled C++ call per token for the whole model.

At d=128 a decode step is about 0.7 million multiply-adds, microseconds of arithmetic, yet
eager PyTorch spends hundreds of microseconds dispatching its ~40 small ops. This path does
the same arithmetic (embedding, pre-LayerNorm blocks with cached attention, tanh GELU, tied
lm head) in plain loops over raw float pointers, single-threaded (threads only cost at this
size), compiled once per machine with the system C++ compiler (``torch.utils.cpp_extension``,
cached under ~/.cache/torch_extensions). Reductions keep their order per lane, so logits agree
with the eager path to float rounding, not bit for bit.
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

static inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

static void matvec(const float* w, const float* bias, const float* x, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) out[r] = dot(w + r * cols, x, cols) + (bias ? bias[r] : 0.f);
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
static void step(int64_t token, int64_t pos, const torch::Tensor& flat, int64_t vocab, int64_t context,
                 torch::Tensor& keys, torch::Tensor& values, float* logits) {
  const int64_t layers = keys.size(0), n_head = keys.size(2), capacity = keys.size(3), hd = keys.size(4);
  const int64_t d = n_head * hd;
  TORCH_CHECK(pos < capacity && pos < context, "position past the cache or the model context");
  TORCH_CHECK(token >= 0 && token < vocab, "token outside the vocabulary");
  std::vector<float> x(d), h(d), qkv(3 * d), att(d), up(4 * d), tmp(d), scores(pos + 1);
  const float* cursor = flat.data_ptr<float>();
  auto take = [&cursor](int64_t n) { const float* at = cursor; cursor += n; return at; };
  const float* wte = take(vocab * d);
  const float* wpe = take(context * d);
  for (int64_t i = 0; i < d; ++i) x[i] = wte[token * d + i] + wpe[pos * d + i];
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
    layer_norm(x.data(), ln1_w, ln1_b, h.data(), d);
    matvec(attn_w, attn_b, h.data(), qkv.data(), 3 * d, d);
    for (int64_t head = 0; head < n_head; ++head) {
      float* kh = kc + ((l * n_head + head) * capacity) * hd;
      float* vh = vc + ((l * n_head + head) * capacity) * hd;
      const float* q = qkv.data() + head * hd;
      for (int64_t i = 0; i < hd; ++i) {
        kh[pos * hd + i] = qkv[d + head * hd + i];
        vh[pos * hd + i] = qkv[2 * d + head * hd + i];
      }
      float top = -INFINITY;
      for (int64_t t = 0; t <= pos; ++t) {
        scores[t] = dot(q, kh + t * hd, hd) * scale;
        top = std::max(top, scores[t]);
      }
      float total = 0.f;
      for (int64_t t = 0; t <= pos; ++t) { scores[t] = std::exp(scores[t] - top); total += scores[t]; }
      float* out = att.data() + head * hd;
      for (int64_t i = 0; i < hd; ++i) out[i] = 0.f;
      for (int64_t t = 0; t <= pos; ++t) {
        const float weight = scores[t] / total;
        const float* v = vh + t * hd;
#pragma omp simd
        for (int64_t i = 0; i < hd; ++i) out[i] += weight * v[i];
      }
    }
    matvec(proj_w, proj_b, att.data(), tmp.data(), d, d);
    for (int64_t i = 0; i < d; ++i) x[i] += tmp[i];
    layer_norm(x.data(), ln2_w, ln2_b, h.data(), d);
    matvec(fc_w, fc_b, h.data(), up.data(), 4 * d, d);
    for (int64_t i = 0; i < 4 * d; ++i) {
      const float u = up[i];
      up[i] = 0.5f * u * (1.f + std::tanh(0.7978845608028654f * (u + 0.044715f * u * u * u)));
    }
    matvec(fc2_w, fc2_b, up.data(), tmp.data(), d, 4 * d);
    for (int64_t i = 0; i < d; ++i) x[i] += tmp[i];
  }
  const float* lnf_w = take(d); const float* lnf_b = take(d);
  TORCH_CHECK(cursor == flat.data_ptr<float>() + flat.numel(), "weights do not match the cache's shape");
  layer_norm(x.data(), lnf_w, lnf_b, h.data(), d);
  matvec(wte, nullptr, h.data(), logits, vocab, d);
}

torch::Tensor decode_step(int64_t token, int64_t pos, torch::Tensor flat, int64_t vocab, int64_t context,
                          torch::Tensor keys, torch::Tensor values) {
  torch::Tensor logits = torch::empty({vocab}, torch::kFloat32);
  step(token, pos, flat, vocab, context, keys, values, logits.data_ptr<float>());
  return logits;
}

// Greedy decoding entirely in C++: feed the prompt, then n tokens, each the argmax of the last
// logits (the first maximum on ties, as torch.argmax). Returns the n generated tokens.
torch::Tensor greedy(std::vector<int64_t> prompt, int64_t n, torch::Tensor flat, int64_t vocab, int64_t context,
                     torch::Tensor keys, torch::Tensor values) {
  std::vector<float> logits(vocab);
  torch::Tensor out = torch::empty({n}, torch::kInt64);
  int64_t* tokens = out.data_ptr<int64_t>();
  int64_t pos = 0;
  for (int64_t token : prompt) step(token, pos++, flat, vocab, context, keys, values, logits.data());
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v) if (logits[v] > logits[best]) best = v;
    tokens[i] = best;
    if (i + 1 < n) step(best, pos++, flat, vocab, context, keys, values, logits.data());
  }
  return out;
}
"""


@functools.cache
def extension() -> Any:
    """Compile (once per machine; cached) and load the C++ decode step."""
    from torch.utils.cpp_extension import load_inline

    return load_inline(
        name="decodelab_fast_decode",
        cpp_sources=SOURCE,
        functions=["decode_step", "greedy"],
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
    """Decode steps for one model through the compiled path, writing into a KVCache."""

    def __init__(self, model: CharGPT) -> None:
        self.model = model
        self.weights = flat_weights(model)
        self.step_function = extension().decode_step
        self.vocab_size, self.context_length = model.config.vocab_size, model.config.context_length

    def step(self, token: int, cache: KVCache) -> torch.Tensor:
        """Logits (vocab) after feeding ``token`` at position ``cache.length``."""
        logits = self.step_function(
            token, cache.length, self.weights, self.vocab_size, self.context_length, cache.keys, cache.values
        )
        cache.length += 1
        return logits

    def greedy(self, prompt: list[int], new_tokens: int, cache: KVCache) -> list[int]:
        """The whole greedy generation in one C++ call (no Python between steps)."""
        tokens = extension().greedy(
            prompt, new_tokens, self.weights, self.vocab_size, self.context_length, cache.keys, cache.values
        )
        cache.length += len(prompt) + new_tokens - 1
        return tokens.tolist()


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
