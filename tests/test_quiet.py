"""Background work of the timing process (the store heartbeat) runs between samples, never inside
one, and neither side waits on the other without bound (runner.measure.quiet)."""

from __future__ import annotations

import threading
import time

from runner.measure import quiet
from runner.measure.timing import Harness


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

    stuck, stuck_running = threading.Event(), threading.Event()

    def hold() -> None:
        with quiet.between_samples():
            stuck_running.set()
            stuck.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    assert stuck_running.wait(5)
    started = time.perf_counter()
    with quiet.sample(max_wait_seconds=0.05):
        waited = time.perf_counter() - started
    stuck.set()
    holder.join(5)
    assert 0.04 <= waited < 2.0


def _background(ran: list[str], max_wait_seconds: float) -> None:
    with quiet.between_samples(max_wait_seconds=max_wait_seconds):
        ran.append("background")


def test_a_sample_inside_a_sample_of_the_same_thread_does_not_wait_for_itself() -> None:
    harness = Harness()
    inner = harness.time_once(lambda: harness.time_once(lambda: None))
    assert inner >= 0.0
    with quiet.sample(), quiet.sample():
        pass


def test_the_harness_opens_a_sample_around_every_timed_window() -> None:
    """Every timed call of time_once and time_interleaved runs inside a sample."""
    inside: list[bool] = []

    def probe() -> None:
        inside.append(bool(quiet._sampling.get(threading.get_ident())))

    harness = Harness()
    harness.time_once(probe, loops=2)
    harness.time_interleaved([probe, probe], [2, 1])
    assert inside == [True] * 5
