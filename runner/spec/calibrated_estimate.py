"""How long a sweep will take on this machine, said before it is launched.

The cost model of runner.spec.sweeps prices each case from its shape; on a machine with earlier done
runs in the store, each experiment's price is scaled by what those runs took: the time between
a case's record and the one before it (the run's start for its first case) summed per
experiment, over what the model said of the same cases. An experiment this machine never ran
keeps the model's price, and the estimate says which experiments were calibrated.

Training is priced from this machine's runs that trained their model: a run's command began
``wall_seconds`` before it finished, and its model was stored when training ended (before the
run's own start), so the model's ``created_at`` less the command's start is that training's
time. The same model, batch and sequence length trained before: its measured seconds per step
times the steps asked for. Another shape within a factor of ``TRAINING_SHAPE_RANGE`` of the cost
model's time per step: the nearest one's measured over modelled time scales the cost model's
(steps × model size × batch). Shapes further apart (a tiny test model's time is all per-step
overhead, a real one's arithmetic) or no training at all: the cost model alone.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from runner.cost.cost_model import case_seconds, training_seconds, training_seconds_of
from runner.errors import InputError
from runner.measure.load import load_note
from runner.spec.sweeps import SweepSpec
from store.records import comparable_key
from store.schema import Case, Machine, Model, Run
from store.store import Store

# The newest done runs of the machine that calibrate it: recent enough to be today's machine.
CALIBRATION_RUNS = 5
# Runs read to find the newest ones that trained their model (most reuse a stored one).
TRAINING_LOOKBACK_RUNS = 200
# How far apart (as a ratio of the cost model's time per step) an earlier training may be and
# still scale the new one: beyond it the time per step is made of different things.
TRAINING_SHAPE_RANGE = 8.0
# The spec fields that make one training step cost what another does.
STEP_SHAPE_FIELDS = (("model", "d_model"), ("model", "n_layer"), ("model", "n_head"), ("model", "context_length"))
BATCH_SHAPE_FIELDS = (("train", "batch_size"), ("train", "sequence_length"))


@dataclass(frozen=True)
class Training:
    """One earlier training on this machine: its step's shape, steps, measured and modelled time."""

    shape: tuple[Any, ...]
    steps: int
    measured_seconds: float
    modelled_seconds: float


def step_shape(raw: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(raw[section][name] for section, name in (*STEP_SHAPE_FIELDS, *BATCH_SHAPE_FIELDS))


@dataclass(frozen=True)
class Estimate:
    seconds: float
    training_seconds: float  # included in seconds; 0 when the model is stored
    training_basis: str  # what the training's price rests on ("" when nothing is trained)
    calibrated: tuple[str, ...]  # experiments priced from this machine's earlier runs
    uncalibrated: tuple[str, ...]  # experiments priced by the cost model alone
    # What this very sweep took on this machine before: its earlier done runs' own times (the
    # sweep, started_at to finished_at, as History draws it), newest first; empty for none.
    earlier_sweeps: tuple[float, ...] = ()

    def describe(self) -> str:
        """One line: the estimate, its spread over this machine's earlier runs of the same sweep,
        that load stretches it, and what each part rests on."""
        if self.calibrated and not self.uncalibrated:
            basis = "from this machine's earlier runs"
        elif self.calibrated:
            basis = (
                f"from this machine's earlier runs for {', '.join(self.calibrated)}, "
                f"by the cost model for {', '.join(self.uncalibrated)}"
            )
        else:
            basis = "by the cost model (no earlier run of these experiments on this machine)"
        spread, load = self.spread(), load_note()
        if spread and load.startswith(" ("):  # one bracket: "(… over 4 earlier runs here; load average 0.4 …)"
            spread, load = spread[:-1] + "; " + load[2:-1] + ")", ""
        return f"about {minutes(self.seconds)}{spread}{load}; the cases {basis}{self.training_part()}"

    def spread(self) -> str:
        """`` (1 min 55 s–2 min 30 s over 4 earlier runs of this sweep here)``: the measured times,
        each with this run's training added where it trains; empty without an earlier run."""
        if not self.earlier_sweeps:
            return ""
        plus = ", plus this training" if self.training_seconds else ""
        low, high = (min(self.earlier_sweeps) + self.training_seconds, max(self.earlier_sweeps) + self.training_seconds)
        if len(self.earlier_sweeps) == 1:
            return f" ({minutes(low)} on its one earlier run here{plus})"
        took = minutes(low) if minutes(low) == minutes(high) else f"{minutes(low)}–{minutes(high)}"
        return f" ({took} over {len(self.earlier_sweeps)} earlier runs of this sweep here{plus})"

    def training_part(self) -> str:
        """What training adds and what its price rests on (empty when the model is stored)."""
        if not self.training_seconds:
            return ""
        return f"; training the model {minutes(self.training_seconds)} of it, {self.training_basis}"


def minutes(seconds: float) -> str:
    """``74 s``, ``2 min 10 s``, ``1 h 05 min``: whole seconds under an hour."""
    if seconds < 1:
        return "under a second"
    if seconds < 90:
        return f"{seconds:.0f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s" if whole % 60 else f"{whole // 60} min"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def earlier_sweeps(store: Store, machine_name: str, spec: SweepSpec) -> tuple[float, ...]:
    """The own times (started_at to finished_at) of ``machine_name``'s newest done runs of this
    very spec (store.records.comparable_key: the same spec, whatever launched it), at most
    ``CALIBRATION_RUNS``, newest first."""
    wanted = comparable_key(None, json.loads(json.dumps(spec.raw, default=str)))
    query = (
        select(Run.spec, Run.started_at, Run.finished_at)
        .join(Machine, Machine.id == Run.machine_id)
        .where(Machine.name == machine_name, Run.status == "done", Run.finished_at.is_not(None))
        .order_by(Run.started_at.desc(), Run.id.desc())
        .limit(TRAINING_LOOKBACK_RUNS)
    )
    with store.read() as session:
        rows = session.execute(query).all()
    found = [
        (finished_at - started_at).total_seconds()
        for stored, started_at, finished_at in rows
        if isinstance(stored, dict) and comparable_key(None, stored) == wanted
    ]
    return tuple(seconds for seconds in found if seconds >= 0)[:CALIBRATION_RUNS]


def case_gaps(started_at: datetime, recorded_at: Sequence[datetime]) -> list[float]:
    """What each case of a run took as its records tell it: the seconds since the previous case's
    record (the run's start for the first), never negative. A case's record closes it, so a gap
    also holds what ran between two cases (building a draft, say), charged to the case after it."""
    gaps: list[float] = []
    previous = started_at
    for created_at in recorded_at:
        gaps.append(max((created_at - previous).total_seconds(), 0.0))
        previous = created_at
    return gaps


def scale_factors(store: Store, machine_name: str) -> dict[str, float]:
    """Per experiment: recorded seconds over the cost model's, over this machine's newest done runs."""
    newest = (
        select(Run.id)
        .join(Machine, Machine.id == Run.machine_id)
        .where(Machine.name == machine_name, Run.status == "done")
        .order_by(Run.started_at.desc(), Run.id.desc())
        .limit(CALIBRATION_RUNS)
    )
    query = (
        select(Case.run_id, Case.experiment, Case.params, Case.created_at, Run.started_at, Run.spec)
        .join(Run, Run.id == Case.run_id)
        .where(Case.run_id.in_(newest))
        .order_by(Case.run_id, Case.created_at, Case.id)
    )
    with store.read() as session:
        rows = session.execute(query).all()
    recorded: dict[str, float] = defaultdict(float)
    modelled: dict[str, float] = defaultdict(float)
    for run_rows in (list(group) for _, group in itertools.groupby(rows, key=lambda row: row.run_id)):
        gaps = case_gaps(run_rows[0].started_at, [row.created_at for row in run_rows])
        for (_, experiment, params, _, _, spec), gap in zip(run_rows, gaps, strict=True):
            try:
                priced = case_seconds(experiment, params, spec.get("model", {}))
            except KeyError:
                continue  # a case of an older shape the model cannot price: left out of the calibration
            recorded[experiment] += gap
            modelled[experiment] += priced
    return {name: recorded[name] / modelled[name] for name in modelled if modelled[name] > 0 and recorded[name] > 0}


def earlier_trainings(store: Store, machine_name: str) -> list[Training]:
    """``machine_name``'s newest runs that trained their model, newest first, at most
    ``CALIBRATION_RUNS`` (a Hugging Face checkpoint trains nothing and is left out)."""
    query = (
        select(Run.spec, Run.started_at, Run.finished_at, Run.wall_seconds, Model.created_at)
        .join(Machine, Machine.id == Run.machine_id)
        .join(Model, Model.id == Run.model_id)
        .where(Machine.name == machine_name, Run.finished_at.is_not(None), Run.wall_seconds.is_not(None))
        .order_by(Run.started_at.desc(), Run.id.desc())
        .limit(TRAINING_LOOKBACK_RUNS)
    )
    with store.read() as session:
        rows = session.execute(query).all()
    found: list[Training] = []
    for spec, started_at, finished_at, wall_seconds, model_stored_at in rows:
        command_started = finished_at - timedelta(seconds=wall_seconds)
        # A model stored before this command began was reused, not trained, by this run.
        if not command_started <= model_stored_at <= started_at:
            continue
        try:
            shape, steps = step_shape(spec), int(spec["train"]["steps"])
            modelled = training_seconds_of(spec["model"], spec["train"])
        except (KeyError, TypeError, ValueError):
            continue  # a Hugging Face checkpoint, or a spec of an older shape: nothing to scale
        measured = (model_stored_at - command_started).total_seconds()
        if measured > 0 and modelled > 0 and steps > 0:
            found.append(Training(shape, steps, measured, modelled))
        if len(found) == CALIBRATION_RUNS:
            break
    return found


def price_training(spec: SweepSpec, trainings: list[Training]) -> tuple[float, str]:
    """``spec``'s training time and what it rests on: this machine's trainings of the same shape
    (seconds per step × steps), else the nearest shape's (scaled by the cost model), else the cost
    model alone."""
    modelled = training_seconds(spec)
    steps = int(spec.raw["train"]["steps"])
    same = [training for training in trainings if training.shape == step_shape(spec.raw)]
    if same:
        per_step = sum(training.measured_seconds for training in same) / sum(training.steps for training in same)
        said = "training" if len(same) == 1 else f"{len(same)} trainings"
        return per_step * steps, f"from this machine's earlier {said} of this model per step, times {steps:,} steps"
    wanted = modelled / steps
    near = [
        training
        for training in trainings
        if abs(math.log((training.modelled_seconds / training.steps) / wanted)) <= math.log(TRAINING_SHAPE_RANGE)
    ]
    if near:
        nearest = min(near, key=lambda training: abs(math.log((training.modelled_seconds / training.steps) / wanted)))
        d_model, n_layer = nearest.shape[0], nearest.shape[1]
        return modelled * nearest.measured_seconds / nearest.modelled_seconds, (
            f"scaled by steps × model size from this machine's earlier training of a d_model={d_model}, "
            f"n_layer={n_layer} model"
        )
    if trainings:
        return modelled, "by the cost model (this machine's earlier trainings were of models too unlike this one)"
    return modelled, "by the cost model, as this machine trained none before"


def estimate(
    spec: SweepSpec,
    factors: dict[str, float],
    model_stored: bool,
    trainings: list[Training] | None = None,
    earlier: tuple[float, ...] = (),
) -> Estimate:
    """``spec``'s time: the cost model per case, scaled by ``factors`` where an experiment has one,
    and its training priced from ``trainings``, this machine's earlier ones (price_training) (a local Hugging
    Face checkpoint: its own estimate, runner.spec.hf; it trains nothing); ``earlier``: what this
    very sweep took on the machine before (earlier_sweeps), said beside it as its spread."""
    if spec.is_hf:
        from runner.spec import hf as hf_spec

        names = tuple(dict.fromkeys(experiment.name for experiment, _ in spec.plan()))
        return Estimate(
            hf_spec.estimate(spec).seconds, 0.0, "", calibrated=(), uncalibrated=names, earlier_sweeps=earlier
        )
    model = spec.raw["model"]
    training_time, training_basis = (0.0, "") if model_stored else price_training(spec, trainings or [])
    total = training_time
    used: dict[str, bool] = {}
    for experiment, case in spec.plan():
        factor = factors.get(experiment.name)
        used[experiment.name] = factor is not None
        total += case_seconds(experiment.name, case, model) * (factor or 1.0)
    return Estimate(
        seconds=total,
        training_seconds=training_time,
        training_basis=training_basis,
        calibrated=tuple(name for name, calibrated in used.items() if calibrated),
        uncalibrated=tuple(name for name, calibrated in used.items() if not calibrated),
        earlier_sweeps=earlier,
    )


def estimate_here(store: Store, spec: SweepSpec, machine_name: str) -> Estimate:
    """``spec``'s time on ``machine_name`` as ``decodelab run`` will run it: training counted
    unless the store holds the model already. A corpus that cannot be read here counts its
    training: the run itself then fails its job with the reason, in one line."""
    from runner.model.corpus import load_corpus
    from runner.model.train import recipe_hash

    stored = False
    if not spec.is_hf:
        try:
            corpus = load_corpus(spec.corpus, min_length=2 * spec.raw["model"]["context_length"])
        except InputError:
            corpus = None
        if corpus is not None:
            config = spec.model_config(vocab_size=len(corpus.vocabulary))
            wanted = recipe_hash(config, spec.train_config(), corpus.content_hash)
            stored = store.results.find_model(recipe_hash=wanted) is not None
    return estimate(
        spec,
        scale_factors(store, machine_name),
        model_stored=stored,
        trainings=earlier_trainings(store, machine_name),
        earlier=earlier_sweeps(store, machine_name, spec),
    )


def main(arguments: list[str] | None = None) -> int:
    """``python -m runner.spec.calibrated_estimate --preset quick --db URL``: the line ``decodelab run`` says
    first, without running anything (``make demo`` opens with it)."""
    import argparse

    from runner.measure.machine import machine_name
    from runner.spec.sweeps import load_preset

    parser = argparse.ArgumentParser(description="How long a preset's sweep will take here, said before it runs.")
    parser.add_argument("--preset", required=True, help="quick, seed or full")
    parser.add_argument("--db", required=True, help="the store's URL")
    options = parser.parse_args(arguments)
    try:
        spec = load_preset(options.preset)
    except InputError as error:
        print(f"error: {error}")
        return 2
    store = Store(options.db)
    try:
        print(f"the sweep: {spec.cases_total()} cases, {estimate_here(store, spec, machine_name()).describe()}")
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
