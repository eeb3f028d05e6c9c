"""One side of an A/B session (`decodelab ab`): a worker process that measures cases with one
revision's code, one process per round of the session (runner/ab/session.py says why).

Run by path, ``python -P runner/ab/worker_main.py``, with PYTHONPATH set to that revision's
worktree: every ``runner`` and ``store`` module it imports is the revision's own, this file
included in neither (a baseline older than `decodelab ab` has no runner/ab at all). It therefore
uses only the standard library at the top and the revision's long-standing entry points below.

The protocol (runner/ab/protocol.py writes the parent's side): one JSON object per line on stdin,
one JSON reply per line on the process's original stdout; anything else the code prints goes to
stderr, so a stray print never breaks a reply.

- ``{"op": "build"}``: import the revision's code and build its fast path (the C++ library).
- ``{"op": "prepare", "db": URL, "spec": {...}, "roof": {...} | null, "overheads": {...}, "overhead_fits": {...}}``:
  train or reuse the spec's model through the revision's own training code and store, and plan
  the cases; the reply names the model and lists the cases as ``[experiment, params]``.
- ``{"op": "case", "index": I, "first": true|false}``: measure case I of the plan once; ``first``
  (round 0) adds its measurements to what later cases read (each case once, as in a run).
- ``{"op": "record", "index": I, "measurements": [{"metric", "value", "unit"}, ...]}``: add case
  I's round-0 figures to what later cases read, in a fresh process of a later round.
- ``{"op": "quit"}``: end.

Every reply holds ``"ok"``: true with its fields, or false with ``"error"`` (one line).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any, TextIO


def error_summary(error: BaseException) -> str:
    """The error in one line: its first line, and a compiler's first ``error:`` line after it (a
    failed build's message holds the command, then the compiler's whole output)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    cause = next((line for line in lines[1:] if "error:" in line), None)
    text = lines[0].rstrip(":") + (f": {cause}" if cause else "")
    return text if isinstance(error, RuntimeError | ValueError) else f"{type(error).__name__}: {text}"


class Side:
    """What one revision's worker holds between requests: its model, plan and context."""

    def __init__(self) -> None:
        self.plan: list[tuple[Any, dict[str, Any]]] = []
        self.context: Any = None
        self.made: Any = None
        self.seed = 0
        self.recorded: set[int] = set()
        self.scope = contextlib.ExitStack()

    def build(self) -> dict[str, Any]:
        from runner.decoding import fast

        return {"instruction_set": fast.instruction_set()}

    def prepare(self, request: dict[str, Any]) -> dict[str, Any]:
        from runner.execution.execute import log_to_stderr, prepare_model, torch_threads, train_side_model
        from runner.experiments import ExperimentContext
        from runner.experiments.base import RunMeasurements
        from runner.measure.timing import Harness
        from runner.spec.sweeps import validate
        from store.store import Store

        spec = validate(request["spec"])
        store = Store(request["db"])
        prepared = prepare_model(store, spec, show_progress=False, log=log_to_stderr)
        # The spec's threads for the whole session, the fast path's included, as execute() does.
        self.scope.enter_context(torch_threads(spec.raw.get("threads", 0), fast_path=True))
        self.made = RunMeasurements()
        self.seed = spec.seed
        self.context = ExperimentContext(
            model=prepared.model,
            model_record=prepared.record,
            corpus=prepared.corpus,
            harness=Harness(device=spec.device),
            device=spec.device,
            seed=spec.seed,
            earlier=self.made.of,
            train_model=lambda model_config, train_config, teacher=None, name="a side model": train_side_model(
                store, model_config, train_config, prepared.corpus, spec.device, log_to_stderr, teacher, name
            ),
            roof=request.get("roof"),
            overheads=request.get("overheads") or {},
            overhead_fits=request.get("overhead_fits") or {},
        )
        self.plan = spec.plan()
        return {
            "model_id": prepared.record.id,
            "cases": [[experiment.name, params] for experiment, params in self.plan],
        }

    def record(self, request: dict[str, Any]) -> dict[str, Any]:
        from store.records import MeasurementRecord

        index = int(request["index"])
        experiment, params = self.plan[index]
        if index not in self.recorded:
            figures = [MeasurementRecord(m["metric"], float(m["value"]), m["unit"]) for m in request["measurements"]]
            self.made.add(experiment.name, params, tuple(figures))
            self.recorded.add(index)
        return {}

    def case(self, request: dict[str, Any]) -> dict[str, Any]:
        import torch

        index = int(request["index"])
        experiment, params = self.plan[index]
        torch.manual_seed(self.seed)
        measurements = experiment.run_case(params, self.context)
        if request.get("first") and index not in self.recorded:
            self.made.add(experiment.name, params, measurements)
            self.recorded.add(index)
        return {
            "measurements": [
                {
                    "metric": record.metric,
                    "value": float(record.value),
                    "unit": record.unit,
                    "samples": [[sample.pair_index, sample.side, sample.seconds] for sample in record.samples],
                }
                for record in measurements
            ]
        }


def serve(requests: TextIO, replies: TextIO) -> int:
    side = Side()
    handlers = {"build": lambda _: side.build(), "prepare": side.prepare, "case": side.case, "record": side.record}
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("op") == "quit":
            break
        try:
            handler = handlers[request["op"]]
            reply = {"ok": True, **handler(request)}
        except Exception as error:  # the parent names the side and stops the session
            reply = {"ok": False, "error": error_summary(error)}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    side.scope.close()
    return 0


def main() -> int:
    # Replies go to the original stdout; the code's own prints (progress, logs) to stderr.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return serve(sys.stdin, replies)


if __name__ == "__main__":
    sys.exit(main())
