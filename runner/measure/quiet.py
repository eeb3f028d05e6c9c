"""Background work of the timing process waits for the gap between two samples.

A run's store heartbeat (runner.execution.worker.Heartbeat) beats from a thread every five
seconds: an ORM update and a commit, a few milliseconds of Python that takes the interpreter
lock from the thread being timed. Landing inside a 50 ms sample it made that sample slow
(benchmarks/heartbeat_noise.py on the Xeon VM, 2026-12-05, a write every 0.5 s: 39 of 450 samples
more than 5% slow, the slowest 32%; 8 with the writes waiting for a gap, 4 with no writes), and
the training summary's three samples read 18% apart in two runs of four. So a sample is a
window that such work does not enter: ``sample()`` around every timed window, ``between_samples()``
around the background work, which then runs once the current sample ends and before the next
begins. Neither side waits without bound: background work that waited MAX_WAIT_SECONDS for a gap
(a sample that long) runs anyway, and a sample waits at most as long for background work to end
(a heartbeat held up by a store outage must not stall the timing).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

MAX_WAIT_SECONDS = 10.0

_changed = threading.Condition()
_sampling: dict[int, int] = {}  # thread id → depth of its open samples (a timed function may time)
_pending = 0  # background work waiting for, or running in, a gap


@contextlib.contextmanager
def sample(max_wait_seconds: float = MAX_WAIT_SECONDS) -> Iterator[None]:
    """A timed window: waits (up to ``max_wait_seconds``) for background work to finish first."""
    thread = threading.get_ident()
    with _changed:
        if not _sampling.get(thread):
            _changed.wait_for(lambda: _pending == 0, timeout=max_wait_seconds)
        _sampling[thread] = _sampling.get(thread, 0) + 1
    try:
        yield
    finally:
        with _changed:
            _sampling[thread] -= 1
            if not _sampling[thread]:
                del _sampling[thread]
            _changed.notify_all()


@contextlib.contextmanager
def between_samples(max_wait_seconds: float = MAX_WAIT_SECONDS) -> Iterator[None]:
    """Background work: runs when no sample is open (after waiting up to ``max_wait_seconds`` for
    one to end), and no sample opens until it is done (or has run ``max_wait_seconds``)."""
    global _pending
    with _changed:
        _pending += 1
        _changed.wait_for(lambda: not _sampling, timeout=max_wait_seconds)
    try:
        yield
    finally:
        with _changed:
            _pending -= 1
            _changed.notify_all()
