"""A quiet sample's surroundings: the timing process pinned to the CPU it is on, and no garbage
collection pause inside a sample (runner.measure.timing)."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

import torch


def current_cpu() -> int | None:
    """The CPU this process is running on now (Linux: /proc/self/stat field 39), else None."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return int(fields[36])
    except (OSError, IndexError, ValueError):
        return None


@contextlib.contextmanager
def pinned() -> Iterator[None]:
    """The process on one CPU (the one it is on) while timing, where the OS allows it and both torch
    and the fast path run one thread: a migration between cores mid-sample costs its caches.
    Restored after. (A thread started while pinned inherits the pin: the fast path's helpers would
    share the one CPU with the thread they help.)"""
    from runner.decoding.fast_library import threads_wanted

    if not hasattr(os, "sched_setaffinity") or torch.get_num_threads() != 1 or threads_wanted() != 1:
        yield
        return
    try:
        allowed = os.sched_getaffinity(0)
    except OSError:
        yield
        return
    cpu = current_cpu()
    if len(allowed) < 2 or cpu is None or cpu not in allowed:
        yield
        return
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, allowed)


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """No garbage collection pause inside a sample (it runs between samples)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
