"""User text is data: a hostile note and a hostile machine name reach every sink (the Markdown
reports, the Review page, the terminal, CSV exports and downloads) as inert text."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from store.store import Store
from store.user_text import csv_safe, for_terminal, markdown_cell, markdown_text
from tests.conftest import QUICK_SPEC, ROOT, run_decodelab

NOTE = (
    "fine\n| x | y |\n# Heading\n![img](https://evil.example/x.png) [click](javascript:alert(1)) "
    "<script>alert(1)</script> \x1b[31mred"
)
MACHINE = '=HYPERLINK("https://evil.example")\x1b[2J\x07|x\n# owned [m](javascript:x)'
# Markup that must not survive unescaped: a link or image, raw HTML, a heading or row of its own.
UNESCAPED = re.compile(r"(?<!\\)\[(click|m)(?<!\\)\]|(?<!\\)<script|\n# (Heading|owned)|\n\| x \|")


def assert_inert(text: str) -> None:
    assert not UNESCAPED.search(text), UNESCAPED.search(text)
    assert "\x1b" not in text and "\x07" not in text


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two quick runs on a machine with a hostile name, the second with a hostile note, and a
    worker of that machine."""
    directory = tmp_path_factory.mktemp("hostile")
    (directory / "quick.toml").write_text(QUICK_SPEC)
    url = f"sqlite:///{directory / 'hostile.db'}"
    for _ in range(2):
        result = run_decodelab("run", "--spec", "quick.toml", "--db", url, cwd=directory, DECODELAB_MACHINE=MACHINE)
        assert result.returncode == 0, result.stderr
    noted = run_decodelab("note", "--run", "2", NOTE, "--db", url, cwd=directory)
    assert noted.returncode == 0, noted.stderr
    store = Store(url)
    # Escape codes first: the listing cuts a name at 20 characters.
    store.workers.register(
        name="\x1b]0;pwned\x07w:1",
        kind="worker",
        machine_name="\x1b[2J\nbox",
        host="h",
        pid=1,
        stale_after_seconds=3600,
    )
    store.close()
    return url


def test_the_filters_keep_text_as_typed_and_inert() -> None:
    assert for_terminal(MACHINE) == '=HYPERLINK("https://evil.example")[2J|x # owned [m](javascript:x)'
    assert markdown_text("a_b [c](d) <e> `f` |g| $h$ ~i~ *j* !k https://l") == (
        r"a\_b \[c\](d) \<e\> \`f\` \|g\| \$h\$ \~i\~ \*j\* \!k https://l"
    )
    assert markdown_cell("kv_cache · n=256\n| x") == r"kv_cache · n=256 \| x"
    frame = pd.DataFrame({"machine": ["=1+1", "+cmd", "-2", "@SUM(A1)", "ok", None], "value": [-1.5, 2, 3, 4, 5, 6]})
    safe = csv_safe(frame)
    assert safe["machine"].tolist()[:5] == ["'=1+1", "'+cmd", "'-2", "'@SUM(A1)", "ok"]
    assert pd.isna(safe["machine"].tolist()[5])
    assert safe["value"].tolist() == [-1.5, 2, 3, 4, 5, 6]  # numbers stay numbers


def test_the_markdown_reports_keep_the_note_and_the_name_as_text(hostile_store: str, tmp_path: Path) -> None:
    run_report = run_decodelab(
        "report", "run", "--run", "2", "--baseline", "1", "--out", "run.md", "--db", hostile_store, cwd=tmp_path
    )
    assert run_report.returncode == 0, run_report.stderr
    text = (tmp_path / "run.md").read_text()
    assert "- note: fine \\| x \\| y \\| # Heading \\!\\[img\\]" in text
    assert_inert(text)
    machines = run_decodelab("report", "machines", "--out", "machines.md", "--db", hostile_store, cwd=tmp_path)
    assert machines.returncode == 0, machines.stderr
    text = (tmp_path / "machines.md").read_text()
    assert_inert(text)
    # Every table row has as many cells as its header: no cell added a column or a row.
    for table in re.findall(r"((?:^\|.*\|$\n?)+)", text, flags=re.MULTILINE):
        widths = {len(re.split(r"(?<!\\)\|", line)) for line in table.strip().splitlines()}
        assert len(widths) == 1, table


def test_the_terminal_gets_no_escape_code(hostile_store: str, tmp_path: Path) -> None:
    listed = run_decodelab("workers", "--db", hostile_store, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    rows = listed.stdout.strip().splitlines()[1:]
    assert len(rows) == 3 and all(re.match(r"^\s*\d+  ", row) for row in rows), rows  # one line each


def test_csv_exports_neutralise_formulas(hostile_store: str, tmp_path: Path) -> None:
    exported = run_decodelab("export", "--out", "all.csv", "--db", hostile_store, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "all.csv").read_text())))
    # The name was stored without its control characters (store.user_text.clean_label).
    assert rows and all(row["machine"] == "'" + for_terminal(MACHINE) for row in rows)
    assert all(float(row["value"]) == float(row["value"]) for row in rows)  # values still read as numbers


def test_the_review_page_shows_the_note_and_the_name_as_text(
    hostile_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DECODELAB_DB", hostile_store)
    monkeypatch.setenv("DECODELAB_READ_ONLY", "1")
    app = AppTest.from_file(str(ROOT / "dashboard" / "views" / "review.py"), default_timeout=60)
    app.query_params["run"] = "2"
    app.query_params["baseline"] = "1"
    app.run()
    assert not app.exception, [exception.value for exception in app.exception]
    shown = [element.value for element in app.markdown if "Note:" in str(element.value)]
    assert shown and "\\[click\\](javascript" in shown[0], shown
    for element in [*app.markdown, *app.caption, *app.warning, *app.info]:
        assert_inert(str(element.value))
