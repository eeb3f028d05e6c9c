"""How busy this machine is, read once where a choice depends on it: training takes one torch
thread on a busy machine (as the sweep's spec does), and the sweep's estimate says the load.
Standard library only."""

from __future__ import annotations

import os

# A machine is busy when its 1-minute load average reaches its core count: every core already
# has a runnable task, so a second training thread waits on someone else's work (on 2 cores at a
# load of 5-7, 2 torch threads took 27 min to train the quick model).
BUSY_LOAD_PER_CORE = 1.0


def cores() -> int:
    return os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average, None where the system has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def busy(load: float | None = None) -> bool:
    load = load_average() if load is None else load
    return load is not None and load >= BUSY_LOAD_PER_CORE * cores()


def load_note(load: float | None = None) -> str:
    """What the load does to an estimate, in a few words: ``"; the load average is 5.2 on 2 cores:
    other work stretches it"`` on a busy machine, else that load would stretch it."""
    load = load_average() if load is None else load
    if load is None:
        return "; other work on the machine stretches it"
    if busy(load):
        return f"; the load average is {load:.1f} on {cores()} cores: other work stretches it, expect longer"
    return f" (load average {load:.1f} on {cores()} cores; other work on the machine stretches it)"
