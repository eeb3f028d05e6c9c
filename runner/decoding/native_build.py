"""Building the C++ of runner/decoding/csrc into a shared library, once per CPU and source.

The library is built with ``-march=native``, so the kernels are chosen when it is built (AVX-512 where
the CPU has it, AVX2 otherwise, plain loops else: runner/decoding/csrc/simd.h) and the binary may use any
instruction this CPU has. Its cache entry is therefore keyed by the CPU's model and flags as well as
by the sources and the compiler flags: a home directory shared with a machine of another CPU never
loads a binary built for this one. The sources include no torch headers, so a build takes seconds
rather than the half minute a torch extension took; the library is loaded with ctypes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import subprocess
import tempfile
from pathlib import Path

CSRC = Path(__file__).parent / "csrc"
FLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC", "-fno-math-errno")


def cpu_flags_key() -> str:
    """A short hash of this CPU's model and instruction-set flags."""
    described = platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "model name", "Features")):
                described += line
    return hashlib.sha256(described.encode()).hexdigest()[:10]


def cache_directory() -> Path:
    """$DECODELAB_BUILD_DIR, else ~/.cache/decodelab/native."""
    configured = os.environ.get("DECODELAB_BUILD_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "decodelab" / "native"


def source_files(main: str) -> list[Path]:
    return [CSRC / main, *sorted(CSRC.glob("*.h"))]


def build_key(main: str, march: str, compiler: str) -> str:
    digest = hashlib.sha256(f"{cpu_flags_key()} {march} {compiler} {' '.join(FLAGS)}".encode())
    for source in source_files(main):
        digest.update(source.name.encode() + source.read_bytes())
    return digest.hexdigest()[:16]


def build(main: str, march: str = "native") -> Path:
    """The shared library built from ``csrc/main`` (and the headers beside it) for ``-march=march``,
    compiled now unless the cache holds it. Concurrent builders wait on a lock; the library appears
    under its final name only once complete."""
    compiler = os.environ.get("CXX", "c++")
    directory = cache_directory()
    directory.mkdir(parents=True, exist_ok=True)
    library = directory / f"{Path(main).stem}-{build_key(main, march, compiler)}.so"
    if library.exists():
        return library
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if library.exists():
            return library
        descriptor, partial = tempfile.mkstemp(dir=directory, suffix=".so.partial")
        os.close(descriptor)
        command = [compiler, *FLAGS, f"-march={march}", "-o", partial, str(CSRC / main)]
        completed = subprocess.run(command, capture_output=True, text=True)
        if completed.returncode != 0:
            os.unlink(partial)
            raise RuntimeError(f"building {main} failed ({' '.join(command)}):\n{completed.stderr[-4000:]}")
        os.replace(partial, library)
    return library
