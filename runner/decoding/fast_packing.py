"""The fast path's packed weights: the tensors one model hands the library (in its kernel's
format) and the packings a decoder holds (runner.decoding.fast.FastDecoder).

The library copies every tensor into buffers of its own layout (runner/decoding/csrc/linear.h); a
packing is the handle it returns. Where a small model's packing lands in memory decides part of
its speed for as long as it stays: on the Zen 5 EPYC a fast_int8 generation of the quick model's 64
tokens took 0.50-0.57 ms by packing, steady within one (0.2% over 40 s), so a process timed one draw
of it and a run's int8 figures moved 3-4% between fresh processes (benchmarks/process_spread.py).
``Packings.repack`` draws another: the timings repack between their pairs so that a run's median
averages several placements (runner.decoding.fast.new_placements). Each pair's placement is its own
only as far as memory allows: a packing is made while the RETIRED_PACKINGS before it are held, so a
timing of more pairs than that (the full preset's 9), or of a model whose packings pass
RETIRED_BYTES / 2 (one held), may land where a freed one was.
"""

from __future__ import annotations

import collections
import ctypes
import weakref
from typing import Any, cast

import torch
import torch.nn as nn

from runner.model.gpt import Block, CharGPT
from runner.model.quantize import Bfloat16Linear, Int8DynamicLinear, quantization_of

FORMATS = {"float32": 0, "fast_bf16": 1, "fast_int8": 2}  # runner/decoding/csrc/linear.h Format, by quantization kernel
FAST_KERNELS = tuple(FORMATS)
# The earlier packings held after a repack (at most RETIRED_BYTES of them, at least one): a packing
# made while the one before it is held cannot take that one's memory.
RETIRED_PACKINGS = 8
RETIRED_BYTES = 64 << 20


def _linear_tensors(linear: nn.Module, kernel: str) -> list[torch.Tensor | None]:
    """Weight (in the kernel's format), per-row scales (int8 only) and bias of one linear layer."""
    if kernel == "float32" and isinstance(linear, nn.Linear):
        return [linear.weight.detach().float().contiguous(), None, linear.bias.detach().float().contiguous()]
    if kernel == "fast_bf16" and isinstance(linear, Bfloat16Linear):
        return [linear.weight_bfloat16.view(torch.int16).contiguous(), None, linear.bias.float().contiguous()]
    if kernel == "fast_int8" and isinstance(linear, Int8DynamicLinear):
        # Symmetric quantization never makes -128; the AVX2 kernel gives a weight its activation's sign, and
        # -128 has no positive twin in a byte.
        if linear.weight_int8.numel() and int(linear.weight_int8.min()) < -127:
            raise ValueError("fast_int8 weights: -128 is below the range the kernel takes (allowed -127..127)")
        return [linear.weight_int8.contiguous(), linear.weight_scales.float().contiguous(), linear.bias.contiguous()]
    raise ValueError(f"a {type(linear).__name__} does not run through the fast {kernel} kernel")


def model_tensors(model: CharGPT) -> tuple[int, list[torch.Tensor], list[torch.Tensor | None]]:
    """The format, the four float32 model-wide tensors (wte, wpe, ln_f weight and bias) and every
    block's 16 tensors in the order dl_model_new reads them."""
    kernel = quantization_of(model).kernel
    if model.device.type != "cpu" or kernel not in FORMATS or not model.config.is_gpt2:
        raise ValueError(
            "the fast path runs GPT-2 shaped models (tied lm head) on the CPU, in float32 or quantized by the "
            f"{' or '.join(FAST_KERNELS[1:])} kernel"
        )
    shared = [model.wte.weight, model.wpe.weight, model.ln_f.weight, model.ln_f.bias]
    blocks: list[torch.Tensor | None] = []
    for block in cast(list[Block], model.blocks):
        attention, mlp = block.attn, block.mlp
        blocks += [block.ln_1.weight, block.ln_1.bias]
        blocks += _linear_tensors(attention.c_attn, kernel) + _linear_tensors(attention.c_proj, kernel)
        blocks += [block.ln_2.weight, block.ln_2.bias]
        blocks += _linear_tensors(mlp.c_fc, kernel) + _linear_tensors(mlp.c_proj, kernel)
    as_float = [tensor.detach().float().contiguous() for tensor in shared]
    return FORMATS[kernel], as_float, [None if t is None else t.detach().contiguous() for t in blocks]


def address(tensor: torch.Tensor | None) -> int | None:
    return None if tensor is None else tensor.data_ptr()


def _free_all(library: Any, handles: collections.deque[int]) -> None:
    while handles:
        library.dl_model_free(handles.popleft())


class Packings:
    """One model's packings in a library: the current one (``handle``) and the earlier ones held
    after ``repack`` (``keep`` of them), all freed with this object. Holds no reference to the model."""

    def __init__(self, library: Any, model: CharGPT) -> None:
        self._library = library
        self._handles: collections.deque[int] = collections.deque()
        weakref.finalize(self, _free_all, library, self._handles)
        self.bytes = 0  # the tensors handed over, in their formats (the library's copy holds wte twice)
        self._pack(model)

    @property
    def handle(self) -> int:
        return self._handles[-1]

    @property
    def keep(self) -> int:
        """How many earlier packings ``repack`` holds: RETIRED_PACKINGS, fewer where they would pass RETIRED_BYTES."""
        return max(1, min(RETIRED_PACKINGS, RETIRED_BYTES // max(self.bytes, 1)))

    def _pack(self, model: CharGPT) -> None:
        # The library copies and packs every tensor: nothing here needs to outlive the call.
        config = model.config
        weight_format, shared, blocks = model_tensors(model)
        self.bytes = sum(tensor.numel() * tensor.element_size() for tensor in (*shared, *blocks) if tensor is not None)
        pointers = (ctypes.c_void_p * len(blocks))(*(address(tensor) for tensor in blocks))
        handle = self._library.dl_model_new(
            config.vocab_size,
            config.context_length,
            config.d_model,
            config.n_layer,
            config.n_head,
            weight_format,
            *(address(tensor) for tensor in shared),
            pointers,
        )
        self._handles.append(cast(int, handle))

    def repack(self, model: CharGPT) -> None:
        """Pack ``model``'s weights (the ones packed before) again, elsewhere: ``handle`` is the new
        packing; the oldest earlier one is freed once more than ``keep`` are held. Not while another
        thread calls the library on them."""
        self._pack(model)
        while len(self._handles) > self.keep + 1:
            self._library.dl_model_free(self._handles.popleft())

    def forget_retired(self) -> None:
        """Free every earlier packing; the current one stays."""
        while len(self._handles) > 1:
            self._library.dl_model_free(self._handles.popleft())

    def __len__(self) -> int:
        return len(self._handles)
