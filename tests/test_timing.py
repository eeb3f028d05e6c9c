"""The harness' statistics, checked with a fake clock (no wall-time assertions)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from runner.measure.timing import Harness


class FakeClock:
    """Advances by a programmed duration whenever the timed function runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def runner(self, durations: list[float]) -> tuple[Callable[[], None], list[float]]:
        queue = list(durations)

        def run() -> None:
            self.now += queue.pop(0)

        return run, queue

    def taking(self, seconds: float, name: str, order: list[str]) -> Callable[[], None]:
        """A function that takes ``seconds`` on this clock and notes ``name`` in ``order``."""

        def run() -> None:
            order.append(name)
            self.now += seconds

        return run


def test_min_of_n_keeps_every_sample_and_the_minimum() -> None:
    clock = FakeClock()
    function, queue = clock.runner([9.0, 3.0, 2.0, 4.0])  # the first is the warm-up
    result = Harness(clock=clock, warmup=1).min_of(function, repeats=3)
    assert result.seconds == (3.0, 2.0, 4.0)
    assert result.minimum == 2.0 and result.median == 3.0
    assert not queue
    measurement = result.measurement("seconds_per_token", scale=0.5)
    assert measurement.value == 1.0
    assert [sample.seconds for sample in measurement.samples] == [3.0, 2.0, 4.0]


def test_interleaved_rounds_rotate_the_order_and_pair_up() -> None:
    clock = FakeClock()
    order: list[str] = []
    functions = [clock.taking(seconds, name, order) for seconds, name in ((4.0, "A"), (2.0, "B"), (1.0, "C"))]
    seen_after_rounds: list[int] = []
    seconds = Harness(clock=clock, warmup=1).interleaved(
        functions, rounds=3, between=lambda: seen_after_rounds.append(len(order))
    )
    # One warm-up each, then rounds starting with A, B and C in turn.
    assert order == ["A", "B", "C", "A", "B", "C", "B", "C", "A", "C", "A", "B"]
    assert seconds == ((4.0, 4.0, 4.0), (2.0, 2.0, 2.0), (1.0, 1.0, 1.0))
    assert seen_after_rounds == [6, 9, 12]
    with pytest.raises(ValueError, match="rounds"):
        Harness(clock=clock).interleaved(functions, rounds=0)


def test_paired_alternates_and_reports_median_and_band() -> None:
    clock = FakeClock()
    order: list[str] = []
    baseline_times = [10.0, 8.0, 12.0, 9.0, 10.0]
    candidate_times = [5.0, 2.0, 4.0, 3.0, 4.0]

    def baseline() -> None:
        order.append("A")
        clock.now += baseline_times.pop(0) if warmed[0] else 1.0

    def candidate() -> None:
        order.append("B")
        clock.now += candidate_times.pop(0) if warmed[0] else 1.0

    warmed = [False]
    harness = Harness(clock=clock, warmup=1)
    original_warm = harness._warm

    def warm(*functions: Callable[[], object]) -> None:
        original_warm(*functions)
        warmed[0] = True

    harness._warm = warm  # type: ignore[method-assign]
    result = harness.paired(baseline, candidate, pairs=5)
    assert order == ["A", "B", "A", "B", "B", "A", "A", "B", "B", "A", "A", "B"]
    assert result.baseline_seconds == (10.0, 8.0, 12.0, 9.0, 10.0)
    assert result.candidate_seconds == (5.0, 2.0, 4.0, 3.0, 4.0)
    assert result.ratios == (2.0, 4.0, 3.0, 3.0, 2.5)
    assert (result.median, result.low, result.high) == (3.0, 2.0, 4.0)
    speedup, low, high = result.measurements("speedup")
    assert (speedup.value, low.value, high.value) == (3.0, 2.0, 4.0)
    assert len(speedup.samples) == 10
    assert [(s.pair_index, s.side) for s in speedup.samples[:4]] == [(0, "A"), (0, "B"), (1, "A"), (1, "B")]


def test_alternating_times_each_function_on_its_own_in_turn() -> None:
    clock = FakeClock()
    order: list[str] = []
    draft, verify = clock.taking(1.0, "draft", order), clock.taking(4.0, "verify", order)
    setups: list[int] = []
    draft_turns, verifications = Harness(clock=clock).alternating(
        (draft, verify), rounds=3, repeats=2, setup=lambda: setups.append(1)
    )
    assert order == ["draft", "verify"] * 7, "one untimed round to warm up, then 2 repeats of 3 rounds"
    assert draft_turns.seconds == (1.0, 1.0) and verifications.seconds == (4.0, 4.0)
    assert len(setups) == 3
    with pytest.raises(ValueError):
        Harness().alternating((draft,), rounds=0)


def test_paired_runs_the_between_measurement_after_every_pair_untimed() -> None:
    clock = FakeClock()
    order: list[str] = []
    baseline, candidate, cost = (
        clock.taking(seconds, name, order) for seconds, name in ((2.0, "A"), (1.0, "B"), (50.0, "cost"))
    )
    result = Harness(clock=clock).paired(baseline, candidate, pairs=3, between=cost)
    assert order == ["A", "B", "A", "B", "cost", "B", "A", "cost", "A", "B", "cost"]
    assert result.ratios == (2.0, 2.0, 2.0), "the between step is in no pair's time"


def test_the_harness_refuses_zero_repeats() -> None:
    with pytest.raises(ValueError):
        Harness().min_of(lambda: None, repeats=0)
    with pytest.raises(ValueError):
        Harness().paired(lambda: None, lambda: None, pairs=0)


def test_a_steady_timing_loops_short_calls_to_a_long_enough_sample_and_settles_first() -> None:
    """Calls of 1/32 s and 1/128 s (binary fractions: the fake clock's sums are exact, so the
    loop counts do not hang on rounding): one warm-up each, one timed call each to choose its own
    loop count (MIN_SAMPLE_SECONDS / (1/32) = 1.6: 2 loops, / (1/128) = 6.4: 7 loops), warm-up
    samples until two consecutive ones agree (the second already does on a steady clock), then
    pairs whose samples are seconds per call."""
    from runner.measure import timing

    clock = FakeClock()
    order: list[str] = []
    slow_call, quick_call = 1 / 32, 1 / 128
    baseline, candidate = clock.taking(slow_call, "A", order), clock.taking(quick_call, "B", order)
    result = Harness(clock=clock).paired(baseline, candidate, pairs=3, steady=True)
    loops_baseline = math.ceil(timing.MIN_SAMPLE_SECONDS / slow_call)
    loops_candidate = math.ceil(timing.MIN_SAMPLE_SECONDS / quick_call)
    assert (loops_baseline, loops_candidate) == (2, 7)
    assert result.baseline_seconds == pytest.approx((slow_call,) * 3)
    assert result.candidate_seconds == pytest.approx((quick_call,) * 3)
    settle_rounds = 2
    assert order.count("A") == 1 + 1 + loops_baseline * (settle_rounds + 3)
    assert order.count("B") == 1 + 1 + loops_candidate * (settle_rounds + 3)


def test_a_slow_side_is_not_looped_as_often_as_its_quick_partner() -> None:
    """A 0.5 s call beside a 0.01 s one: one call already lasts longer than MIN_SAMPLE_SECONDS,
    so each of its samples is one call (looping it five times, as its partner needs, made a
    kv_cache case a minute long). Its timed warm-up call (at least LONG_CALL_SECONDS) is its first
    settling sample, needing no loop-count call: the warm-up, one more settling sample that agrees
    with it, three rounds."""
    clock = FakeClock()
    order: list[str] = []
    slow, quick = clock.taking(0.5, "slow", order), clock.taking(0.01, "quick", order)
    Harness(clock=clock).interleaved([slow, quick], rounds=3, steady=True)
    assert order.count("slow") == 1 + 1 + 3
    assert order.count("quick") == 1 + 1 + 5 * (2 + 3), "a looped function settles on samples of its loop count"


def test_a_settled_function_is_not_sampled_again_while_its_partner_settles() -> None:
    """A steady 0.5 s call settles at its first settling round; its quick partner speeds up from
    1/64 s to 1/128 s a call after its sixth call and needs a second round. Each stops on its own:
    the slow call is not run again for the partner (a kv_cache case's 0.7 s generation was)."""
    clock = FakeClock()
    order: list[str] = []
    slow = clock.taking(0.5, "slow", order)
    quick_calls = {"made": 0}

    def quick() -> None:
        quick_calls["made"] += 1
        order.append("quick")
        clock.now += 1 / 64 if quick_calls["made"] <= 6 else 1 / 128

    Harness(clock=clock).interleaved([slow, quick], rounds=3, steady=True)
    assert order.count("slow") == 1 + 1 + 3, "its warm-up, one agreeing sample, three rounds"
    # Warm-up, the loop-count call (4 loops), a first sample, two settling samples, three rounds.
    assert order.count("quick") == 1 + 1 + 4 * (1 + 2 + 3)


def test_settling_stops_at_two_agreeing_samples_or_after_steady_rounds() -> None:
    from runner.measure import timing

    clock = FakeClock()
    # The warm-up call lasts a sample (the first settling sample), then samples falling 0.5, 0.49:
    # the third agrees with the second.
    function, queue = clock.runner([1.0, 0.5, 0.49, 0.48, 0.47, 0.46])
    result = Harness(clock=clock).min_of(function, repeats=3, steady=True)
    assert result.seconds == pytest.approx((0.48, 0.47, 0.46)) and not queue
    clock = FakeClock()
    # Samples that never agree: STEADY_ROUNDS settling samples (the warm-up the first), then the
    # timed one (3.0).
    wild = [1.0 + index % 2 for index in range(timing.STEADY_ROUNDS)] + [3.0]
    function, queue = clock.runner(wild)
    assert Harness(clock=clock).min_of(function, repeats=1, steady=True).seconds == (3.0,) and not queue


def test_min_of_runs_between_untimed_after_every_sample() -> None:
    """What ``between`` does is never inside a sample: the fake clock moves only in the function,
    and ``between`` sees one more sample each time."""
    clock = FakeClock()
    function, queue = clock.runner([1.0, 2.0, 3.0, 4.0])  # the warm-up call, then three samples
    seen: list[int] = []

    def between() -> None:
        seen.append(len(queue))
        clock.now += 100.0  # a slow repack, say: in no sample

    result = Harness(clock=clock, warmup=1).min_of(function, repeats=3, between=between)
    assert result.seconds == (2.0, 3.0, 4.0) and seen == [2, 1, 0] and not queue


def test_a_sample_runs_with_the_collector_off_and_the_process_pinned_then_restored() -> None:
    import gc
    import os

    import torch

    from runner.measure import pinning

    seen: list[tuple[bool, int]] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        Harness().min_of(lambda: seen.append((gc.isenabled(), len(os.sched_getaffinity(0)))), repeats=2)
    finally:
        torch.set_num_threads(threads)
    assert gc.isenabled(), "the collector is back on after the sample"
    assert [enabled for enabled, _ in seen[1:]] == [False, False], "off inside every timed sample"
    if len(before) > 1 and pinning.current_cpu() is not None:
        assert {cpus for _, cpus in seen} == {1}, "pinned to one CPU while timing"
    assert (os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()) == before


def test_timing_does_not_pin_a_process_whose_fast_path_runs_helper_threads() -> None:
    """A helper started while the timing thread is pinned inherits the pin and shares its one CPU:
    two threads then ran at half the speed of one (benchmarks/decode_vs_transformers.py printed 0.5x
    where they give 1.4x)."""
    import os

    import torch

    from runner.decoding.fast_library import set_threads, threads_wanted

    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to pin to one")
    seen: list[int] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    set_threads(2)
    try:
        Harness().min_of(lambda: seen.append(len(os.sched_getaffinity(0))), repeats=2)
    finally:
        set_threads(1)
        torch.set_num_threads(threads)
    assert threads_wanted() == 1
    assert min(seen) > 1, "left on every CPU it may use while the fast path runs helpers"


def test_a_steady_pair_interleaves_its_calls_call_by_call_so_both_sides_see_the_same_phases() -> None:
    """Calls of 1/64 s and 1/128 s (4 and 7 loops a sample; binary fractions, so that the fake
    clock's sums are exact): inside each timed sample the quick side's seven calls are spread
    among the slow side's four, never all of one side first; sides of equal loops alternate call
    by call, the leading side alternating by round. A clock that runs 3× slow for the last half of
    a sample's calls slows both sides nearly alike, where one side's whole loop after the other's
    read the pair's ratio of 2 as 0.77 (interleaved: 1.52)."""
    clock = FakeClock()
    order: list[str] = []
    baseline, candidate = clock.taking(1 / 64, "A", order), clock.taking(1 / 128, "B", order)
    Harness(clock=clock).paired(baseline, candidate, pairs=2, steady=True)
    warm_up, loop_counts, settling = 2, 2, 2 * (4 + 7)
    samples = order[warm_up + loop_counts + settling :]
    first, second = samples[:11], samples[11:]
    assert len(second) == 11 and first.count("A") == second.count("A") == 4
    for sample in (first, second):
        assert "AA" not in "".join(sample) and "BBB" not in "".join(sample), sample
    equal: list[str] = []
    Harness(clock=clock).paired(
        clock.taking(1 / 128, "A", equal), clock.taking(1 / 128, "B", equal), pairs=2, steady=True
    )
    timed = equal[2 + 2 + 2 * (7 + 7) :]
    assert timed == ["A", "B"] * 7 + ["B", "A"] * 7, "equal sides alternate, and the one leading alternates by round"

    calls = {"made": 0}

    def phased(seconds: float) -> Callable[[], None]:
        def run() -> None:
            calls["made"] += 1
            clock.now += seconds * (3.0 if calls["made"] > 4 else 1.0)  # the last four calls of eight

        return run

    harness = Harness(clock=clock)
    slow_side, quick_side = harness.time_interleaved([phased(0.02), phased(0.01)], [3, 5])
    calls["made"] = 0
    block_ratio = harness.time_once(phased(0.02), 3) / harness.time_once(phased(0.01), 5)
    assert block_ratio == pytest.approx(0.02 / 0.026)
    assert abs(math.log(slow_side / quick_side / 2.0)) < abs(math.log(block_ratio / 2.0)) / 3


def test_a_cpu_sample_times_the_call_alone_between_its_clock_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing but the call runs between a sample's two clock reads on the CPU: asking torch which
    device it times (a torch.device built per timed call) cost 0.6 us on the Xeon VM, inside the window:
    3% of a table draft's 20 us turn in the cost sessions."""
    import torch

    events: list[str] = []
    real_device = torch.device

    def counted_device(*arguments: object) -> torch.device:
        events.append("device")
        return real_device(*arguments)  # type: ignore[call-overload]

    def clock() -> float:
        events.append("clock")
        return float(len(events))

    harness = Harness("cpu", clock=clock)
    monkeypatch.setattr(torch, "device", counted_device)
    harness.time_once(lambda: events.append("call"))
    harness.alternating((lambda: events.append("call"),), rounds=2, repeats=1)
    harness.time_interleaved((lambda: events.append("call"),), loops=[3])
    assert "device" not in events, f"no device query while timing: {events}"
    # Timed calls: one, two rounds (after one untimed warm-up call), three; each between two reads.
    assert events.count("call") == 1 + (1 + 2) + 3 and events.count("clock") == 2 * (1 + 2 + 3)


def test_a_cuda_sample_still_waits_for_the_device_before_each_clock_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA path keeps its synchronisation: before the first read (queued work is not the
    call's) and after the call, inside the window (the call's kernels are). No GPU needed: the
    harness only builds a torch.device, and torch.cuda.synchronize is stood in for."""
    import torch

    events: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append(f"sync {device}"))

    def clock() -> float:
        events.append("clock")
        return float(len(events))

    Harness("cuda:0", clock=clock).time_once(lambda: events.append("call"))
    assert events == ["sync cuda:0", "clock", "call", "sync cuda:0", "clock"]
