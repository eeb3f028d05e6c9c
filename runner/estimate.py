"""How long a sweep will take on this machine, said before it is launched.

The cost model of runner.sweeps prices each case from its shape; on a machine with earlier done
runs in the store, each experiment's price is scaled by what those runs took: the time between
a case's record and the one before it (the run's start for its first case) summed per
experiment, over what the model said of the same cases. An experiment this machine never ran
keeps the model's price, and the estimate says which experiments were calibrated.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from runner.cost_limits import case_seconds, training_seconds
from runner.errors import InputError
from runner.sweeps import SweepSpec
from store.schema import Case, Machine, Run
from store.store import Store

# The newest done runs of the machine that calibrate it: recent enough to be today's machine.
CALIBRATION_RUNS = 5


@dataclass(frozen=True)
class Estimate:
    seconds: float
    training_seconds: float  # included in seconds; 0 when the model is stored
    calibrated: tuple[str, ...]  # experiments priced from this machine's earlier runs
    uncalibrated: tuple[str, ...]  # experiments priced by the cost model alone

    def describe(self) -> str:
        """One line: the estimate and what it rests on."""
        if self.calibrated and not self.uncalibrated:
            basis = "from this machine's earlier runs"
        elif self.calibrated:
            basis = (
                f"from this machine's earlier runs for {', '.join(self.calibrated)}; "
                f"by the cost model for {', '.join(self.uncalibrated)}"
            )
        else:
            basis = "by the cost model (no earlier run of these experiments on this machine)"
        training = f", {minutes(self.training_seconds)} of it training the model" if self.training_seconds else ""
        return f"about {minutes(self.seconds)}{training}, {basis}"


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


def estimate(spec: SweepSpec, factors: dict[str, float], model_stored: bool) -> Estimate:
    """``spec``'s time: the cost model per case, scaled by ``factors`` where an experiment has one
    (a local Hugging Face checkpoint: its own estimate, runner.hf_spec; it trains nothing)."""
    if spec.is_hf:
        from runner import hf_spec

        names = tuple(dict.fromkeys(experiment.name for experiment, _ in spec.plan()))
        return Estimate(hf_spec.estimate(spec).seconds, 0.0, calibrated=(), uncalibrated=names)
    model = spec.raw["model"]
    training = 0.0 if model_stored else training_seconds(spec)
    total = training
    used: dict[str, bool] = {}
    for experiment, case in spec.plan():
        factor = factors.get(experiment.name)
        used[experiment.name] = factor is not None
        total += case_seconds(experiment.name, case, model) * (factor or 1.0)
    return Estimate(
        seconds=total,
        training_seconds=training,
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
    return estimate(spec, scale_factors(store, machine_name), model_stored=stored)
