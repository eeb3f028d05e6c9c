"""The write-ups' figures beside one run's: one row per figure the five write-ups state
(analysis/data/writeup_figures.toml), with this run's counterpart, its method and a verdict.

How a row is judged, by the figure's kind:
- exact: counts, closed-form ratios, bytes, the context-cost and explainer numbers. They must
  agree within the precision the write-up printed (``tolerance``, absolute).
- sampling: a total-variation distance. Agrees when this run's lies within its own
  sampling-noise bound, as the write-up's did within theirs.
- model: deterministic, but of this run's trained model (acceptance, passes, losses): shown
  beside the write-up's, not judged.
- machine: timed on this machine (speedups, microseconds, slopes): shown with its band.

Each row is classed by what produced its value:
- ``measured``: timed, counted or compared on this run's model and machine;
- ``computed``: a closed form or arithmetic on fixed sizes (the write-ups' model's shape, the
  counter check's, the cache's K/V count over five tokens, the context-cost figures at d = 512,
  every arithmetic ratio, the explainer's real models): the same for any run;
- ``identity``: a ratio that is n² or n by construction, a shape back-solved to match.
The headline agreement counts measured rows only, with the computed and identity rows' counts
beside it. Every figure entry pins the parameters its claim names, so a claim whose case the run
does not hold says "not in this run", never "differs".

Standard library only (no torch), so the dashboard's Seeds page builds the same rows.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from runner.cost import counts, scale
from store.files import write_text_whole
from store.records import RecordedMeasurement

FIGURES_PATH = Path(__file__).parent / "data" / "writeup_figures.toml"

# Figures decodelab computes from its own modules (the write-ups' arithmetic about real models).
COMPUTED_FIGURES: dict[str, Callable[[], float]] = {
    "cache_4096_32_8192_fp16_gib": lambda: counts.cache_bytes(32, 32, 8192, 128, 2) / 2**30,
    "explainer_6_to_15": lambda: scale.attention_work_without_cache(6, 10, 96),
    "explainer_400_100_no_cache_billions": lambda: scale.attention_work_without_cache(400, 100, 96) / 1e9,
    "explainer_400_100_cache_millions": lambda: scale.attention_work_with_cache(400, 100, 96) / 1e6,
    # The named shape whose request of 8,000 tokens comes nearest the claimed 1.2 GB.
    "explainer_per_user_8000_gb": lambda: (
        min((check.bytes for check in scale.check_claim(8000, 1.2e9)), key=lambda size: abs(size - 1.2e9)) / 1e9
    ),
}


class MeasurementSource(Protocol):
    def measurements(self, run_id: int, experiment: str) -> list[RecordedMeasurement]: ...


# What a row's value comes from: only ``MEASURED`` rows can disagree because of the run.
MEASURED, COMPUTED, IDENTITY = "measured", "computed", "identity"
SOURCES = (MEASURED, COMPUTED, IDENTITY)
# Case parts whose every figure is arithmetic on sizes, whatever the run's model: the write-ups'
# model and the counter check at fixed shapes, the K/V count over five tokens on random weights,
# the closed-form counts at the model's shape, the context-cost figures at their own d and n.
COMPUTED_PARTS = frozenset(
    {
        ("kv_cache", "writeup_model"),
        ("kv_cache", "counter_check"),
        ("kv_cache", "recomputation"),
        ("kv_cache", "counts"),
        ("context_cost", "summary"),
        ("context_cost", "table"),
    }
)
# Closed forms recorded beside timed figures in a measured part (kv_timing's timing and width
# cases): the ratio of two multiplication counts at the case's n and width.
CLOSED_FORM_METRICS = frozenset(
    {
        "arithmetic_ratio",
        "arithmetic_ratio_causal",
        "arithmetic_ratio_with_lm_head",
        "arithmetic_ratio_writeup_model",
        "mults_no_cache_with_lm_head",
        "mults_cache_with_lm_head",
    }
)


def source_of(figure: dict[str, Any]) -> str:
    """``figure``'s class: identity where the figures file says so, computed where decodelab's own
    modules or a closed form at fixed sizes produce it, else measured on the run."""
    if figure.get("source") == IDENTITY:
        return IDENTITY
    part = (figure.get("experiment"), figure.get("params", {}).get("part"))
    if "computed" in figure or part in COMPUTED_PARTS or figure.get("metric") in CLOSED_FORM_METRICS:
        return COMPUTED
    return MEASURED


@dataclass(frozen=True)
class Row:
    writeup: str
    claim: str
    writeup_value: float
    run_value: float | None
    band_low: float | None
    band_high: float | None
    kind: str
    method: str
    verdict: str
    source: str = MEASURED


# The page's columns: the verdict beside the two values it judges, the band and the method after
# (a first-time user found the verdict past the right edge, after the long method text).
PAGE_COLUMNS = [
    "writeup",
    "claim",
    "writeup_value",
    "run_value",
    "verdict",
    "band_low",
    "band_high",
    "kind",
    "source",
    "method",
]


class RunFigures:
    """One run's recorded measurements, looked up by experiment, metric and case params."""

    def __init__(self, source: MeasurementSource, run_id: int) -> None:
        self.source, self.run_id = source, run_id
        # Read once per experiment a figure names (the figures file says which), when first asked.
        self.rows: dict[str, list[RecordedMeasurement]] = {}

    def value(self, experiment: str, metric: str, params: dict[str, Any]) -> float | None:
        if experiment not in self.rows:
            self.rows[experiment] = self.source.measurements(self.run_id, experiment)
        for row in self.rows[experiment]:
            if row.metric == metric and all(row.params.get(key) == value for key, value in params.items()):
                return row.value
        return None


def load_figures(path: Path = FIGURES_PATH) -> list[dict[str, Any]]:
    return list(tomllib.loads(path.read_text(encoding="utf-8"))["figure"])


def run_value(figure: dict[str, Any], run: RunFigures, metric: str | None = None) -> float | None:
    """This run's counterpart of ``figure`` (or of its ``metric`` at the same case)."""
    if "computed" in figure and metric is None:
        return COMPUTED_FIGURES[figure["computed"]]()
    value = run.value(figure["experiment"], metric or figure["metric"], figure.get("params", {}))
    if value is None or metric is not None:
        return value
    return value * figure.get("scale", 1.0) + figure.get("offset", 0)


def judge(figure: dict[str, Any], value: float | None, run: RunFigures) -> str:
    if value is None:
        return "not in this run (run the seed preset)"
    if figure["kind"] == "exact":
        # Half a unit of the last printed digit, inclusive (0.375 MiB prints as 0.38).
        tolerance = figure.get("tolerance", 0.0) * (1 + 1e-9)
        return "agrees" if abs(value - figure["value"]) <= tolerance else "differs"
    if figure["kind"] == "sampling":
        bound = run_value(figure, run, figure["bound"])
        if bound is None:
            return "no noise bound recorded"
        return "within sampling noise" if value <= bound else "outside sampling noise"
    return "model-dependent" if figure["kind"] == "model" else "machine-dependent"


def writeup_rows(source: MeasurementSource, run_id: int) -> list[Row]:
    run = RunFigures(source, run_id)
    rows = []
    for figure in load_figures():
        value = run_value(figure, run)
        low, high = (run_value(figure, run, name) for name in figure["band"]) if "band" in figure else (None, None)
        rows.append(
            Row(
                figure["writeup"],
                figure["claim"],
                figure["value"],
                value,
                low,
                high,
                figure["kind"],
                figure["method"],
                judge(figure, value, run),
                source_of(figure),
            )
        )
    return rows


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    if float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.4g}"


def summary(rows: Sequence[Row]) -> str:
    """The agreement count over the exact figures measured on this run (its cases held); the
    computed and identity ones agree for any run and are counted beside it, never in it."""
    exact = [row for row in rows if row.kind == "exact" and row.run_value is not None]

    def agreeing(source: str) -> tuple[int, int]:
        of_source = [row for row in exact if row.source == source]
        return sum(row.verdict == "agrees" for row in of_source), len(of_source)

    (measured_agree, measured), (computed_agree, computed), (identity_agree, identities) = map(agreeing, SOURCES)
    missing = sum(row.run_value is None for row in rows)
    return (
        f"{measured_agree} of {measured} exact figures measured on this run agree "
        f"(beside them, not counted: {computed_agree} of {computed} computed, closed forms and arithmetic on "
        f"fixed sizes, and {identity_agree} of {identities} identities agree, the same for any run); "
        f"{missing} of {len(rows)} figures are not in this run."
    )


def markdown(rows: Sequence[Row], run_id: int) -> str:
    lines = [
        f"# The write-ups' figures beside run {run_id}",
        "",
        "Exact figures must agree within the write-up's printed precision; sampled ones within their noise "
        "bound; model and machine figures are shown beside the write-up's (another model, another machine). "
        "Source: measured (timed, counted or compared on this run's model), computed (a closed form or "
        "arithmetic on fixed sizes: the same for any run) or identity (true by construction); the count below "
        "the table agrees over measured rows only.",
        "",
        "| write-up | claim | write-up | this run | verdict | band | kind | source | method |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        band = f"{_number(row.band_low)}–{_number(row.band_high)}" if row.band_low is not None else ""
        lines.append(
            f"| {row.writeup} | {row.claim} | {_number(row.writeup_value)} | {_number(row.run_value)} | "
            f"{row.verdict} | {band} | {row.kind} | {row.source} | {row.method} |"
        )
    return "\n".join([*lines, "", summary(rows)]) + "\n"


def write_writeup_report(rows: Sequence[Row], run_id: int, out: Path) -> list[Path]:
    """seed_report.json (one object per row) and seed_report.md in ``out``."""
    json_path, markdown_path = out / "seed_report.json", out / "seed_report.md"
    json_text, markdown_text = json.dumps([asdict(row) for row in rows], indent=1), markdown(rows, run_id)
    write_text_whole(json_path, json_text)
    write_text_whole(markdown_path, markdown_text)
    return [json_path, markdown_path]
