"""How long a sweep will take on this machine, said before it is launched.

The cost model of runner.sweeps prices each case from its shape; on a machine with earlier done
runs in the store, each experiment's price is scaled by what those runs took: the time between
a case's record and the one before it (the run's start for its first case) summed per
experiment, over what the model said of the same cases. An experiment this machine never ran
keeps the model's price, and the estimate says which experiments were calibrated.

Training is priced the same way from the runs that trained their model: a run's command began
``wall_seconds`` before it finished, and its model was stored when training ended (before the
run's own start), so the model's ``created_at`` less the command's start is that training's
time. Its ratio to the cost model's training time for that spec scales the cost model's time for
the new spec (steps × model size × batch): a spec of another size is scaled, not copied.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select

from runner.cost_limits import case_seconds, training_seconds, training_seconds_of
from runner.errors import InputError
from runner.sweeps import SweepSpec
from store.schema import Case, Machine, Model, Run
from store.store import Store

# The newest done runs of the machine that calibrate it: recent enough to be today's machine.
CALIBRATION_RUNS = 5
# Runs read to find the newest ones that trained their model (most reuse a stored one).
TRAINING_LOOKBACK_RUNS = 200


@dataclass(frozen=True)
class TrainingScale:
    """This machine's measured training times over the cost model's, summed over its newest runs
    that trained their model."""

    factor: float
    runs: int


@dataclass(frozen=True)
class Estimate:
    seconds: float
    training_seconds: float  # included in seconds; 0 when the model is stored
    training_runs: int  # this machine's earlier trainings that priced it (0: the cost model alone)
    calibrated: tuple[str, ...]  # experiments priced from this machine's earlier runs
    uncalibrated: tuple[str, ...]  # experiments priced by the cost model alone

    def describe(self) -> str:
        """One line: the estimate and what each part rests on."""
        if self.calibrated and not self.uncalibrated:
            basis = "from this machine's earlier runs"
        elif self.calibrated:
            basis = (
                f"from this machine's earlier runs for {', '.join(self.calibrated)}, "
                f"by the cost model for {', '.join(self.uncalibrated)}"
            )
        else:
            basis = "by the cost model (no earlier run of these experiments on this machine)"
        return f"about {minutes(self.seconds)}; the cases {basis}{self.training_part()}"

    def training_part(self) -> str:
        """What training adds and what its price rests on (empty when the model is stored)."""
        if not self.training_seconds:
            return ""
        if self.training_runs:
            said = "earlier training" if self.training_runs == 1 else f"{self.training_runs} earlier trainings"
            basis = f"scaled from this machine's {said}"
        else:
            basis = "by the cost model, as this machine trained none before"
        return f"; training the model {minutes(self.training_seconds)} of it, {basis}"


def minutes(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


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
    previous: tuple[int, datetime] | None = None
    for run_id, experiment, params, created_at, started_at, spec in rows:
        since = previous[1] if previous is not None and previous[0] == run_id else started_at
        previous = (run_id, created_at)
        model = spec.get("model", {})
        try:
            priced = case_seconds(experiment, params, model)
        except KeyError:
            continue  # a case of an older shape the model cannot price: left out of the calibration
        recorded[experiment] += max((created_at - since).total_seconds(), 0.0)
        modelled[experiment] += priced
    return {name: recorded[name] / modelled[name] for name in modelled if modelled[name] > 0 and recorded[name] > 0}


def training_scale(store: Store, machine_name: str) -> TrainingScale | None:
    """Measured over modelled training time of ``machine_name``'s newest runs that trained their
    model (None: none did, or none of a shape the cost model prices)."""
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
    measured, modelled, runs = 0.0, 0.0, 0
    for spec, started_at, finished_at, wall_seconds, model_stored_at in rows:
        command_started = finished_at - timedelta(seconds=wall_seconds)
        # A model stored before this command began was reused, not trained, by this run.
        if not command_started <= model_stored_at <= started_at:
            continue
        try:
            priced = training_seconds_of(spec["model"], spec["train"])
        except (KeyError, TypeError):
            continue  # a Hugging Face checkpoint, or a spec of an older shape: nothing to scale
        measured += (model_stored_at - command_started).total_seconds()
        modelled += priced
        runs += 1
        if runs == CALIBRATION_RUNS:
            break
    if runs == 0 or modelled <= 0 or measured <= 0:
        return None
    return TrainingScale(measured / modelled, runs)


def estimate(
    spec: SweepSpec, factors: dict[str, float], model_stored: bool, training: TrainingScale | None = None
) -> Estimate:
    """``spec``'s time: the cost model per case, scaled by ``factors`` where an experiment has one,
    and its training scaled by ``training`` where this machine trained before (a local Hugging
    Face checkpoint: its own estimate, runner.hf_spec; it trains nothing)."""
    if spec.is_hf:
        from runner import hf_spec

        names = tuple(dict.fromkeys(experiment.name for experiment, _ in spec.plan()))
        return Estimate(hf_spec.estimate(spec).seconds, 0.0, 0, calibrated=(), uncalibrated=names)
    model = spec.raw["model"]
    training_time = 0.0 if model_stored else training_seconds(spec) * (training.factor if training else 1.0)
    total = training_time
    used: dict[str, bool] = {}
    for experiment, case in spec.plan():
        factor = factors.get(experiment.name)
        used[experiment.name] = factor is not None
        total += case_seconds(experiment.name, case, model) * (factor or 1.0)
    return Estimate(
        seconds=total,
        training_seconds=training_time,
        training_runs=training.runs if training is not None and not model_stored else 0,
        calibrated=tuple(name for name, calibrated in used.items() if calibrated),
        uncalibrated=tuple(name for name, calibrated in used.items() if not calibrated),
    )


def estimate_here(store: Store, spec: SweepSpec, machine_name: str) -> Estimate:
    """``spec``'s time on ``machine_name`` as ``decodelab run`` will run it: training counted
    unless the store holds the model already. A corpus that cannot be read here counts its
    training: the run itself then fails its job with the reason, in one line."""
    from runner.corpus import load_corpus
    from runner.train import recipe_hash

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
        spec, scale_factors(store, machine_name), model_stored=stored, training=training_scale(store, machine_name)
    )
