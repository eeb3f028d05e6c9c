"""Launching a sweep from the dashboard: build the spec from the form, validate it with the
runner's validator, enqueue it, and start a worker when a SQLite store has none.

Plain functions (no Streamlit) so the form's handling can be tested and fuzzed directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner import declarations
from runner.errors import InputError
from runner.fields import check_machine
from runner.model.data_folder import DEFAULT_DATA_DIR, dashboard_corpus, dashboard_models, mark_dashboard_job
from store.files import PRIVATE_MODE
from store.store import Store

if TYPE_CHECKING:  # runner.spec.calibrated_estimate imports torch (through the spec validator): not at page load
    from runner.spec.calibrated_estimate import Estimate

# Launches estimated to take longer than this ask for confirmation first.
CONFIRM_ABOVE_SECONDS = 600.0
# What one browser session may launch: a burst of clicks (or a script) queues this many a minute.
LAUNCHES_PER_MINUTE = 5
RATE_WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class LaunchCaps:
    """Limits set by whoever started the dashboard (`decodelab dashboard --max-hours,
    --max-memory, --max-queued`), not by the spec a visitor pastes: a spec's own max_hours is
    lowered to the cap, and the worker checks it again."""

    max_hours: float = 8.0
    max_memory_gib: float = 4.0
    max_queued: int = 20

    @classmethod
    def from_environment(cls) -> LaunchCaps:
        """The caps `decodelab dashboard` put in this process's environment (else the defaults)."""
        default = cls()
        return cls(
            float(os.environ.get("DECODELAB_MAX_HOURS") or default.max_hours),
            float(os.environ.get("DECODELAB_MAX_MEMORY_GIB") or default.max_memory_gib),
            int(os.environ.get("DECODELAB_MAX_QUEUED") or default.max_queued),
        )


def check_launch_rate(launched_at: list[float], now: float) -> list[float]:
    """The session's recent launch times with ``now`` added; InputError when it has launched
    LAUNCHES_PER_MINUTE times in the last minute already."""
    recent = [moment for moment in launched_at if now - moment < RATE_WINDOW_SECONDS]
    if len(recent) >= LAUNCHES_PER_MINUTE:
        wait = RATE_WINDOW_SECONDS - (now - min(recent))
        raise InputError(
            f"launch: {len(recent)} launches in the last minute from this page (allowed: at most "
            f"{LAUNCHES_PER_MINUTE} a minute; wait {wait:.0f} s)"
        )
    return [*recent, now]


@dataclass(frozen=True)
class LaunchRequest:
    source: str  # "preset" or "spec"
    preset: str
    experiments: list[str]
    spec_text: str
    machine: str
    confirmed: bool
    # Key parameters that override the preset (None or empty: keep the preset's), each for the
    # experiments whose declaration names it (runner.declarations.LAUNCH_FIELDS).
    lengths: list[int] | None = None  # kv_cache lengths
    ks: list[int] | None = None  # speculative draft lengths
    pairs: int | None = None  # paired timings per point, for every experiment that times pairs
    corpus: str = "default"  # for a preset: "default" or a file of the data folder (a spec names its own)


def form_fields(experiments: list[str]) -> set[str]:
    """The launch form's overrides (lengths, ks, pairs) that apply to some of ``experiments``:
    those their declarations' ``launch_fields`` name."""
    return {
        name
        for experiment in experiments
        if (declaration := declarations.find(experiment)) is not None
        for name in declaration.launch_fields
    }


@dataclass(frozen=True)
class Launched:
    job_id: int | None
    cases: int
    estimated_seconds: float
    needs_confirmation: bool
    estimate: Estimate | None = None


def build_spec(request: LaunchRequest, data_dir: Path = DEFAULT_DATA_DIR) -> Any:
    """The validated spec the form describes; InputError naming the field otherwise. A model
    path or ``hf:`` draft must be a model folder under ``data_dir``, checked before validation
    reads anything in it (runner/model/data_folder.py)."""
    from runner.spec.sweeps import PRESETS, preset_text, validate

    if request.source == "preset":
        if request.preset not in PRESETS:
            raise InputError(f"preset: {request.preset!r} is not a preset (allowed: {', '.join(PRESETS)})")
        raw = tomllib.loads(preset_text(request.preset))
        if not request.experiments:
            raise InputError(f"experiments: choose at least one (allowed: {', '.join(raw['experiments'])})")
        unknown = [name for name in request.experiments if name not in raw["experiments"]]
        if unknown:
            raise InputError(
                f"experiments: {unknown[0]!r} is not in preset {request.preset} "
                f"(allowed: {', '.join(raw['experiments'])})"
            )
        raw["experiments"] = {name: dict(raw["experiments"][name]) for name in request.experiments}
        for name, params in raw["experiments"].items():
            for field, value in (("lengths", request.lengths), ("ks", request.ks)):
                if value and field in form_fields([name]):
                    params[field] = list(value)
        if request.pairs is not None:
            for params in raw["experiments"].values():
                if "pairs" in params:
                    params["pairs"] = request.pairs
        raw["model"]["corpus"] = request.corpus
        return validate(raw)
    if request.source == "spec":
        if len(request.spec_text) > 100_000:
            raise InputError("spec: longer than 100,000 characters (allowed: a sweep spec in TOML)")
        try:
            raw = tomllib.loads(request.spec_text)
        except tomllib.TOMLDecodeError as error:
            raise InputError(f"spec: not valid TOML ({error})") from None
        return validate(dashboard_models(raw, data_dir))
    raise InputError(f"source: {request.source!r} is not a source (allowed: preset, spec)")


def estimate_launch(store: Store, spec: Any, machine: str | None) -> Estimate:
    """How long ``spec`` will take on ``machine`` (default: this one): the cost model scaled by
    that machine's earlier runs in this store (runner.spec.calibrated_estimate), training included unless the
    model is stored already (scaled by that machine's earlier trainings where it has any)."""
    from runner.measure.machine import machine_name
    from runner.model.train import recipe_hash
    from runner.spec.calibrated_estimate import earlier_sweeps, earlier_trainings, estimate, scale_factors

    name = machine or machine_name()
    return estimate(
        spec,
        scale_factors(store, name),
        model_stored=_model_stored(store, spec, recipe_hash),
        trainings=earlier_trainings(store, name),
        earlier=earlier_sweeps(store, name, spec),
    )


def check_caps(store: Store, spec: Any, estimated: Estimate, caps: LaunchCaps) -> None:
    """Refuse, in one line naming the cap and who sets it, a launch over the dashboard's caps."""
    from runner.cost.cost_model import peak_memory_bytes, readable_bytes, readable_hours
    from runner.spec import hf

    pending = store.jobs.pending()
    if pending >= caps.max_queued:
        raise InputError(
            f"queue: {pending} jobs queued or running already (allowed: at most {caps.max_queued}, set by "
            "`decodelab dashboard --max-queued`; cancel one or wait)"
        )
    if estimated.seconds > caps.max_hours * 3600:
        raise InputError(
            f"max_hours: estimated wall time {readable_hours(estimated.seconds)} is above this dashboard's cap "
            f"(allowed: at most {caps.max_hours:g} hours, set by `decodelab dashboard --max-hours`; shrink the sweep)"
        )
    peak = hf.estimate(spec).peak_bytes if spec.is_hf else peak_memory_bytes(spec)
    if peak > caps.max_memory_gib * 2**30:
        raise InputError(
            f"memory: estimated peak memory {readable_bytes(peak)} is above this dashboard's cap (allowed: at most "
            f"{caps.max_memory_gib:g} GiB, set by `decodelab dashboard --max-memory`; a smaller model or batch)"
        )


def launch(
    store: Store, request: LaunchRequest, data_dir: Path = DEFAULT_DATA_DIR, caps: LaunchCaps | None = None
) -> Launched:
    """Validate and enqueue with the estimate recorded on the job (History sets it beside the
    time taken); a long sweep is enqueued only once confirmed. The corpus must be ``default`` or a
    file under ``data_dir`` (runner/model/data_folder.py), whatever the spec says; the launch must
    fit the dashboard's ``caps`` (else those of its environment), whatever the spec says."""
    from runner.spec.sweeps import validate

    caps = caps or LaunchCaps.from_environment()
    spec = build_spec(request, data_dir)
    corpus = dashboard_corpus(spec.corpus, data_dir)
    if corpus != spec.corpus:  # the resolved path: the worker checks that very file again
        spec = validate({**spec.raw, "model": {**spec.raw["model"], "corpus": corpus}})
    machine = check_machine(request.machine)
    estimated = estimate_launch(store, spec, machine)
    check_caps(store, spec, estimated, caps)
    label = preset_label(request, spec)  # the preset's own sweep, whatever time it is allowed
    if float(spec.raw["max_hours"]) > caps.max_hours:
        # The job carries the cap, not the spec's own allowance: the worker validates it again.
        spec = validate({**spec.raw, "max_hours": caps.max_hours})
    cases = spec.cases_total()
    if estimated.seconds > CONFIRM_ABOVE_SECONDS and not request.confirmed:
        return Launched(None, cases, estimated.seconds, needs_confirmation=True, estimate=estimated)
    job_spec = mark_dashboard_job(spec.raw, data_dir)
    job_id = store.jobs.enqueue(
        job_spec,
        preset=label,
        machine_name=machine,
        cases_total=cases,
        estimated_seconds=estimated.seconds,
    )
    return Launched(job_id, cases, estimated.seconds, needs_confirmation=False, estimate=estimated)


def preset_label(request: LaunchRequest, spec: Any) -> str | None:
    """The preset's name only for the preset run unchanged: a launch with some of its experiments
    or other lengths, k or pairs is stored as custom (None, its spec kept), so that baselines,
    Compare, History and the calibration never set it beside the preset's own runs."""
    from runner.spec.sweeps import load_preset

    if request.source != "preset" or spec.raw != load_preset(request.preset).raw:
        return None
    return request.preset


def _model_stored(store: Store, spec: Any, recipe_hash: Any) -> bool:
    if spec.is_hf or spec.corpus != "default":
        return False  # an hf checkpoint is never trained; its estimate does not ask
    from runner.model.corpus import load_corpus

    corpus = load_corpus()
    config = spec.model_config(vocab_size=len(corpus.vocabulary))
    return (
        store.results.find_model(recipe_hash=recipe_hash(config, spec.train_config(), corpus.content_hash)) is not None
    )


def worker_log_path(url: str) -> Path:
    from store.engine import read_url

    database = read_url(url).database or "decodelab.db"
    return Path(database).resolve().with_suffix(".worker.log")


def start_worker(url: str, idle_seconds: int = 600) -> subprocess.Popen[bytes]:
    """A detached ``decodelab worker`` for this store: an argument list (no shell), the URL in
    the environment (never on a command line), output to a log file next to the store."""
    log_path = worker_log_path(url)
    environment = {**os.environ, "DECODELAB_DB": url}
    # The log may quote anything the jobs hold: the owner's alone (an older, wider log narrowed).
    descriptor = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, PRIVATE_MODE)
    if os.fstat(descriptor).st_uid == os.geteuid():
        os.fchmod(descriptor, PRIVATE_MODE)
    with open(descriptor, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "cli", "worker", "--max-idle-seconds", str(idle_seconds)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
        )


def stop_workers(started: dict[str, subprocess.Popen[bytes]], wait_seconds: float = 15.0) -> None:
    """SIGTERM to each worker this dashboard started that still runs (a running job goes back to
    the queue), then wait for them: registered to run as the dashboard's process exits, so
    Ctrl-C on `decodelab dashboard` (or `make demo`) leaves no worker behind. The workers run in
    their own session, so the terminal's Ctrl-C never reaches them directly."""
    running = [
        process for process in started.values() if isinstance(process, subprocess.Popen) and process.poll() is None
    ]
    for process in running:
        process.terminate()
    for process in running:
        try:
            process.wait(timeout=wait_seconds)
        except subprocess.TimeoutExpired:
            process.kill()
