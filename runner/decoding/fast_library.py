"""The compiled library behind the ``fast`` path (runner.decoding.fast): which ``-march`` it is built
for, loading it with ctypes (built on first use by runner.decoding.native_build), how many threads a
pass uses, and the library's own clock of the time spent inside its entry points."""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path
from typing import cast

from runner.decoding.native_build import build
from runner.errors import InputError

_pointer, _int64, _int32, _double = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_double
SAMPLE_ENTRY, VERIFY_ENTRY = 1, 2  # runner/decoding/csrc/fast_decode.cpp EntryPoint: dl_sample, dl_verify


MARCH_VARIABLE = "DECODELAB_FAST_MARCH"
_MARCH_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,39}")


def default_march() -> str:
    """The instruction set the fast path is built for: ``native`` unless $DECODELAB_FAST_MARCH names
    another ``-march`` (``x86-64-v3`` for AVX2, ``x86-64`` for plain loops), so the suite can check that
    its figures hold whichever kernels a CPU gets."""
    march = os.environ.get(MARCH_VARIABLE, "native").strip() or "native"
    if not _MARCH_PATTERN.fullmatch(march):
        allowed = "lower-case letters, digits, '.', '_', '-'"
        raise InputError(f"{MARCH_VARIABLE}: {march!r} is not a -march name ({allowed})")
    return march


_loaded: dict[str, ctypes.CDLL] = {}  # by -march: the libraries this process has loaded


def library(march: str | None = None) -> ctypes.CDLL:
    """The compiled decode path for this CPU (built once, then cached; see runner.decoding.native_build)."""
    march = march or default_march()
    if march not in _loaded:
        _loaded[march] = _load(march)
    return _loaded[march]


def _load(march: str) -> ctypes.CDLL:
    return load_built(build("fast_decode.cpp", march))


def load_built(path: Path) -> ctypes.CDLL:
    """A built fast_decode library loaded with its entry points' signatures (``library`` loads this
    checkout's; benchmarks/library_ab.py another revision's beside it)."""
    loaded = ctypes.CDLL(str(path))
    loaded.dl_isa.restype = ctypes.c_char_p
    loaded.dl_model_new.restype = _pointer
    loaded.dl_model_new.argtypes = [_int64] * 5 + [_int32] + [_pointer] * 5
    loaded.dl_model_free.argtypes = [_pointer]
    loaded.dl_forward.restype = _int32
    loaded.dl_forward.argtypes = [_pointer, _pointer, _int64, _int64, _pointer, _pointer, _int64, _pointer]
    loaded.dl_sample.restype = _int32
    loaded.dl_sample.argtypes = [_pointer, _pointer, _int64, _int64, _int64, _double, _pointer]
    loaded.dl_sample.argtypes += [_pointer, _pointer, _int64, _int32, _pointer, _pointer, _double]
    loaded.dl_verify.restype = _int64
    loaded.dl_verify.argtypes = [_pointer, _pointer, _int64, _int64, _pointer, _pointer, _int64, _pointer, _double]
    loaded.dl_verify.argtypes += [_pointer, _pointer, _pointer, _int32]
    loaded.dl_speculate.restype = _int32
    loaded.dl_speculate.argtypes = [_pointer, _pointer, _int64, _int64, _int32, _int64, _int64, _double, _double]
    loaded.dl_speculate.argtypes += [_pointer, _int64, _pointer, _pointer, _int64, _int64, _pointer, _pointer]
    loaded.dl_speculate.argtypes += [_int64, _int64, _pointer, _int64, _pointer, _pointer, _pointer, _pointer, _pointer]
    loaded.dl_speculate.argtypes += [_pointer, _int64, _pointer]
    if hasattr(loaded, "dl_speculate_table"):  # a revision before it, built by benchmarks/library_ab.py, lacks it
        loaded.dl_speculate_table.restype = _int32
        loaded.dl_speculate_table.argtypes = [_pointer, _int64, _pointer, _pointer, _pointer, _pointer, _pointer]
        loaded.dl_speculate_table.argtypes += [_pointer, _pointer, _int64, _int64, _int64, _int32, _int64, _int64]
        loaded.dl_speculate_table.argtypes += [_double, _double, _pointer, _int64, _pointer, _pointer, _int64, _int64]
        loaded.dl_speculate_table.argtypes += [_pointer, _pointer, _pointer, _pointer, _pointer, _pointer, _int64]
        loaded.dl_speculate_table.argtypes += [_pointer]
        loaded.dl_propose_table.restype = _int32
        loaded.dl_propose_table.argtypes = [_int64, _int64] + [_pointer] * 7 + [_int64, _int64, _double, _pointer]
        loaded.dl_propose_table.argtypes += [_pointer, _pointer]
    loaded.dl_entry_point_nanoseconds.restype = _int64
    loaded.dl_entry_point_nanoseconds.argtypes = [_int32]
    loaded.dl_set_threads.argtypes = [_int32]
    loaded.dl_threads.restype = _int32
    loaded.dl_kernel_nanoseconds.restype = _int64
    loaded.dl_set_threads(_threads_wanted)
    return loaded


def instruction_set(march: str | None = None) -> str:
    """What the kernels were built for, e.g. ``avx512+vnni+bf16``."""
    return cast(bytes, library(march).dl_isa()).decode()


_threads_wanted = 1


def set_threads(threads: int) -> None:
    """How many threads each pass of the fast path uses, this one included: rows of every layer and
    the attention heads are shared with helpers (runner/decoding/csrc/pool.h). 1 by default: a helper the OS
    does not schedule, on a machine busy with other work, stalls the passes that wait for it
    (benchmarks/decode_vs_transformers.py times two threads against one, paired). Applied when the
    library loads, so setting it builds nothing."""
    global _threads_wanted
    _threads_wanted = max(1, threads)
    for loaded in _loaded.values():
        loaded.dl_set_threads(_threads_wanted)


def threads_wanted() -> int:
    """The threads set_threads last asked for (1 until then), without loading the library."""
    return _threads_wanted


def threads() -> int:
    """The threads the loaded library's passes use."""
    return int(library().dl_threads())


def entry_point_seconds() -> tuple[float, float]:
    """Seconds this thread has spent inside the default library's draft calls (sample) and
    verifications (verify) so far, each apart: what a compiled speculative loop spent on each."""
    loaded = library()
    draft_calls, verifications = (
        int(loaded.dl_entry_point_nanoseconds(entry_point)) / 1e9 for entry_point in (SAMPLE_ENTRY, VERIFY_ENTRY)
    )
    return draft_calls, verifications


def kernel_seconds() -> float:
    """Seconds this thread has spent inside the default library's compiled passes (forward, sample,
    verify) so far: a loop around them spends its wall time less the growth of this outside them."""
    return int(library().dl_kernel_nanoseconds()) / 1e9
