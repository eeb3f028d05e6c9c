"""Background work of the timing process (the store heartbeat) runs between samples, never inside
one, and neither side waits on the other without bound (runner.measure.quiet)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from runner.measure import quiet
from runner.measure.timing import Harness

T = TypeVar("T")


def test_background_work_waits_for_the_open_sample_and_the_next_sample_waits_for_it() -> None:
    events: list[str] = []
    sample_open, beat_waiting, beat_running, release_beat = (threading.Event() for _ in range(4))

    def beat() -> None:
        beat_waiting.set()
        with quiet.between_samples():
            events.append("beat starts")
            beat_running.set()
            release_beat.wait(5)
            events.append("beat ends")

    with quiet.sample():
        sample_open.set()
        thread = threading.Thread(target=beat)
        thread.start()
        beat_waiting.wait(5)
        time.sleep(0.05)  # the beat would have started by now, had it not waited
        events.append("sample ends")
    assert beat_running.wait(5)

    def release_soon() -> None:
        time.sleep(0.05)
        events.append("released")
        release_beat.set()

    releaser = threading.Thread(target=release_soon)
    releaser.start()
    with quiet.sample():
        events.append("next sample starts")
    thread.join(5)
    releaser.join(5)
    assert events == ["sample ends", "beat starts", "released", "beat ends", "next sample starts"]


def test_neither_side_waits_past_its_limit() -> None:
    """A sample longer than the limit lets background work through; background work stuck past
    the limit (a heartbeat in a store outage) does not hold the timing up."""
    ran: list[str] = []
    with quiet.sample():
        thread = threading.Thread(target=lambda: _background(ran, max_wait_seconds=0.05))
        thread.start()
        thread.join(5)
        assert ran == ["background"], "it ran once it had waited its limit"

    # Background work stuck inside its gap (a heartbeat in a store outage): the next sample waits
    # its limit, then runs while that work is still inside, where without a limit it would run
    # only once the work gave up (after its own 5 s).
    stuck, stuck_running, holder_done = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        with quiet.between_samples():
            stuck_running.set()
            stuck.wait(5)
            holder_done.set()  # inside: a sample that waited for the work to end runs after this

    holder = threading.Thread(target=hold)
    holder.start()
    assert stuck_running.wait(5)
    with quiet.sample(max_wait_seconds=0.05):
        ran.append("sample" if not holder_done.is_set() else "sample after the work gave up")
    stuck.set()
    holder.join(5)
    assert ran == ["background", "sample"]


def _background(ran: list[str], max_wait_seconds: float) -> None:
    with quiet.between_samples(max_wait_seconds=max_wait_seconds):
        ran.append("background")


class RecordingCondition(threading.Condition):
    """quiet's condition, noting which thread waited on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiters: list[int] = []

    def wait_for(self, predicate: Callable[[], T], timeout: float | None = None) -> T:
        self.waiters.append(threading.get_ident())
        return super().wait_for(predicate, timeout)


def test_a_sample_inside_a_sample_of_the_same_thread_does_not_wait_for_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With background work waiting for the outer sample to end, an inner sample of the same
    thread opens at once: waiting for that work would wait on itself (until its limit)."""
    condition = RecordingCondition()
    monkeypatch.setattr(quiet, "_changed", condition)
    events: list[str] = []
    me = threading.get_ident()
    with quiet.sample():
        background = threading.Thread(target=lambda: _background(events, max_wait_seconds=5))
        background.start()
        with condition:
            assert condition.wait_for(lambda: quiet._pending == 1, timeout=5), "the work is waiting"
        waits_before = condition.waiters.count(me)
        with quiet.sample(max_wait_seconds=5):
            events.append("inner sample")
        assert condition.waiters.count(me) == waits_before, "the inner sample did not wait"
        events.append("outer sample ends")
    background.join(5)
    assert events == ["inner sample", "outer sample ends", "background"]
    harness = Harness()
    assert harness.time_once(lambda: harness.time_once(lambda: None)) >= 0.0


def test_the_harness_opens_a_sample_around_every_timed_window() -> None:
    """Every timed call of time_once and time_interleaved runs inside a sample."""
    inside: list[bool] = []

    def probe() -> None:
        inside.append(bool(quiet._sampling.get(threading.get_ident())))

    harness = Harness()
    harness.time_once(probe, loops=2)
    harness.time_interleaved([probe, probe], [2, 1])
    assert inside == [True] * 5
