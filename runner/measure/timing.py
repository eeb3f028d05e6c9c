"""One timing harness for every experiment.

- Warm up first, synchronise the device before every clock read.
- Quiet samples: the timing process is pinned to the CPU it is on while it times (one-thread
  runs, where the OS allows it), the garbage collector is off inside a sample, the process's
  background work (the store heartbeat) waits for the gap between samples (runner.measure.quiet), and for
  functions that may run any number of times (``steady=True``: no state kept between calls) a
  sample repeats the call until it lasts MIN_SAMPLE_SECONDS (each function its own loop count,
  so a slow side is not looped as often as the quickest one needs; each sample the per-call
  mean) after warm-up rounds until two consecutive samples agree within STEADY_TOLERANCE (at most
  STEADY_ROUNDS). Paired or interleaved steady samples interleave their functions call by call
  (``time_interleaved``), so that both sides of a pair run in the same phases of the host.
- Min-of-N: the least disturbed of N runs of one function.
- Paired A/B: alternate baseline (A) and candidate (B); one ratio A/B per pair, so drift
  that hits both sides of a pair cancels. Report the median ratio and the min–max band.
  Interleaved rounds do the same for three or more functions, any two of which pair up.
Both return their raw samples as well as the summary, so the store keeps what was measured.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from runner.measure import quiet
from runner.measure.pinning import collector_off, pinned
from runner.measure.reference import reference_seconds
from store.records import MeasurementRecord, SampleRecord

Clock = Callable[[], float]

# A sample of a ``steady`` timing lasts at least this long (loops of the call): longer than the
# timer's resolution and a scheduler tick by far, short enough for the quick sweep.
MIN_SAMPLE_SECONDS = 0.05
MAX_LOOPS = 64
# Warm-up rounds of a ``steady`` timing stop once two consecutive samples of every function
# agree within this (|log| of their ratio), or after STEADY_ROUNDS.
STEADY_TOLERANCE = math.log(1.05)
STEADY_ROUNDS = 4
# A steady function whose warm-up call lasts this long needs no loop-count call (one call is a
# sample however much faster a warm one is) and its warm-up call is its first settling sample: the
# kv_cache experiment's no-cache generations (0.2-0.7 s each on the Xeon) paid for one more call.
LONG_CALL_SECONDS = 4 * MIN_SAMPLE_SECONDS


def no_synchronize() -> None:
    """A CPU device's synchronisation before a clock read: nothing to wait for."""


@dataclass(frozen=True)
class MinOfN:
    seconds: tuple[float, ...]

    @property
    def minimum(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def measurement(self, metric: str, side: str = "A", scale: float = 1.0) -> MeasurementRecord:
        """The minimum as a measurement, every run as a sample (pair_index = repeat)."""
        return MeasurementRecord(
            metric=metric,
            value=self.minimum * scale,
            unit="seconds",
            samples=tuple(SampleRecord(index, side, seconds) for index, seconds in enumerate(self.seconds)),
        )


@dataclass(frozen=True)
class Paired:
    baseline_seconds: tuple[float, ...]
    candidate_seconds: tuple[float, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        """Baseline time over candidate time per pair: above 1 means the candidate is faster."""
        return tuple(a / b for a, b in zip(self.baseline_seconds, self.candidate_seconds, strict=True))

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def low(self) -> float:
        return min(self.ratios)

    @property
    def high(self) -> float:
        return max(self.ratios)

    def samples(self) -> tuple[SampleRecord, ...]:
        return tuple(
            SampleRecord(index, side, seconds)
            for index, (a, b) in enumerate(zip(self.baseline_seconds, self.candidate_seconds, strict=True))
            for side, seconds in (("A", a), ("B", b))
        )

    def measurements(self, metric: str = "speedup") -> tuple[MeasurementRecord, ...]:
        """The median ratio (with the raw samples) and its band."""
        return (
            MeasurementRecord(metric, self.median, "ratio", self.samples()),
            MeasurementRecord(f"{metric}_low", self.low, "ratio"),
            MeasurementRecord(f"{metric}_high", self.high, "ratio"),
        )


def loops_for_seconds(seconds: float) -> int:
    """How many calls of ``seconds`` each make one sample last MIN_SAMPLE_SECONDS."""
    if seconds <= 0:
        return MAX_LOOPS
    return max(1, min(MAX_LOOPS, math.ceil(MIN_SAMPLE_SECONDS / seconds)))


class Harness:
    """Times callables on one device; the clock is injectable so tests can use a fake one."""

    def __init__(
        self,
        device: str | torch.device = "cpu",
        clock: Clock = time.perf_counter,
        warmup: int = 1,
        *,
        reference: bool = False,
    ):
        self.device = device
        self.clock = clock
        self.warmup = warmup
        # ``reference``: each timing reads the machine's own speed just before its first sample and
        # after every sample or round (runner.measure.reference).
        self.reference_readings: list[float] | None = [] if reference else None
        # Decided once, not per timed call: building a torch.device to ask took 0.6 us on the Xeon
        # VM, inside the timed window after every call (a timed no-op: 0.81 us, now 0.19 us), 3%
        # of a table draft's 20 us turn in the cost sessions. (So ``device`` is not to be changed
        # on a built harness: build another.)
        self.synchronize: Callable[[], None] = (
            (lambda: torch.cuda.synchronize(device)) if torch.device(device).type == "cuda" else no_synchronize
        )

    def with_clock(self, clock: Clock) -> Harness:
        """This harness with another clock (the library's own, for the kernels alone), adding its
        reference readings to this one's."""
        derived = Harness(self.device, clock=clock, warmup=self.warmup)
        derived.reference_readings = self.reference_readings
        return derived

    def read_reference(self) -> None:
        """One reading of the reference loop, where this harness keeps them: as quiet as a sample
        (the store's heartbeat waits for the gap after it, the collector off)."""
        if self.reference_readings is not None:
            with quiet.sample(), collector_off():
                self.reference_readings.append(reference_seconds())

    def take_reference_readings(self) -> list[float]:
        """The reference loop's readings since the last call: one case's, for the runner to store."""
        if self.reference_readings is None:
            return []
        taken = list(self.reference_readings)
        self.reference_readings.clear()
        return taken

    def time_once(self, function: Callable[[], object], loops: int = 1) -> float:
        """Seconds per call of ``function`` over ``loops`` calls, the collector off."""
        self.synchronize()
        with quiet.sample(), collector_off():
            start = self.clock()
            for _ in range(loops):
                function()
            self.synchronize()
            elapsed = self.clock() - start
        return elapsed / loops

    def loops_for(self, function: Callable[[], object]) -> int:
        """How many calls of ``function`` make one sample last MIN_SAMPLE_SECONDS."""
        return loops_for_seconds(self.time_once(function))

    def _settle(self, functions: Sequence[Callable[[], object]], loops: Sequence[int], first: Sequence[float]) -> None:
        """Warm-up samples of each function until two consecutive ones agree (STEADY_TOLERANCE),
        each function stopping on its own (a settled 0.7 s generation sampled again while its
        quick partner settles cost a kv_cache case its time for nothing), at most STEADY_ROUNDS
        samples each. ``first``: each function's first sample, already timed at its loop count."""
        previous = list(first)
        unsettled = set(range(len(functions)))
        for _ in range(STEADY_ROUNDS - 1):
            for index in sorted(unsettled):
                current = self.time_once(functions[index], loops[index])
                before = previous[index]
                if before > 0 and current > 0 and abs(math.log(current / before)) <= STEADY_TOLERANCE:
                    unsettled.discard(index)
                previous[index] = current
            if not unsettled:
                return

    def _prepare(self, functions: Sequence[Callable[[], object]], steady: bool, warm: bool = True) -> list[int]:
        """Warm up (unless ``warm`` is False: the caller ran every function just before); for a
        ``steady`` timing, choose each function's loop count and settle.
        Returns the loop counts. A loop count per function, not the quickest one's for all: a
        0.5 s generation looped as often as its 10 ms partner needs made one kv_cache case a
        minute long, for no less noise (its single call already swamps the timer)."""
        if not steady:
            if warm:
                self._warm(*functions)
            return [1] * len(functions)
        # A steady timing times its warm-up calls: one that lasted LONG_CALL_SECONDS is a sample.
        warm_calls: list[float | None] = [None] * len(functions)
        if warm:
            for _ in range(self.warmup):
                warm_calls = [self.time_once(function) for function in functions]
        first: list[float] = []
        loops: list[int] = []
        for function, warm_seconds in zip(functions, warm_calls, strict=True):
            if warm_seconds is not None and warm_seconds >= LONG_CALL_SECONDS:
                loops.append(1)
                first.append(warm_seconds)
                continue
            # The call that chooses the loop count; where one call already lasts a sample it is the
            # first settling sample (a second would cost the kv_cache experiment's 0.8 s no-cache
            # generations again).
            single = self.time_once(function)
            loops.append(loops_for_seconds(single))
            first.append(single if loops[-1] == 1 else self.time_once(function, loops[-1]))
        self._settle(functions, loops, first)
        return loops

    def _warm(self, *functions: Callable[[], object]) -> None:
        for _ in range(self.warmup):
            for function in functions:
                function()
        self.synchronize()

    def min_of(
        self,
        function: Callable[[], object],
        repeats: int = 3,
        *,
        steady: bool = False,
        between: Callable[[], object] | None = None,
    ) -> MinOfN:
        """``repeats`` samples of ``function`` after warm-up; ``steady``: the function keeps no
        state between calls, so a sample may loop it and warm-up may repeat it. ``between``, if
        given, runs untimed after every sample, the last too (as in ``interleaved``): each later
        sample sees what it set up, the first what warm-up ran on, and the minimum is the best."""
        if repeats < 1:
            raise ValueError("repeats must be at least 1")
        with pinned():
            (loops,) = self._prepare([function], steady)
            self.read_reference()
            seconds: list[float] = []
            for _ in range(repeats):
                seconds.append(self.time_once(function, loops))
                self.read_reference()
                if between is not None:
                    between()
            return MinOfN(tuple(seconds))

    def alternating(
        self,
        functions: Sequence[Callable[[], object]],
        rounds: int,
        repeats: int = 3,
        setup: Callable[[], object] | None = None,
    ) -> tuple[MinOfN, ...]:
        """Call ``functions`` in turn for ``rounds`` rounds, timing each on its own: what each
        costs per call while the others run between its calls, as in a loop that alternates them
        (sharing, and evicting, the same caches). One MinOfN of per-call seconds per function,
        over ``repeats`` runs, each after ``setup`` (untimed)."""
        if repeats < 1 or rounds < 1:
            raise ValueError("repeats and rounds must be at least 1")
        prepare = setup or (lambda: None)
        prepare()
        for function in functions:
            function()
        per_call: list[list[float]] = [[] for _ in functions]
        self.read_reference()
        for _ in range(repeats):
            prepare()
            totals = [0.0] * len(functions)
            for _ in range(rounds):
                for index, function in enumerate(functions):
                    totals[index] += self.time_once(function)
            for index, total in enumerate(totals):
                per_call[index].append(total / rounds)
            self.read_reference()
        return tuple(MinOfN(tuple(seconds)) for seconds in per_call)

    def interleaved(
        self,
        functions: Sequence[Callable[[], object]],
        rounds: int,
        between: Callable[[], object] | None = None,
        *,
        steady: bool = False,
        warm: bool = True,
    ) -> tuple[tuple[float, ...], ...]:
        """Time every function once per round, rotating which goes first (round r starts with
        function r mod len; in a steady sample, on a tie of ``time_interleaved``'s schedule),
        after one warm-up of each. Returns each function's seconds, one per
        round, so any two of them form pairs that saw the machine in the same state.

        ``between``, if given, runs untimed after every round: a measurement that should see the
        machine as each round saw it (cost breakdowns to set beside the round's ratio).
        ``steady``: the functions keep no state between calls: every sample loops each of them
        until it lasts MIN_SAMPLE_SECONDS (seconds per call) after warm-up until steady.
        ``warm=False`` skips the warm-up call of each: the caller has just run them."""
        if rounds < 1:
            raise ValueError("rounds must be at least 1")
        with pinned():
            loops = self._prepare(functions, steady, warm)
            self.read_reference()
            seconds: list[list[float]] = [[] for _ in functions]
            for index in range(rounds):
                if steady:
                    for position, per_call in enumerate(self.time_interleaved(functions, loops, index)):
                        seconds[position].append(per_call)
                else:
                    # Rotating the order cancels a systematic first-mover effect too.
                    for offset in range(len(functions)):
                        position = (index + offset) % len(functions)
                        seconds[position].append(self.time_once(functions[position], loops[position]))
                self.read_reference()
                if between is not None:
                    between()
        return tuple(tuple(times) for times in seconds)

    def time_interleaved(
        self, functions: Sequence[Callable[[], object]], loops: Sequence[int], first: int = 0
    ) -> list[float]:
        """One sample of each function, their calls interleaved call by call (each function's
        ``loops`` calls spread evenly over the sample, ``first`` going first): seconds per call
        of each. A host whose speed moves in phases of tens of milliseconds (the 2-core EPYC VM:
        ±25% in phases of 0.05–0.5 s) slows both sides of a pair alike only if they run in the
        same phases; one function's whole loop after the other's put them 50 ms apart."""
        count = len(functions)
        # Each function's calls at evenly spaced points of the sample, (k + 1/2) / loops; a tie
        # goes to the function ``first`` positions on, so the side that leads alternates.
        schedule = sorted(
            ((call + 0.5) / loops[position], (position - first) % count, position)
            for position in range(count)
            for call in range(loops[position])
        )
        totals = [0.0] * count
        self.synchronize()
        with quiet.sample(), collector_off():
            for _, _, position in schedule:
                start = self.clock()
                functions[position]()
                self.synchronize()
                totals[position] += self.clock() - start
        return [total / calls for total, calls in zip(totals, loops, strict=True)]

    def paired(
        self,
        baseline: Callable[[], object],
        candidate: Callable[[], object],
        pairs: int = 5,
        between: Callable[[], object] | None = None,
        *,
        steady: bool = False,
        warm: bool = True,
    ) -> Paired:
        """Baseline and candidate alternating (A B, B A, A B …): ``interleaved`` of two."""
        if pairs < 1:
            raise ValueError("pairs must be at least 1")
        baseline_seconds, candidate_seconds = self.interleaved(
            (baseline, candidate), pairs, between, steady=steady, warm=warm
        )
        return Paired(baseline_seconds, candidate_seconds)
