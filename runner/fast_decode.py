"""The ``fast`` decode path: the whole model in one compiled C++ call.

At d=128 a decode step is about 0.7 million multiply-adds, microseconds of arithmetic, yet
eager PyTorch spends hundreds of microseconds dispatching its ~40 small ops. This path does
the same arithmetic (embedding, pre-LayerNorm blocks with cached attention, tanh GELU, tied
lm head) in plain loops over raw float pointers, single-threaded (threads only cost at this
size), compiled once per machine with the system C++ compiler (``torch.utils.cpp_extension``,
cached under ~/.cache/torch_extensions). Reductions keep their order per lane, so logits agree
with the eager path to float rounding, not bit for bit.

Entry points: ``forward`` feeds m positions in one pass over the weights (a prompt, or a
speculative verification of k + 1 positions); ``sample`` runs a whole generation, choosing each
token in C++ from a given uniform (inverse CDF, as the eager loops choose); ``sample_no_cache``
does the same without a cache, feeding the whole sequence again every step (the compiled
path's own no-cache baseline); ``step`` is ``forward`` of one token.

The C++ source is ``runner/csrc/fast_decode.cpp``.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import weakref
from pathlib import Path
from typing import Any, cast

import torch

from runner.model import Block, CharGPT, KVCache

SOURCES = [Path(__file__).parent / "csrc" / "fast_decode.cpp"]


def cpu_flags_key() -> str:
    """A short hash of this CPU's model and instruction-set flags. The extension is built with
    -march=native, so its build cache is keyed by it: a home directory shared with a machine of
    another CPU must not load a binary using instructions this one lacks."""
    described = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "model name", "Features")):
                described += line
    except OSError:
        pass
    return hashlib.sha256(described.encode()).hexdigest()[:10]


@functools.cache
def extension() -> Any:
    """Compile (once per machine and CPU; cached) and load the C++ decode path."""
    from torch.utils.cpp_extension import load

    return load(
        name=f"decodelab_fast_decode_{cpu_flags_key()}",
        sources=[str(source) for source in SOURCES],
        extra_cflags=["-O3", "-march=native", "-fopenmp-simd"],
        verbose=False,
    )


def flat_weights(model: CharGPT) -> torch.Tensor:
    """The model's float32 weights, flattened into one buffer in the order the C++ step reads them
    (one tensor to hand over per call instead of forty)."""
    if model.device.type != "cpu" or hasattr(model, "quantization") or not model.config.is_gpt2:
        raise ValueError("the fast path runs float32 GPT-2 shaped models (tied lm head) on the CPU")
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
            False,
        )
        cache.length += len(feed) + new_tokens - 1
        return tokens.tolist(), distributions

    def sample_no_cache(
        self, prompt: list[int], new_tokens: int, temperature: float, uniforms: torch.Tensor
    ) -> list[int]:
        """``sample`` without a cache: every step pushes the whole sequence so far through the
        model from position 0 (the scratch buffer holds only the current pass's K/V)."""
        scratch = self.model.new_cache(capacity=len(prompt) + max(new_tokens - 1, 0))
        tokens, _ = self._sample(
            prompt,
            0,
            new_tokens,
            temperature,
            uniforms,
            self.weights,
            self.vocab_size,
            self.context_length,
            scratch.keys,
            scratch.values,
            True,
        )
        return cast(list[int], tokens.tolist())


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
