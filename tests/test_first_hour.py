"""What a newcomer meets first, outside the browser: one chart style (analysis.theme), one table
format (analysis.tables), labels that say each word once, the run's closing line, and the
command line's --version, flags in --help and a busy dashboard port."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import pytest

from analysis import machines, tables, theme
from dashboard import charts
from runner.execution.execute import done_line
from runner.labels import progress_label, variant_label
from tests.conftest import ROOT, run_decodelab


def test_an_impl_draft_or_precision_keeps_its_colour_whatever_else_is_drawn() -> None:
    alone = theme.color_scale("impl", ["static"])
    both = theme.color_scale("impl", ["fast", "static"])
    assert alone.range[alone.domain.index("static")] == both.range[both.domain.index("static")]
    drafts = theme.color_scale("draft", ["small", "bigram", "int8"])
    assert dict(zip(drafts.domain, drafts.range, strict=True)) == {
        name: theme.DRAFT_COLORS[name] for name in ("bigram", "int8", "small")
    }
    others = theme.color_scale("layout", ["all heads", "kv heads 1", "kv heads 2"])
    assert len(set(others.range)) == 3 and theme.REFERENCE_COLOR not in others.range


def test_a_fitted_log_axis_spans_the_data_not_whole_decades() -> None:
    scale = theme.fitted_scale([64, 128, 256], log=True)
    low, high = scale.domain
    assert 60 < low < 64 and 256 < high < 270 and scale.nice is False
    linear = theme.fitted_scale([0.9, 1.1])
    assert linear.zero is False and 0.8 < linear.domain[0] < 0.9


def test_every_chart_is_finished_with_whole_legends_and_a_title_and_an_untitled_one_is_refused() -> None:
    frame = pd.DataFrame(
        {"variant": ["fp32", "int8 · fake"], "weight_bytes": [4096.0, 1024.0], "precision": ["fp32", "int8"]}
    )
    spec = theme.finish(charts.bars(frame, "variant", "weight_bytes", "weight bytes", "precision")).to_dict()
    assert spec["title"] == "weight bytes"
    assert spec["config"]["legend"] == {"labelLimit": 0, "titleLimit": 0, "symbolOpacity": 1, "symbolLimit": 0}
    # Tooltips without a format of their own: six significant digits, a run's time to the minute.
    assert spec["config"]["tooltipFormat"] == {"numberFormat": ",.6~r", "timeFormat": "%Y-%m-%d %H:%M"}
    assert spec["encoding"]["x"]["axis"]["labelOverlap"] is False  # every bar labelled
    # Each bar's value is written over it, whole numbers whole, others to three figures.
    written = [layer for layer in spec["layer"] if layer["mark"]["type"] == "text"]
    text = {"field": "weight_bytes", "format": ",d", "type": "quantitative"}
    assert written and written[0]["encoding"]["text"] == text
    # Others with the decimals that give the largest three figures, the same for every bar.
    assert charts.value_format(pd.Series([0.912, 1.01, 0.32])) == ",.2f"
    assert charts.value_format(pd.Series([0.0691, 0.0204])) == ",.4f"
    assert charts.value_format(pd.Series([6.7e-6, -0.00454])) == ",.5f"
    assert charts.value_format(pd.Series([1234.5, 20.25])) == ",.0f"
    assert charts.value_format(pd.Series([0.0, 1.0])) == ",.2f"  # a zero is no count's evidence
    # The plot keeps its own height whatever the legend and labels take (Streamlit's "fit" squeezed it).
    assert spec["autosize"] == {"type": "fit-x", "contains": "padding"}
    with pytest.raises(ValueError, match="title"):
        theme.finish(alt.Chart(frame).mark_bar().encode(x="variant:N", y="weight_bytes:Q"))


def test_a_variant_that_never_diverged_draws_no_bar_and_says_so() -> None:
    cases = pd.DataFrame(
        {
            "variant": ["fp32", "int8 · fake", "fast_bf16"],
            "precision": ["fp32", "int8", "bf16"],
            "divergence_position_greedy": [200.0, 21.0, 200.0],
            "divergence_tokens": [200, 200, 200],
        }
    )
    spec = charts.divergence(cases, "variant", "divergence_position_greedy", "divergence_tokens").to_dict()
    columns, never = spec["layer"]
    bars = spec["datasets"][columns["data"]["name"]]
    assert [row["index"] for row in bars] == [None, 21.0, None]
    assert [row["variant"] for row in spec["datasets"][never["data"]["name"]]] == ["fp32", "fast_bf16"]
    assert never["encoding"]["text"]["field"] == "note"
    # The index axis spans the tokens generated, in whole numbers, bars or none.
    y = columns["encoding"]["y"]
    assert y["scale"]["domain"] == [0, 200] and y["axis"]["format"] == "d"


def test_the_table_format_reads_flags_missing_values_big_numbers_and_bytes() -> None:
    frame = pd.DataFrame(
        {
            "case_id": [7, 8],
            "run_id": [1234, 1235],
            "strings_identical": [1.0, 0.0],
            "cache": [True, False],
            "mults_cache": [123456789.0, 12.0],
            "weight_bytes": [2.5 * 2**20, 512.0],
            "seconds": [0.000123456, None],
            "impl": ["static", None],
        }
    )
    shown = tables.cell_texts(frame)
    assert list(shown.columns) == [
        "run_id",
        "strings_identical",
        "cache",
        "mults_cache",
        "weight_bytes",
        "seconds",
        "impl",
    ]
    assert shown.to_dict("records") == [
        {
            "run_id": "1234",
            "strings_identical": "yes",
            "cache": "yes",
            "mults_cache": "123,456,789",
            "weight_bytes": "2.50 MiB",
            "seconds": "123.5 µs",
            "impl": "static",
        },
        {
            "run_id": "1235",
            "strings_identical": "no",
            "cache": "no",
            "mults_cache": "12",
            "weight_bytes": "512 B",
            "seconds": "–",
            "impl": "–",
        },
    ]
    # The styled table keeps the numbers underneath (a column sorts by value) and hides case_id.
    styled = tables.display(frame).data  # type: ignore[attr-defined]
    assert "case_id" not in styled.columns and styled["mults_cache"].dtype == float
    # Streamlit draws its own "None" over a missing cell and checkboxes for booleans, whatever the
    # style says: those cells hold their texts underneath.
    assert styled["seconds"].tolist() == ["123.5 µs", "–"] and styled["impl"].tolist() == ["static", "–"]
    assert styled["cache"].tolist() == ["yes", "no"] and styled["strings_identical"].tolist() == ["yes", "no"]


def test_a_tables_headers_are_words_and_its_fractions_percentages() -> None:
    assert [
        tables.header(name)
        for name in (
            "run_id",
            "noise_floor",
            "wall_seconds",
            "draft_call_us",
            "seconds_no_cache",
            "measured_us_per_token",
        )
    ] == ["run", "noise floor", "wall time", "draft call time", "time no cache", "measured µs per token"]
    # An axis over a metric's raw values says its unit, a ratio's going without saying.
    assert [tables.axis_title(name) for name in ("val_loss", "seconds_per_token", "measured_speedup")] == [
        "held-out loss (nats)",
        "time per token (seconds)",
        "measured speedup",
    ]
    # A review's baseline and run hold a speedup on one row and seconds on the next: each in its unit.
    review_rows = pd.DataFrame({"baseline": [4.965e-06, 29.42], "run": [5.131e-06, 30.7], "unit": ["seconds", "ratio"]})
    assert tables.cell_texts(review_rows)[["baseline", "run"]].to_dict("records") == [
        {"baseline": "4.965 µs", "run": "5.131 µs"},
        {"baseline": "29.42", "run": "30.7"},
    ]
    frame = pd.DataFrame({"estimate_error": [0.0177, -0.5], "median_abs_error": [2.716, 0.05]})
    assert tables.cell_texts(frame).to_dict("records") == [
        {"estimate_error": "+1.8%", "median_abs_error": "271.6%"},
        {"estimate_error": "-50.0%", "median_abs_error": "5.0%"},
    ]


def test_the_table_format_follows_the_catalogues_unit_not_the_columns_name() -> None:
    frame = pd.DataFrame(
        {
            # A ratio whose name begins with bytes_ (once read as "1 B" and "0 B").
            "bytes_ratio_vs_fp32": [1.0, 0.2612],
            "cache_bytes": [4096.0, 10.0],
            # A catalogue flag whose name holds no flag word, and a case's cache parameter.
            "greedy_matches_target": [1.0, 0.0],
            "cache": [1.0, 0.0],
            "prefill_seconds": [0.0123, 1976.4],
            "target_pass_us": [850.0, 1500.0],
            "change": [0.123, -0.35],
            "started_at": pd.to_datetime(["2026-12-02 10:11:12.123456", "2026-12-02 10:11:13.9"]),
        }
    )
    shown = tables.cell_texts(frame).to_dict("records")
    assert shown == [
        {
            "bytes_ratio_vs_fp32": "1",
            "cache_bytes": "4.00 KiB",
            "greedy_matches_target": "yes",
            "cache": "yes",
            "prefill_seconds": "12.3 ms",
            "target_pass_us": "850 µs",
            "change": "+12.3%",
            "started_at": "2026-12-02 10:11:12",
        },
        {
            "bytes_ratio_vs_fp32": "0.2612",
            "cache_bytes": "10 B",
            "greedy_matches_target": "no",
            "cache": "no",
            "prefill_seconds": "1,976 s",
            "target_pass_us": "1.5 ms",
            "change": "-35.0%",
            "started_at": "2026-12-02 10:11:13",
        },
    ]
    # The dates hold their texts underneath (Streamlit would draw microseconds); the ratio stays a number.
    styled = tables.display(frame).data  # type: ignore[attr-defined]
    assert styled["started_at"].tolist() == ["2026-12-02 10:11:12", "2026-12-02 10:11:13"]
    assert styled["bytes_ratio_vs_fp32"].dtype == float
    # The machines report writes flags, bytes and times the same way.
    assert machines.value_text(1.0, unit="bool") == "yes" and machines.value_text(2048.0, unit="bytes") == "2.00 KiB"
    assert machines.value_text(0.5, 0.4, 0.6, unit="seconds") == "500 ms [400 ms–600 ms]"
    assert machines.field_text("started_at", "2026-12-02 10:11:12.5") == "2026-12-02 10:11:12"


def test_labels_say_each_word_once() -> None:
    assert (
        progress_label("speculative", "speculative · fast · fast_int8 · k=2") == "speculative · fast · fast_int8 · k=2"
    )
    assert progress_label("kv_cache", "timing · static · n=256") == "kv_cache · timing · static · n=256"
    assert progress_label("training_summary", "all") == "training_summary"
    assert variant_label("fp32", "float32") == "fp32"
    assert variant_label("bf16", "fast_bf16") == "fast_bf16"
    assert variant_label("int8", "fake") == "int8 · fake"


def test_the_runs_last_line_gives_the_sweeps_time_and_the_whole_commands_apart() -> None:
    assert done_line(3, 107, 0, 123.44, 230.71) == (
        "run 3 done: 107 cases measured in 123.4 s (230.7 s with the model's training or loading)"
    )
    assert done_line(3, 7, 100, 10.0, 12.0).endswith("; 100 cases were recorded by an earlier attempt and kept")


def test_version_and_flags_without_a_type_in_help(tmp_path: Path) -> None:
    from importlib.metadata import version

    shown = run_decodelab("--version", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.strip() == f"decodelab {version('decodelab')}"
    helped = run_decodelab("worker", "--help", cwd=tmp_path, COLUMNS="120")
    assert helped.returncode == 0 and "--once" in helped.stdout and "--poll-seconds" in helped.stdout
    assert "<bool>" not in helped.stdout and "<float range>" in helped.stdout


def test_no_commands_help_shows_a_flag_as_a_typed_value() -> None:
    """Every command and subcommand's --help, read in-process: a flag is written --flag/--no-flag
    (or alone), never with a <bool> or BOOLEAN value a newcomer would try to type."""
    import typer
    from typer.testing import CliRunner

    from cli.main import app

    def paths(command: object, path: list[str]) -> list[list[str]]:
        below = getattr(command, "commands", {})
        return [path, *[found for name, sub in below.items() for found in paths(sub, [*path, name])]]

    every = paths(typer.main.get_command(app), [])
    assert len(every) > 20 and ["report", "seeds"] in every
    for path in every:
        helped = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert helped.exit_code == 0, (path, helped.output)
        assert "<bool>" not in helped.output and "BOOLEAN" not in helped.output, (path, helped.output)


def test_a_dashboard_on_a_busy_port_says_so_in_one_line_and_claims_no_address(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_decodelab(
            "dashboard", "--db", f"sqlite:///{tmp_path / 'store.db'}", "--port", str(port), cwd=ROOT, timeout=60
        )
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr.strip()
        == f"error: --port: {port} is in use on 127.0.0.1 (allowed: a free port, e.g. --port {port + 1})"
    )
    assert "dashboard for" not in result.stdout + result.stderr


def test_a_calibrated_estimate_of_a_sweep_this_machine_ran_is_the_time_its_cases_took(filled_store_url: str) -> None:
    """Calibrated by one run of the very same spec, the estimate must give back that run's case
    times exactly: each experiment's factor is recorded over modelled time for those cases."""
    import sqlalchemy as sa

    from runner.measure.machine import machine_name
    from runner.spec.calibrated_estimate import estimate, scale_factors
    from runner.spec.sweeps import load_spec_file
    from store.store import Store
    from tests.conftest import TINY_SPEC

    store = Store(filled_store_url)
    spec = load_spec_file(TINY_SPEC)
    factors = scale_factors(store, machine_name())
    calibrated = estimate(spec, factors, model_stored=True)
    with store.engine.connect() as connection:
        started = connection.execute(sa.text("SELECT started_at FROM run WHERE id = 1")).scalar_one()
        created = connection.execute(sa.text('SELECT created_at FROM "case" WHERE run_id = 1 ORDER BY created_at, id'))
        times = [pd.Timestamp(started)] + [pd.Timestamp(row[0]) for row in created]
    taken = (times[-1] - times[0]).total_seconds()
    assert set(calibrated.calibrated) == set(spec.raw["experiments"]) and not calibrated.uncalibrated
    assert calibrated.seconds == pytest.approx(taken, rel=1e-6)
    assert calibrated.training_seconds == 0 and "from this machine's earlier runs" in calibrated.describe()
    # Another machine's estimate has nothing to learn from here: the cost model alone.
    elsewhere = estimate(spec, scale_factors(store, "a-machine-never-seen"), model_stored=False)
    assert elsewhere.calibrated == () and elsewhere.training_seconds > 0
    assert "by the cost model" in elsewhere.describe()
    store.close()


def test_fields_show_only_when_they_apply_and_the_experiments_start_empty_then_remembered(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamlit.testing.v1 import AppTest

    import dashboard.launch
    from store.store import Store

    monkeypatch.setattr(dashboard.launch, "start_worker", lambda url: None)
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    Store(sqlite_url).close()
    app = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
    app.run()
    experiments = app.multiselect(key="launch_experiments_quick")
    assert experiments.value == [] and app.button(key="launch_button").disabled
    labels = {widget.label for widget in app.sidebar.multiselect} | {
        widget.label for widget in app.sidebar.number_input
    }
    assert not [label for label in labels if "lengths" in label or "Draft" in label or "pairs" in label], labels
    assert not app.sidebar.text_area and not app.sidebar.text_input, "no spec box, no machine on a SQLite store"
    experiments.set_value(["kv_cache"]).run()
    labels = {widget.label for widget in app.sidebar.multiselect} | {
        widget.label for widget in app.sidebar.number_input
    }
    assert "KV-cache lengths n (empty: the preset's)" in labels and "Timing pairs per point (0: the preset's)" in labels
    assert not [label for label in labels if label.startswith("Draft lengths")]
    app.multiselect(key="launch_experiments_quick").set_value(["context_cost"]).run()
    # The quick model is not stored yet: training makes the sweep long, so it asks first.
    assert app.button(key="launch_button").disabled
    app.checkbox(key="launch_confirmed").check().run()
    app.button(key="launch_button").click().run()
    assert not app.exception, [exception.value for exception in app.exception]
    assert any("queued" in success.value for success in app.sidebar.success)
    app.selectbox(key="launch_preset").set_value("seed").run()
    app.selectbox(key="launch_preset").set_value("quick").run()
    assert app.multiselect(key="launch_experiments_quick").value == ["context_cost"], "the last choice remembered"


def test_the_review_draws_an_empty_timed_chart_without_altair_warnings() -> None:
    """With no timed row the frame is empty; untyped fields made Altair warn once per field on
    every render of the Review page."""
    import warnings

    from analysis import review_charts

    columns = ["kind", "change", "experiment", "metric", "point", "baseline", "run", "p_value", "noise_floor"]
    empty = pd.DataFrame(columns=[*columns, "verdict"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = review_charts.timed_changes(empty).to_dict()
    assert spec["title"] == "timed metrics: run against baseline"


def test_the_review_names_a_timed_row_without_repeating_its_experiment() -> None:
    from analysis import review_charts

    row = {"kind": "timed", "change": 0.1, "experiment": "speculative", "metric": "speedup_median"}
    table = pd.DataFrame([{**row, "point": "speculative · fast · bigram · k=1", "verdict": "within noise"}])
    spec = review_charts.timed_changes(table).to_dict()
    points = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "point")
    [drawn] = spec["datasets"][points["data"]["name"]]
    # Two lines on the axis (the break keeps the plot wide): experiment · metric, then the point.
    assert drawn["row"] == "speculative · speedup_median | fast · bigram · k=1"


def test_training_is_priced_from_this_machines_earlier_training_scaled_by_size(
    filled_store_url: str, tmp_path: Path
) -> None:
    """The filled store's run trained the tiny model: its training took from the command's start
    (its end less its wall time) to the model's storing. The same model's training estimate must be
    that time per step times the steps asked for; a model of a near size that time scaled by the
    cost model; a model far from it (all overhead against all arithmetic), a machine that never
    trained, or a run whose model was stored before it began (reused), the cost model alone."""
    import sqlalchemy as sa

    from runner.cost.cost_model import training_seconds
    from runner.measure.machine import machine_name
    from runner.spec.calibrated_estimate import earlier_trainings, estimate
    from runner.spec.sweeps import load_preset, load_spec_file, validate
    from store.store import Store
    from tests.conftest import TINY_SPEC, copy_store

    spec = load_spec_file(TINY_SPEC)
    store = Store(filled_store_url)
    with store.engine.connect() as connection:
        finished, wall, stored = connection.execute(
            sa.text(
                "SELECT run.finished_at, run.wall_seconds, model.created_at"
                " FROM run JOIN model ON model.id = run.model_id"
            )
        ).one()
    took = (pd.Timestamp(stored) - (pd.Timestamp(finished) - pd.Timedelta(seconds=wall))).total_seconds()
    trainings = earlier_trainings(store, machine_name())
    store.close()
    assert len(trainings) == 1 and took > 0
    same = estimate(spec, {}, model_stored=False, trainings=trainings)
    assert same.training_seconds == pytest.approx(took, rel=1e-6)
    assert "from this machine's earlier training of this model per step, times 15 steps" in same.describe()
    raw = spec.raw
    longer = validate({**raw, "train": {**raw["train"], "steps": 2 * raw["train"]["steps"]}})
    assert estimate(longer, {}, model_stored=False, trainings=trainings).training_seconds == pytest.approx(2 * took)
    wider = validate({**raw, "model": {**raw["model"], "d_model": 48}})
    scaled = estimate(wider, {}, model_stored=False, trainings=trainings)
    assert scaled.training_seconds == pytest.approx(took * training_seconds(wider) / training_seconds(spec))
    assert "scaled by steps × model size from this machine's earlier training of a d_model=32" in scaled.describe()
    quick = load_preset("quick")
    unlike = estimate(quick, {}, model_stored=False, trainings=trainings)
    assert unlike.training_seconds == training_seconds(quick) and "too unlike this one" in unlike.describe()
    assert estimate(spec, {}, model_stored=True, trainings=trainings).training_seconds == 0
    unscaled = estimate(spec, {}, model_stored=False, trainings=[])
    assert unscaled.training_seconds == training_seconds(spec)
    assert "by the cost model, as this machine trained none before" in unscaled.describe()

    copy = Store(copy_store(filled_store_url, tmp_path / "reused.db"))
    assert earlier_trainings(copy, "a-machine-never-seen") == []
    with copy.engine.begin() as connection:  # the model stored before the run began: reused, not trained
        connection.execute(sa.text("UPDATE model SET created_at = '2000-01-01 00:00:00.000000'"))
    assert earlier_trainings(copy, machine_name()) == []
    copy.close()


def test_the_review_timed_chart_says_why_it_is_small_with_few_rows() -> None:
    """One 30 px row per timed metric: under seven rows the plot is below 200 px, and the chart
    says so in its subtitle (the browser checks read it); seven or more need no reason."""
    from analysis import review_charts, theme

    row = {"kind": "timed", "experiment": "kv_cache", "metric": "measured_speedup", "verdict": "within noise"}
    few = pd.DataFrame([{**row, "change": 0.01 * index, "point": f"n={index}"} for index in range(2)])
    title = review_charts.timed_changes(few).to_dict()["title"]
    assert title["subtitle"] == theme.SMALL_ON_PURPOSE + "one 30 px row per timed metric, 2 timed rows here"
    many = pd.DataFrame([{**row, "change": 0.01 * index, "point": f"n={index}"} for index in range(7)])
    spec = review_charts.timed_changes(many).to_dict()
    assert spec["title"] == "timed metrics: run against baseline"
    # Centred on no change, every ratio inside it (here 1.00–1.06), not a niced 0.1–10.
    low, high = spec["layer"][1]["encoding"]["x"]["scale"]["domain"]
    assert low == pytest.approx(1 / high) and 1.06 < high < 1.2
    # More rows than it draws: its title says which.
    most = pd.DataFrame(
        [{**row, "change": 0.001 * index, "point": f"n={index}"} for index in range(review_charts.MOST_ROWS + 5)]
    )
    title = review_charts.timed_changes(most).to_dict()["title"]
    shown = review_charts.MOST_ROWS
    assert title == f"timed metrics: run against baseline (the {shown} largest changes of {shown + 5})"
    # The legend names the verdicts drawn, in their fixed colours.
    scale = spec["layer"][1]["encoding"]["color"]["scale"]
    assert scale == {"domain": ["within noise"], "range": [review_charts.VERDICT_COLORS["within noise"]]}


def blank_dash_legends(spec: Any) -> list[str]:
    """Layers whose strokeDash legend Vega-Lite would draw from a filled point (a line mark with
    ``point``): every entry blank."""
    found = []
    if isinstance(spec, dict):
        mark = spec.get("mark")
        dash = spec.get("encoding", {}).get("strokeDash")
        pointed_line = isinstance(mark, dict) and mark.get("type") == "line" and mark.get("point")
        if pointed_line and dash is not None and dash.get("legend", {}) is not None:
            found.append(str(dash.get("field")))
        for value in spec.values():
            found += blank_dash_legends(value)
    elif isinstance(spec, list):
        for value in spec:
            found += blank_dash_legends(value)
    return found


def test_a_legend_of_line_styles_draws_its_strokes() -> None:
    from dashboard import charts, speculative_figures

    timing = pd.DataFrame(
        {"n": [64, 128], "impl": ["fast", "fast"], "seconds_no_cache": [0.01, 0.04], "seconds_cache": [0.001, 0.002]}
    )
    curves = pd.DataFrame(
        {"draft": ["bigram"] * 2, "setting": ["k=4"] * 2, "position": [1, 1], "series": ["measured", "a priori"],
         "acceptance": [0.9, 0.88]}
    )  # fmt: skip
    for figure in (charts.seconds_against_n(timing, None), speculative_figures.position_chart(curves)):
        spec = theme.finish(figure).to_dict()
        assert blank_dash_legends(spec) == []
        legends = [layer["encoding"]["strokeDash"].get("legend") for layer in spec["layer"]]
        assert legends[0]["symbolType"] == "stroke" and legends[1:] == [None]  # the lines carry it, once
    broken = alt.Chart(curves).mark_line(point=True).encode(x="position:O", y="acceptance:Q", strokeDash="series:N")
    assert blank_dash_legends(broken.to_dict()) == ["series"]


def test_the_reviews_speculative_chart_gives_each_case_its_own_row() -> None:
    """Cases that share a k (a fixed and a confidence schedule) were one vertical stroke over k."""
    from analysis import review_charts

    frame = pd.DataFrame(
        {
            "case": ["static · bigram · schedule=fixed", "static · bigram · p_min=0.5 · schedule=confidence"] * 2,
            "speedup_median": [1.2, 1.1, 1.25, 1.12],
            "which": ["run 2", "run 2", "baseline 1", "baseline 1"],
        }
    )
    spec = theme.finish(review_charts.cases_side_by_side(frame, "case", "speedup_median", "each case")).to_dict()
    points = spec["layer"][1]
    assert points["mark"]["type"] == "point" and points["encoding"]["y"]["field"] == "case"
    assert sorted(points["encoding"]["y"]["sort"]) == sorted(set(frame["case"]))


def test_the_review_chart_puts_a_slower_time_and_a_lower_speedup_on_the_same_side() -> None:
    """A time per token 25% up and a speedup 20% down are both worse: both left of 1 on the
    Review page's chart of the changes, by the same distance on its log axis."""
    from analysis import review_charts

    rows = [
        {"experiment": "overhead", "metric": "seconds_per_token", "change": 0.25, "point": "overhead · fast · d=64"},
        {"experiment": "kv_cache", "metric": "measured_speedup", "change": -0.2, "point": "kv_cache · fast · n=64"},
    ]
    table = pd.DataFrame([{**row, "kind": "timed", "verdict": "regressed"} for row in rows])
    spec = review_charts.timed_changes(table).to_dict()
    points = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "point")
    drawn = {row["metric"]: row["ratio"] for row in spec["datasets"][points["data"]["name"]]}
    assert drawn == pytest.approx({"seconds_per_token": 0.8, "measured_speedup": 0.8})


def test_a_reviews_run_and_baseline_are_drawn_in_colours_far_apart() -> None:
    """The Review page's per-case chart told "baseline 3" and "run 4" apart by a light blue and a
    light teal (colours from their names): the two sides now have fixed colours, whatever the ids."""
    from analysis import review_charts, theme

    frame = pd.DataFrame(
        {"case": ["fast · bigram", "fast · bigram"], "speedup_median": [0.9, 1.1], "which": ["baseline 3", "run 4"]}
    )
    spec = review_charts.cases_side_by_side(frame, "case", "speedup_median", "speculative").to_dict()
    points = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "point")
    scale = points["encoding"]["color"]["scale"]
    assert dict(zip(scale["domain"], scale["range"], strict=True)) == {
        "baseline 3": theme.WHICH_COLORS["baseline"],
        "run 4": theme.WHICH_COLORS["run"],
    }


def test_the_verdicts_and_the_chart_take_one_direction_for_every_timed_metric() -> None:
    """A headline's direction first, else the metric catalogue's, else higher: a prefill time seen
    with "Every metric" on is lower-is-better in its verdict and drawn inverted on the chart."""
    from analysis import review, review_charts

    assert review.better_way("seconds_per_token") == "lower"
    assert review.better_way("prefill_seconds") == "lower"  # no headline: the catalogue's
    assert review.better_way("draft_cost_ratio") == "higher"  # neither says: higher
    assert review_charts.better_factor("prefill_seconds", 1.25) == pytest.approx(0.8)
    assert review_charts.better_factor("measured_speedup", 1.25) == 1.25


def test_context_costs_two_parts_take_their_fixed_colours() -> None:
    """From their names the two parts came out two pinks."""
    table = pd.DataFrame({"n": [16, 32], "quad_mults": [8192, 32768], "linear_mults": [49152, 98304]})
    spec = charts.quad_vs_linear(table, 96.0).to_dict()
    colour = spec["layer"][0]["encoding"]["color"]["scale"]
    assert dict(zip(colour["domain"], colour["range"], strict=True)) == theme.COST_PART_COLORS


def test_bars_of_zeros_or_infinities_keep_an_axis_and_a_format() -> None:
    """Every bar zero gave the axis a domain of [0, 0]; an infinite value broke the format."""
    zeros = charts.headroom_scale(pd.Series([0.0, 0.0]))
    assert zeros.domain == [0.0, 1.0]
    with_inf = charts.headroom_scale(pd.Series([1.0, float("inf"), 2.0]))
    assert with_inf.domain[0] == 0.0 and 2.0 < with_inf.domain[1] < 2.5
    assert charts.value_format(pd.Series([float("inf"), 1.5])) == ",.2f"
    assert charts.value_format(pd.Series([float("nan")])) == ",.3~r"
