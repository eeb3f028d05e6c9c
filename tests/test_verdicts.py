"""Verdicts that know their own error rate: no timed verdict without a floor of its own kind,
drift between runs never made into a regression, the review's p-values adjusted together, a
between-run floor that cannot collapse on three runs, the CI gate through the real CLI, the
calibration on a store of five small runs, and the catalogue and package boundaries they use."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis import review
from runner import metrics
from store import frames
from store.store import Store
from tests.conftest import ROOT, copy_store, run_decodelab
from tests.review_helpers import reviewed_pair, slowed_copy

PAIRS = 7


def case_rows(
    run_id: int, cases: list[tuple[str, dict[str, Any], list[float]]], aa: dict[tuple[str, str], float]
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """One run: per (experiment, params, ratios) a paired speedup with its samples, and per
    (experiment, impl) an A/A case whose band is ±``aa[...]``."""
    records, samples = [], []
    for index, (experiment, params, ratios) in enumerate(cases):
        metric = "speedup_median" if experiment == "speculative" else "measured_speedup"
        ident = run_id * 1000 + index
        records.append(row(run_id, experiment, params, metric, float(pd.Series(ratios).median()), ident))
        for pair, ratio in enumerate(ratios):
            samples += [
                {"measurement_id": ident, "pair_index": pair, "side": "A", "seconds": 1.0},
                {"measurement_id": ident, "pair_index": pair, "side": "B", "seconds": 1.0 / ratio},
            ]
    for index, ((experiment, impl), band) in enumerate(aa.items()):
        low, high = ("speedup_min", "speedup_max") if experiment == "speculative" else metrics.band_of("aa_speedup")
        params = {"part": "aa", "impl": impl}
        ident = run_id * 1000 + 500 + 2 * index
        records.append(row(run_id, experiment, params, low, 1 - band, ident))
        records.append(row(run_id, experiment, params, high, 1 + band, ident + 1))
    return pd.DataFrame(records), samples


def row(run_id: int, experiment: str, params: dict[str, Any], metric: str, value: float, ident: int) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "experiment": experiment,
        "case_id": ident,
        "params": params,
        "metric": metric,
        "value": value,
        "unit": "ratio",
        "measurement_id": ident,
    }


def steady(center: float, seed: int) -> list[float]:
    """PAIRS ratios within ±0.1% of ``center`` (separated from any center 1% away)."""
    return [center * (1 + 0.001 * math.sin(seed * 7 + pair)) for pair in range(PAIRS)]


CASES = [
    ("speculative", {"part": "speculative", "draft": draft, "k": k, "impl": impl})
    for draft in ("bigram", "ngram")
    for k in (2, 4)
    for impl in ("static", "fast")
] + [("kv_cache", {"part": "timing", "n": n, "impl": "fast"}) for n in (64, 128)]
AA = {("speculative", "static"): 0.01, ("speculative", "fast"): 0.01, ("kv_cache", "fast"): 0.01}


def review_of(run_factor: float, aa: dict[tuple[str, str], float] = AA, **options: Any) -> pd.DataFrame:
    """Every case of CASES in a baseline at ratio 1.5 and in a run at 1.5 · ``run_factor``."""
    baseline, baseline_samples = case_rows(1, [(e, p, steady(1.5, i)) for i, (e, p) in enumerate(CASES)], aa)
    run, run_samples = case_rows(2, [(e, p, steady(1.5 * run_factor, i + 50)) for i, (e, p) in enumerate(CASES)], aa)
    return review.compare(run, baseline, pd.DataFrame(run_samples + baseline_samples), **options)


def test_two_runs_of_the_same_code_drifting_by_a_few_percent_give_no_regression() -> None:
    """Every pair separated (p = 0.0006) and beyond the 1% A/A floors, but 4% is what a shared
    machine drifts between two runs: without earlier runs to learn the drift, `unknown drift`."""
    table = review_of(0.96)
    timed = table[table["kind"] == "timed"]
    assert len(timed) == len(CASES) and (timed["p_value"] < review.ALPHA).all()
    assert set(timed["verdict"]) == {"unknown drift"}, timed[["verdict", "point", "change"]]
    assert not table["verdict"].isin(["regressed", "improved"]).any()


def test_a_copy_slowed_by_25_percent_is_flagged_with_raw_and_adjusted_p() -> None:
    table = review_of(1 / 1.25)
    timed = table[table["kind"] == "timed"]
    assert set(timed["verdict"]) == {"regressed"}
    assert (timed["adjusted_p"] >= timed["p_value"]).all() and (timed["adjusted_p"] < review.ALPHA).all()
    assert all("adjusted over" in why and "noise floor ±1.0%" in why for why in timed["why"])


def test_a_case_without_a_floor_of_its_own_says_no_floor_and_shows_the_shift() -> None:
    """The KV cache's timings have no A/A case here: the speculative one's floor is not borrowed."""
    without_kv = {key: value for key, value in AA.items() if key[0] != "kv_cache"}
    table = review_of(1 / 1.25, aa=without_kv)
    kv = table[table["experiment"] == "kv_cache"]
    assert set(kv["verdict"]) == {"no floor"} and kv["change"].round(3).eq(-0.2).all()
    assert all("no A/A case of kv_cache · fast" in why for why in kv["why"])
    assert set(table[table["experiment"] == "speculative"]["verdict"]) == {"regressed"}


def test_the_timed_p_values_of_a_review_are_corrected_together() -> None:
    """One case of twenty (the quick preset's speculative grid) separated (p = 0.0006) by 20%:
    alone it would be regressed; among twenty tests whose others show nothing, its adjusted p
    (0.0006 · 20) is not below 0.01."""
    grid = [
        ("speculative", {"part": "speculative", "draft": draft, "k": k, "impl": impl})
        for draft in ("bigram", "ngram", "int8", "small", "fast_int8")
        for k in (2, 4)
        for impl in ("static", "fast")
    ]
    baseline, baseline_samples = case_rows(1, [(e, p, steady(1.5, i)) for i, (e, p) in enumerate(grid)], AA)
    # The others hold the baseline's values in another order: nothing to see.
    mixed = [(e, p, list(reversed(steady(1.5, i))) if i else steady(1.2, 99)) for i, (e, p) in enumerate(grid)]
    run, run_samples = case_rows(2, mixed, AA)
    table = review.compare(run, baseline, pd.DataFrame(run_samples + baseline_samples), drift=0.0)
    moved = table[table["change"].abs() > 0.1]
    assert len(moved) == 1
    assert moved["p_value"].iloc[0] < review.ALPHA <= moved["adjusted_p"].iloc[0]
    assert moved["verdict"].iloc[0] == "within noise"


def test_the_between_run_floor_cannot_collapse_on_three_runs() -> None:
    """Earlier values 1.00, 1.01, 1.30: MAD alone says ±4.4% though the runs spread 26%."""
    params = {"part": "speculative", "draft": "bigram", "k": 4, "impl": "static"}
    history = pd.DataFrame(
        [
            row(run_id, "speculative", params, "speedup_median", value, run_id)
            for run_id, value in enumerate((1.0, 1.01, 1.3))
        ]
    ).assign(started_at=pd.date_range("2026-01-01", periods=3, freq="D"))
    [floor] = review.between_run_floors(history).values()
    assert floor > math.log(1.3 / 1.01)


def pivot_statistic(samples: pd.DataFrame) -> tuple[list[float], str]:
    """review.sample_statistic as it was written first, with a pandas pivot table: the reference."""
    if samples.empty:
        return [], "paired"
    sides = samples.pivot_table(index="pair_index", columns="side", values="seconds", aggfunc="first")
    if "B" in sides.columns and "A" in sides.columns:
        paired = sides.dropna(subset=["A", "B"])
        return [float(a / b) for a, b in zip(paired["A"], paired["B"], strict=True)], "paired"
    return [float(value) for value in samples["seconds"]], "min"


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [(0, "A", 2.0), (0, "B", 1.0), (1, "A", 3.0), (1, "B", 2.0)],
        [(2, "B", 4.0), (0, "A", 1.0), (2, "A", 2.0), (0, "B", 8.0), (1, "A", 5.0)],  # unsorted, one A alone
        [(0, "A", 1.0), (0, "A", 9.0), (0, "B", 2.0), (0, "B", 7.0)],  # repeated: the first of each side
        [(0, "A", math.nan), (0, "A", 3.0), (0, "B", 1.5), (1, "B", math.nan), (1, "A", 1.0)],  # missing seconds
        [(0, "A", 0.5), (1, "A", 0.25), (2, "A", 0.75)],  # min-of-N: side A only
        [(0, "A", 0.5), (1, "B", math.nan)],  # a side with nothing but missing seconds
    ],
)
def test_the_sample_statistic_pairs_sides_as_a_pivot_table_does(rows: list[tuple[int, str, float]]) -> None:
    samples = pd.DataFrame(rows, columns=["pair_index", "side", "seconds"])
    (values, method), (expected, expected_method) = review.sample_statistic(samples), pivot_statistic(samples)
    # Series.equals counts a missing value equal to a missing value in the same place.
    assert method == expected_method and pd.Series(values, dtype=float).equals(pd.Series(expected, dtype=float))


@pytest.mark.slow
def test_the_ci_gate_exits_1_on_a_listed_verdict_0_otherwise_2_on_bad_input(
    filled_store_url: str, tmp_path: Path
) -> None:
    url = copy_store(filled_store_url, tmp_path / "gate.db")
    baseline, slowed = reviewed_pair(Store(url))
    common = ("report", "run", "--run", str(slowed), "--db", url)
    gated = run_decodelab(*common, "--out", "-", "--format", "md", "--fail-on", "regressed,changed", cwd=tmp_path)
    assert gated.returncode == 1, gated.stderr
    assert gated.stdout.startswith(f"# decodelab: run {slowed} against baseline {baseline}"), "the comment on stdout"
    assert "\n| [regressed](#verdict-regressed) |" in gated.stdout, "each verdict word links to its meaning"
    assert "--fail-on:" in gated.stderr and "regressed" in gated.stderr
    passed = run_decodelab(*common, "--out", "r.md", "--fail-on", "changed", cwd=tmp_path)
    assert passed.returncode == 0 and (tmp_path / "r.md").exists(), passed.stderr  # an identical copy: unchanged
    for args, fragment in (
        (["--out", "x.md", "--fail-on", "slower"], "--fail-on: 'slower'"),
        (["--out", "-"], "--out: - (stdout) needs --format md"),
    ):
        result = run_decodelab(*common, *args, cwd=tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and fragment in lines[0], (args, result.stderr)
    assert not (tmp_path / "x.md").exists()


@pytest.mark.slow
def test_the_calibration_measures_false_alerts_and_recall_on_five_small_runs(
    filled_store_url: str, tmp_path: Path
) -> None:
    url = copy_store(filled_store_url, tmp_path / "calibration.db")
    store = Store(url)
    store.annotations.add_tag(1, "suspect")  # the session's run as it was timed: its copies are the runs
    copies = [slowed_copy(store, 1, slower_by=1.0, hours_later=hours, steady=True) for hours in (1, 2, 3, 4, 5)]
    preset = str(frames.runs(store).set_index("run_id").loc[copies[0], "preset"])
    store.close()
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "review_calibration.py"), "--db", url, "--preset", preset],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    figures = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line and " " not in line)
    assert figures["review_pairs"] == "4" and int(figures["review_timed_verdicts"]) > 0
    assert float(figures["review_false_alert_rate"]) == 0 and float(figures["review_reviews_with_false_alert"]) == 0
    recall = [float(figures[f"review_recall_at_{size}pct"]) for size in (5, 10, 25, 50)]
    assert recall == sorted(recall) and recall[2] == recall[3] == 1.0, recall
    assert "over 4 A/A pair(s)" in result.stdout.splitlines()[-1]
    refused = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "review_calibration.py"), "--db", url, "--preset", "seed"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert refused.returncode == 2 and "--preset: no two consecutive done seed runs" in refused.stderr


def test_import_analysis_pulls_in_neither_streamlit_nor_the_dashboard() -> None:
    code = (
        "import sys, analysis, analysis.review, analysis.statistics, analysis.comparison, analysis.calibration\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('streamlit', 'dashboard')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0 and json.loads(result.stdout.replace("'", '"')) == [], result.stdout + result.stderr


def test_the_command_line_modules_import_neither_streamlit_nor_the_dashboard() -> None:
    """The CLI's reports come from analysis/ (issue 28): every runner module that a command
    loads, and the report builders they call, leave the dashboard package and Streamlit out."""
    code = (
        "import sys, importlib, pkgutil, runner\n"
        "for module in pkgutil.iter_modules(runner.__path__):\n"
        "    if module.name.startswith('cli'): importlib.import_module('runner.' + module.name)\n"
        "import analysis.report, analysis.machines_report, analysis.roofline_report\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('streamlit', 'dashboard')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0 and json.loads(result.stdout.replace("'", '"')) == [], result.stdout + result.stderr
    # The commands import their helpers inside the function bodies: read every import statement too.
    found = []
    for path in sorted([*(ROOT / "runner").rglob("*.py"), *(ROOT / "analysis").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [
                f"{path.relative_to(ROOT)}: {name}"
                for name in names
                if name.split(".")[0] in ("dashboard", "streamlit")
            ]
    assert not found, found


def test_every_metric_a_run_records_is_in_the_catalogue(filled_store_url: str) -> None:
    store = Store(filled_store_url)
    recorded = frames.export_rows(store)
    store.close()
    unknown = sorted({name for name in recorded["metric"] if metrics.lookup(name) is None})
    assert not unknown, f"record these in runner/metrics.py: {unknown}"
    units = {(name, unit) for name, unit in zip(recorded["metric"], recorded["unit"], strict=True)}
    wrong = sorted((name, unit) for name, unit in units if metrics.lookup(name).unit != unit)  # type: ignore[union-attr]
    assert not wrong, f"recorded under another unit than the catalogue's: {wrong}"
    assert metrics.lookup("no_such_metric") is None and metrics.lookup("accepted_length_3") is not None
    assert metrics.lookup("predicted_speedup") == metrics.lookup("writeup_formula_speedup"), "an old name"


@pytest.mark.parametrize("name", ["max_logit_diff", "val_loss", "tvd", "cache_bytes", "speedup_median"])
def test_the_catalogue_classes_each_metric_by_what_a_second_machine_may_do_to_it(name: str) -> None:
    expected = {
        "max_logit_diff": "numerical",
        "val_loss": "numerical",
        "tvd": "sampled",
        "cache_bytes": "exact",
        "speedup_median": "timed",
    }
    assert metrics.lookup(name).kind == expected[name]  # type: ignore[union-attr]


def test_a_custom_launch_is_labelled_from_its_spec_and_set_only_beside_runs_of_that_spec() -> None:
    from analysis import runs as runs_module
    from runner.spec.sweeps import load_preset

    quick = load_preset("quick").raw
    kv_only = {**quick, "experiments": {"kv_cache": quick["experiments"]["kv_cache"]}}
    lengths = {**quick, "experiments": {**quick["experiments"], "kv_cache": {**kv_only["experiments"]["kv_cache"]}}}
    lengths["experiments"]["kv_cache"]["lengths"] = [64]
    assert runs_module.sweep_label("quick", quick) == "quick"
    assert runs_module.sweep_label(None, kv_only) == "quick, kv_cache only"
    assert runs_module.sweep_label(None, lengths) == "quick, changed lengths"
    assert runs_module.sweep_label(None, {**kv_only, "launched_from_dashboard": {"data_dir": "x"}}) == (
        "quick, kv_cache only"
    )
    assert runs_module.sweep_label(None, {"name": "tiny", "experiments": {}}) == "custom"
    runs = pd.DataFrame(
        [
            {"run_id": run_id, "started_at": f"2026-01-0{run_id}", "preset": preset, "spec": spec}
            | {"machine": "laptop", "machine_fingerprint": "f", "status": "done", "tags": ""}
            for run_id, preset, spec in [
                (1, "quick", quick),
                (2, None, kv_only),
                (3, None, lengths),
                (4, None, kv_only),
                (5, "quick", quick),
            ]
        ]
    )
    assert review.default_baseline(runs, 5) == 1, "a kv_cache-only launch never stands for the quick preset"
    assert review.default_baseline(runs, 4) == 2, "a custom run is set beside the very same spec"
    assert review.default_baseline(runs, 3) is None, "changed lengths: no earlier run of that spec"
    from analysis import machines

    assert machines.presets_by_machines(runs) == ["quick", "quick, changed lengths", "quick, kv_cache only"]
    assert machines.candidate_runs(runs, "quick")["run_id"].tolist() == [5, 1]


def test_a_review_of_two_runs_that_share_no_case_says_so_in_one_line() -> None:
    """A kv_cache-only launch against a speculative-only baseline: one line, not a table of zeros."""
    kv = [(experiment, params, steady(2.0, index)) for index, (experiment, params) in enumerate(CASES[-2:])]
    speculative = [(experiment, params, steady(1.5, index)) for index, (experiment, params) in enumerate(CASES[:3])]
    run, run_samples = case_rows(2, kv, {})
    baseline, baseline_samples = case_rows(1, speculative, {})
    table = review.compare(run, baseline, pd.DataFrame(run_samples + baseline_samples))
    assert review.shares_no_case(table)
    assert review.summary_line(table) == (
        "the two runs share no case (2 figures only in the run, 3 only in the baseline): nothing to compare"
    )
    assert not review.shares_no_case(review_of(1.0)), "runs of one sweep share their cases"
