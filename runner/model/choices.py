"""What a spec may choose of the model's numbers, torch-free: how a cache may be rounded and which
precisions each quantizing kernel runs. The experiments' modules build their fields from these
without importing torch (runner.declarations reads them)."""

from __future__ import annotations

CACHE_ROUNDINGS = ("bfloat16", "float16", "int8")

# The precisions each quantizing kernel runs.
KERNEL_PRECISIONS = {
    "fake": ("int8", "int4"),
    "dynamic_int8": ("int8",),
    "fast_int8": ("int8",),
    "fast_bf16": ("bf16",),
}
