"""This machine's roof, measured (``decodelab machine profile``): peak multiply-add throughput of
one core per precision and read bandwidth over working sets swept from inside L1 to DRAM, on one
thread and on all, with bands over repeats. The micro-kernels are runner/decoding/csrc/roof_probe.cpp
(the instructions the fast path's kernels use); every call is timed by runner.measure.timing's harness
and the work it did is counted in C++, so a figure is counted work over measured seconds.

The figures are one JSON-able dict (stored with the machine, store/profiles.py):

- ``instruction_set``; ``threads`` (all of them); ``quick``;
- ``caches``: the OS's data cache sizes per level (``L1``, ``L2``, ``L3``) in bytes, per core
  for private levels;
- ``peak_operations_per_second``: per precision (``fp32``, ``bf16``, ``int8``) the median,
  ``low`` and ``high`` over repeats (a multiply-add counts two);
- ``bandwidth``: per level (``L1``, ``L2``, ``L3``, ``DRAM``) the working set read and the
  bytes per second on one thread and on all threads (median, low, high);
- ``sweep``: one thread's best bytes per second at each swept working-set size and at each of
  the decode's own working sets (``decode_working_sets``: the quick model's fast-path step in each
  precision after 0, 128, 256 and 512 cached tokens, and its small draft's; the fp32 step's ~3.2 MB
  sits on the L2 → L3 cliff, where interpolating between swept sizes could put the roof anywhere
  between them): what the cost model reads at a pass's working set;
- ``decode_working_sets``: those sizes by name (runner.cost.roofline_model.decode_working_sets);
- ``read_alignment_bytes``: the largest power of two (up to 4096) dividing every read buffer's
  address: at least 64, so no 64-byte vector load splits a cache line, as none of the decode
  kernel's do (its weights are ``aligned_alloc(64)``). A buffer from ``array.array`` sat 16 or 48
  bytes past a line and read 10–50% slower than the hardware (docs/experiments.md, "How the roof is
  checked").

The roof is the best of the repeats (``high``), not their median: other work on the machine can
only slow a micro-kernel down, so the fastest repeat is the nearest to what the hardware does.
"""

from __future__ import annotations

import ctypes
import functools
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.cost.roofline_model import LEVELS, decode_working_sets
from runner.decoding.native_build import build

PRECISIONS = ("fp32", "bf16", "int8")
PRECISION_CODES = {"fp32": 0, "bf16": 1, "int8": 2}  # runner/decoding/csrc/roof_probe.cpp Precision
KIB, MIB = 1024, 1024 * 1024
ALIGNMENT_BYTES = 64  # a cache line and an AVX-512 vector
# Fallbacks where /sys says nothing (a container without it): a common desktop core's caches.
DEFAULT_CACHES = {"L1": 32 * KIB, "L2": 1 * MIB, "L3": 32 * MIB}


@functools.cache
def library() -> ctypes.CDLL:
    loaded = ctypes.CDLL(str(build("roof_probe.cpp")))
    loaded.rp_isa.restype = ctypes.c_char_p
    loaded.rp_operations_per_iteration.restype = ctypes.c_int64
    loaded.rp_operations_per_iteration.argtypes = [ctypes.c_int32]
    loaded.rp_multiply_adds.restype = ctypes.c_double
    loaded.rp_multiply_adds.argtypes = [ctypes.c_int32, ctypes.c_int64]
    loaded.rp_read_granule.restype = ctypes.c_int64
    loaded.rp_read.restype = ctypes.c_double
    loaded.rp_read.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    loaded.rp_read_threads.restype = ctypes.c_double
    loaded.rp_read_threads.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32]
    return loaded


def parse_size(text: str) -> int:
    """A /sys cache size (``48K``, ``2048K``, ``32M``) in bytes."""
    text = text.strip().upper()
    factor = {"K": KIB, "M": MIB, "G": 1024 * MIB}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * factor


def cache_sizes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[str, int]:
    """Data (or unified) cache bytes per level as the OS reports them for CPU 0."""
    sizes: dict[str, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and 1 <= level <= 3:
            sizes[f"L{level}"] = size
    return {level: sizes.get(level, default) for level, default in DEFAULT_CACHES.items()}


def level_working_sets(caches: dict[str, int], quick: bool) -> dict[str, int]:
    """A working set that lands in each level: half of L1 and of L2; in L3 four times L2 (at most
    half of L3, at least 1.5 times L2: a VM may report the host's whole L3); DRAM four times L3,
    capped (64 MiB quick, 512 MiB else: a shared machine's memory)."""
    level_three = min(4 * caches["L2"], max(caches["L3"] // 2, caches["L2"] * 3 // 2))
    dram_cap = 64 * MIB if quick else 512 * MIB
    dram = max(min(4 * caches["L3"], dram_cap), 2 * level_three)
    return dict(zip(LEVELS, (caches["L1"] // 2, caches["L2"] // 2, level_three, dram), strict=True))


def sweep_sizes(caches: dict[str, int], largest: int, quick: bool) -> list[int]:
    """Working sets from 8 KiB to ``largest``, ×2 apart (×√2 apart up to twice L2, where a decode's
    weights sit; quick: ×2 throughout)."""
    sizes: list[int] = []
    size: float = 8 * KIB
    while size <= largest:
        sizes.append(int(size))
        size *= 2 if quick or size >= 2 * caches["L2"] else 2**0.5
    return sorted(set(sizes))


def aligned_floats(count: int, alignment: int = ALIGNMENT_BYTES) -> tuple[ctypes.Array[ctypes.c_char], int]:
    """A buffer of ``count`` floats whose address is a multiple of ``alignment``: the owner (keep it
    alive while the address is read) and the address. Every byte is written (0x01: tiny normal
    floats), so the pages are this buffer's own and not the kernel's one shared page of zeros,
    which would read at cache speed whatever the size."""
    owner = ctypes.create_string_buffer(count * 4 + alignment)
    address = -(-ctypes.addressof(owner) // alignment) * alignment
    ctypes.memset(address, 1, count * 4)
    return owner, address


def alignment_of(address: int, most: int = 4096) -> int:
    """The largest power of two up to ``most`` that divides ``address``."""
    alignment = 1
    while alignment < most and address % (2 * alignment) == 0:
        alignment *= 2
    return alignment


def band(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


class Probe:
    """Times the micro-kernels with a harness; each call does about ``call_seconds`` of work."""

    def __init__(self, repeats: int, call_seconds: float, clock: Callable[[], float] = time.perf_counter) -> None:
        from runner.measure.timing import Harness

        self.harness = Harness(clock=clock)
        self.repeats = repeats
        self.call_seconds = call_seconds
        self.lib = library()
        self.granule = int(self.lib.rp_read_granule())
        self.read_alignment = 4096  # the least alignment of any buffer read so far

    def rates(self, work: float, call: Callable[[], object]) -> list[float]:
        """Work per second of each repeat of ``call``."""
        return [work / seconds for seconds in self.harness.min_of(call, self.repeats).seconds]

    def peak(self, precision: str) -> dict[str, float]:
        code = PRECISION_CODES[precision]
        per_iteration = int(self.lib.rp_operations_per_iteration(code))
        # About 1e11 operations per second per core: size a call to call_seconds.
        iterations = max(1000, int(1e11 * self.call_seconds / per_iteration))
        return band(self.rates(per_iteration * iterations, lambda: self.lib.rp_multiply_adds(code, iterations)))

    def read(self, size_bytes: int, threads: int) -> dict[str, float]:
        floats = max(self.granule, size_bytes // 4 // self.granule * self.granule)
        # Each thread's part starts on a line too: floats is a multiple of the granule (8 vectors).
        owner, address = aligned_floats(floats * threads)
        self.read_alignment = min(self.read_alignment, alignment_of(address))
        # About 2e10 bytes per second: enough passes that a call lasts call_seconds.
        passes = max(1, int(2e10 * self.call_seconds / (floats * 4)))
        if threads == 1:
            call: Callable[[], object] = lambda: self.lib.rp_read(address, floats, passes)  # noqa: E731
        else:
            call = lambda: self.lib.rp_read_threads(address, floats, passes, threads)  # noqa: E731
        rates = band(self.rates(4.0 * floats * passes * threads, call))
        del owner  # the calls above read it; freed only now
        return rates


def profile(
    quick: bool = False, threads: int | None = None, working_sets: dict[str, int] | None = None
) -> dict[str, Any]:
    """Measure this machine's roof (a few seconds quick, well under a minute in full)."""
    started = time.perf_counter()
    all_threads = threads or os.cpu_count() or 1
    # Short calls, many repeats: on a machine shared with other work the best repeat is then likely
    # one that no other process interrupted.
    probe = Probe(repeats=7 if quick else 25, call_seconds=0.0005)
    caches = cache_sizes()
    level_sizes = level_working_sets(caches, quick)
    peaks = {precision: probe.peak(precision) for precision in PRECISIONS}
    bandwidth: dict[str, dict[str, Any]] = {}
    for level, size in level_sizes.items():
        shared = level in ("L3", "DRAM")  # all threads share one working set there, else one each
        per_thread = size // all_threads if shared else size
        bandwidth[level] = {
            "working_set_bytes": size,
            "one_thread": probe.read(size, 1),
            "all_threads": probe.read(per_thread, all_threads),
        }
    decode_sizes = dict(working_sets if working_sets is not None else decode_working_sets())
    sizes = sorted(set(sweep_sizes(caches, level_sizes["DRAM"], quick)) | set(decode_sizes.values()))
    sweep = [{"working_set_bytes": size, "bytes_per_second": probe.read(size, 1)["high"]} for size in sizes]
    return {
        "instruction_set": probe.lib.rp_isa().decode(),
        "threads": all_threads,
        "quick": quick,
        "caches": caches,
        "peak_operations_per_second": peaks,
        "bandwidth": bandwidth,
        "sweep": sweep,
        "decode_working_sets": decode_sizes,
        "read_alignment_bytes": probe.read_alignment,
        "profile_seconds": time.perf_counter() - started,
    }


def name_value_lines(figures: dict[str, Any]) -> list[str]:
    """The profile as ``name=value`` lines (what scripts read): the roof, each the best repeat."""
    lines = [f"instruction_set={figures['instruction_set']}", f"threads={figures['threads']}"]
    if "read_alignment_bytes" in figures:
        lines.append(f"read_alignment_bytes={figures['read_alignment_bytes']}")
    lines += [f"{level.lower()}_cache_bytes={size}" for level, size in figures["caches"].items()]
    for precision, rates in figures["peak_operations_per_second"].items():
        lines.append(f"peak_{precision}_operations_per_second={rates['high']:.4g}")
    for level, row in figures["bandwidth"].items():
        lines.append(f"{level.lower()}_working_set_bytes={row['working_set_bytes']}")
        lines.append(f"{level.lower()}_bytes_per_second_one_thread={row['one_thread']['high']:.4g}")
        lines.append(f"{level.lower()}_bytes_per_second_all_threads={row['all_threads']['high']:.4g}")
    lines.append(f"profile_seconds={figures['profile_seconds']:.1f}")
    return lines


def table(figures: dict[str, Any]) -> str:
    """The profile as a plain text table: first each figure's roof, the best repeat, which the
    roofline uses (the median came first, and a user compared the wrong figure), then its median
    and least repeat."""

    def rate(row: dict[str, float], scale: float) -> str:
        return f"{row['high'] / scale:8.1f} (median {row['median'] / scale:.1f}, least {row['low'] / scale:.1f})"

    lines = [f"{'roof: the best repeat':<28}{'(median, least)':>28}"]
    for precision, rates in figures["peak_operations_per_second"].items():
        lines.append(f"{'peak ' + precision + ' Gop/s (one core)':<28}{rate(rates, 1e9):>28}")
    threads = figures["threads"]
    for level, row in figures["bandwidth"].items():
        size = row["working_set_bytes"]
        label = f"{level} read GB/s at {size / KIB:,.0f} KiB"
        lines.append(
            f"{label:<40} one thread {rate(row['one_thread'], 1e9)}   {threads} threads {rate(row['all_threads'], 1e9)}"
        )
    swept = {row["working_set_bytes"]: row["bytes_per_second"] for row in figures["sweep"]}
    for name, size in figures.get("decode_working_sets", {}).items():
        if name.endswith("_at_128"):  # a generation's middle; the other positions are in the sweep
            label = f"{name.removesuffix('_at_128')} decode read GB/s at {size / KIB:,.0f} KiB"
            lines.append(f"{label:<40} one thread {swept[size] / 1e9:8.1f} (best repeat)")
    return "\n".join(lines)
