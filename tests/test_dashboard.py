"""The dashboard without a browser: chart builders on small frames, every page through
AppTest on a store filled by a real tiny sweep, and the launch form's handling."""

from __future__ import annotations

import json
import re
import time
import tomllib
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from analysis import statistics, theme
from analysis.runs import job_label
from dashboard import charts, data, history_charts, history_series
from dashboard import pages as dashboard_pages
from dashboard.launch import LaunchRequest, build_spec, launch
from runner.errors import InputError
from runner.spec.sweeps import parse_toml, preset_text
from store import frames
from store.compatibility import current_params
from store.store import Store
from tests.conftest import QUICK_SPEC, TINY_SPEC, kill_job_workers, rows_by

DASHBOARD = Path(__file__).parent.parent / "dashboard"
# Every page but Review (tested on its own), in the navigation's order (dashboard/pages.py).
PAGES = [page.name for page in dashboard_pages.pages() if page.name != "review"]
# Pages whose content is a table, not a chart.
TABLE_PAGES = {"seeds"}
# Pages that show a store's runs (the scale calculator needs none): an empty store names the command.
PAGES_WITH_DATA = [page for page in PAGES if page != "scale"] + ["review"]


def layers(chart: object) -> list[dict]:
    spec = chart.to_dict()  # type: ignore[attr-defined]
    return spec.get("layer", [spec])


def test_kv_speedup_chart_has_band_median_and_arithmetic_on_log_axes() -> None:
    timing = pd.DataFrame(
        {
            "n": [64, 128],
            "measured_speedup": [2.0, 3.0],
            "measured_speedup_low": [1.8, 2.7],
            "measured_speedup_high": [2.2, 3.3],
            "arithmetic_ratio": [32.9, 66.1],
        }
    )
    spec = charts.kv_speedup(timing).to_dict()
    flat = [layer for top in spec["layer"] for layer in top.get("layer", [top])]
    marks = [layer["mark"]["type"] for layer in flat]
    assert marks == ["area", "line", "line"]
    assert flat[0]["encoding"]["y"]["field"] == "measured_speedup_low"
    assert flat[0]["encoding"]["y2"]["field"] == "measured_speedup_high"
    assert flat[2]["encoding"]["y"]["field"] == "arithmetic_ratio"
    assert all(layer["encoding"]["x"]["scale"]["type"] == "log" for layer in flat)
    datasets = spec["datasets"]
    assert any(row.get("arithmetic_ratio") == 66.1 for rows in datasets.values() for row in rows)


def test_predicted_vs_measured_names_each_model_and_draws_the_diagonal() -> None:
    frame = pd.DataFrame(
        {
            "draft": ["bigram", "int8"],
            "k": [1, 4],
            "speedup_median": [1.1, 0.5],
            "predicted_speedup_a_priori": [1.0, 0.4],
            "writeup_formula_speedup": [1.3, 0.6],
            "component_model_speedup": [1.15, 0.52],
        }
    )
    spec = charts.predicted_vs_measured(frame).to_dict()
    diagonal, points = spec["layer"]
    assert diagonal["mark"]["type"] == "line"
    rows = spec["datasets"][points["data"]["name"]]
    labels = {row["model"] for row in rows}
    assert labels == set(charts.SPEEDUP_MODELS.values()) and len(rows) == 6
    assert any("before the run" in label for label in labels)
    assert points["encoding"]["y"]["field"] == "speedup_median"
    only = charts.predicted_vs_measured(frame, ["predicted_speedup_a_priori"]).to_dict()
    assert len(only["datasets"][only["layer"][1]["data"]["name"]]) == 2


def test_the_best_speedup_is_picked_per_impl_and_old_runs_count_as_static() -> None:
    speculative = pd.DataFrame(
        {
            # The last: a run recorded before impls existed, as the store's read path gives it.
            "impl": ["static", "static", "fast", current_params("speculative", {"part": "speculative"})["impl"]],
            "draft": ["bigram", "ngram", "ngram", "small"],
            "k": [2, 4, 4, 2],
            "speedup_median": [1.4, 1.6, 0.5, 1.7],
            "speedup_min": [1.3, 1.5, 0.4, 1.6],
            "speedup_max": [1.5, 1.7, 0.6, 1.8],
            "target_step_seconds": [4e-4, 4e-4, 1.2e-4, 4e-4],
            "verify_cost_ratio": [1.3, 1.4, 4.5, 1.3],
        }
    )
    best = data.best_speedup_by_impl(speculative).set_index("impl")
    assert best.loc["static", "draft"] == "small" and best.loc["fast", "draft"] == "ngram"
    assert best.loc["fast", "baseline_us_per_token"] == pytest.approx(120.0)
    assert best.loc["fast", "verify_cost_ratio"] == 4.5
    assert data.best_speedup_by_impl(pd.DataFrame()).empty


def test_kv_timing_rows_say_which_no_cache_path_their_speedup_divides() -> None:
    # As the store's read path gives them (store.compatibility): an old row without the params
    # ran static and divided the eager (static) no-cache time.
    recorded = [
        {"part": "timing", "n": 64, "impl": "static"},
        {"part": "timing", "n": 64, "impl": "fast"},
        {"part": "timing", "n": 64, "impl": "fast", "no_cache_impl": "fast"},
        {"part": "timing", "n": 64},
    ]
    timing = pd.DataFrame([current_params("kv_cache", params) for params in recorded])
    labelled = data.with_no_cache_path(timing)
    assert labelled["no_cache_impl"].tolist() == ["static", "static", "fast", "static"]
    assert labelled["baseline"].tolist() == [
        "no cache, same impl",  # an old static row meant what a new one means
        "eager no cache (old definition, before per-impl baselines)",
        "no cache, same impl",
        "no cache, same impl",
    ]


def test_the_distribution_check_says_no_power_instead_of_a_tick() -> None:
    distribution = pd.DataFrame(
        {
            "draft": ["bigram", "int8", "int4", "old"],
            "within_sampling_noise": [1.0, 1.0, 0.0, 1.0],
            "check_detects_broken_rule": [1.0, 0.0, 1.0, None],
        }
    )
    verdicts = data.distribution_verdicts(distribution)["verdict"].tolist()
    assert verdicts[0].startswith("✅") and "caught" in verdicts[0]
    assert verdicts[1].startswith("no power") and "✅" not in verdicts[1]
    assert verdicts[2].startswith("❌")
    assert "power unknown" in verdicts[3]


def test_cache_bytes_has_a_weights_rule_and_kv_head_layouts() -> None:
    memory = pd.DataFrame(
        {
            "n": [128, 512],
            "cache_bytes": [1.0, 4.0],
            "cache_bytes_kv_heads_1": [0.25, 1.0],
            "cache_bytes_allocated": [1.0, 4.0],
        }
    )
    spec = charts.cache_bytes(memory, 3.0).to_dict()
    lines, rule = spec["layer"]
    assert rule["mark"]["type"] == "rule" and rule["encoding"]["y"]["field"] == "size"
    assert spec["datasets"][rule["data"]["name"]] == [{"size": 3.0, "weight_bytes": 3.0}]
    assert lines["encoding"]["y"]["title"] == "bytes"  # the largest value is below a KiB
    layouts = {row["layout"] for row in spec["datasets"][lines["data"]["name"]]}
    assert layouts == {"all heads", "kv heads 1"}
    # A layout's colour is not the weights line's: reference lines are drawn in their own gray.
    assert theme.REFERENCE_COLOR not in lines["encoding"]["color"]["scale"]["range"]
    assert rule["mark"]["color"] == theme.REFERENCE_COLOR


def test_tvd_chart_and_history_change_points() -> None:
    distribution = pd.DataFrame({"draft": ["bigram"], "tvd": [0.01], "tvd_direct": [0.009], "tvd_noise_bound": [0.02]})
    assert [layer["mark"]["type"] for layer in layers(charts.tvd(distribution))] == ["bar", "tick"]
    history = pd.DataFrame(
        {
            "run_id": range(12),
            "machine": ["a"] * 12,
            "machine_fingerprint": ["f"] * 12,
            "started_at": pd.date_range("2026-01-01", periods=12, freq="D"),
            "value": [1.0, 1.1, 0.9, 1.0, 1.05, 5.0, 1.0, 1.02, 1.6, 1.62, 1.58, 1.61],
            "tags": "",
        }
    )
    flagged = history_series.change_points(history[["run_id", "value"]], history.drop(columns=["value"]))
    # Every change point, not only the last: the jump to 5.0, the return, the new level at 1.6.
    assert flagged.index[flagged["change_point"]].tolist() == [5, 6, 8]
    assert flagged.loc[8, "review"] == "review?run=8&baseline=7" and flagged.loc[3, "review"] == "review?run=3"
    marks = [layer["mark"]["type"] for layer in layers(history_charts.history(flagged, "seconds"))]
    assert marks == ["area", "line", "point", "point"]
    # Two series that agree draw on one another: each its own outlined shape keeps both in sight.
    both = pd.concat([flagged.assign(series="naive"), flagged.assign(series="static")], ignore_index=True)
    dots = layers(history_charts.history(both, "ratio", color="series"))[2]
    assert dots["encoding"]["shape"]["field"] == "series" and dots["mark"]["filled"] is False


def test_a_headline_series_of_one_machine_draws_each_impl_in_its_own_colour() -> None:
    """History's lines keep the impl colours of every other page where one machine and one sweep
    ran them; across machines or sweeps the whole label tells them apart."""
    points = pd.DataFrame(
        {
            "run_id": [1, 1, 2, 2],
            "impl": ["fast", "static", "fast", "static"],
            "machine": "box",
            "sweep": "quick",
            "value": [1.0, 2.0, 1.1, 2.1],
            "median": [1.0, 2.0, 1.0, 2.0],
            "low": 0.9,
            "high": 2.2,
            "change_point": False,
            "started_at": pd.to_datetime(["2026-01-01", "2026-01-01", "2026-01-02", "2026-01-02"]),
        }
    )
    points = points.assign(series=points["machine"] + " · " + points["sweep"] + " · " + points["impl"])
    assert history_charts.line_field(points) == "impl"
    scale = layers(history_charts.history(points, "speedup", color="impl"))[1]["encoding"]["color"]["scale"]
    assert dict(zip(scale["domain"], scale["range"], strict=True)) == {
        impl: theme.IMPL_COLORS[impl] for impl in ("fast", "static")
    }
    two_machines = pd.concat([points, points.assign(machine="other", run_id=[3, 3, 4, 4])], ignore_index=True)
    assert history_charts.line_field(two_machines) == "series"
    assert history_charts.line_field(points.assign(sweep=["quick", "quick", "seed", "seed"])) == "series"
    # A series of an impl at a point (the received fraction's "static · n=256") keeps the impl's colour.
    at_length = points.assign(impl=points["impl"] + " · n=256")
    assert history_charts.line_field(at_length) == "impl"
    scale = layers(history_charts.history(at_length, "fraction", color="impl"))[1]["encoding"]["color"]["scale"]
    assert dict(zip(scale["domain"], scale["range"], strict=True)) == {
        f"{impl} · n=256": theme.IMPL_COLORS[impl] for impl in ("fast", "static")
    }
    # Lines that are no impl's (the sweep's wall time and its training) keep their whole labels.
    assert history_charts.line_field(points.assign(impl=["sweep", "training or loading"] * 2)) == "series"


def test_a_series_alternating_a_few_percent_has_no_change_point() -> None:
    # Eight runs of one code on the Zen 5 EPYC (fast µs per token): four were drawn as new levels
    # when the noise was the differences' spread about their median, which alternating signs hide.
    values = [26.26, 27.38, 26.57, 27.41, 26.67, 25.83, 27.10, 26.16]
    assert statistics.change_points(values) == []
    assert statistics.change_points([*values, *(value * 1.3 for value in values)]) == [len(values)]


def test_compare_table_flags_deterministic_differences() -> None:
    frame = pd.DataFrame(
        {
            "point": ["n=64", "n=64", "n=128", "n=128"],
            "machine": ["a", "b", "a", "b"],
            "value": [10.0, 10.0, 20.0, 21.0],
        }
    )
    table = data.compare_table(frame, ["point"], deterministic=True)
    assert table.set_index("point")["equal"].to_dict() == {"n=128": False, "n=64": True}
    assert table.set_index("point")["b / a"].to_dict() == {"n=128": 1.05, "n=64": 1.0}


def test_every_view_is_a_page_of_the_one_list() -> None:
    """dashboard/pages.py is the one list the navigation and every test read: a view file it
    lacks would be served by no link and tested by no test, a name without a file breaks the app."""
    views = {path.stem for path in (DASHBOARD / "views").glob("*.py") if path.stem != "__init__"}
    assert views == {page.name for page in dashboard_pages.pages()}
    assert len(dashboard_pages.pages()) == len(views), "a page listed twice"
    assert {page.section for page in dashboard_pages.pages()} <= set(dashboard_pages.SECTIONS)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_a_real_store(page: str, filled_store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECODELAB_DB", filled_store_url)
    app = AppTest.from_file(str(DASHBOARD / "views" / f"{page}.py"), default_timeout=60)
    app.run()
    assert not app.exception, [exception.value for exception in app.exception]
    assert not app.error, [error.value for error in app.error]
    if page in TABLE_PAGES:
        assert app.dataframe and not app.dataframe[0].value.empty, f"{page} shows no table"
        return
    charts_shown = app.get("vega_lite_chart")
    assert charts_shown, f"{page} shows no chart"
    for element in charts_shown:
        assert json.loads(element.proto.spec)  # a real Vega-Lite spec


def test_the_kv_cache_page_judges_both_models_on_the_same_points(
    filled_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26, D7: the roofline's prediction and the overhead calibration's, over the same timed
    points of the run, each with its median |error| and whether it fits; a misfit is named."""
    monkeypatch.setenv("DECODELAB_DB", filled_store_url)
    app = AppTest.from_file(str(DASHBOARD / "views" / "kv_cache.py"), default_timeout=60)
    app.run()
    assert not app.exception, [exception.value for exception in app.exception]
    assert "Measured against the roofline's prediction" in [header.value for header in app.subheader]
    fits = next(frame.value for frame in app.dataframe if "median_abs_error" in frame.value.columns)
    assert set(fits["model"]) == {"roofline", "overhead a + b·mults"}
    points = fits.pivot_table(index=["impl", "side"], columns="model", values="points")
    assert (points["roofline"] == points["overhead a + b·mults"]).all(), points
    # The table shows flags as yes/no text (analysis.tables), not as booleans.
    misfits = fits[fits["fits"].isin([False, "no"])]
    warnings = [warning.value for warning in app.warning if "do not fit" in warning.value]
    # One warning for the page however many groups miss (issue 44, D7), naming the figure.
    assert len(warnings) == (1 if len(misfits) else 0)
    assert all("against" in text and "Why it matters" in text and "What to do" in text for text in warnings)


def test_pages_show_an_empty_state_naming_the_command(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    Store(sqlite_url).close()
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    for page in PAGES_WITH_DATA:
        app = AppTest.from_file(str(DASHBOARD / "views" / f"{page}.py"), default_timeout=60)
        app.run()
        assert not app.exception
        assert any("decodelab run --preset quick" in info.value for info in app.info), page


def test_the_launch_form_validates_and_enqueues(sqlite_url: str) -> None:
    store = Store(sqlite_url)
    spec_text = TINY_SPEC.read_text()
    with pytest.raises(InputError, match="experiments.kv_cache.pairs: 99 is above the maximum"):
        build_spec(LaunchRequest("spec", "quick", [], spec_text.replace("pairs = 3", "pairs = 99"), "", False))
    with pytest.raises(InputError, match="experiments: choose at least one"):
        build_spec(LaunchRequest("preset", "quick", [], "", "", False))
    with pytest.raises(InputError, match="machine: a printable name"):
        launch(store, LaunchRequest("spec", "quick", [], spec_text, "bad\nname", False))
    assert frames.jobs(store).empty, "nothing was written for bad input"
    with pytest.raises(InputError, match="experiments.speculative.pairs: 3 is below the minimum"):
        build_spec(LaunchRequest("preset", "quick", ["speculative"], "", "", False, pairs=3))
    overridden = build_spec(
        LaunchRequest("preset", "quick", ["kv_cache", "speculative"], "", "", False, lengths=[32, 64], ks=[2], pairs=6)
    )
    assert overridden.raw["experiments"]["kv_cache"]["lengths"] == [32, 64]
    assert overridden.raw["experiments"]["speculative"]["ks"] == [2]
    assert (
        overridden.raw["experiments"]["kv_cache"]["pairs"] == overridden.raw["experiments"]["speculative"]["pairs"] == 6
    )
    seed = launch(store, LaunchRequest("preset", "seed", ["kv_cache"], "", "", False))
    assert seed.needs_confirmation and seed.job_id is None and frames.jobs(store).empty
    confirmed = launch(store, LaunchRequest("preset", "seed", ["kv_cache"], "", "", True))
    assert confirmed.job_id is not None
    tiny = launch(store, LaunchRequest("spec", "quick", [], spec_text, "gpu-box", False))
    job = rows_by(frames.jobs(store), "job_id")[tiny.job_id]
    assert (job["machine_name"], job["cases_total"]) == ("gpu-box", tiny.cases)


def test_only_a_preset_launched_unchanged_is_stored_as_that_preset(sqlite_url: str) -> None:
    """A subset of the preset's experiments, or other lengths, k or pairs, is a custom run: only
    like is compared with like."""
    store = Store(sqlite_url)
    every = list(tomllib.loads(preset_text("quick"))["experiments"])
    launched = {
        "whole": launch(store, LaunchRequest("preset", "quick", every, "", "", True)),
        "kv_cache only": launch(store, LaunchRequest("preset", "quick", ["kv_cache"], "", "", True)),
        "other pairs": launch(store, LaunchRequest("preset", "quick", every, "", "", True, pairs=5)),
    }
    jobs = rows_by(frames.jobs(store), "job_id")
    presets = {name: jobs[outcome.job_id]["preset"] for name, outcome in launched.items()}
    presets = {name: None if pd.isna(preset) else preset for name, preset in presets.items()}
    assert presets == {"whole": "quick", "kv_cache only": None, "other pairs": None}
    assert launched["kv_cache only"].cases < launched["whole"].cases, "its own spec, kv_cache alone"
    # The sidebar names each job as History names its run, from the stored spec: never "nan".
    labels = {name: job_label(jobs[outcome.job_id]) for name, outcome in launched.items()}
    assert labels == {
        "whole": f"job {launched['whole'].job_id} · quick · queued",
        "kv_cache only": f"job {launched['kv_cache only'].job_id} · quick, kv_cache only · queued",
        "other pairs": f"job {launched['other pairs'].job_id} · quick, changed pairs · queued",
    }


def test_the_verdict_meanings_print_the_level_not_the_constants_name() -> None:
    from analysis.review import ALPHA, VERDICT_MEANINGS

    assert not any("ALPHA" in meaning for meaning in VERDICT_MEANINGS.values())
    assert f"below {ALPHA:g}" in VERDICT_MEANINGS["regressed"]


@pytest.mark.slow
def test_the_sidebar_launches_a_sweep_that_a_worker_completes(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    Store(sqlite_url).close()
    app = AppTest.from_file(str(DASHBOARD / "app.py"), default_timeout=60)
    app.run()
    assert not app.exception
    assert not app.text_area, "the spec box shows only once 'spec' is chosen"
    app.radio(key="launch_source").set_value("spec").run()
    # The quick spec (training and one experiment): launching and completing a job is what is tested.
    app.text_area(key="launch_spec").input(QUICK_SPEC).run()
    # The estimate is there before the click: the size and the time, and what the time rests on.
    cases = parse_toml(QUICK_SPEC, source="quick").cases_total()
    assert any(caption.value.startswith(f"{cases} cases, about ") for caption in app.sidebar.caption), [
        caption.value for caption in app.sidebar.caption
    ]
    app.button(key="launch_button").click().run()
    assert not app.exception, [exception.value for exception in app.exception]
    assert any("queued" in success.value for success in app.sidebar.success)
    store = Store(sqlite_url)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and frames.jobs(store).iloc[0]["status"] in ("queued", "running"):
            time.sleep(0.2)  # polling the store, not a pause
        job = frames.jobs(store).iloc[0]
        assert job["status"] == "done", job["error"]
        assert job["cases_done"] == job["cases_total"]
        # The estimate said before the click is on the job, and History sets it beside the time taken.
        run = frames.runs(store).set_index("run_id").loc[int(job["run_id"])]
        assert run["estimated_seconds"] == job["estimated_seconds"] > 0
        error = data.estimate_error(run["estimated_seconds"], run["wall_seconds"])
        assert error == run["estimated_seconds"] / run["wall_seconds"] - 1
    finally:
        kill_job_workers(sqlite_url)


def test_compare_page_puts_two_machines_side_by_side(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from store.records import CaseRecord, MachineRecord, MeasurementRecord

    store = Store(sqlite_url)
    for name, mults in (("laptop", 1000.0), ("server", 1000.0), ("laptop", 1000.0)):
        machine = MachineRecord(name, "cpu", 2, 1, "Linux", "3.11", "2.13.0", 2, "cpu", None)
        run_id = store.results.start_run(
            machine_id=store.results.machine_id(machine), spec={}, code_version="x", model_id=None
        )
        for n in (64, 128):
            store.results.record_case(
                run_id,
                CaseRecord(
                    "kv_cache",
                    {"part": "counts", "n": n},
                    (MeasurementRecord("mults_cache", mults * n, "multiplications"),),
                ),
            )
        store.results.finish_run(run_id, "done")
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    app = AppTest.from_file(str(DASHBOARD / "views" / "compare.py"), default_timeout=60)
    app.run()
    app.selectbox(key="compare_metric").set_value("mults_cache").run()
    assert not app.exception, [exception.value for exception in app.exception]
    assert any("deterministic and equal on every one" in success.value for success in app.success), (
        [w.value for w in app.warning],
        [i.value for i in app.info],
        app.dataframe[0].value if app.dataframe else None,
    )
    # The one-figure table, below the machines matrix (which has no headline figure of this store).
    table = app.dataframe[-1].value
    assert list(table["case"]) == ["n=128", "n=64"]
    assert list(table["server / laptop"]) == [1.0, 1.0]


def all_text(app: AppTest) -> str:
    parts = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "exception", "text", "code"):
        parts += [str(getattr(element, "value", "")) for element in app.get(kind)]
    return "\n".join(parts)


def test_a_store_password_never_reaches_the_page(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy.engine import make_url

    Store(postgres_url).close()
    password = make_url(postgres_url).password
    assert password, "the test server's URL carries a password"
    monkeypatch.setenv("DECODELAB_DB", postgres_url)
    app = AppTest.from_file(str(DASHBOARD / "app.py"), default_timeout=60)
    app.run()
    assert not app.exception
    shown = all_text(app)
    assert "***@" in shown and password not in shown
    # An unreachable server with a password: the error shown is masked too.
    monkeypatch.setenv("DECODELAB_DB", "postgresql+psycopg://someone:hunter2@127.0.0.1:1/nowhere")
    broken = AppTest.from_file(str(DASHBOARD / "views" / "kv_cache.py"), default_timeout=60)
    broken.run()
    assert broken.error and "hunter2" not in all_text(broken)


def test_the_dashboard_only_reads_except_to_enqueue(filled_store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import event

    monkeypatch.setenv("DECODELAB_DB", filled_store_url)
    statements: list[str] = []
    engine = data.store_for(filled_store_url).engine
    listener = lambda _c, _cur, statement, *_rest: statements.append(statement.split()[0].upper())  # noqa: E731
    event.listen(engine, "before_cursor_execute", listener)
    try:
        for page in PAGES:
            AppTest.from_file(str(DASHBOARD / "views" / f"{page}.py"), default_timeout=60).run()
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    assert "SELECT" in statements, "the pages went through the cached store"
    assert not {"INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP"} & set(statements), set(statements)


def test_compare_page_shows_bands_and_compares_runs(filled_store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECODELAB_DB", filled_store_url)
    app = AppTest.from_file(str(DASHBOARD / "views" / "compare.py"), default_timeout=60)
    app.run()
    app.selectbox(key="compare_metric").set_value("measured_speedup").run()
    assert not app.exception
    spec = json.loads(app.get("vega_lite_chart")[0].proto.spec)
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["bar", "rule"]
    app.radio(key="compare_mode").set_value("runs").run()
    assert not app.exception, [exception.value for exception in app.exception]
    assert app.get("vega_lite_chart")


def test_a_read_only_dashboard_shows_no_launch_form_and_writes_nothing(
    filled_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import event

    monkeypatch.setenv("DECODELAB_DB", filled_store_url)
    monkeypatch.setenv("DECODELAB_READ_ONLY", "1")
    statements: list[str] = []
    engine = data.store_for(filled_store_url).engine
    listener = lambda _c, _cur, statement, *_rest: statements.append(statement.split()[0].upper())  # noqa: E731
    event.listen(engine, "before_cursor_execute", listener)
    try:
        app = AppTest.from_file(str(DASHBOARD / "app.py"), default_timeout=60)
        app.run()
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    assert not app.exception, [exception.value for exception in app.exception]
    assert not app.sidebar.button, "no launch button"
    assert any("Read-only" in caption.value for caption in app.sidebar.caption)
    assert not {"INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP"} & set(statements), set(statements)


def test_the_dashboard_starts_no_worker_beside_a_live_one(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import dashboard.launch

    started: list[str] = []
    monkeypatch.setattr(dashboard.launch, "start_worker", lambda url: started.append(url))
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    monkeypatch.setenv("DECODELAB_MACHINE", "dash-box")
    store = Store(sqlite_url)
    # A worker left running by an earlier dashboard (or started from a terminal) serves this machine.
    store.workers.register(
        name="old:1", kind="worker", machine_name="dash-box", host="h", pid=1, stale_after_seconds=60
    )

    def launch_tiny() -> AppTest:
        app = AppTest.from_file(str(DASHBOARD / "app.py"), default_timeout=60)
        app.run()
        app.radio(key="launch_source").set_value("spec").run()
        app.text_area(key="launch_spec").input(TINY_SPEC.read_text()).run()
        app.button(key="launch_button").click().run()
        assert not app.exception, [exception.value for exception in app.exception]
        return app

    app = launch_tiny()
    captions = [caption.value for caption in app.sidebar.caption]
    assert "A worker already serves machine dash-box." in captions and not started
    assert any(caption.startswith("dash-box · worker old:1 · live") for caption in captions), captions
    # Once it has stopped, the next launch starts one.
    store.workers.stop(store.workers.live("dash-box")[0])
    launch_tiny()
    assert started == [sqlite_url]
    assert len(frames.jobs(store)) == 2


def test_with_an_oidc_login_configured_nothing_shows_before_logging_in(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Store(sqlite_url).close()
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    monkeypatch.setenv("DECODELAB_READ_ONLY", "1")
    # Read from the file Streamlit reads (tests/test_access.py: the allow-list, a broken file).
    from tests.test_access import COMPLETE, secrets

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    login = secrets(tmp_path, COMPLETE)
    app = AppTest.from_file(str(DASHBOARD / "app.py"), default_timeout=60)
    app.run()
    assert not app.exception, [exception.value for exception in app.exception]
    assert [button.label for button in app.button] == ["Log in"]
    assert not app.title or app.title[0].value == "decodelab"
    login.unlink()
    open_app = AppTest.from_file(str(DASHBOARD / "app.py"), default_timeout=60)
    open_app.run()
    assert "Log in" not in [button.label for button in open_app.button], "without [auth] there is no gate"


def test_the_review_page_compares_two_runs_and_puts_the_regressions_first(
    filled_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import copy_store
    from tests.review_helpers import reviewed_pair

    url = copy_store(filled_store_url, tmp_path / "review.db")
    baseline, slowed = reviewed_pair(Store(url))
    monkeypatch.setenv("DECODELAB_DB", url)
    app = AppTest.from_file(str(DASHBOARD / "views" / "review.py"), default_timeout=120)
    app.run()
    assert not app.exception, [exception.value for exception in app.exception]
    assert app.query_params["run"] == str(slowed) and app.query_params["baseline"] == str(baseline)
    shown = {metric.label: metric.value for metric in app.metric}
    assert int(shown["regressed"]) > 0
    # Issue 44 D5: the page opens with what it could see, before any count or warning.
    from streamlit.testing.v1.element_tree import Info, Metric
    from streamlit.testing.v1.element_tree import Warning as WarningBox

    from analysis import report, review_lines

    nodes = list(app.main)
    first_box = next(index for index, node in enumerate(nodes) if isinstance(node, Info | WarningBox))
    assert first_box < next(index for index, node in enumerate(nodes) if isinstance(node, Metric))
    judged = report.build_report(Store(url), slowed, baseline, calibrated=False).table
    opening = nodes[first_box]
    assert isinstance(opening, Info | WarningBox) and opening.value == review_lines.seen_line(judged)
    assert isinstance(opening, WarningBox) == review_lines.cannot_see(judged)
    # Then at most two boxes before the counts: whether it is underpowered, and the rest in one list.
    first_metric = next(index for index, node in enumerate(nodes) if isinstance(node, Metric))
    boxes = [node.value for node in nodes[:first_metric] if isinstance(node, Info | WarningBox)]
    built = report.build_report(Store(url), slowed, baseline, calibrated=False)
    power = review_lines.power_line(judged)
    assert boxes == [
        opening.value,
        *([power] if power else []),
        *filter(None, [review_lines.notes_markdown(built.warnings)]),
    ]
    table = app.dataframe[0].value
    assert table.iloc[0]["verdict"] == "regressed"
    # Read left to right: the verdict, what it is of, how far it moved and why, then the test's figures.
    from analysis import review

    columns = list(table.columns)
    assert columns == [column for column in review.PAGE_COLUMNS if column in columns], columns
    assert columns[:6] == ["verdict", "experiment", "point", "metric", "change", "why"], columns
    assert sorted(review.PAGE_COLUMNS) == sorted(review.COLUMNS)
    # A tested timed row that did not alert says what it could have seen.
    labels = [label for label in table["verdict"] if label.startswith("within noise")]
    assert all(label.startswith("within noise (would have seen ") for label in labels), labels
    # ≥ some change for a paired ratio; a min-of-N time with no history yet could see none.
    waiting = len(review_lines.waiting_rows(judged).query("verdict == 'within noise'"))
    assert sum(label.endswith("no change)") for label in labels) == waiting
    assert sum("would have seen ≥ " in label for label in labels) == len(labels) - waiting > 0
    # It opens with the verdict counts, each verdict word a link to its meaning, and the calibration line.
    texts = [element.value for element in app.markdown]
    counts = next(text for text in texts if text.startswith("**Verdicts:**"))
    assert f"{shown['regressed']} [regressed](#verdict-regressed)" in counts, counts
    calibration = next(text for text in texts if text.startswith("**Calibration:**"))
    assert texts.index(counts) < texts.index(calibration)
    # Drawn last (the slow part), in the place it was kept for: the report's own line.
    assert calibration == f"**Calibration:** {report.build_report(Store(url), slowed, baseline).calibration}"
    meanings = next(text for text in texts if '<a id="verdict-regressed"></a>' in text)
    words = {label.split(" (")[0] for label in table["verdict"]}
    assert all(f'<a id="verdict-{verdict.replace(" ", "-")}"></a>' in meanings for verdict in words)
    assert any("drift figure" in caption.value for caption in app.caption)
    assert app.get("vega_lite_chart"), "the review draws its charts"
    monkeypatch.setenv("DECODELAB_READ_ONLY", "1")
    shown_only = AppTest.from_file(str(DASHBOARD / "views" / "review.py"), default_timeout=120)
    shown_only.run()
    assert not shown_only.exception
    labels = [button.label for button in shown_only.button]
    assert not any("Save tags" in label or "Pin run" in label for label in labels), labels


def test_the_compare_page_keeps_a_pinned_run_and_the_reference_in_the_url(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_machines import recorded_run

    store = Store(sqlite_url)
    first = recorded_run(store, "laptop", {64: 2.0})
    recorded_run(store, "laptop", {64: 2.5})
    server = recorded_run(store, "server", {64: 3.0})
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    app = AppTest.from_file(str(DASHBOARD / "views" / "compare.py"), default_timeout=60)
    app.query_params["pin"] = f"laptop:{first}"
    app.query_params["reference"] = "server"
    app.run()
    assert not app.exception, [exception.value for exception in app.exception]
    assert f"laptop: run {first}, server: run {server}" in [caption.value for caption in app.caption]
    matrix = app.dataframe[0].value.set_index(["metric", "case"])
    # One case per part: labelled by its part alone.
    assert matrix.loc[("measured_speedup", "timing"), "laptop / server"] == "×0.667"  # the pinned run's 2.0 against 3.0
    assert any(success.value.endswith("1 deterministic figure, equal") for success in app.success)


def test_a_custom_launch_draws_its_own_history_line_and_makes_no_change_point_in_the_presets() -> None:
    """A kv_cache-only launch (stored as custom, its spec kept) timed 0.2 s where the quick runs
    take 230 s: it must not mark the quick series' change points (230 → 0.2 → 230)."""
    from runner.spec.sweeps import load_preset

    quick = load_preset("quick").raw
    kv_only = {**quick, "experiments": {"kv_cache": quick["experiments"]["kv_cache"]}}
    runs = pd.DataFrame(
        {
            "run_id": range(8),
            "machine": ["a"] * 8,
            "machine_fingerprint": ["f"] * 8,
            "started_at": pd.date_range("2026-01-01", periods=8, freq="D"),
            "tags": "",
            "preset": ["quick"] * 4 + [None] + ["quick"] * 3,
            "spec": [quick] * 4 + [kv_only] + [quick] * 3,
        }
    )
    values = pd.DataFrame({"run_id": range(8), "value": [230.0, 231, 229, 230, 0.2, 230, 231, 229]})
    flagged = history_series.change_points(values, runs)
    assert not flagged["change_point"].any(), flagged[["run_id", "value", "change_point"]]
    assert flagged.set_index("run_id")["sweep"].to_dict()[4] == "quick, kv_cache only"


def sweep_runs() -> pd.DataFrame:
    """Runs 1–3 of quick on machine a, then a kv_cache-only custom launch (run 4, newest) and
    one still running (run 5)."""
    from runner.spec.sweeps import load_preset

    quick = load_preset("quick").raw
    kv_only = {**quick, "experiments": {"kv_cache": quick["experiments"]["kv_cache"]}}
    started = pd.date_range("2026-01-01", periods=5, freq="h")
    return pd.DataFrame(
        {
            "run_id": [1, 2, 3, 4, 5],
            "machine": ["a"] * 5,
            "machine_fingerprint": ["f"] * 5,
            "started_at": started,
            "finished_at": [started[0] + pd.Timedelta(seconds=150), started[1] + pd.Timedelta(seconds=140)]
            + [started[2] + pd.Timedelta(seconds=160), started[3] + pd.Timedelta(seconds=10), pd.NaT],
            # Run 1 trained its model for 1,826 s before its 150 s sweep; the others reused it.
            "wall_seconds": [1976.0, 150.0, 170.0, 12.0, None],
            "status": ["done", "done", "done", "done", "running"],
            "tags": "",
            "preset": ["quick", "quick", "quick", None, "quick"],
            "spec": [quick, quick, quick, kv_only, quick],
        }
    )


def test_the_review_opens_on_runs_of_the_same_spec_and_preset() -> None:
    from analysis.runs import default_baseline, default_review_run, same_sweep_runs

    runs = sweep_runs()
    # The newest run (5) is still running and the custom run 4 has no earlier run of its spec:
    # the review opens on run 3 against run 2, both quick.
    assert default_baseline(runs, 4) is None
    assert default_review_run(runs) == 3 and default_baseline(runs, 3) == 2
    # The custom run's fallback is another run of its own spec, never a quick one.
    assert same_sweep_runs(runs, 4) == [] and same_sweep_runs(runs, 2) == [5, 3, 1]


def test_a_reviews_warnings_are_one_list_under_what_they_are() -> None:
    from analysis import review_lines

    assert review_lines.notes_markdown([]) == ""
    assert review_lines.notes_markdown(["the machine moved"]) == "the machine moved"
    assert review_lines.notes_markdown(["a", "b"]) == "**What else limits this review:**\n- a\n- b"


def test_a_review_against_a_later_run_says_which_way_its_verdicts_read() -> None:
    """A store's first run has no earlier run to be reviewed against: the page offers a later one,
    and says that the verdicts then read the older run against the newer."""
    from analysis.runs import later_baseline

    runs = sweep_runs()
    said = later_baseline(runs, 1, 3)
    assert said is not None and said.startswith("The baseline, run 3, ran after run 1")
    assert "regressed means run 1 did worse than run 3" in said
    assert later_baseline(runs, 3, 1) is None and later_baseline(runs, 3, 99) is None
    unknown = runs.copy()
    unknown.loc[unknown.index[1], "started_at"] = pd.NaT  # run 2's start unknown
    assert later_baseline(unknown, 2, 3) is None and later_baseline(unknown, 1, 2) is None


def test_the_machines_report_compares_runs_of_one_spec() -> None:
    from analysis import machines
    from runner.spec.sweeps import load_preset

    quick = load_preset("quick").raw
    other = {**quick, "name": "mine"}  # two spec files of their own: both read "custom"
    runs = pd.DataFrame(
        {
            "run_id": [1, 2, 3],
            "machine": ["laptop", "server", "laptop"],
            "started_at": pd.date_range("2026-01-01", periods=3, freq="h"),
            "status": "done",
            "tags": "",
            "preset": None,
            "spec": [{**quick, "name": "lab"}, {**quick, "name": "lab"}, other],
        }
    )
    assert machines.presets_by_machines(runs) == ["custom"]
    # The spec on both machines stands for "custom", not the newer one-machine spec (run 3).
    assert machines.chosen_runs(runs, "custom", ["laptop", "server"]) == {"laptop": 1, "server": 2}


def test_the_wall_time_series_sets_training_apart_and_plots_only_finished_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = sweep_runs()

    def done_runs(store: object, status: str | None = None, **_: object) -> pd.DataFrame:
        return runs if status is None else runs[runs["status"] == status].reset_index(drop=True)

    monkeypatch.setattr(history_series.frames, "runs", done_runs)
    series = next(series for series in history_series.SERIES if series.name == "quick-sweep wall time")
    values = series.read(None)  # type: ignore[arg-type]
    by_run = values.pivot_table(index="run_id", columns="impl", values="value")
    assert by_run["sweep"].to_dict() == {1: 150.0, 2: 140.0, 3: 160.0}
    assert by_run["training or loading"].to_dict() == {1: 1826.0, 2: 10.0, 3: 10.0}
    # A running run's figures (run 5) are never plotted, whatever series reads them.
    running = pd.DataFrame({"run_id": [3, 5], "impl": "fast", "value": [1.0, 9.0]})
    reads = history_series.Series("x", "ratio", "", lambda store: running)
    assert set(history_series.series_history(None, reads)["run_id"]) == {3}  # type: ignore[arg-type]


def test_a_reviews_cache_key_moves_with_what_the_review_reads_and_only_with_it() -> None:
    runs = pd.DataFrame(
        {
            "run_id": [3, 2, 1],
            "status": ["running", "done", "done"],
            "finished_at": [None, "2026-12-06 10:01", "2026-12-06 10:00"],
            "tags": ["", "", ""],
            "note": [None, None, None],
            "wall_seconds": [None, 80.0, 81.0],
        }
    )
    finished = data.review_state(runs, 2, 1, now=0.0)
    # Two finished runs: the same key later, and for a column the review does not read.
    assert data.review_state(runs, 2, 1, now=10_000.0) == finished
    assert data.review_state(runs.assign(wall_seconds=[1.0, 2.0, 3.0]), 2, 1, now=0.0) == finished
    # A tag (it moves baselines and history), a note, a run finishing: a new key.
    assert data.review_state(runs.assign(tags=["", "", "suspect"]), 2, 1, now=0.0) != finished
    assert (
        data.review_state(runs.assign(note=pd.Series([None, "laptop", None], dtype=object)), 2, 1, now=0.0) != finished
    )
    assert data.review_state(runs.assign(status=["done", "done", "done"]), 2, 1, now=0.0) != finished
    # A run still running gets its samples afresh every RESULTS_TTL_SECONDS.
    running = data.review_state(runs, 3, 2, now=0.0)
    assert data.review_state(runs, 3, 2, now=data.RESULTS_TTL_SECONDS - 1.0) == running
    assert data.review_state(runs, 3, 2, now=data.RESULTS_TTL_SECONDS + 1.0) != running
    # An abandoned run's samples are final (another machine went on as a new run).
    abandoned = runs.assign(status=["abandoned", "done", "done"])
    assert data.review_state(abandoned, 3, 2, now=0.0) == data.review_state(abandoned, 3, 2, now=10_000.0)


def rendered_page(page: str, url: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """``page`` run once on the store at ``url``, with no exception."""
    monkeypatch.setenv("DECODELAB_DB", url)
    app = AppTest.from_file(str(DASHBOARD / "views" / f"{page}.py"), default_timeout=60)
    app.run()
    assert not app.exception, [exception.value for exception in app.exception]
    return app


def test_historys_estimate_error_says_which_way_its_sign_points(
    filled_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = rendered_page("history", filled_store_url, monkeypatch)
    runs = next(frame for frame in app.dataframe if "estimate_error" in frame.value.columns)
    columns = json.loads(runs.proto.columns)
    assert "+50% said half again as long" in columns["estimate_error"]["help"]
    assert "help" not in columns["run_id"]


def test_the_quantization_page_says_what_a_divergence_position_of_every_token_means(
    filled_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chart writes "never diverged" where the table holds the number of tokens generated."""
    app = rendered_page("quantization", filled_store_url, monkeypatch)
    table = next(frame.value for frame in app.dataframe if "divergence_position_greedy" in frame.value.columns)
    [caption] = [caption.value for caption in app.caption if caption.value.startswith("Divergence positions")]
    said = re.search(r"A position of (\d+), as many as were generated, means none differed", caption)
    assert said is not None and '(the chart\'s "never diverged")' in caption, caption
    # No position lies past the tokens generated: the largest possible is "none differed".
    assert table["divergence_position_greedy"].max() <= int(said.group(1))


def test_the_scale_calculators_users_and_budget_move_the_columns_shown_first() -> None:
    app = AppTest.from_file(str(DASHBOARD / "views" / "scale.py"), default_timeout=60)
    app.run()
    first = app.dataframe[0].value
    assert list(first.columns[:4]) == ["shape", "kv_gb_per_user", "kv_gb_all_users", "max_users_in_budget"]
    app.number_input(key="scale_users").set_value(10)
    app.number_input(key="scale_budget").set_value(160.0)
    app.run()
    assert not app.exception, [exception.value for exception in app.exception]
    second = app.dataframe[0].value
    assert second["kv_gb_all_users"].tolist() == pytest.approx((10 * first["kv_gb_all_users"]).tolist())
    assert (second["max_users_in_budget"] >= 2 * first["max_users_in_budget"]).all()
    assert any("the budget of 160 GiB is 171.8 GB" in caption.value for caption in app.caption)


def test_one_figure_across_machines_leaves_its_long_slanted_case_axis_untitled() -> None:
    """Under slanted case labels Vega set the axis title on the last label; the chart's title
    says what the axis holds instead."""
    values = pd.DataFrame(
        {
            "case": ["timing · fast · n=64", "width · static · d_model=256"],
            "series": ["vm", "vm"],
            "value": [5.0, 4.6],
            "run_id": [4, 4],
        }
    )
    spec = history_charts.compare_machines(values, "case", "measured_speedup", series="series").to_dict()
    assert spec["encoding"]["x"]["axis"]["title"] is None
    assert spec["title"] == "measured_speedup per case, side by side per series"


def test_each_fitted_power_law_is_drawn_in_its_impls_colour_and_its_modes_dash() -> None:
    timing = pd.DataFrame(
        {
            "n": [64, 128, 64, 128],
            "impl": ["fast", "fast", "static", "static"],
            "seconds_no_cache": [0.02, 0.08, 0.08, 0.3],
            "seconds_cache": [0.005, 0.01, 0.03, 0.06],
        }
    )
    fit = pd.DataFrame(
        {
            "impl": ["fast", "static"],
            "slope_no_cache": [2.0, 1.9],
            "fit_scale_no_cache": [5e-6, 2e-5],
            "max_fit_error_no_cache": [0.05, 0.04],
            "slope_cache": [1.0, 1.0],
            "fit_scale_cache": [8e-5, 4.7e-4],
            "max_fit_error_cache": [0.02, 0.03],
        }
    )
    spec = charts.seconds_against_n(timing, fit).to_dict()
    fits = spec["layer"][-1]
    colour = fits["encoding"]["color"]
    assert colour["field"] == "impl" and colour["legend"] is None
    assert dict(zip(colour["scale"]["domain"], colour["scale"]["range"], strict=True)) == {
        impl: theme.IMPL_COLORS[impl] for impl in ("fast", "static")
    }
    drawn = spec["datasets"][fits["data"]["name"]]
    assert {row["mode"] for row in drawn} == {"cache", "no cache"}  # the points' own dash values
    assert fits["encoding"]["strokeDash"]["field"] == "mode"
    assert any(row["fit"] == "fit no cache · fast: n^2.00 (max error 5%)" for row in drawn)
