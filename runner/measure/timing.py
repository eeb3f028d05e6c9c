"""One timing harness for every experiment.

- Warm up first, synchronise the device before every clock read.
- Min-of-N: the least disturbed of N runs of one function.
- Paired A/B: alternate baseline (A) and candidate (B); one ratio A/B per pair, so drift
  that hits both sides of a pair cancels. Report the median ratio and the min–max band.
  Interleaved rounds do the same for three or more functions, any two of which pair up.
Both return their raw samples as well as the summary, so the store keeps what was measured.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from store.records import MeasurementRecord, SampleRecord

Clock = Callable[[], float]


def synchronize(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


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


class Harness:
    """Times callables on one device; the clock is injectable so tests can use a fake one."""

    def __init__(self, device: str | torch.device = "cpu", clock: Clock = time.perf_counter, warmup: int = 1):
        self.device = device
        self.clock = clock
        self.warmup = warmup

    def time_once(self, function: Callable[[], object]) -> float:
        synchronize(self.device)
        start = self.clock()
        function()
        synchronize(self.device)
        return self.clock() - start

    def _warm(self, *functions: Callable[[], object]) -> None:
        for _ in range(self.warmup):
            for function in functions:
                function()
        synchronize(self.device)

    def min_of(self, function: Callable[[], object], repeats: int = 3) -> MinOfN:
        if repeats < 1:
            raise ValueError("repeats must be at least 1")
        self._warm(function)
        return MinOfN(tuple(self.time_once(function) for _ in range(repeats)))

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
        for _ in range(repeats):
            prepare()
            totals = [0.0] * len(functions)
            for _ in range(rounds):
                for index, function in enumerate(functions):
                    totals[index] += self.time_once(function)
            for index, total in enumerate(totals):
                per_call[index].append(total / rounds)
        return tuple(MinOfN(tuple(seconds)) for seconds in per_call)

    def interleaved(
        self,
        functions: Sequence[Callable[[], object]],
        rounds: int,
        between: Callable[[], object] | None = None,
    ) -> tuple[tuple[float, ...], ...]:
        """Time every function once per round, rotating which goes first (round r starts with
        function r mod len), after one warm-up of each. Returns each function's seconds, one per
        round, so any two of them form pairs that saw the machine in the same state.

        ``between``, if given, runs untimed after every round: a measurement that should see the
        machine as each round saw it (cost breakdowns to set beside the round's ratio)."""
        if rounds < 1:
            raise ValueError("rounds must be at least 1")
        self._warm(*functions)
        seconds: list[list[float]] = [[] for _ in functions]
        for index in range(rounds):
            # Rotating the order cancels a systematic first-mover effect too.
            for offset in range(len(functions)):
                position = (index + offset) % len(functions)
                seconds[position].append(self.time_once(functions[position]))
            if between is not None:
                between()
        return tuple(tuple(times) for times in seconds)

    def paired(
        self,
        baseline: Callable[[], object],
        candidate: Callable[[], object],
        pairs: int = 5,
        between: Callable[[], object] | None = None,
    ) -> Paired:
        """Baseline and candidate alternating (A B, B A, A B …): ``interleaved`` of two."""
        if pairs < 1:
            raise ValueError("pairs must be at least 1")
        baseline_seconds, candidate_seconds = self.interleaved((baseline, candidate), pairs, between)
        return Paired(baseline_seconds, candidate_seconds)
