"""Weight quantization: int8 per output channel and 4-bit per group, both symmetric.

``quantize_model(model, precision, ...)`` returns a new ``CharGPT`` whose linear layers (and,
by default, embeddings) hold quantized weights; it keeps the float model's decode API
(``forward``, ``forward_cached``, ``new_cache``), so it can be timed, evaluated or used as a
speculative draft exactly like the original. The mode travels with the model as
``model.quantization``, never inferred from a file name.

Kernels:
- ``fake``: weights stored quantized, dequantized to float32 at each use, matmul in float32.
  Saves memory, not time.
- ``dynamic_int8``: PyTorch's dynamic int8 linear (a real int8 CPU kernel: activations are
  quantized on the fly), for the blocks' linear layers; embeddings and lm head stay float32.
- ``fast_int8`` and ``fast_bf16``: the blocks' linear layers for the fast path's own kernels
  (runner.decoding.fast): int8 weights with one scale per output row and activations quantized
  symmetrically per position (integer dot products: VNNI where the CPU has it), or bfloat16 weights
  and activations summed in float32. Embeddings and lm head stay float32. The modules' eager forward
  does the same arithmetic, so the other impls (and the loss) see the numbers the kernel computes, to
  float rounding.
"""

from __future__ import annotations

import copy
import threading
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn as nn
from torch.nn import functional as F

from runner.model.choices import KERNEL_PRECISIONS
from runner.model.gpt import CharGPT

PRECISIONS = ("fp32", "int8", "int4", "bf16")
KERNELS = ("float32", "fake", "dynamic_int8", "fast_int8", "fast_bf16")
LEVELS = {"int8": 127, "int4": 7}  # symmetric: q ∈ [−levels, levels]


@dataclass(frozen=True)
class QuantizationInfo:
    precision: str
    group_size: int | None
    kernel: str
    embeddings_quantized: bool

    def to_params(self) -> dict[str, Any]:
        return asdict(self)


class QuantizedTensor(nn.Module):
    """A 2-D weight quantized in groups along each row, one float32 scale per group.

    int8 keeps one byte per value; int4 packs two values per byte (low nibble first).
    """

    def __init__(self, weight: torch.Tensor, precision: str, group_size: int) -> None:
        super().__init__()
        rows, columns = weight.shape
        if columns % group_size:
            raise ValueError(f"group_size {group_size} must divide the row length {columns}")
        self.precision, self.group_size, self.shape = precision, group_size, (rows, columns)
        self.data: torch.Tensor
        self.scales: torch.Tensor
        levels = LEVELS[precision]
        groups = weight.detach().float().reshape(rows, columns // group_size, group_size)
        scales = groups.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / levels
        values = (groups / scales).round().clamp(-levels, levels).to(torch.int8).reshape(rows, columns)
        if precision == "int4":
            if columns % 2:
                raise ValueError("int4 needs an even row length")
            unsigned = (values + 8).to(torch.uint8)
            values = (unsigned[:, 0::2] | (unsigned[:, 1::2] << 4)).contiguous()
        self.register_buffer("data", values)
        self.register_buffer("scales", scales.squeeze(-1).contiguous())

    def _integers(self, data: torch.Tensor) -> torch.Tensor:
        """Rows of stored ``data`` as int8 values, one per column (int4 unpacked, low nibble first)."""
        if self.precision == "int8":
            return data
        low = (data & 0x0F).to(torch.int8) - 8
        high = (data >> 4).to(torch.int8) - 8
        return torch.stack([low, high], dim=-1).reshape(data.shape[0], -1)

    def dequantize_rows(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        data = self.data if rows is None else self.data[rows]
        scales = self.scales if rows is None else self.scales[rows]
        values = self._integers(data.reshape(-1, data.shape[-1])).float()
        groups = values.reshape(values.shape[0], -1, self.group_size) * scales.reshape(values.shape[0], -1, 1)
        return groups.reshape(*data.shape[:-1], self.shape[1])

    def dequantize(self) -> torch.Tensor:
        return self.dequantize_rows()

    def dequantize_into(self, out: torch.Tensor) -> torch.Tensor:
        """The whole weight dequantized into ``out`` (float32, rows × columns elements), the same
        numbers as ``dequantize``: each integer converted to float32, times its group's scale."""
        rows, columns = self.shape
        values = self._integers(self.data)
        groups = columns // self.group_size
        grouped = out.view(rows, groups, self.group_size)
        # Two passes, each one dtype (a conversion, then a multiply in place): faster than one
        # mixed int8 × float32 multiply into ``out``, which took the slower casting loop.
        grouped.copy_(values.reshape(rows, groups, self.group_size)).mul_(self.scales.view(rows, groups, 1))
        return out.view(rows, columns)


# Per thread and device, one float32 buffer that every fake-quantized layer dequantizes its weight
# into while decoding. A fresh float32 weight per layer and call left each process's temporaries
# wherever its heap put them: on the 2-core Xeon the fake int8 speedup over float32 ranged 0.46-0.66
# from one fresh process to the next (log standard deviation 14%, 1.5% inside a process); with one
# reused buffer, 0.68-0.70 (0.4%, docs/review-measurements.md). Threads keep their own: a model may
# decode on two.
_dequantized = threading.local()


def dequantize_buffer(numel: int, device: torch.device) -> torch.Tensor:
    buffers: dict[torch.device, torch.Tensor] = _dequantized.__dict__.setdefault("buffers", {})
    buffer = buffers.get(device)
    if buffer is None or buffer.numel() < numel:
        buffer = buffers[device] = torch.empty(numel, dtype=torch.float32, device=device)
    return buffer[:numel]


class QuantizedLinear(nn.Module):
    def __init__(self, weight: QuantizedTensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight_quantized: QuantizedTensor = weight
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight_quantized
        if not torch.is_inference_mode_enabled():
            # Outside inference mode (a loss under no_grad, autograd) the buffer, an inference
            # tensor, cannot be written, and autograd would need each layer's weight kept.
            return F.linear(x, weight.dequantize(), self.bias)
        rows, columns = weight.shape
        buffer = dequantize_buffer(rows * columns, weight.data.device)
        return F.linear(x, weight.dequantize_into(buffer), self.bias)


class QuantizedEmbedding(nn.Module):
    """Embedding rows are quantized like linear rows; lookups dequantize only the rows used."""

    def __init__(self, weight: QuantizedTensor) -> None:
        super().__init__()
        self.weight_quantized: QuantizedTensor = weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.weight_quantized.dequantize_rows(idx)


class Int8DynamicLinear(nn.Module):
    """int8 weights (one scale per output row, as ``QuantizedTensor``) times activations rounded to
    int8 per position (scale max |x| / 127): the fast_int8 kernel's arithmetic. The integer sums are
    below 2^24, so the float32 matmul of the integer values is exact, as the kernel's int32 sums are."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        quantized = QuantizedTensor(linear.weight, "int8", linear.in_features)
        self.weight_int8: torch.Tensor
        self.weight_scales: torch.Tensor
        self.bias: torch.Tensor
        self.register_buffer("weight_int8", quantized.data)
        self.register_buffer("weight_scales", quantized.scales.reshape(-1).contiguous())
        self.register_buffer("bias", linear.bias.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 127.0
        integers = (x / scale).round().clamp(-127, 127)
        return F.linear(integers, self.weight_int8.float()) * (scale * self.weight_scales) + self.bias


class Bfloat16Linear(nn.Module):
    """bfloat16 weights times activations rounded to bfloat16, summed in float32: the fast_bf16
    kernel's arithmetic (the products of two bfloat16 values are exact in float32)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight_bfloat16: torch.Tensor
        self.bias: torch.Tensor
        self.register_buffer("weight_bfloat16", linear.weight.detach().to(torch.bfloat16).contiguous())
        self.register_buffer("bias", linear.bias.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(torch.bfloat16).float(), self.weight_bfloat16.float(), self.bias)


def _quantize_for_fast_path(model: CharGPT, kernel: str) -> CharGPT:
    quantized = copy.deepcopy(model)
    layer = Int8DynamicLinear if kernel == "fast_int8" else Bfloat16Linear
    for block in quantized.blocks:
        for parent in (block.attn, block.mlp):
            for name in ("c_attn", "c_fc", "c_proj"):
                linear = getattr(parent, name, None)
                if isinstance(linear, nn.Linear):
                    setattr(parent, name, layer(linear))
    return quantized


def _quantize_fake(model: CharGPT, precision: str, group_size: int, embeddings: bool) -> CharGPT:
    quantized = copy.deepcopy(model)
    for block in quantized.blocks:
        for parent in (block.attn, block.mlp):
            for name in ("c_attn", "c_fc", "c_proj"):
                linear = getattr(parent, name, None)
                if isinstance(linear, nn.Linear):
                    row_group = linear.in_features if precision == "int8" else group_size
                    setattr(
                        parent, name, QuantizedLinear(QuantizedTensor(linear.weight, precision, row_group), linear.bias)
                    )
    if embeddings:
        row_group = model.config.d_model if precision == "int8" else group_size
        token_table = QuantizedTensor(model.wte.weight, precision, row_group)
        quantized.wte = QuantizedEmbedding(token_table)  # type: ignore[assignment]
        quantized.wpe = QuantizedEmbedding(QuantizedTensor(model.wpe.weight, precision, row_group))  # type: ignore[assignment]
        if model.config.tie_lm_head:  # a tied lm head reads the same quantized table
            quantized.lm_head = QuantizedLinear(token_table, model.lm_head.bias)  # type: ignore[assignment]
        else:
            head = QuantizedTensor(model.lm_head.weight, precision, row_group)
            quantized.lm_head = QuantizedLinear(head, model.lm_head.bias)  # type: ignore[assignment]
    return quantized


def _quantize_dynamic_int8(model: CharGPT) -> CharGPT:
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch marks its quantized tensors deprecated; the kernel still runs
        return quantize_dynamic(copy.deepcopy(model), {"blocks": per_channel_dynamic_qconfig}, dtype=torch.qint8)


def quantize_model(
    model: CharGPT, precision: str, *, group_size: int = 32, kernel: str = "fake", embeddings: bool = True
) -> CharGPT:
    """A quantized copy of ``model`` with the same decode API; ``model`` is left untouched."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision != "fp32" and kernel not in KERNEL_PRECISIONS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if precision != "fp32" and precision not in KERNEL_PRECISIONS[kernel]:
        raise ValueError(f"the {kernel} kernel runs {' or '.join(KERNEL_PRECISIONS[kernel])} only")
    if precision == "fp32":
        result = copy.deepcopy(model)
        info = QuantizationInfo("fp32", None, "float32", False)
    elif kernel in ("fast_int8", "fast_bf16"):
        if not model.config.is_gpt2:
            raise ValueError(f"the {kernel} kernel runs GPT-2 shaped models (tied lm head) only")
        result = _quantize_for_fast_path(model, kernel)
        info = QuantizationInfo(precision, None, kernel, False)
    elif kernel == "fake":
        if precision == "int4" and model.config.d_model % group_size:
            raise ValueError(f"group_size {group_size} must divide d_model {model.config.d_model}")
        result = _quantize_fake(model, precision, group_size, embeddings)
        info = QuantizationInfo(precision, group_size if precision == "int4" else None, "fake", embeddings)
    else:
        result = _quantize_dynamic_int8(model)
        info = QuantizationInfo("int8", None, "dynamic_int8", False)
    result.quantization = info  # type: ignore[assignment]
    return result.eval()


def quantization_of(model: CharGPT) -> QuantizationInfo:
    return getattr(model, "quantization", QuantizationInfo("fp32", None, "float32", False))


def weight_bytes(model: nn.Module) -> int:
    """Exact bytes of everything the model keeps to compute: parameters, buffers (quantized
    values, scales) and the packed weights of dynamic int8 layers; shared storage counted once.

    Packed weights are counted from their shapes (one byte per int8 value, and each scale and
    zero point at its own width), never by storage address: unpacking them makes temporary
    tensors whose freed addresses a later one may reuse, which made the count vary between
    identical runs."""
    seen: set[int] = set()
    total = 0

    def count_stored(tensor: torch.Tensor) -> None:
        nonlocal total
        pointer = tensor.untyped_storage().data_ptr()
        if pointer in seen:
            return
        seen.add(pointer)
        total += tensor.numel() * tensor.element_size()

    def count_packed(tensor: torch.Tensor) -> int:
        if not tensor.is_quantized:
            return tensor.numel() * tensor.element_size()
        size = tensor.numel() * tensor.element_size()  # one byte per qint8 value
        if tensor.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            scales, zero_points = tensor.q_per_channel_scales(), tensor.q_per_channel_zero_points()
            size += scales.numel() * scales.element_size() + zero_points.numel() * zero_points.element_size()
        else:
            size += 8 + 8  # one float64 scale, one int64 zero point
        return size

    for parameter in model.parameters():
        count_stored(parameter)
    for buffer in model.buffers():
        count_stored(buffer)
    for module in model.modules():
        packed = getattr(module, "_packed_params", None)
        if packed is not None and hasattr(packed, "_weight_bias"):
            weight, bias = packed._weight_bias()
            total += count_packed(weight) + (count_packed(bias) if bias is not None else 0)
    return total
