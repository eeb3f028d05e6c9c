"""The ``compiled`` decode impl: PyTorch's own compiler on the static-cache loop, gpt-fast style.

One decode step (embedding, the blocks over a preallocated K/V cache, final LayerNorm, lm head) is
a function of fixed shapes: the new position is a tensor, K/V are written with ``index_copy_`` and
attention reads the whole cache under a mask, so ``torch.compile(fullgraph=True, dynamic=False)``
traces it once per cache capacity (rounded up to a power of two, so a few shapes cover every
generation) and inductor fuses it into generated C++. Choosing the token stays in Python, as in
the eager loops, so every impl draws the same tokens.

What it costs besides the arithmetic is what the lab measures against the hand-written fast path:
each step still enters Python, checks the compiled graph's guards and dispatches its kernels
(``call_overhead_seconds`` times that for an empty compiled function).
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn as nn
from torch.nn import functional as F

from runner.decoding.native_build import cpu_flags_key
from runner.decoding.stepper import Stepper
from runner.model.gpt import Block, CharGPT

MIN_CAPACITY = 64
# Of what inductor offers on the CPU, frozen weights and its C++ wrapper (no Python between the
# generated kernels) gave the quickest step on the development machine: 381-416 µs against 462-483
# without. benchmarks/compiled_options.py times each set against eager static.
OPTIONS: dict[str, str | int | bool | Callable[..., Any]] = {"freezing": True, "cpp_wrapper": True}


def capacity_for(positions: int) -> int:
    """The cache capacity a generation of ``positions`` positions runs with: a power of two."""
    capacity = MIN_CAPACITY
    while capacity < positions:
        capacity *= 2
    return capacity


class StaticStep(nn.Module):
    """One decode step of ``model`` over a static cache of ``capacity`` positions, kept as the
    module's buffers (so the compiled graph writes the new K/V in place instead of copying the
    cache back): fixed shapes whatever the position.

    One K and one V buffer per layer, written whole-buffer with ``index_copy_`` (gpt-fast's
    pattern): inductor writes that in place. Writing a view of one buffer shared by every layer
    (``keys[layer, :, position] = k``) made it copy each layer's whole cache several times a step
    and write every layer back at the end, O(capacity) bytes a step (docs/performance.md, The
    compiled impl)."""

    def __init__(self, model: CharGPT, capacity: int) -> None:
        super().__init__()
        self.model = model
        config = model.config
        shape = (1, config.n_head, capacity, config.head_dim)
        for layer in range(config.n_layer):
            self.register_buffer(f"keys_{layer}", torch.zeros(shape, device=model.device), persistent=False)
            self.register_buffer(f"values_{layer}", torch.zeros(shape, device=model.device), persistent=False)

    def forward(self, token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        model = self.model
        config = model.config
        heads, head_dim = config.n_head, config.head_dim
        capacity = cast(torch.Tensor, self.keys_0).shape[2]
        x = model.wte(token) + model.wpe(position)  # (1, 1, d)
        # Slots after the new position are this or an earlier generation's leftovers: masked out.
        visible = torch.arange(capacity, device=token.device) <= position
        mask = torch.where(visible, 0.0, float("-inf")).to(x.dtype).view(1, capacity)
        for layer, block in enumerate(cast(list[Block], model.blocks)):
            attention = block.attn
            keys = cast(torch.Tensor, getattr(self, f"keys_{layer}"))
            values = cast(torch.Tensor, getattr(self, f"values_{layer}"))
            q, k, v = attention.c_attn(block.ln_1(x)).split(config.d_model, dim=2)
            q = q.view(1, 1, heads, head_dim).transpose(1, 2)
            keys.index_copy_(2, position, k.view(1, heads, 1, head_dim))
            values.index_copy_(2, position, v.view(1, heads, 1, head_dim))
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            x = x + attention.c_proj(y.transpose(1, 2).reshape(1, 1, config.d_model))
            x = x + block.mlp(block.ln_2(x))
        return model.lm_head(model.ln_f(x))[:, -1, :]


_inductor_cache_chosen = False


def separate_inductor_cache() -> str:
    """Point inductor's on-disk cache at a folder of this CPU and this ATen capability
    (ATEN_CPU_CAPABILITY), inside the one it would use. Inductor's own cache key leaves the
    capability out: code generated under AVX-512 and reloaded by a process run with
    ATEN_CPU_CAPABILITY=avx2 drew token 0 at every step (seen on an AMD EPYC), and a home
    directory shared between two CPUs would do the same. Returns the folder."""
    global _inductor_cache_chosen
    variable = "TORCHINDUCTOR_CACHE_DIR"
    if not _inductor_cache_chosen:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        base = os.environ.get(variable) or default_cache_dir()
        capability = torch.backends.cpu.get_cpu_capability().lower()
        os.environ[variable] = os.path.join(base, f"decodelab-{cpu_flags_key()}-{capability}")
        _inductor_cache_chosen = True
    return os.environ[variable]


_STEPS: weakref.WeakKeyDictionary[CharGPT, dict[int, Callable[..., torch.Tensor]]] = weakref.WeakKeyDictionary()


def compiled_step(model: CharGPT, capacity: int) -> Callable[..., torch.Tensor]:
    """The model's compiled step for a cache of ``capacity`` positions (compiled on its first call;
    inductor keeps what it generated on disk for the next process)."""
    steps = _STEPS.setdefault(model, {})
    if capacity not in steps:
        separate_inductor_cache()
        steps[capacity] = cast(
            Callable[..., torch.Tensor],
            torch.compile(StaticStep(model, capacity), fullgraph=True, dynamic=False, options=dict(OPTIONS)),
        )
    return steps[capacity]


def compiled_steps(model: CharGPT, prompt: list[int], positions: int) -> Stepper:
    """A stepper (runner.decoding.decode) through the compiled step: the prompt fed one position at a time
    (the compiled graph takes one), then one step per chosen token."""
    step = compiled_step(model, capacity_for(positions))
    device = model.device
    logits = torch.empty(0)
    for index, token in enumerate(prompt):
        logits = step(torch.tensor([[token]], device=device), torch.tensor([index], device=device))
    index = len(prompt)
    while True:
        chosen = yield logits
        logits = step(chosen.reshape(1, 1), torch.tensor([index], device=device))
        index += 1


def call_overhead_seconds(repeats: int = 2000) -> float:
    """The least time of one call to a compiled function that does almost nothing (one add on a
    one-element tensor): the guard check, the dispatch into the generated code and the output's
    allocation that every compiled step pays before its arithmetic."""
    separate_inductor_cache()
    nothing = torch.compile(lambda x: x + 1, fullgraph=True, dynamic=False)
    x = torch.zeros(1)
    for _ in range(10):
        nothing(x)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        nothing(x)
        best = min(best, time.perf_counter() - start)
    return best
