"""What every experiment shares: the context a case runs in, the shape an experiment has, its
parts named by path, and the A/A case's noise-floor measurements. Kept apart from the registry
(runner.experiments), which imports every experiment: an experiment imports from here, so no
import comes back. Torch-free at import, as every experiment's module is (runner.declarations
reads them): the model, corpus and harness types are named for the type checker only."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from runner.fields import Field
from runner.labels import progress_label, short_label
from store.records import MeasurementRecord, RecordedMeasurement, case_key

if TYPE_CHECKING:
    from runner.measure.timing import Harness
    from runner.model.corpus import Corpus
    from runner.model.gpt import CharGPT

# The part of a case without a ``part`` param: an experiment of one kind of case
# (training_summary), or quantization's variant cases beside its ``aa`` part.
WHOLE = ""


@dataclass(frozen=True)
class Case:
    """One case of a plan, typed: its experiment, its part and its params. ``params`` is what the
    store keeps (the part is one of them, so the stored format is unchanged); ``key`` is the
    store's case key and ``label`` the words the progress bar and the pages show."""

    experiment: str
    params: Mapping[str, Any] = field(hash=False)

    @property
    def part(self) -> str:
        return str(self.params.get("part", WHOLE))

    @property
    def key(self) -> str:
        return case_key(dict(self.params))

    def label(self, varying: Sequence[str] | None = None) -> str:
        """``experiment · part · …``: the params in ``varying`` (every param when None) after the
        experiment's name, each word once (runner.labels)."""
        return progress_label(self.experiment, short_label(self.params, varying))


# How an experiment measures one part: the case's params and the context in, records out.
Part = Callable[[dict[str, Any], "ExperimentContext"], Iterable[MeasurementRecord]]


@dataclass(frozen=True)
class PartAt:
    """The part measured by function ``function`` of module ``module``, imported when its first
    case runs: how an experiment's module names code that imports torch without importing it."""

    module: str
    function: str

    def resolve(self) -> Part:
        measure: Part = getattr(importlib.import_module(self.module), self.function)
        return measure

    def __call__(self, case: dict[str, Any], context: ExperimentContext) -> Iterable[MeasurementRecord]:
        return self.resolve()(case, context)


def parts_in(module: str, *functions: str) -> dict[str, Part]:
    """Parts named as their functions in ``module`` (``parts_in(M, "timing")``: part ``timing``
    is ``M.timing``), each imported when its first case runs (PartAt)."""
    return {function: PartAt(module, function) for function in functions}


class UnknownPart(ValueError):
    """A case whose part its experiment does not measure (a hand-edited job, a newer planner)."""


def run_part(case: Case, parts: Mapping[str, Part], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
    """The one dispatch every experiment uses: ``parts`` maps each part to its function."""
    measure = parts.get(case.part)
    if measure is None:
        known = ", ".join(repr(name) for name in parts)
        raise UnknownPart(f"{case.experiment}: unknown part {case.part!r} (known parts: {known})")
    return tuple(measure(dict(case.params), context))


class PartsExperiment:
    """An experiment that measures each case through its ``parts`` (part name → function)."""

    name: str
    parts: Mapping[str, Part]

    def run_case(self, case: dict[str, Any], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
        return run_part(Case(self.name, case), self.parts, context)


@dataclass
class ExperimentContext:
    """What a case may use: the trained model, its corpus, the harness, the device, a seed."""

    model: CharGPT
    model_record: Any
    corpus: Corpus
    harness: Harness
    device: str
    seed: int
    # Measurements this run already made for an experiment (RunMeasurements.of): how a summary
    # case (a fit over lengths, the speculative choice) sees earlier cases, also after a resume.
    earlier: Callable[[str], list[RecordedMeasurement]] = field(default=lambda experiment: [])
    # Train (or reuse from the store) another model on the same corpus, e.g. a small draft;
    # arguments: model config, train config, and optionally a teacher to distil from.
    train_model: Callable[..., CharGPT] | None = None
    # This machine's measured roof (runner.cost.machine_profile) and its latest stored per-pass
    # overhead per impl: what runner.experiments.parts.roofline_placement places each timed case
    # with (none: nothing placed).
    roof: dict[str, Any] | None = None
    overheads: dict[str, float] = field(default_factory=dict)
    # The same fits' figures per impl by metric (``seconds_per_mult``, ``max_fit_error``: what
    # prices an eager impl's steps, and whether it may; store.profiles.overhead_fits).
    overhead_fits: dict[str, dict[str, float]] = field(default_factory=dict)

    def prompt(self, chars: int = 1) -> list[int]:
        """The corpus' first ``chars`` characters (tokens, for an hf model's tokenizer): the
        prompt every generation starts from."""
        return self.corpus.prompt(chars)


class RunMeasurements:
    """The run's measurements, kept in memory as its cases are measured: what a summary case
    reads, so it is computed from the cases this process just produced, not read back from the
    store. A resumed run starts from the cases its earlier attempt recorded (``resumed``)."""

    def __init__(self, resumed: dict[str, list[RecordedMeasurement]] | None = None) -> None:
        self._by_experiment: dict[str, list[RecordedMeasurement]] = {
            experiment: list(rows) for experiment, rows in (resumed or {}).items()
        }

    def add(self, experiment: str, params: dict[str, Any], measurements: tuple[MeasurementRecord, ...]) -> None:
        # float(): the value as the store keeps it (a bool measurement reads back as 0.0 or 1.0).
        self._by_experiment.setdefault(experiment, []).extend(
            RecordedMeasurement(params, record.metric, float(record.value), record.unit) for record in measurements
        )

    def of(self, experiment: str) -> list[RecordedMeasurement]:
        return list(self._by_experiment.get(experiment, []))


class Experiment(Protocol):
    name: str
    title: str
    fields: dict[str, Field]

    def plan(self, params: dict[str, Any], model: dict[str, Any]) -> list[dict[str, Any]]:
        """The parameters of every case, in the order they run; ``model`` is the spec's
        model section (d_model, n_layer, n_head, context_length)."""
        ...

    def run_case(self, case: dict[str, Any], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
        """Measure one case."""
        ...


# The A/A case's metrics: one decode paired against itself, what the clock alone does to a
# paired ratio (aa_speedup and its band) and to a ratio of two minima (aa_min_ratio), per impl.
AA_PART = "aa"


def aa_measurements(
    harness: Harness,
    decode: Callable[[], object],
    pairs: int,
    impl: str,
    *models: CharGPT,
    steady: bool = False,
) -> list[MeasurementRecord]:
    """The noise floor of the paired and of the min-of-N method for ``decode`` through ``impl`` on
    this machine now: the same decode on both sides of every pair, timed as the experiment times
    its cases (``steady`` where its decodes keep no state, runner.measure.timing; on the fast impl
    each pair on its own placement of ``models``' weights, placements_between_pairs)."""
    with placements_between_pairs(impl, *models) as between:
        paired = harness.paired(decode, decode, pairs=pairs, between=between, steady=steady)
    return [
        *paired.measurements("aa_speedup"),
        MeasurementRecord("aa_min_ratio", min(paired.baseline_seconds) / min(paired.candidate_seconds), "ratio"),
    ]


@contextlib.contextmanager
def placements_between_pairs(impl: str, *models: CharGPT) -> Iterator[Callable[[], None] | None]:
    """A paired timing's ``between`` on the fast impl: repack ``models`` after every pair
    (runner.decoding.fast.new_placements; the harness also calls it after the last, which no pair
    samples), so that each pair times its own placement of their weights and the run's median
    averages several; the earlier packings are freed when the block ends. None on the other impls.
    A min-of-N timing takes it too (Harness.min_of): each sample its own placement, the minimum
    the best of them, which moves far less from process to process than one placement's time."""
    if impl != "fast":
        yield None
        return
    from runner.decoding.fast import new_placements, release_placements

    try:
        yield lambda: new_placements(*models)
    finally:
        release_placements(*models)
