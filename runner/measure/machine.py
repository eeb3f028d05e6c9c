"""The machine fingerprint recorded with every run, and the code version."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
from functools import cache
from pathlib import Path

import torch

from store.records import MachineRecord
from store.user_text import clean_label


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def machine_name() -> str:
    """``DECODELAB_MACHINE`` names this machine for pinned jobs; else the host name. On one line,
    without control characters: the name is a label in every chart, report and terminal."""
    return clean_label(os.environ.get("DECODELAB_MACHINE") or "").strip() or socket.gethostname()


def fingerprint(device: str = "cpu") -> MachineRecord:
    gpu_name = None
    if torch.device(device).type == "cuda":
        gpu_name = torch.cuda.get_device_name(torch.device(device))
    return MachineRecord(
        name=machine_name(),
        cpu_model=cpu_model(),
        cores=os.cpu_count() or 1,
        memory_bytes=memory_bytes(),
        os=f"{platform.system()} {platform.release()}",
        python_version=platform.python_version(),
        torch_version=torch.__version__,
        threads=torch.get_num_threads(),
        device=torch.device(device).type,
        gpu_name=gpu_name,
    )


def git(root: Path, *arguments: str) -> str:
    """A git command's output in the checkout at ``root`` (raises if git fails or is absent)."""
    return subprocess.run(
        ["git", "-C", str(root), *arguments], capture_output=True, text=True, timeout=5, check=True
    ).stdout.strip()


@cache
def code_version() -> str:
    """The git commit of the checkout, else the package version. A modified checkout adds
    ``+dirty.`` and the first 8 hex digits of its diff's sha256: two different edits of one
    commit are two code versions (the calibration pairs only runs of one code version, and had
    paired runs of two uncommitted timing drafts as one)."""
    from importlib.metadata import PackageNotFoundError, version

    root = Path(__file__).resolve().parent.parent.parent
    try:
        commit = git(root, "rev-parse", "--short=12", "HEAD")
        dirty = git(root, "status", "--porcelain", "--untracked-files=no")
        if not dirty:
            return commit
        changes = hashlib.sha256(git(root, "diff", "HEAD").encode("utf-8", "surrogateescape")).hexdigest()
        return f"{commit}+dirty.{changes[:8]}"
    except (OSError, subprocess.SubprocessError):
        try:
            return version("decodelab")
        except PackageNotFoundError:
            return "unknown"
