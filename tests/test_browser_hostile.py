"""A hostile run imported, then every page opened in headless Chromium (issue 41, rows 1, 6, 7,
11): BEL, ESC and NUL in each label field (every parameter's value, the machine's name and CPU,
the preset, the note), Markdown images and a heading in the preset, the machine name and the
note, a bare CR before a formula in the note. The server must stay up on every page, no page may
show an exception or load an image from the run's text, and both report formats and History's
CSV download must come out whole.

Before issue 41 the Review page of two such runs made vl-convert panic on the BEL while drawing
the HTML report's charts ("non-unwinding panic. aborting"), and the whole server exited."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dashboard import pages as dashboard_pages
from tests.browser_helpers import SERVERS, chromium, open_page, require_browser, serve_dashboard, wait_until_idle
from tests.conftest import QUICK_SPEC, copy_store, run_decodelab
from tests.test_browser_pages import navigate

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CONTROLS = "\x07\x1b\x00"
MACHINE = f"vm{CONTROLS}[31m ![m](http://evil.invalid/m.png) # owned"
PRESET = f"qu{CONTROLS}ick ![p](http://evil.invalid/p.png)"
NOTE = f"note{CONTROLS} ![n](http://evil.invalid/n.png)\r=cmd|' /C calc'!A0"
# The pages the sidebar links to, followed as a reader does (a page loaded by its address starts
# the whole app again: docs/testing.md); the root URL opens the Review page of the newest run.
PAGES = [page.name for page in dashboard_pages.pages() if page.name != "review"] + ["review"]
REVIEWED = "review?run=3&baseline=2"
# Row 11: a run id longer than int() reads (4,300 digits) was an uncaught ValueError.
LONG_PIN = "compare?pin=vm:" + "9" * 5000


def poisoned(text: str) -> str:
    """The controls inside a known label: cleaned where it enters, it is the label again."""
    return text[:1] + CONTROLS + text[1:]


@pytest.fixture(scope="module")
def hostile_dashboard(filled_store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    require_browser()
    directory = tmp_path_factory.mktemp("hostile-browser")
    url = copy_store(filled_store_url, directory / "hostile.db")
    exported = run_decodelab("export", "--format", "json", "--out", "run.json", "--db", url, cwd=directory)
    assert exported.returncode == 0, exported.stderr
    # Two hostile runs (2 and 3, an hour and a moment before the session's run): the Review page
    # sets them side by side, so their cases match and the HTML report draws their labels.
    for uid, hours_earlier in (("hostile-run-1", 1.0), ("hostile-run-2", 0.01)):
        rows: list[dict[str, Any]] = json.loads((directory / "run.json").read_text())
        for row in rows:
            params = json.loads(row["params"])
            row["params"] = json.dumps(
                {key: poisoned(value) if isinstance(value, str) else value for key, value in params.items()}
            )
            row["case_key"] = None
            run = row["run"]
            started = datetime.fromisoformat(run["started_at"]) - timedelta(hours=hours_earlier)
            run.update(uid=uid, preset=PRESET, note=NOTE, tags=[], started_at=started.isoformat(), finished_at=None)
            run["machine"].update(name=MACHINE, cpu_model=poisoned(run["machine"]["cpu_model"]))
        (directory / f"{uid}.json").write_text(json.dumps(rows))
        imported = run_decodelab("import", f"{uid}.json", "--db", url, cwd=directory)
        assert imported.returncode == 0, imported.stderr
    with serve_dashboard(url, directory) as address:
        yield address, directory


def assert_page_is_whole(page: Any, address: str, path: str) -> None:
    """The server still up, no exception box, no image or heading made of the run's text."""
    server = SERVERS[address]
    assert server.poll() is None, f"the server exited on /{path[:60]}: rc {server.returncode}"
    assert page.locator('[data-testid="stException"]').count() == 0, (
        path[:60],
        page.locator('[data-testid="stException"]').first.inner_text()[:500],
    )
    assert page.locator('img[src*="evil.invalid"]').count() == 0, path[:60]
    assert page.locator("h1, h2, h3, h4, h5, h6").filter(has_text="owned").count() == 0, path[:60]


def test_every_page_opens_on_a_hostile_run_and_the_server_stays_up(hostile_dashboard: tuple[str, Path]) -> None:
    from playwright.sync_api import expect

    address, _ = hostile_dashboard
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        # The Review page of the two hostile runs, up to its HTML report (drawn last, on the server).
        page.goto(f"{address}/{REVIEWED}")  # not open_page: a page whose server died never goes idle
        html_report = page.get_by_role("button", name="Download the report (HTML)")
        try:
            expect(html_report).to_be_visible(timeout=180_000)
            drawn = True
        except AssertionError:
            drawn = False
        server = SERVERS[address]
        assert server.poll() is None, f"the server exited drawing the HTML report: rc {server.returncode}"
        assert drawn, "the HTML report's button never showed"
        wait_until_idle(page)
        assert_page_is_whole(page, address, REVIEWED)
        open_page(page, address)
        assert_page_is_whole(page, address, "")
        for path in PAGES:
            navigate(page, path)
            wait_until_idle(page)
            assert_page_is_whole(page, address, path)
        open_page(page, address, LONG_PIN)
        assert_page_is_whole(page, address, LONG_PIN)
        open_page(page, address, REVIEWED)
        main = page.locator('[data-testid="stMain"]')
        warnings = main.locator('[data-testid="stAlert"]').filter(has_text="earlier done runs of")
        # The preset as text, without its controls: no image, no escape left showing.
        assert "quick ![p](http://evil.invalid/p.png)" in warnings.first.inner_text()


def download(page: Any, button: str, target: Path) -> str:
    from playwright.sync_api import expect

    wait_until_idle(page)
    control = page.get_by_role("button", name=button).first
    expect(control).to_be_visible(timeout=120_000)
    with page.expect_download(timeout=120_000) as started:
        control.click()
    started.value.save_as(target)
    with target.open(encoding="utf-8", newline="") as downloaded:
        return downloaded.read()


def test_both_reports_and_the_csv_download_come_out_whole(hostile_dashboard: tuple[str, Path], tmp_path: Path) -> None:
    from playwright.sync_api import expect

    address, _ = hostile_dashboard
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1400}, accept_downloads=True)
        open_page(page, address, REVIEWED)
        markdown = download(page, "Download the report (Markdown)", tmp_path / "report.md")
        html = download(page, "Download the report (HTML)", tmp_path / "report.html")
        assert_page_is_whole(page, address, "review")
        for text in (markdown, html):
            assert not any(character in text for character in CONTROLS)
            assert "\r" not in text
        assert "<svg" in html and "could not be drawn" not in html
        assert not re.search(r"(?<!\\)!(?<!\\)\[", markdown), "an image survived in the Markdown report"
        assert "quick \\!\\[p\\](http://evil.invalid/p.png)" in markdown

        open_page(page, address, "compare")
        for label in ("HTML", "Markdown"):
            text = download(page, f"Download the comparison ({label})", tmp_path / f"machines.{label}")
            assert not any(character in text for character in CONTROLS)
            if label == "Markdown":
                assert not re.search(r"(?<!\\)!(?<!\\)\[|^# owned", text, flags=re.MULTILINE)

        # History's runs table: the note's bare CR would start a row whose first cell is a formula.
        open_page(page, address, "history")
        runs_csv = download(page, "Download runs (CSV)", tmp_path / "runs.csv")
        assert "\r" not in runs_csv
        rows = list(csv.DictReader(io.StringIO(runs_csv)))
        assert len(rows) == 3
        for line in re.split(r"[\r\n]", runs_csv):
            assert not line.startswith(("=", "+", "-", "@")), line

        # Row 11: a NUL in the spec's corpus is refused in one line, not a traceback on Launch.
        sidebar = page.locator('[data-testid="stSidebar"]')
        sidebar.get_by_text("spec", exact=True).click()
        wait_until_idle(page)
        sidebar.locator("textarea").fill(QUICK_SPEC.replace('corpus = "default"', 'corpus = "a\\u0000b"'))
        sidebar.locator("textarea").press("Control+Enter")
        wait_until_idle(page)
        expect(sidebar.get_by_text("model.corpus: text with a control character")).to_be_visible(timeout=60_000)
        assert_page_is_whole(page, address, "launch")
