"""Execute a validated sweep spec into the store: train or reuse the model, then run every
case of every experiment, one transaction per case, resuming a run without duplicates.

Run under a job's claim, every write is the claim's: when the job stops being this process's
(ClaimLost, from the store or the heartbeat) nothing more is written, not even the run's end."""

from __future__ import annotations

import contextlib
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from runner.errors import InputError, Unmeasured
from runner.execution.lifecycle import check_stop, job_ends_before_its_run, run_lifecycle
from runner.experiments import ExperimentContext
from runner.experiments.base import RunMeasurements
from runner.labels import part_labels, progress_label
from runner.measure import load as machine_load
from runner.measure.machine import code_version, fingerprint
from runner.measure.reference import REFERENCE_METRIC, speed_line
from runner.measure.timing import Harness
from runner.model.corpus import load_corpus
from runner.model.progress import Ticker
from runner.model.train import train_or_reuse
from runner.spec.sweeps import SweepSpec
from store.masking import mask_secrets
from store.records import CaseRecord, Claim, JobRecord, MeasurementRecord, case_key
from store.store import Store

Log = Callable[[str], None]


def log_to_stderr(message: str) -> None:
    # Logs end up in journald and shared log files: no password in them.
    print(mask_secrets(message), file=sys.stderr, flush=True)


@dataclass(frozen=True)
class RunOutcome:
    run_id: int
    cases_recorded: int
    cases_skipped: int
    wall_seconds: float
    cases_unmeasured: int = 0  # of the run's cases, those it holds as not measured (Unmeasured)


# A reason is kept and shown on one line, whatever the exception's text held.
REASON_CHARACTERS = 500


def one_line_reason(error: Exception) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= REASON_CHARACTERS else text[: REASON_CHARACTERS - 1] + "…"


# Torch's own thread count, before any spec changed it: what training uses.
DEFAULT_THREADS = torch.get_num_threads()


@contextlib.contextmanager
def torch_threads(threads: int, fast_path: bool = False) -> Iterator[None]:
    """Torch uses ``threads`` threads inside the block (0: DEFAULT_THREADS), then what it used
    before; with ``fast_path`` the fast decode path does too (0: its default, one)."""
    from runner.decoding.fast_library import set_threads, threads_wanted

    before, fast_before = torch.get_num_threads(), threads_wanted()
    torch.set_num_threads(threads or DEFAULT_THREADS)
    if fast_path:
        set_threads(threads or 1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        if fast_path:
            set_threads(fast_before)


def training_threads(log: Log) -> int:
    """Torch threads for training: one on a busy machine (load average at its core count, as the
    sweep's spec asks for one), else torch's own count (0). Said in the log when it is one."""
    load = machine_load.load_average()
    if DEFAULT_THREADS > 1 and machine_load.busy(load):
        log(f"the machine is busy (load average {load:.1f} on {machine_load.cores()} cores): training on one thread")
        return 1
    return 0


def train_side_model(
    store: Store,
    model_config: Any,
    train_config: Any,
    corpus: Any,
    device: str,
    log: Log,
    teacher: Any = None,
    name: str = "a side model",
) -> Any:
    """Train (or reuse) another model for an experiment, e.g. a small draft, optionally distilled
    from ``teacher``; its log lines start with ``name``. Experiments may ask from inside
    ``torch.inference_mode``; training needs autograd back (and the teacher on the CPU beside
    the corpus)."""
    with torch.inference_mode(False), torch.enable_grad(), torch_threads(training_threads(log)):
        cpu_teacher = None if teacher is None else copy.deepcopy(teacher).cpu()
        trained = train_or_reuse(
            store.results,
            model_config,
            train_config,
            corpus,
            show_progress=False,
            log=lambda message: log(f"{name}: {message}"),
            teacher=cpu_teacher,
        )
    return trained.model.to(device).eval()


def ensure_profile(store: Store, machine_id: int, log: Log) -> dict[str, Any]:
    """This machine's stored roof, measured now if the store has none for its fingerprint (a quick
    profile where DECODELAB_PROFILE=quick, as the tests set)."""
    from runner.cost import machine_profile

    roof = store.profiles.latest(machine_id)
    if roof is None:
        quick = os.environ.get("DECODELAB_PROFILE") == "quick"
        log(f"profiling this machine first ({'quick' if quick else 'full'}): no roof stored for it")
        roof = machine_profile.profile(quick=quick)
        store.profiles.save(machine_id, roof["instruction_set"], quick, roof)
    return roof


def check_device(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("device: 'cuda' was asked for but this machine has no CUDA device (allowed: cpu)")


def case_progress_labels(plan: list[tuple[Any, dict[str, Any]]]) -> dict[tuple[str, str], str]:
    """What the progress bar says of each case: its experiment and part, and the parameters that
    vary within that part (``kv_cache · timing · static · n=256``)."""
    labels = part_labels((experiment.name, case) for experiment, case in plan)
    return {key: progress_label(key[0], label) for key, label in labels.items()}


@dataclass(frozen=True)
class PreparedModel:
    """The model the cases measure, its stored record, and the text it reads."""

    model: Any
    record: Any
    corpus: Any


@dataclass(frozen=True)
class OpenedRun:
    """The run the cases are recorded into, on the machine (and its roof) that times them."""

    run_id: int
    machine_id: int
    roof: dict[str, Any] | None


def prepare_model(store: Store, spec: SweepSpec, *, show_progress: bool, log: Log) -> PreparedModel:
    """Train (or reuse) the spec's model, or load its local Hugging Face checkpoint, on its device."""
    check_device(spec.device)
    if spec.is_hf:
        from runner.execution.hf_run import load_target

        # A local Hugging Face checkpoint: loaded, not trained; the text seen through its tokenizer.
        target = load_target(store.results, spec, log)
        return PreparedModel(target.model.to(spec.device).eval(), target.record, target.corpus)
    corpus = load_corpus(spec.corpus, min_length=2 * spec.raw["model"]["context_length"])
    with torch_threads(training_threads(log)):
        trained = train_or_reuse(
            store.results,
            spec.model_config(vocab_size=len(corpus.vocabulary)),
            spec.train_config(),
            corpus,
            show_progress=show_progress,
            log=lambda message: log(f"the model: {message}"),
        )
    return PreparedModel(trained.model.to(spec.device).eval(), trained.record, corpus)


def open_run(
    store: Store, spec: SweepSpec, model_record: Any, claim: Claim | None, preset: str | None, log: Log
) -> OpenedRun:
    """Start the run (under a claim: begin the job's run, or resume the one it began before)."""
    # The experiments run on the spec's threads, and the machine is recorded with that count.
    with torch_threads(spec.raw.get("threads", 0), fast_path=True):
        machine_id = store.results.machine_id(fingerprint(spec.device))
        roof = ensure_profile(store, machine_id, log) if spec.device == "cpu" else None
    run_fields: dict[str, Any] = {
        "machine_id": machine_id,
        "spec": spec.raw,
        "code_version": code_version(),
        "model_id": model_record.id,
        "preset": preset,
    }
    if claim is None:
        return OpenedRun(store.results.start_run(**run_fields), machine_id, roof)
    run_id, resumed = store.jobs.begin_run(claim, **run_fields)
    if resumed:
        log(f"resuming run {run_id}")
    return OpenedRun(run_id, machine_id, roof)


class CaseProgress:
    """The bar over a run's cases and the job's progress in the store, moved together."""

    def __init__(
        self, store: Store, claim: Claim | None, run_id: int, done: int, total: int, show: bool, log: Log | None = None
    ) -> None:
        self.store, self.claim, self.done, self.total = store, claim, done, total
        # Where no bar is drawn on a terminal, a whole progress line every LOG_EVERY_SECONDS instead.
        self.lines = log if log is not None and not (show and sys.stderr.isatty()) else None
        self.ticker, self.run_id = Ticker(), run_id
        # smoothing=0: the ETA from the average case so far, not the last one (a case that trains
        # a draft for a minute would otherwise swing it from seconds to many minutes).
        self.bar = tqdm(
            total=total, initial=done, desc=f"run {run_id}", unit="case", disable=not show, file=sys.stderr, smoothing=0
        )
        self._report()

    def _report(self) -> None:
        if self.claim is not None:
            self.store.jobs.progress(self.claim, self.done, self.total)

    def advance(self) -> None:
        self.done += 1
        self.bar.update(1)
        self._report()
        if self.lines is not None and self.ticker.due():
            self.lines(f"run {self.run_id}: {self.done}/{self.total} cases")


def machine_speed(harness: Harness) -> tuple[MeasurementRecord, ...]:
    """The case's ``reference_loop_seconds``: the median reading of the reference loop between its
    samples (runner.measure.reference), where it timed anything."""
    readings = harness.take_reference_readings()
    return (MeasurementRecord(REFERENCE_METRIC, statistics.median(readings), "seconds"),) if readings else ()


def run_cases(
    store: Store,
    spec: SweepSpec,
    plan: list[tuple[Any, dict[str, Any]]],
    prepared: PreparedModel,
    opened: OpenedRun,
    claim: Claim | None,
    recorded: set[tuple[str, str]],
    progress: CaseProgress,
    log: Log,
) -> int:
    """Measure and record every case of ``plan`` not in ``recorded`` (the run's cases recorded
    before, by an earlier attempt), one transaction per case; returns how many this call recorded."""
    run_id, recorded_now = opened.run_id, 0

    def log_beside_bar(message: str) -> None:
        """A line logged while the bar is drawn: on a line of its own, the bar redrawn below."""
        if progress.bar.disable:
            log(message)
            return
        with progress.bar.external_write_mode(file=sys.stderr):
            log(message)

    # Summary cases read the run's measurements from memory; a resumed run first loads what its
    # earlier attempt recorded, once per experiment.
    resumed_experiments = sorted({experiment for experiment, _ in recorded})
    made = RunMeasurements({name: store.results.measurements(run_id, name) for name in resumed_experiments})
    context = ExperimentContext(
        model=prepared.model,
        model_record=prepared.record,
        corpus=prepared.corpus,
        harness=Harness(device=spec.device, reference=True),
        device=spec.device,
        seed=spec.seed,
        earlier=made.of,
        train_model=lambda model_config, train_config, teacher=None, name="a side model": train_side_model(
            store, model_config, train_config, prepared.corpus, spec.device, log_beside_bar, teacher, name
        ),
        roof=opened.roof,
        overheads=store.profiles.overheads(opened.machine_id),
        overhead_fits=store.profiles.overhead_fits(opened.machine_id),
    )
    labels = case_progress_labels(plan)
    for experiment, case in plan:
        check_stop()
        if (experiment.name, case_key(case)) in recorded:
            continue
        progress.bar.set_postfix_str(labels[(experiment.name, case_key(case))])
        torch.manual_seed(spec.seed)
        context.harness.take_reference_readings()  # none of an earlier case's, or of training a draft
        try:
            measurements = (*experiment.run_case(case, context), *machine_speed(context.harness))
            record = CaseRecord(experiment.name, case, measurements)
            made.add(experiment.name, case, measurements)
        except Unmeasured as unmeasured:
            # One case this machine cannot time now does not throw away the others: kept with its reason.
            reason = one_line_reason(unmeasured)
            log_beside_bar(f"not measured: {labels[(experiment.name, case_key(case))]}: {reason}")
            record = CaseRecord(experiment.name, case, unmeasured_reason=reason)
        if store.results.record_case(run_id, record, claim) is not None:
            recorded_now += 1
        progress.advance()
    return recorded_now


def execute(
    store: Store,
    spec: SweepSpec,
    *,
    preset: str | None = None,
    job: JobRecord | None = None,
    requeue_on_interrupt: bool = False,
    show_progress: bool = True,
    log: Log = log_to_stderr,
) -> RunOutcome:
    """Run ``spec`` and record it: prepare the model, open the run, run the cases. Ctrl-C or
    SIGTERM marks the run interrupted and re-raises (and, with ``requeue_on_interrupt``, gives
    its job back to the queue for the next worker)."""
    started = time.perf_counter()
    claim = job.claim if job is not None else None
    plan = spec.plan()
    total, recorded_now = len(plan), 0
    # Nothing between the two guards below but entering the second: a stop or an error at any
    # point ends the job (requeued, interrupted or failed), never leaves it running.
    with job_ends_before_its_run(store, claim, requeue_on_interrupt=requeue_on_interrupt):
        prepared = prepare_model(store, spec, show_progress=show_progress, log=log)
        opened = open_run(store, spec, prepared.record, claim, preset, log)
    run_id = opened.run_id
    progress: CaseProgress | None = None
    sweep_started = time.perf_counter()
    try:
        with (
            run_lifecycle(store, run_id, claim, started=started, requeue_on_interrupt=requeue_on_interrupt),
            torch_threads(spec.raw.get("threads", 0), fast_path=True),
        ):
            recorded = store.results.recorded_case_keys(run_id)
            done = sum((experiment.name, case_key(case)) in recorded for experiment, case in plan)
            progress = CaseProgress(store, claim, run_id, done, total, show_progress, log)
            recorded_now = run_cases(store, spec, plan, prepared, opened, claim, recorded, progress, log)
    except KeyboardInterrupt:
        done = progress.done if progress is not None else 0
        requeued = f"; job {claim.job_id} requeued for the next worker" if claim and requeue_on_interrupt else ""
        log(f"run {run_id} interrupted after {done}/{total} cases; recorded cases are kept{requeued}")
        raise
    finally:
        if progress is not None:
            progress.bar.close()
    wall = time.perf_counter() - started
    unmeasured = len(store.results.unmeasured_cases(run_id))
    sweep_seconds = time.perf_counter() - sweep_started
    log(done_line(run_id, recorded_now - unmeasured, total - recorded_now, sweep_seconds, wall, unmeasured))
    if speeds := speed_line(store.results.metric_values(run_id, REFERENCE_METRIC)):
        log(speeds)
    return RunOutcome(run_id, recorded_now, total - recorded_now, wall, unmeasured)


def done_line(
    run_id: int, measured: int, resumed: int, sweep_seconds: float, wall_seconds: float, unmeasured: int = 0
) -> str:
    """The run's last line: the cases measured in the sweep's own time (what the bar showed), and
    the whole command's time beside it (training or loading the model included), and how many
    cases could not be measured, with the command that retries them."""
    kept = f"; {resumed} cases were recorded by an earlier attempt and kept" if resumed else ""
    missing = (
        f"; {unmeasured} cases not measured (retry them with `decodelab run --only-unmeasured {run_id}`)"
        if unmeasured
        else ""
    )
    return (
        f"run {run_id} done: {measured} cases measured in {sweep_seconds:.1f} s "
        f"({wall_seconds:.1f} s with the model's training or loading){kept}{missing}"
    )
