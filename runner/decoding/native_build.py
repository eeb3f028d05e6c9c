"""Building the C++ of runner/decoding/csrc into a shared library, once per CPU and source.

The library is built with ``-march=native``, so the kernels are chosen when it is built (AVX-512 where
the CPU has it, AVX2 otherwise, plain loops else: runner/decoding/csrc/simd.h) and the binary may use any
instruction this CPU has. Its cache entry is therefore keyed by the CPU's model and flags as well as
by the sources and the compiler flags: a home directory shared with a machine of another CPU never
loads a binary built for this one. The sources include no torch headers, so a build takes seconds
rather than the half minute a torch extension took; the library is loaded with ctypes.

The cache key can be computed by anyone, so the cache folder and every library in it must be
this user's and writable by no one else, or nothing is loaded (BuildCacheRefused, one line).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import stat
import subprocess
import tempfile
from pathlib import Path

from runner.errors import InputError

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


class BuildCacheRefused(InputError):
    """A build cache another user could have written to: what it holds would run as this user."""


def check_private(path: Path, what: str) -> None:
    """Refuse ``path`` unless this user owns it and neither group nor others may write to it (a
    library is also refused as a symlink or not a regular file): the cache key is computable, so a
    library planted in a shared folder would otherwise be loaded and run."""
    try:
        status = os.lstat(path) if what == "library" else os.stat(path)
    except OSError as error:
        raise BuildCacheRefused(f"DECODELAB_BUILD_DIR: cannot read {what} {str(path)!r} ({error.strerror})") from None
    if what == "library" and not stat.S_ISREG(status.st_mode):
        problem = "not a regular file"
    elif status.st_uid != os.geteuid():
        problem = f"owned by user id {status.st_uid}, not this user ({os.geteuid()})"
    elif status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = "writable by group or others"
    else:
        return
    raise BuildCacheRefused(
        f"DECODELAB_BUILD_DIR: the build cache's {what} {str(path)!r} is {problem}, so what it loads could be "
        "anyone's (allowed: a folder owned by this user and writable by no one else)"
    )


def source_files(main: str, sources: Path = CSRC) -> list[Path]:
    return [sources / main, *sorted(sources.glob("*.h"))]


def build_key(main: str, march: str, compiler: str, sources: Path = CSRC) -> str:
    digest = hashlib.sha256(f"{cpu_flags_key()} {march} {compiler} {' '.join(FLAGS)}".encode())
    for source in source_files(main, sources):
        digest.update(source.name.encode() + source.read_bytes())
    return digest.hexdigest()[:16]


def build(main: str, march: str = "native", sources: Path = CSRC) -> Path:
    """The shared library built from ``csrc/main`` (and the headers beside it) for ``-march=march``,
    compiled now unless the cache holds it. Concurrent builders wait on a lock; the library appears
    under its final name only once complete. ``sources``: another folder of the same files (another
    revision's, benchmarks/library_ab.py), cached under its own contents' key."""
    compiler = os.environ.get("CXX", "c++")
    directory = cache_directory()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_private(directory, "folder")
    library = directory / f"{Path(main).stem}-{build_key(main, march, compiler, sources)}.so"
    if os.path.lexists(library):
        check_private(library, "library")
        return library
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.lexists(library):
            check_private(library, "library")
            return library
        descriptor, partial = tempfile.mkstemp(dir=directory, suffix=".so.partial")
        os.close(descriptor)
        command = [compiler, *FLAGS, f"-march={march}", "-o", partial, str(sources / main)]
        completed = subprocess.run(command, capture_output=True, text=True)
        if completed.returncode != 0:
            os.unlink(partial)
            raise RuntimeError(f"building {main} failed ({' '.join(command)}):\n{completed.stderr[-4000:]}")
        os.chmod(partial, 0o755)  # whatever the umask: no one else may rewrite what this user runs
        os.replace(partial, library)
    return library
