"""A run's own text cannot take a process down or become markup (issue 41, rows 1, 6, 7, 10 and
the History crash), through the CLI and the History page's script.

The "legacy" store holds what a store written before text was cleaned at entry may hold: control
characters (BEL, ESC, NUL) in a case's impl and the machine's name, Markdown in a run's preset,
status and machine name, a bare CR before a formula in the machine's name."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from streamlit.testing.v1 import AppTest

from store import frames
from store.store import Store
from tests.conftest import QUICK_SPEC, ROOT, copy_store, run_decodelab

CONTROLS = "\x07\x1b\x00"
MACHINE = "vm\x07\x1b[31m\x00 ![m](http://evil.invalid/m.png)\r=cmd|' /C calc'!A0"
PRESET = "![p](http://evil.invalid/p.png)\n# owned"
STATUS = "done ![s](http://evil.invalid/s.png)"
# An image or a heading that survived unescaped.
MARKUP = re.compile(r"(?<!\\)!(?<!\\)\[|^#+ owned", flags=re.MULTILINE)
EXPERIMENTS = ("training_summary", "kv_cache", "overhead", "quantization", "speculative", "context_cost")


@pytest.fixture(scope="module")
def exported(filled_store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session store's run as a JSON export."""
    directory = tmp_path_factory.mktemp("exported")
    result = run_decodelab("export", "--format", "json", "--out", "run.json", "--db", filled_store_url, cwd=directory)
    assert result.returncode == 0, result.stderr
    return directory / "run.json"


@pytest.fixture(scope="module")
def legacy_store(filled_store_url: str, exported: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The session's run and an imported copy of it (run 2), then the text written straight into
    the store as an older decodelab let it in."""
    directory = tmp_path_factory.mktemp("legacy")
    url = copy_store(filled_store_url, directory / "legacy.db")
    rows = json.loads(exported.read_text())
    for row in rows:
        row["run"]["uid"] = "copy-of-the-session-run"
    (directory / "copy.json").write_text(json.dumps(rows))
    imported = run_decodelab("import", "copy.json", "--db", url, cwd=directory)
    assert imported.returncode == 0, imported.stderr
    store = Store(url)
    with store.engine.begin() as connection:
        connection.execute(sa.text("UPDATE machine SET name = :name"), {"name": MACHINE})
        # The run keeps status done (the machines report compares done runs); its baseline shows the status.
        connection.execute(sa.text("UPDATE run SET preset = :preset WHERE id = 2"), {"preset": PRESET})
        connection.execute(sa.text("UPDATE run SET status = :status WHERE id = 1"), {"status": STATUS})
        for case_id, params in connection.execute(sa.text('SELECT id, params FROM "case" WHERE run_id = 2')).all():
            params = json.loads(params) if isinstance(params, str) else params
            if "impl" in params:
                params["impl"] = params["impl"][:1] + CONTROLS + params["impl"][1:]
                connection.execute(
                    sa.text('UPDATE "case" SET params = :params WHERE id = :id'),
                    {"params": json.dumps(params), "id": case_id},
                )
    store.close()
    return url


@pytest.mark.parametrize("report", ["run", "roofline"])
def test_the_html_reports_draw_labels_with_control_characters(legacy_store: str, tmp_path: Path, report: str) -> None:
    """Before: vl-convert panicked on the BEL ("non-unwinding panic. aborting"), rc -6, no file."""
    extra = ["--baseline", "1"] if report == "run" else []
    result = run_decodelab(
        "report", report, "--run", "2", *extra, "--out", "report.html", "--db", legacy_store, cwd=tmp_path
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    page = (tmp_path / "report.html").read_text()
    assert "<svg" in page and "could not be drawn" not in page
    # The charts were drawn from the labels made XML-safe (the tables keep the stored text, escaped).
    charts = "".join(re.findall(r"<svg.*?</svg>", page, flags=re.DOTALL))
    assert charts and not any(character in charts for character in CONTROLS)


def test_the_markdown_reports_keep_a_runs_text_as_text(legacy_store: str, tmp_path: Path) -> None:
    """Before: the preset and status reached the run line, the calibration and the warnings raw;
    the machines report's title held the preset, the roofline report's the machine name."""
    written = {
        "run.md": ["report", "run", "--run", "2", "--baseline", "1"],
        "machines.md": ["report", "machines", "--preset", PRESET],
        "roofline.md": ["report", "roofline", "--run", "2"],
    }
    for name, command in written.items():
        result = run_decodelab(*command, "--out", name, "--db", legacy_store, cwd=tmp_path)
        assert result.returncode == 0, (name, result.stderr[-2000:])
        text = (tmp_path / name).read_text()
        assert not MARKUP.search(text), (name, MARKUP.search(text))
        assert not any(character in text for character in CONTROLS), name
        assert "\r" not in text, name
    report = (tmp_path / "run.md").read_text()
    assert "\\!\\[p\\](http://evil.invalid/p.png) # owned" in report  # shown, as typed, on one line
    assert "done \\!\\[s\\]" in report


def test_csv_export_starts_no_row_and_no_formula(legacy_store: str, tmp_path: Path) -> None:
    """Before: the bare CR was written as it was, so a spreadsheet that splits rows on CR started
    one with =cmd."""
    result = run_decodelab("export", "--out", "all.csv", "--db", legacy_store, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with (tmp_path / "all.csv").open(newline="") as exported:
        text = exported.read()
    assert "\r" not in text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(frames.export_rows(Store(legacy_store)))
    assert {row["machine"] for row in rows} == {"vm[31m ![m](http://evil.invalid/m.png) =cmd|' /C calc'!A0"}
    for line in re.split(r"[\r\n]", text):
        assert not line.startswith(("=", "+", "-", "@")), line


def test_a_spec_with_a_control_character_is_one_line(tmp_path: Path) -> None:
    """Row 11's NUL in the corpus field (and row 10's escape code in a spec name), refused where
    the spec is read: before, the NUL reached the file system ("embedded null byte")."""
    for old, new, field in (
        ('corpus = "default"', 'corpus = "a\\u0000b"', "model.corpus"),
        ('name = "tiny"', 'name = "x\\u001b]0;owned\\u0007"', "spec.name"),
    ):
        assert old in QUICK_SPEC
        (tmp_path / "spec.toml").write_text(QUICK_SPEC.replace(old, new))
        result = run_decodelab("run", "--spec", "spec.toml", "--db", f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {field}: text with a control character"), lines
        assert "\x1b" not in result.stderr and "\x00" not in result.stderr


@pytest.fixture(scope="module")
def single_experiment_stores(exported: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One store per experiment, each holding the session run's cases of that experiment only
    (imported through the CLI)."""
    rows = json.loads(exported.read_text())
    stores = {}
    for experiment in EXPERIMENTS:
        directory = tmp_path_factory.mktemp(experiment)
        (directory / "run.json").write_text(json.dumps([row for row in rows if row["experiment"] == experiment]))
        url = f"sqlite:///{directory / 'store.db'}"
        result = run_decodelab("import", "run.json", "--db", url, cwd=directory)
        assert result.returncode == 0, result.stderr
        stores[experiment] = url
    return stores


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_history_opens_on_a_store_of_one_experiment(
    single_experiment_stores: dict[str, str], experiment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a store with no speculative result (kv_cache runs only) raised KeyError ['impl'] in
    history_series.series_history."""
    monkeypatch.setenv("DECODELAB_DB", single_experiment_stores[experiment])
    monkeypatch.setenv("DECODELAB_READ_ONLY", "1")
    app = AppTest.from_file(str(ROOT / "dashboard" / "views" / "history.py"), default_timeout=120)
    app.run()
    assert not app.exception, [exception.value for exception in app.exception]
    assert any("Runs" in str(header.value) for header in app.subheader)  # the page ran to its runs table


def test_an_error_quoting_a_stored_name_reaches_the_terminal_without_escapes(legacy_store: str, tmp_path: Path) -> None:
    """Row 10: `report machines` lists the machines it allows; before, the stored ESC reached the
    terminal raw."""
    result = run_decodelab(
        "report", "machines", "--machines", "nope", "--out", "m.md", "--db", legacy_store, cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "vm[31m" in lines[0], lines
    assert not any(character in result.stderr for character in CONTROLS)


def test_a_chart_that_cannot_be_drawn_is_one_line_in_the_html_report() -> None:
    """Before: vl-convert's error ended the report (and, through the dashboard, its page)."""
    from analysis.report_render import to_svg

    class Undrawable:
        def to_dict(self) -> dict[str, object]:
            return {"mark": "no-such-mark", "data": {"values": [{"x": "a\x07"}]}}

    shown = to_svg(Undrawable())  # type: ignore[arg-type]
    assert shown.startswith('<p class="warning">this chart could not be drawn: ') and "\n" not in shown
