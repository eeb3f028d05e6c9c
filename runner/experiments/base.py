"""What every experiment shares: the context a case runs in, the shape an experiment has, and
the A/A case's noise-floor measurements. Kept apart from the registry (runner.experiments),
which imports every experiment: an experiment imports from here, so no import comes back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner.corpus import Corpus
from runner.fields import Field
from runner.model import CharGPT
from runner.timing import Harness
from store.records import MeasurementRecord, RecordedMeasurement


@dataclass
class ExperimentContext:
    """What a case may use: the trained model, its corpus, the harness, the device, a seed."""

    model: CharGPT
    model_record: Any
    corpus: Corpus
    harness: Harness
    device: str
    seed: int
    # Measurements this run already recorded for an experiment: how a summary case (e.g. a fit
    # over lengths) sees earlier cases, also after a resume.
    earlier: Callable[[str], list[RecordedMeasurement]] = field(default=lambda experiment: [])
    # Train (or reuse from the store) another model on the same corpus, e.g. a small draft;
    # arguments: model config, train config, and optionally a teacher to distil from.
    train_model: Callable[..., CharGPT] | None = None
    # This machine's measured roof (runner.machine_profile) and its latest stored per-pass
    # overhead per impl: what runner.roofline places each timed case with (none: nothing placed).
    roof: dict[str, Any] | None = None
    overheads: dict[str, float] = field(default_factory=dict)

    def prompt(self, chars: int = 1) -> list[int]:
        """The corpus' first ``chars`` characters (tokens, for an hf model's tokenizer): the
        prompt every generation starts from."""
        return self.corpus.prompt(chars)


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


def aa_measurements(harness: Harness, decode: Callable[[], object], pairs: int) -> list[MeasurementRecord]:
    """The noise floor of the paired and of the min-of-N method for ``decode`` on this machine
    now: the same decode on both sides of every pair."""
    paired = harness.paired(decode, decode, pairs=pairs)
    return [
        *paired.measurements("aa_speedup"),
        MeasurementRecord("aa_min_ratio", min(paired.baseline_seconds) / min(paired.candidate_seconds), "ratio"),
    ]
