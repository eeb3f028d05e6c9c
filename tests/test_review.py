"""The Review page's rules on constructed runs: a clear regression, pure noise, a shift inside the
drift allowance, a changed deterministic metric, three pairs and one; which run is the baseline;
tags and notes in the store (both backends), through the CLI, and across export and import;
the report as Markdown and as HTML that names no network resource."""

from __future__ import annotations

import html
import json
import math
import random
import re
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis import report, report_render, review, review_lines
from analysis.statistics import robust_sigma
from store import frames
from store.errors import StoreError
from store.store import Store
from tests.conftest import copy_store, run_decodelab
from tests.review_helpers import reviewed_pair, slowed_copy

PAIRED = {"part": "speculative", "draft": "bigram", "k": 4, "impl": "static"}
AA = {"part": "aa", "draft": "none", "k": 0, "impl": "static"}


def measurements(run_id: int, rows: list[tuple[dict[str, Any], str, float, str]]) -> pd.DataFrame:
    """A frames.measurements-shaped frame: (params, metric, value, unit) per row, one case per params."""
    cases: dict[str, int] = {}
    records = []
    for index, (params, metric, value, unit) in enumerate(rows):
        case_id = cases.setdefault(json.dumps(params, sort_keys=True), len(cases) + run_id * 1000)
        records.append(
            {
                "run_id": run_id,
                "experiment": "speculative",
                "case_id": case_id,
                "params": params,
                "metric": metric,
                "value": value,
                "unit": unit,
                "measurement_id": run_id * 1000 + index,
            }
        )
    return pd.DataFrame(records)


def paired_samples(measurement_id: int, ratios: list[float], baseline_seconds: float = 1.0) -> list[dict[str, Any]]:
    """Pairs whose ratio A/B is each of ``ratios``."""
    rows = []
    for pair, ratio in enumerate(ratios):
        rows.append({"measurement_id": measurement_id, "pair_index": pair, "side": "A", "seconds": baseline_seconds})
        rows.append(
            {"measurement_id": measurement_id, "pair_index": pair, "side": "B", "seconds": baseline_seconds / ratio}
        )
    return rows


def two_runs(
    run_ratios: list[float],
    baseline_ratios: list[float],
    *,
    aa_band: tuple[float, float] = (0.97, 1.03),
    acceptance: tuple[float, float] = (0.6, 0.6),
    drift: float | None = None,
) -> pd.DataFrame:
    """Compare a run and a baseline holding one paired speedup, one A/A case and one seeded count."""
    frames_by_run, samples = [], []
    for run_id, ratios, accepted in ((2, run_ratios, acceptance[0]), (1, baseline_ratios, acceptance[1])):
        frame = measurements(
            run_id,
            [
                (PAIRED, "speedup_median", float(pd.Series(ratios).median()), "ratio"),
                (PAIRED, "acceptance_rate", accepted, "ratio"),
                (AA, "speedup_min", aa_band[0], "ratio"),
                (AA, "speedup_max", aa_band[1], "ratio"),
            ],
        )
        frames_by_run.append(frame)
        samples += paired_samples(int(frame["measurement_id"].iloc[0]), ratios)
    return review.verdict_table(frames_by_run[0], frames_by_run[1], pd.DataFrame(samples), drift=drift)


def verdict_of(table: pd.DataFrame, metric: str) -> dict[Any, Any]:
    return table[table["metric"] == metric].iloc[0].to_dict()


def noisy(center: float, count: int, seed: int, spread: float = 0.02) -> list[float]:
    generator = random.Random(seed)
    return [center * (1 + generator.uniform(-spread, spread)) for _ in range(count)]


def test_a_clear_regression_is_regressed_and_listed_first() -> None:
    table = two_runs(noisy(1.2, 7, seed=1), noisy(1.6, 7, seed=2))
    row = verdict_of(table, "speedup_median")
    assert row["verdict"] == "regressed" and table.iloc[0]["metric"] == "speedup_median"
    assert row["p_value"] < review.ALPHA and row["change"] == pytest.approx(1.2 / 1.6 - 1, abs=0.03)
    assert verdict_of(table, "acceptance_rate")["verdict"] == "unchanged"


def test_the_same_clear_shift_upwards_is_improved() -> None:
    assert verdict_of(two_runs(noisy(1.6, 7, seed=3), noisy(1.2, 7, seed=4)), "speedup_median")["verdict"] == "improved"


def test_pure_noise_is_within_noise() -> None:
    table = two_runs(noisy(1.3, 7, seed=5, spread=0.1), noisy(1.3, 7, seed=6, spread=0.1))
    row = verdict_of(table, "speedup_median")
    assert row["verdict"] == "within noise" and row["p_value"] >= review.ALPHA


def test_a_significant_shift_within_the_drift_allowance_is_unknown_drift_not_a_regression() -> None:
    """Separated samples (p far below 0.01) but a 5% shift, and no earlier runs to say how far the
    machine moves between runs: within the default ±15% allowance it is `unknown drift`. The A/A
    band, however wide, is no longer a threshold: the t test measures the row's noise itself."""
    run, baseline = [1.00 + 0.001 * index for index in range(7)], [1.05 + 0.001 * index for index in range(7)]
    wide = verdict_of(two_runs(run, baseline, aa_band=(0.7, 1.3)), "speedup_median")
    assert wide["p_value"] < review.ALPHA and wide["verdict"] == "unknown drift"
    assert "drift allowance ±15.0%" in wide["why"] and wide["detectable"] == pytest.approx(0.15)
    # On a machine whose runs are known not to drift apart (a drift figure of 0).
    steady = two_runs(run, baseline, aa_band=(0.7, 1.3), drift=0.0)
    assert verdict_of(steady, "speedup_median")["verdict"] == "regressed"


def test_a_changed_deterministic_metric_is_changed() -> None:
    table = two_runs(noisy(1.3, 7, seed=7), noisy(1.3, 7, seed=8), acceptance=(0.55, 0.6))
    row = verdict_of(table, "acceptance_rate")
    assert row["verdict"] == "changed" and row["kind"] == "deterministic"
    assert row["change"] == pytest.approx(0.55 / 0.6 - 1)


def test_three_pairs_are_tested_and_one_pair_says_too_few_samples() -> None:
    """The quick preset's KV-cache and quantization timings have three pairs: a U test could
    never reach 0.01 there (smallest p 0.1), the t test on log ratios can. One pair has no variance."""
    assert review.smallest_p_value(3, 3) == pytest.approx(0.1)
    row = verdict_of(two_runs([1.0, 1.01, 1.02], [2.0, 2.01, 2.02]), "speedup_median")
    assert row["verdict"] == "regressed" and row["p_value"] < review.ALPHA and row["detectable"] < 0.5
    lone = verdict_of(two_runs([1.0], [2.0, 2.01, 2.02]), "speedup_median")
    assert lone["verdict"] == "too few samples" and lone["p_value"] is None
    assert lone["why"] == "1 against 3 samples: the t test needs 2 a side"


def test_a_min_of_n_time_is_judged_on_its_seconds_lower_being_better() -> None:
    def timed(run_id: int, seconds: list[float]) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
        params = {"new_tokens": 64}
        # Per token, as the experiment stores it; the samples time a whole 64-token generation.
        frame = measurements(run_id, [(params, "seconds_per_token", min(seconds) / 64, "seconds")])
        frame["experiment"] = "training_summary"
        ident = int(frame["measurement_id"].iloc[0])
        return frame, [
            {"measurement_id": ident, "pair_index": index, "side": "A", "seconds": value}
            for index, value in enumerate(seconds)
        ]

    slower_samples_seconds = noisy(2.0, 7, seed=9)
    slower, slower_samples = timed(2, slower_samples_seconds)
    faster, faster_samples = timed(1, noisy(1.0, 7, seed=10))
    samples = pd.DataFrame(slower_samples + faster_samples)
    # Judged against the case's history (three earlier runs 1% apart: a floor far below 2×).
    key = ("training_summary", "seconds_per_token", review.params_key({"new_tokens": 64}))
    history = {key: review.between_run_multiplier(3) * 0.01}
    table = review.verdict_table(slower, faster, samples, between_runs=history)
    row = verdict_of(table, "seconds_per_token")
    assert row["verdict"] == "regressed"
    # The values beside the change are the samples' geometric means, in the headline's unit (per token).
    slower_mean = math.exp(statistics.fmean(math.log(value) for value in slower_samples_seconds)) / 64
    assert row["run"] == pytest.approx(slower_mean) and row["run"] / row["baseline"] - 1 == pytest.approx(row["change"])
    table = review.verdict_table(faster, slower, samples, between_runs=history)
    assert verdict_of(table, "seconds_per_token")["verdict"] == "improved"
    # Without that history the samples, taken back to back in one run, say nothing of how far the
    # machine moves between runs: even a doubling is at most unknown drift, and the row says why.
    blind = verdict_of(review.verdict_table(slower, faster, samples), "seconds_per_token")
    assert blind["verdict"] == "unknown drift" and math.isinf(blind["detectable"])
    assert review.NO_HISTORY in blind["why"] and "would have seen no change" in blind["why"]
    assert review_lines.verdict_label(blind) == "unknown drift (would have seen no change)"
    # Waiting for history is said on its own line, not as underpowered: more pairs would not help.
    blind_table = review.verdict_table(slower, faster, samples)
    assert review_lines.power_line(blind_table) is None and review_lines.underpowered_rows(blind_table).empty
    assert (waiting := review_lines.waiting_line(blind_table)) and waiting.startswith(
        "1 min-of-N time waits for history"
    )
    assert review_lines.waiting_line(table) is None
    # An A/B session's rounds judged against a run of another session are absolute times too.
    assert math.isinf(review.row_floor(None, review.DEFAULT_DRIFT, "min, per round").drift)
    assert review.row_floor(None, review.DEFAULT_DRIFT, "paired, per round").drift == review.DEFAULT_DRIFT
    # An A/B session (no drift possible between its runs: drift 0) judges it on its samples.
    assert verdict_of(review.verdict_table(slower, faster, samples, drift=0.0), "seconds_per_token")["verdict"] == (
        "regressed"
    )


def test_the_between_run_floor_is_crossed_by_an_unchanged_case_with_chance_alpha() -> None:
    """The floor is t(1 - ALPHA/2) on n - 1 degrees of freedom times sqrt(2) run-to-run standard
    deviations: wide on three earlier runs, narrowing as they accumulate; simulated A/A moves
    (normal run-to-run spread) cross it about ALPHA of the time, where a fixed 3 crossed 11%."""
    multipliers = [review.between_run_multiplier(runs) for runs in (3, 5, 10, 20)]
    assert multipliers == sorted(multipliers, reverse=True)
    assert multipliers[0] == pytest.approx(9.925 * math.sqrt(2), rel=1e-3)
    assert math.isinf(review.between_run_multiplier(1))
    generator = random.Random(42)
    for runs in (2, 3, 8):
        crossed = 0
        for _ in range(4000):
            earlier = [generator.gauss(0.0, 0.1) for _ in range(runs)]
            floor = review.between_run_multiplier(runs) * robust_sigma(earlier)
            crossed += abs(generator.gauss(0.0, 0.1) - earlier[-1]) > floor
        assert crossed / 4000 <= 2 * review.ALPHA


def runs_frame(rows: list[tuple[int, str, str, str, str, str]]) -> pd.DataFrame:
    """(run_id, started, preset, fingerprint, status, tags) per run."""
    return pd.DataFrame(
        [
            {
                "run_id": run_id,
                "started_at": pd.Timestamp(started),
                "preset": preset,
                "machine_fingerprint": fingerprint,
                "status": status,
                "tags": tags,
            }
            for run_id, started, preset, fingerprint, status, tags in rows
        ]
    )


def test_the_default_baseline_is_the_pinned_or_previous_done_run_of_the_preset_on_the_machine() -> None:
    runs = runs_frame(
        [
            (1, "2026-01-01", "quick", "laptop", "done", ""),
            (2, "2026-01-02", "quick", "laptop", "done", "baseline"),
            (3, "2026-01-03", "quick", "laptop", "done", ""),
            (4, "2026-01-04", "quick", "laptop", "failed", ""),
            (5, "2026-01-05", "seed", "laptop", "done", ""),
            (6, "2026-01-06", "quick", "server", "done", ""),
            (7, "2026-01-07", "quick", "laptop", "done", "suspect"),
            (8, "2026-01-08", "quick", "laptop", "done", ""),
        ]
    )
    assert review.default_baseline(runs, 8) == 2, "the pinned run wins over the previous one"
    assert review.default_baseline(runs, 2) == 1
    assert review.default_baseline(runs, 1) is None
    assert review.default_baseline(runs, 6) is None, "another machine's runs are not its baseline"
    unpinned = runs.assign(tags=runs["tags"].replace("baseline", ""))
    assert review.default_baseline(unpinned, 8) == 3, "previous done run, the suspect one left out"


def test_tags_and_notes_are_stored_refused_when_bad_and_listed_with_the_runs(
    filled_store_url: str, store_url: str
) -> None:
    from store.transfer import export_json_rows, import_rows

    source = Store(filled_store_url)
    store = Store(store_url)
    [(_, run_id, _)] = import_rows(store, export_json_rows(source, 1))
    assert store.annotations.add_tag(run_id, "suspect") and not store.annotations.add_tag(run_id, "suspect")
    assert store.annotations.add_tag(run_id, "reviewed")
    store.annotations.set_note(run_id, "  the laptop was on battery  ")
    for bad in ("Suspect", "", "a" * 41, "two words"):
        with pytest.raises(StoreError, match="is not a tag name"):
            store.annotations.add_tag(run_id, bad)
    with pytest.raises(StoreError, match="no run 999"):
        store.annotations.add_tag(999, "reviewed")
    row = frames.runs(store).set_index("run_id").loc[run_id]
    assert row["tags"] == "reviewed, suspect" and row["note"] == "the laptop was on battery"
    assert store.annotations.remove_tag(run_id, "reviewed") and not store.annotations.remove_tag(run_id, "reviewed")
    store.annotations.set_note(run_id, "")
    assert store.annotations.note(run_id) is None
    assert store.annotations.tags([run_id]) == {run_id: ["suspect"]}


def test_tags_and_notes_travel_with_export_and_import(filled_store_url: str, tmp_path: Path) -> None:
    from store.transfer import export_json_rows, import_rows

    store = Store(copy_store(filled_store_url, tmp_path / "laptop.db"))
    store.annotations.add_tag(1, "baseline")
    store.annotations.set_note(1, "first quick run on the new kernel")
    shared = Store(f"sqlite:///{tmp_path / 'shared.db'}")
    [(_, run_id, _)] = import_rows(shared, export_json_rows(store, 1))
    store.annotations.add_tag(1, "reviewed")
    import_rows(shared, export_json_rows(store, 1))  # again, with one more tag: merged, nothing doubled
    row = frames.runs(shared).set_index("run_id").loc[run_id]
    assert row["tags"] == "baseline, reviewed" and row["note"] == "first quick run on the new kernel"


@pytest.mark.slow
def test_a_real_run_slowed_on_purpose_is_flagged_and_reported(filled_store_url: str, tmp_path: Path) -> None:
    url = copy_store(filled_store_url, tmp_path / "review.db")
    store = Store(url)
    baseline, slowed = reviewed_pair(store)
    assert review.default_baseline(frames.runs(store), slowed) == baseline
    built = report.build_report(store, slowed, baseline)
    table = built.table
    assert table.iloc[0]["verdict"] == "regressed" and table.iloc[0]["experiment"] == "speculative"
    deterministic = table[table["kind"] == "deterministic"]
    assert not deterministic.empty and set(deterministic["verdict"]) == {"unchanged"}, "an identical copy"
    markdown = report_render.to_markdown(built)
    assert markdown.count("\n| [regressed](#verdict-regressed) |") == (table["verdict"] == "regressed").sum()
    # Every verdict word links to its meaning, and each row says why (the test, adjusted p, floor).
    for verdict in set(table["verdict"]):
        assert f'<a id="{report_render.anchor(verdict)}"></a>**{verdict}**' in markdown, verdict
    assert "t test on log values" in markdown and "Benjamini–Hochberg" in markdown
    assert ("**underpowered: " in markdown.split("\n- run:")[0]) == (review_lines.power_line(table) is not None)
    # Issue 44 D5: the first line under the title says what the review could see, before the counts.
    seen = review_lines.seen_line(table)
    assert markdown.splitlines()[2] == f"**{seen}**", markdown[:600]
    assert markdown.index(seen) < markdown.index("- verdicts: ")
    assert "\n- drift: " in markdown and "drift figure" in built.machine_drift
    page = report_render.to_html(built)
    assert re.search(r"</h1>\n<p( class='warning')?><b>" + re.escape(html.escape(seen)) + "</b></p>", page), page[:900]
    assert page.index(html.escape(seen)) < page.index("<li>verdicts: ")
    assert (
        f'href="#{report_render.anchor("regressed")}"' in page and f'id="{report_render.anchor("regressed")}"' in page
    )
    assert page.count("<svg") == len(built.charts) >= 2
    # Self-contained: no URL but the SVG and XLink namespaces, no script, no stylesheet link.
    addresses = set(re.findall(r"(?:https?:)?//[^\s\"'<>)]+", page))
    assert addresses <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, addresses
    assert "<script" not in page and "<link" not in page


def test_a_review_on_fewer_than_eight_earlier_runs_says_its_floors_rest_on_them(
    filled_store_url: str, tmp_path: Path
) -> None:
    """Floors learned from a few runs cannot know how the machine steps between runs: the review
    says how many runs they rest on until SETTLED_HISTORY are known, and then says nothing."""
    store = Store(copy_store(filled_store_url, tmp_path / "history.db"))
    copies = [slowed_copy(store, 1, slower_by=1.0, hours_later=hours, steady=True) for hours in range(1, 11)]
    earlier = {run: len(review.earlier_comparable_runs(frames.runs(store), run)) for run in copies}
    short = next(run for run in copies if earlier[run] == 3)
    said = [
        warning
        for warning in report.build_report(store, short, short - 1, calibrated=False).warnings
        if "floors" in warning
    ]
    assert said and said[0].startswith("the between-run floors rest on at most 3 earlier done runs of ")
    assert " on this machine: " in said[0] and "known from at most 2 of its moves" in said[0]
    # A first review says what it cannot judge yet, and that a whole run's move it can.
    first = [
        warning
        for warning in report.build_report(store, copies[0], 1, calibrated=False).warnings
        if warning.startswith("fewer than two earlier done runs")
    ]
    assert (
        first
        and (
            "; only a change of the whole run (20 or more paired ratios moving beyond ±5% together) is judged against "
            "±5% instead, the min-of-N times moving with it too (run the preset again to learn it)"
        )
        in first[0]
    )
    settled = next(run for run in copies if earlier[run] >= review.SETTLED_HISTORY)
    built = report.build_report(store, settled, settled - 1, calibrated=False)
    assert not [warning for warning in built.warnings if "floors rest on" in warning]


def test_a_report_against_a_later_baseline_says_so_first_in_both_formats(filled_store_url: str, tmp_path: Path) -> None:
    """A store's first run is reviewed against a later one: the report's first warning says that
    its verdicts read the older run against the newer (the page said so, the files did not)."""
    store = Store(copy_store(filled_store_url, tmp_path / "later.db"))
    later = slowed_copy(store, 1, slower_by=1.0, hours_later=1, steady=True)
    built = report.build_report(store, 1, later, calibrated=False)
    said = f"The baseline, run {later}, ran after run 1: the verdicts read the older run against the newer"
    assert built.warnings[0].startswith(said)
    assert f"- warning: {said}" in report_render.render(built, "md")
    assert f"<li class='warning'>warning: {said}" in report_render.render(built, "html")
    onwards = report.build_report(store, later, 1, calibrated=False)
    assert not [warning for warning in onwards.warnings if "ran after run" in warning]


@pytest.mark.slow
def test_the_report_command_writes_both_formats_and_refuses_bad_input_in_one_line(
    filled_store_url: str, tmp_path: Path
) -> None:
    url = copy_store(filled_store_url, tmp_path / "review.db")
    baseline, slowed = reviewed_pair(Store(url))
    tagged = run_decodelab("tag", "suspect", "--run", str(slowed), "--db", url, cwd=tmp_path)
    noted = run_decodelab("note", "slower on purpose", "--run", str(slowed), "--db", url, cwd=tmp_path)
    assert tagged.returncode == noted.returncode == 0, tagged.stderr + noted.stderr
    written = run_decodelab("report", "run", "--run", str(slowed), "--out", "r.md", "--db", url, cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert "regressed" in written.stdout and f"baseline {baseline}" in written.stdout
    text = (tmp_path / "r.md").read_text()
    assert text.startswith(f"# decodelab: run {slowed} against baseline {baseline}")
    assert "note: slower on purpose" in text
    assert "\n- calibration: " in text and "--no-calibration" not in text, "measured unless left out"
    written = run_decodelab("report", "run", "--run", str(slowed), "--out", "r.html", "--db", url, cwd=tmp_path)
    assert written.returncode == 0 and (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    for args, fragment in (
        (["report", "run", "--run", "1", "--out", "x.html"], "--baseline: run 1 has no earlier done run"),
        (["report", "run", "--run", "9", "--out", "x.html"], "--run: no run 9"),
        (["report", "run", "--run", "1", "--baseline", "1", "--out", "x.md"], "--baseline: 1 is the run itself"),
        (["report", "run", "--run", "2", "--out", "x.pdf", "--format", "pdf"], "--format: 'pdf'"),
        (["tag", "Not A Tag", "--run", "1"], "tag: 'Not A Tag' is not a tag name"),
        (["note", "x", "--run", "77"], "--run: no run 77"),
    ):
        result = run_decodelab(*args, "--db", url, cwd=tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and fragment in lines[0], (args, result.stderr)
    assert not (tmp_path / "x.html").exists() and not (tmp_path / "x.md").exists()


def test_a_shift_inside_the_between_run_floor_is_within_noise() -> None:
    """Within each run the pairs agree to 1% and the A/A floor is 1%, so a 10% shift is significant
    inside the run; but over five earlier runs the case moved by about 20% between runs, so it is
    the machine drifting, not a regression."""
    run, baseline = [1.00 + 0.001 * index for index in range(7)], [1.10 + 0.001 * index for index in range(7)]
    steady = two_runs(run, baseline, aa_band=(0.99, 1.01), drift=0.0)
    assert verdict_of(steady, "speedup_median")["verdict"] == "regressed"
    history = measurements(3, [(PAIRED, "speedup_median", value, "ratio") for value in (1.0, 1.25, 0.9, 1.2, 1.05)])
    history["started_at"] = pd.date_range("2026-01-01", periods=len(history), freq="D")
    floors = review.between_run_floors(history)
    assert list(floors) == [("speculative", "speedup_median", review.params_key(PAIRED))]
    assert floors[next(iter(floors))] > abs(math.log(1.0 / 1.1))
    frames_by_run, samples = [], []
    for run_id, ratios in ((2, run), (1, baseline)):
        frame = measurements(
            run_id,
            [
                (PAIRED, "speedup_median", float(pd.Series(ratios).median()), "ratio"),
                (AA, "speedup_min", 0.99, "ratio"),
                (AA, "speedup_max", 1.01, "ratio"),
            ],
        )
        frames_by_run.append(frame)
        samples += paired_samples(int(frame["measurement_id"].iloc[0]), ratios)
    table = review.verdict_table(frames_by_run[0], frames_by_run[1], pd.DataFrame(samples), between_runs=floors)
    row = verdict_of(table, "speedup_median")
    assert row["verdict"] == "within noise" and row["p_value"] < review.ALPHA
    assert row["noise_floor"] == floors[next(iter(floors))]


def test_a_reports_values_are_written_in_their_unit() -> None:
    row = {"verdict": "regressed", "experiment": "overhead", "metric": "seconds_per_token", "point": "point · fast",
           "baseline": 4.965e-06, "run": 5.131e-06, "change": 0.0334, "unit": "seconds"}  # fmt: skip
    assert report_render.one_line_row(row).endswith(": 4.965 µs → 5.131 µs (+3.3%)")
    counted = {**row, "metric": "mults", "baseline": 1234567.0, "run": 1234568.0, "unit": "multiplications"}
    assert report_render.one_line_row(counted).endswith(": 1,234,567 → 1,234,568 (+3.3%)")
    assert report_render.value_in_unit({**row, "baseline": None}, "baseline") == ""
