"""Comparing machines: which run stands for each, the fingerprints, the matrix of headline
figures, the determinism audit and `decodelab report machines`, on a store holding the lean
spec (tests/fixtures/lean.toml) run twice through the real CLI with DECODELAB_MACHINE set to two names (a spec's runs
have the preset "custom")."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from analysis import machines, machines_report
from runner.labels import case_labels, short_label
from store import frames
from store.records import CaseRecord, MachineRecord, MeasurementRecord
from store.store import Store
from tests.conftest import MACHINE_NAMES, ROOT, copy_store, run_decodelab


def test_case_labels_name_what_varies_and_never_show_json() -> None:
    cases = [
        {"part": "timing", "impl": "static", "n": 256, "d_model": 128, "pairs": 3},
        {"part": "timing", "impl": "fast", "n": 256, "d_model": 128, "pairs": 3},
        {"part": "timing", "impl": "static", "n": 64, "d_model": 128, "pairs": 3},
    ]
    assert case_labels(cases) == ["static · n=256", "fast · n=256", "static · n=64"]
    assert short_label({"draft": "bigram", "k": 2, "ratio_lengths": [128, 1024], "scale": 0.5}) == (
        "bigram · k=2 · ratio_lengths=128,1024 · scale=0.5"
    )
    # A parameter only some cases have varies; a case left with no varying parameter is "all".
    assert case_labels([{"n": 8}, {"n": 8, "impl": "fast"}]) == ["all", "fast"]
    assert case_labels([{"n": 8}]) == ["all"]
    # Flags and unset values read as words, and each value of a key labels apart.
    flags: list[dict[str, object]] = [
        {"kernel": "fake", "group_size": None, "embeddings_quantized": True, "distilled": True},
        {"kernel": "fake", "group_size": 32, "embeddings_quantized": False, "distilled": False},
        {"kernel": "fake", "group_size": 32, "embeddings_quantized": False, "distilled": None},
    ]
    assert case_labels(flags) == [
        "distilled · embeddings quantized · ungrouped",
        "no distilled · embeddings float32 · group_size=32",
        "distilled=none · embeddings float32 · group_size=32",
    ]


def machine(name: str, cores: int = 2) -> MachineRecord:
    return MachineRecord(name, "cpu", cores, 2**33, "Linux", "3.11", "2.13.0", 1, "cpu", None)


def recorded_run(store: Store, name: str, values: dict[int, float], *, cores: int = 2, seed: int = 7) -> int:
    run_id = store.results.start_run(
        machine_id=store.results.machine_id(machine(name, cores)),
        spec={"seed": seed},
        code_version="x",
        model_id=None,
        preset="quick",
    )
    for n, seconds in values.items():
        store.results.record_case(
            run_id,
            CaseRecord(
                "kv_cache",
                {"part": "timing", "impl": "static", "n": n},
                (
                    MeasurementRecord("measured_speedup", seconds, "ratio"),
                    MeasurementRecord("measured_speedup_low", seconds * 0.9, "ratio"),
                    MeasurementRecord("measured_speedup_high", seconds * 1.1, "ratio"),
                    MeasurementRecord("arithmetic_ratio", n / 2, "ratio"),
                ),
            ),
        )
    store.results.finish_run(run_id, "done")
    return run_id


def test_the_newest_done_run_stands_for_a_machine_unless_one_is_pinned(sqlite_url: str) -> None:
    store = Store(sqlite_url)
    first = recorded_run(store, "laptop", {64: 2.0})
    second = recorded_run(store, "laptop", {64: 2.2})
    suspect = recorded_run(store, "laptop", {64: 9.0})
    store.annotations.add_tag(suspect, "suspect")
    server = recorded_run(store, "server", {64: 4.0})
    store.results.finish_run(recorded_run(store, "server", {64: 1.0}), "failed")
    runs = frames.runs(store)
    assert machines.chosen_runs(runs, "quick", ["laptop", "server", "absent"]) == {"laptop": second, "server": server}
    assert machines.chosen_runs(runs, "quick", ["laptop"], {"laptop": first}) == {"laptop": first}
    # A pin that is no done run of the preset on that machine is ignored.
    assert machines.chosen_runs(runs, "quick", ["laptop"], {"laptop": server}) == {"laptop": second}
    assert machines.presets_by_machines(runs) == ["quick"]


def test_the_matrix_gives_bands_and_ratios_and_the_fingerprints_mark_what_differs(sqlite_url: str) -> None:
    store = Store(sqlite_url)
    recorded_run(store, "laptop", {64: 2.0, 256: 8.0})
    recorded_run(store, "server", {64: 3.0, 256: 6.0}, cores=16)
    report = machines_report.build_machines_report(store, "quick", ["laptop", "server"], reference="laptop")
    speedups = report.matrix[report.matrix["metric"] == "measured_speedup"]
    server = speedups[speedups["machine"] == "server"].set_index("case")
    # The case's part, then what varies within it.
    assert server["ratio"].to_dict() == pytest.approx({"timing · n=64": 1.5, "timing · n=256": 0.75})
    low, high = server.loc["timing · n=64", ["low", "high"]]
    assert (low, high) == (pytest.approx(2.7), pytest.approx(3.3))
    wide = report.wide().set_index(["metric", "case"])
    assert wide.loc[("measured_speedup", "timing · n=256"), "server"] == "6 [5.4–6.6]"
    assert wide.loc[("measured_speedup", "timing · n=256"), "server / laptop"] == "×0.75"
    assert wide.loc[("arithmetic_ratio", "timing · n=256"), "server / laptop"] == "×1"
    # Headline order (speedup before arithmetic ratio), each case in the order it ran.
    assert [case.split(" · ")[1] for case in wide.index.get_level_values("case")] == ["n=64", "n=256"] * 2
    differs = report.fingerprints.set_index("field")["differs"]
    assert differs["cores"] and differs["run_id"] and not differs["cpu_model"] and not differs["seed"]
    assert machines.value_text(739328.0) == "739,328" and machines.value_text(None) == "–"
    shown = report.fingerprints.set_index("field")
    assert shown.loc["memory_bytes", "laptop"] == "8.00 GiB" and shown.loc["gpu_name", "laptop"] == "–"


def test_runs_of_different_seeds_are_not_audited_against_each_other(sqlite_url: str) -> None:
    store = Store(sqlite_url)
    recorded_run(store, "laptop", {64: 2.0}, seed=7)
    recorded_run(store, "server", {64: 3.0}, seed=8)
    recorded_run(store, "desk", {64: 5.0}, seed=7)
    report = machines_report.build_machines_report(store, "quick", ["laptop", "server", "desk"])
    [audit] = report.audit.audits
    assert audit.machines == ["laptop", "desk"] and audit.compared == 1 and audit.differences.empty
    [left_out] = report.audit.left_out
    assert left_out.startswith("server: not audited") and "seed 8" in left_out


@pytest.mark.slow
def test_two_machines_running_one_spec_agree_on_every_deterministic_figure(two_machines_url: str) -> None:
    store = Store(two_machines_url)
    report = machines_report.build_machines_report(store, "custom", list(MACHINE_NAMES))
    assert report.machines == list(MACHINE_NAMES) and report.reference == "alpha"
    [audit] = report.audit.audits
    assert audit.compared > 100 and audit.differences.empty and audit.unmatched == 0, audit.line()
    assert audit.line().endswith(f"{audit.compared} deterministic figures, all equal")
    wide = report.wide()
    assert {"alpha", "beta", "beta / alpha"} <= set(wide.columns)
    assert not wide["case"].str.contains(r"[{}]").any()
    assert {"speedup_median", "measured_speedup", "weight_bytes", "acceptance_rate"} <= set(wide["metric"])
    # The same weights on both: every deterministic headline figure has the ratio 1 (or none, for zeros).
    deterministic = report.matrix[(report.matrix["kind"] == "deterministic") & (report.matrix["machine"] == "beta")]
    assert set(deterministic["ratio"].dropna()) == {1.0}


@pytest.mark.slow
def test_an_altered_deterministic_figure_is_listed_in_words(two_machines_url: str, tmp_path: Path) -> None:
    url = copy_store(two_machines_url, tmp_path / "altered.db")
    store = Store(url)
    beta_run = machines.chosen_runs(frames.runs(store), "custom", ["beta"])["beta"]
    measured = frames.measurements(store, beta_run, "speculative")
    target = measured[
        (measured["metric"] == "acceptance_rate")
        & measured["params"].map(
            lambda p: (
                p.get("draft") == "bigram"
                and p.get("k") == 3
                and p.get("impl") == "fast"
                and p.get("schedule") == "fixed"
                and p.get("temperature") == 1.0
            )
        )
    ]
    [(measurement_id, old_value)] = zip(target["measurement_id"], target["value"], strict=True)
    store.close()
    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
        connection.execute("UPDATE measurement SET value = ? WHERE id = ?", (old_value + 0.125, int(measurement_id)))
    report = machines_report.build_machines_report(Store(url), "custom", list(MACHINE_NAMES))
    [audit] = report.audit.audits
    assert len(audit.differences) == 1, audit.differences
    row = audit.differences.iloc[0]
    assert (row["experiment"], row["metric"]) == ("speculative", "acceptance_rate")
    case = "speculative · fast · bigram · k=3 · schedule=fixed · temperature=1"
    assert row["case"] == case
    assert row["alpha"] == old_value and row["beta"] == old_value + 0.125
    assert f"1 of {audit.compared} deterministic figures differ" in audit.line()
    assert f"speculative · acceptance_rate · {case}: alpha" in audit.line()


@pytest.mark.slow
def test_report_machines_writes_the_matrix_fingerprints_and_audit(two_machines_url: str, tmp_path: Path) -> None:
    markdown = tmp_path / "machines.md"
    result = run_decodelab(
        "report", "machines", "--db", two_machines_url, "--machines", "beta,alpha", "--out", str(markdown),
        cwd=Path.cwd(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "deterministic figures, all equal" in result.stdout
    text = markdown.read_text(encoding="utf-8")
    assert "| field | beta | alpha | differs |" in text
    assert "| experiment | metric | case | beta | alpha | alpha / beta |" in text
    page = tmp_path / "machines.html"
    result = run_decodelab(
        "report", "machines", "--db", two_machines_url, "--reference", "beta", "--out", str(page), cwd=Path.cwd()
    )
    assert result.returncode == 0, result.stderr
    document = page.read_text(encoding="utf-8")
    assert "<h2>Determinism audit</h2>" in document and "alpha / beta" in document
    assert not re.search(r"(src|href)=\"?https?:", document), "the page requests nothing"
    matrix = document.split("<h2>Headline figures</h2>", 1)[1]
    assert matrix.count("<tr>") > 100 and "{" not in matrix and "}" not in matrix  # no case as JSON


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("--machines", "alpha,gamma"), "error: --machines: no done run of custom on gamma (allowed: alpha, beta)"),
        (("--preset", "seed"), "error: --preset: no done run of 'seed' (allowed: custom, tiny)"),
        (("--reference", "gamma"), "error: --reference: 'gamma' is not among the machines compared"),
        (("--pin", "alpha=999"), "error: --pin: run 999 is not a done custom run on alpha"),
        (("--format", "pdf"), "error: --format: 'pdf' is not a report format (allowed: html, md)"),
    ],
)
@pytest.mark.slow
def test_report_machines_refuses_bad_input_in_one_line(
    two_machines_url: str, tmp_path: Path, arguments: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "never.md"
    result = run_decodelab(
        "report", "machines", "--db", two_machines_url, "--out", str(out), *arguments, cwd=Path.cwd()
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_the_progress_bar_names_every_case_of_a_preset_apart_in_words() -> None:
    from runner.execution.execute import case_progress_labels
    from runner.spec.sweeps import load_spec_file

    plan = load_spec_file(ROOT / "runner" / "presets" / "quick.toml").plan()
    labels = case_progress_labels(plan)
    assert len(set(labels.values())) == len(plan)
    assert not [label for label in labels.values() if "{" in label or "}" in label]
    assert "kv_cache · timing · static · n=256 · no_cache_impl=static" in labels.values()
    assert "kv_cache · prefill · fast · no cache" in labels.values()
    assert not [label for label in labels.values() if "=False" in label or "=True" in label or "=None" in label]


def audit_frame(machine_name: str, logit_diff: float, cache_bytes: int) -> pd.DataFrame:
    """A frames.measurements-shaped frame of one machine's run: a numerical and an exact figure."""
    params = {"part": "equivalence", "impl": "fast", "n": 128}
    return pd.DataFrame(
        [
            {
                "run_id": 1,
                "experiment": "kv_cache",
                "case_id": 1,
                "params": params,
                "metric": metric,
                "value": value,
                "unit": unit,
                "measurement_id": index,
            }
            for index, (metric, value, unit) in enumerate(
                (("max_logit_diff", logit_diff, "logit"), ("cache_bytes", cache_bytes, "bytes"))
            )
        ]
    )


def test_the_audit_compares_exact_figures_for_equality_and_numerical_ones_within_the_kernels_tolerance() -> None:
    """Two instruction sets: the fast path's logits differ by about 1e-5 (numerical, within
    tolerance); a byte count must be equal; runs whose drafts differ are not audited together."""
    details = pd.DataFrame(
        {"machine": ["avx512", "avx2"], "model_hash": ["m", "m"], "seed": [7, 7], "drafts": ["d", "d"]}
    )
    close = machines.audit(
        {"avx512": audit_frame("avx512", 3.1e-5, 1024), "avx2": audit_frame("avx2", 4.2e-5, 1024)}, details
    )
    [audit] = close.audits
    assert audit.compared == 2 and audit.within_tolerance == 1 and audit.differences.empty
    assert "1 exact figure(s) compared for equality, 1 numerical figure(s) within 0.0001 absolute" in audit.line()
    apart = machines.audit(
        {"avx512": audit_frame("avx512", 3.1e-5, 1024), "avx2": audit_frame("avx2", 0.02, 1028)}, details
    )
    assert sorted(apart.audits[0].differences["metric"]) == ["cache_bytes", "max_logit_diff"]
    other_drafts = machines.audit(
        {"avx512": audit_frame("avx512", 3.1e-5, 1024), "avx2": audit_frame("avx2", 3.1e-5, 1024)},
        details.assign(drafts=["d", "e"]),
    )
    assert not other_drafts.audits and len(other_drafts.left_out) == 2
