"""An A/B session: the two revisions' workers measure the same cases in turn on this machine.

Each timed case runs ``rounds`` times on each side, the sides alternating (round r: baseline
then candidate for even r, candidate then baseline for odd r, so neither always goes first):
whatever the machine does during the session hits both sides alike. A case that records no
timed sample (a deterministic figure, a fit, a choice) runs once per side.

Every sample's pair index counts through the session: a case-round's samples are numbered after
every sample taken before it, on either side, keeping the pairs inside the case (A and B of one
pair share an index). The two stored runs' indexes therefore interleave as the session did, and
any reader can check the order from them.

Each side's rounds of a case become one case record: a timed value (a band's ends too) is the
median over the rounds, so an A/A band stays one round's width however many rounds ran (the
review's noise floor, analysis.review.noise_floors, must not widen with the rounds), its samples
all rounds' samples; a deterministic figure is the first round's (they must agree)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.ab.protocol import SideWorker
from runner.metrics import is_deterministic
from store.records import CaseRecord, MeasurementRecord, SampleRecord, case_key

Log = Callable[[str], None]
CaseId = tuple[str, str]  # (experiment, case key)


@dataclass
class SideCases:
    """What one side measured: its plan (case id → params, index in its worker's plan) and the
    replies of every round of every case, reindexed to the session's order."""

    worker: SideWorker
    model_id: int | None = None
    plan: dict[CaseId, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    rounds: dict[CaseId, list[list[dict[str, Any]]]] = field(default_factory=dict)

    def records(self) -> list[CaseRecord]:
        """One case record per case measured, in the side's plan order."""
        ordered = sorted(self.rounds, key=lambda case: self.plan[case][0])
        return [CaseRecord(case[0], self.plan[case][1], combined(self.rounds[case])) for case in ordered]


def combined(rounds: list[list[dict[str, Any]]]) -> tuple[MeasurementRecord, ...]:
    """A case's rounds as one set of measurements (the rule in the module's docstring)."""
    records: list[MeasurementRecord] = []
    for first in rounds[0]:
        metric, unit = first["metric"], first["unit"]
        same = [measurement for round_ in rounds for measurement in round_ if measurement["metric"] == metric]
        values = [float(measurement["value"]) for measurement in same]
        samples = tuple(SampleRecord(int(i), str(side), float(s)) for m in same for i, side, s in m["samples"])
        if samples or not is_deterministic(metric, unit):
            value = statistics.median(values)
        else:
            value = values[0]
        records.append(MeasurementRecord(metric, value, unit, samples))
    return tuple(records)


class Session:
    """The two sides and the session's running sample index."""

    def __init__(self, baseline: SideWorker, candidate: SideWorker, rounds: int, log: Log) -> None:
        self.sides = (SideCases(baseline), SideCases(candidate))
        self.rounds = rounds
        self.log = log
        self.next_index = 0
        self.cases_interleaved = 0

    def build(self) -> None:
        """Both sides' code imported and fast paths built: a failed build ends the session before
        anything is trained, profiled or stored."""
        for side in self.sides:
            side.worker.ask({"op": "build"}, "building its fast path")

    def prepare(self, request: dict[str, Any]) -> None:
        """Each side's model trained or reused by its own code, and its plan read."""
        for side in self.sides:
            self.log(f"{side.worker.revision.side} {side.worker.revision.short}: preparing the model")
            reply = side.worker.ask({"op": "prepare", **request}, "preparing the model")
            side.model_id = reply.get("model_id")
            side.plan = {
                (str(experiment), case_key(params)): (index, params)
                for index, (experiment, params) in enumerate(reply["cases"])
            }

    def measure(self, side: SideCases, case: CaseId, first: bool) -> list[dict[str, Any]]:
        index, _ = side.plan[case]
        reply = side.worker.ask({"op": "case", "index": index, "first": first}, f"measuring {case[0]} {case[1]}")
        measurements: list[dict[str, Any]] = reply["measurements"]
        offset = self.next_index
        span = 0
        for measurement in measurements:
            for sample in measurement["samples"]:
                span = max(span, int(sample[0]) + 1)
                sample[0] = offset + int(sample[0])
        self.next_index += span
        side.rounds.setdefault(case, []).append(measurements)
        return measurements

    def cases(self) -> list[CaseId]:
        """Every case of either plan: the baseline's in its order, then the candidate's own."""
        baseline, candidate = self.sides
        return list(baseline.plan) + [case for case in candidate.plan if case not in baseline.plan]

    def run(self) -> None:
        planned = self.cases()
        for number, case in enumerate(planned, start=1):
            present = [side for side in self.sides if case in side.plan]
            for round_index in range(self.rounds):
                order = present if round_index % 2 == 0 else present[::-1]
                replies = [self.measure(side, case, first=round_index == 0) for side in order]
                timed = any(measurement["samples"] for reply in replies for measurement in reply)
                if not timed:
                    break  # a deterministic case: once per version
                if round_index == 0 and len(present) == 2:
                    self.cases_interleaved += 1
            if number % 10 == 0 or number == len(planned):
                self.log(f"A/B: {number}/{len(planned)} cases")
