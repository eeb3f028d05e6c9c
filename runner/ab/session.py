"""An A/B session: the two revisions' workers measure the same cases in turn on this machine.

The session runs in rounds. Round 0 measures every case of the plan in order (a case that records
no timed sample, a deterministic figure, a fit, a choice, runs there only: once per version);
each later round starts both workers afresh and measures every timed case again. Inside a round
the sides alternate case by case (baseline first where round + case number is even), so neither
always goes first and whatever the machine does during the session hits both sides alike.

Fresh processes every round, as pyperf runs its values in many worker processes: one process's
own speed (where its allocator put the weights, how its pages map to the caches) shifts every pair
it times by the same few percent. Measured on the AMD EPYC: with one process per side for the
whole session, the bf16 row of an A/A session moved +4.8% consistently over 20 rounds (p = 0.002)
and the 10% slower int8 kernel moved 5.1–11.9% by session. With a process per round that shift is
part of each round's own noise, and the review tests the rounds (every sample keeps its
``round_index``; analysis.review_samples.sample_statistic).

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
        samples = tuple(
            SampleRecord(int(sample[0]), str(sample[1]), float(sample[2]), int(sample[3]) if len(sample) > 3 else None)
            for m in same
            for sample in m["samples"]
        )
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
        self.request: dict[str, Any] = {}

    def build(self) -> None:
        """Both sides' code imported and fast paths built: a failed build ends the session before
        anything is trained, profiled or stored."""
        for side in self.sides:
            side.worker.ask({"op": "build"}, "building its fast path")

    def prepare(self, request: dict[str, Any]) -> None:
        """Each side's model trained or reused by its own code, and its plan read."""
        self.request = request
        for side in self.sides:
            self.log(f"{side.worker.revision.side} {side.worker.revision.short}: preparing the model")
            self.prepare_side(side)

    def prepare_side(self, side: SideCases) -> None:
        reply = side.worker.ask({"op": "prepare", **self.request}, "preparing the model")
        plan = {
            (str(experiment), case_key(params)): (index, params)
            for index, (experiment, params) in enumerate(reply["cases"])
        }
        if side.plan and (plan != side.plan or reply.get("model_id") != side.model_id):
            raise side.worker.failure("preparing the model again", "its model or plan differs from its first process's")
        side.model_id, side.plan = reply.get("model_id"), plan

    def restart(self, round_index: int) -> None:
        """Both workers replaced by fresh processes, built and prepared (the model is reused), and
        given round 0's figures back: a case that reads the session's earlier figures (the
        roofline's overhead fit, the speculative cases' placement) reads round 0's in every round,
        as one long-lived process did.

        Both end before either starts, and the side started first alternates with the round. When
        each side was ended and started again in turn, the baseline first, every new process could
        take the memory its own side's last one had just freed (the kernel hands freed pages out
        again last in, first out), so a side might keep its physical pages, and with them how its
        weights map to the caches, round after round: A/A sessions on the AMD EPYC moved the
        fast_int8 row by -5% on average over 10 fresh-process rounds (8 of 10 rounds the same way)."""
        order = self.sides if round_index % 2 == 0 else self.sides[::-1]
        for side in order:
            side.worker.stop()
        for side in order:
            side.worker.start()
        for side in order:
            side.worker.ask({"op": "build"}, "building its fast path")
            self.prepare_side(side)
            for case, rounds in side.rounds.items():
                figures = [{key: m[key] for key in ("metric", "value", "unit")} for m in rounds[0]]
                request = {"op": "record", "index": side.plan[case][0], "measurements": figures}
                side.worker.ask(request, f"handing back {case[0]} {case[1]}")

    def measure(self, side: SideCases, case: CaseId, round_index: int) -> list[dict[str, Any]]:
        index, _ = side.plan[case]
        request = {"op": "case", "index": index, "first": round_index == 0}
        reply = side.worker.ask(request, f"measuring {case[0]} {case[1]}")
        measurements: list[dict[str, Any]] = reply["measurements"]
        offset = self.next_index
        span = 0
        for measurement in measurements:
            for sample in measurement["samples"]:
                span = max(span, int(sample[0]) + 1)
                sample[0] = offset + int(sample[0])
                sample[3:] = [round_index]
        self.next_index += span
        side.rounds.setdefault(case, []).append(measurements)
        return measurements

    def cases(self) -> list[CaseId]:
        """Every case of either plan: the baseline's in its order, then the candidate's own."""
        baseline, candidate = self.sides
        return list(baseline.plan) + [case for case in candidate.plan if case not in baseline.plan]

    def measure_round(self, cases: list[CaseId], round_index: int) -> list[CaseId]:
        """One round over ``cases``, the sides alternating with the round and the case's place
        in the plan (baseline first where their sum is even); the timed cases."""
        numbers = {case: number for number, case in enumerate(self.cases())}
        timed: list[CaseId] = []
        for case in cases:
            present = [side for side in self.sides if case in side.plan]
            order = present if (round_index + numbers[case]) % 2 == 0 else present[::-1]
            replies = [self.measure(side, case, round_index) for side in order]
            if any(measurement["samples"] for reply in replies for measurement in reply):
                timed.append(case)
        return timed

    def run(self) -> None:
        timed = self.measure_round(self.cases(), 0)
        self.cases_interleaved = sum(all(case in side.plan for side in self.sides) for case in timed)
        self.log(f"A/B: round 1/{self.rounds} ({len(timed)} timed cases)")
        for round_index in range(1, self.rounds if timed else 1):
            self.restart(round_index)
            self.measure_round(timed, round_index)
            self.log(f"A/B: round {round_index + 1}/{self.rounds}")
