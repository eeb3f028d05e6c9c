"""Every page in headless Chromium on two stores, read as a newcomer would: a store with one run,
and one with three runs of two presets on two machines (the second machine's run imported from
tests/fixtures/xeon-amx-quick.json.gz, a real quick run exported on a Xeon). Each page fails on
an exception or error box, a legend or axis text Vega had to cut short (it ends it with "…"), a
chart mark whose centre lies outside its plot area, a discrete axis with fewer visible labels
than categories, a plot area under 300x200 px, overlapping upright tick labels, a title off the
chart's edge or covered by axis labels, a legend past the chart's edge or stopped short, or two
legend entries drawn with one mark (each check proven on tests/fixtures/broken_charts.py).
The same checks read `decodelab report run`'s HTML report (its inline SVG charts) and its
Markdown, rendered. With DECODELAB_SCREENSHOTS=1 each page's full-page screenshot goes to
screenshots/ (ignored by git); the docs' (docs/*.png) come from a real store through
tests/docs_screenshots.py."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from analysis import theme
from dashboard import pages as dashboard_pages
from tests.browser_helpers import (
    SCREENSHOTS,
    SERVERS,
    chromium,
    free_port,
    healthy,
    require_browser,
    serve_dashboard,
    wait_until_charts_settled,
)
from tests.conftest import FIXTURES, copy_store, run_decodelab

if TYPE_CHECKING:
    from playwright.sync_api import ViewportSize

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SECOND_MACHINE_RUN = FIXTURES / "xeon-amx-quick.json.gz"
# Every page by its URL path (dashboard/pages.py).
PAGES = [page.name for page in dashboard_pages.pages()]

# Table cells a reader should never see: Streamlit's own rendering of a boolean or a missing value.
RAW_CELLS = frozenset({"true", "false", "None", "nan", "NaN", "<NA>", "NaT"})
# What a chart shows wrong, read from the SVG Vega drew: cut texts, marks off the plot area,
# discrete axes that label fewer categories than they have (the aria-label says how many).
CHART_PROBLEMS = (
    """
(svg) => {
  const problems = [];
  const box = (element) => element.getBoundingClientRect();
  for (const text of svg.querySelectorAll('text')) {
    if (text.textContent.includes('\u2026')) problems.push('cut text: ' + text.textContent);
  }
  const root = svg.querySelector('g.mark-group.role-frame.root');
  const cells = [...svg.querySelectorAll('g.mark-group.role-scope > g, g.mark-group.role-frame.root > g')];
  const frames = cells.map((cell) => cell.querySelector(':scope > path.background')).filter(Boolean);
  const plot = frames.length ? box(frames[0]) : (root ? box(root) : box(svg));
  const slack = 1.5;
  for (const mark of svg.querySelectorAll('g.role-mark > *')) {
    const area = box(mark);
    if (area.width === 0 && area.height === 0) continue;
    const x = area.left + area.width / 2, y = area.top + area.height / 2;
    if (x < plot.left - slack || x > plot.right + slack || y < plot.top - slack || y > plot.bottom + slack) {
      const kind = mark.parentElement.getAttribute('class');
      problems.push(`mark outside the plot area: ${kind} at (${x.toFixed(0)}, ${y.toFixed(0)}) ` +
        `plot (${plot.left.toFixed(0)}-${plot.right.toFixed(0)}, ${plot.top.toFixed(0)}-${plot.bottom.toFixed(0)})`);
    }
  }
  for (const axis of svg.querySelectorAll('g.role-axis')) {
    const described = axis.getAttribute('aria-label') || '';
    const counted = described.match(/discrete scale with (\\d+) values?/);
    if (!counted) continue;
    const labels = [...axis.querySelectorAll('g.role-axis-label text')].filter(
      (label) => label.getAttribute('opacity') !== '0' && label.textContent.trim() !== '');
    if (labels.length < Number(counted[1])) {
      problems.push(`axis labels ${labels.length} of ${counted[1]} categories: ${described.slice(0, 80)}`);
    }
  }
  const title = svg.querySelector('g.role-title text');
  if (!title || !title.textContent.trim()) problems.push('a chart without a title');
  // Geometry a person reads (issue 44, D1): a plot area big enough to read, tick labels apart, the
  // title whole and clear of the axes, every legend entry whole and told apart by its mark.
  // What a reader can see of the chart: its own box within the window (a report's chart wider
  // than the window runs off its right edge).
  const drawnBox = box(svg);
  const outer = {left: drawnBox.left, top: drawnBox.top, bottom: drawnBox.bottom,
                 right: Math.min(drawnBox.right, document.documentElement.clientWidth)};
  const drawn = svg.querySelectorAll('g.role-mark > *').length > 0;  // an empty chart has no plot to read
  // A chart small on purpose says why in its subtitle (analysis.theme.small_on_purpose): a reason
  // after the words, not the words alone.
  const subtitle = svg.querySelector('g.role-title-subtitle text');
  const stated = subtitle ? subtitle.textContent.trim() : '';
  const explained = stated.startsWith(SMALL_ON_PURPOSE) && stated.slice(SMALL_ON_PURPOSE.length).trim().length > 0;
  if (drawn && !explained && (plot.height < MIN_PLOT_HEIGHT - slack || plot.width < MIN_PLOT_WIDTH - slack)) {
    problems.push(`plot area ${plot.width.toFixed(0)}x${plot.height.toFixed(0)} px, below ` +
      `${MIN_PLOT_WIDTH}x${MIN_PLOT_HEIGHT}` + (stated ? ` (its subtitle gives no reason: ${stated})` : ''));
  }
  const overlap = (a, b) =>
    Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
    Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
  const axisLabels = [];
  for (const axis of svg.querySelectorAll('g.role-axis')) {
    const labels = [...axis.querySelectorAll('g.role-axis-label text')].filter(
      (label) => label.getAttribute('opacity') !== '0' && label.textContent.trim() !== '');
    // A rotated label's box is its slanted text's bounding rectangle: neighbours' boxes meet, the texts not.
    const upright = labels.filter((label) => !/rotate\\((-?[1-9])/.test(label.getAttribute('transform') || ''));
    const boxes = upright.map((label) => [label.textContent, box(label)]);
    axisLabels.push(...boxes);
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        if (overlap(boxes[i][1], boxes[j][1])) problems.push(`tick labels overlap: ${boxes[i][0]} / ${boxes[j][0]}`);
      }
    }
  }
  if (title && title.textContent.trim()) {
    const titled = box(title);
    // Whole across; up and down its middle inside (a glyph box reaches a few px above its text).
    const middle = (titled.top + titled.bottom) / 2;
    if (titled.left < outer.left - slack || titled.right > outer.right + slack ||
        middle < outer.top || middle > outer.bottom) {
      problems.push(`clipped title: ${title.textContent} at x ${titled.left.toFixed(0)}-${titled.right.toFixed(0)}, ` +
        `y ${middle.toFixed(0)} in x ${outer.left.toFixed(0)}-${outer.right.toFixed(0)}, ` +
        `y ${outer.top.toFixed(0)}-${outer.bottom.toFixed(0)}`);
    }
    for (const [text, label] of axisLabels) {
      if (overlap(titled, label)) { problems.push(`title covered by the axis label ${text}`); break; }
    }
  }
  for (const legend of svg.querySelectorAll('g.role-legend')) {
    const legendBox = box(legend);
    if (legendBox.right > outer.right + slack || legendBox.bottom > outer.bottom + slack ||
        legendBox.left < outer.left - slack || legendBox.top < outer.top - slack) {
      problems.push('legend cut by the chart edge');
    }
    const entries = [...legend.querySelectorAll('g.role-legend-entry g.role-scope > g')];
    const seen = new Map();
    for (const entry of entries) {
      const label = entry.querySelector('text');
      const text = label ? label.textContent : '';
      // Vega's "…2 entries" where a legend stops short of its series.
      if (/^\u2026\\s*\\d+ (entries|more)/.test(text)) { problems.push(`legend cut: ${text}`); continue; }
      const symbol = entry.querySelector('g.role-legend-symbol path');
      if (!symbol) continue;
      const style = getComputedStyle(symbol);
      const mark = [symbol.getAttribute('d'), style.fill, style.stroke, style.strokeDasharray, style.opacity].join('|');
      if (seen.has(mark)) problems.push(`legend marks alike: ${seen.get(mark)} / ${text}`);
      else seen.set(mark, text);
    }
  }
  return problems;
}
""".replace("MIN_PLOT_HEIGHT", "200")
    .replace("MIN_PLOT_WIDTH", "300")
    .replace("SMALL_ON_PURPOSE", json.dumps(theme.SMALL_ON_PURPOSE.strip()))
)


def three_runs_store(directory: Path, filled_store_url: str) -> str:
    """The session's tiny run, a second run of its preset (a copy through export and import, an
    hour later), and the second machine's quick run imported through `decodelab import`."""
    from store.store import Store
    from tests.review_helpers import slowed_copy

    url = copy_store(filled_store_url, directory / "three-runs.db")
    store = Store(url)
    slowed_copy(store, 1, slower_by=1.0, hours_later=1.0)
    store.close()
    exported = directory / "xeon-amx-quick.json"
    with gzip.open(SECOND_MACHINE_RUN, "rb") as packed, exported.open("wb") as unpacked:
        shutil.copyfileobj(packed, unpacked)
    imported = run_decodelab("import", str(exported), "--db", url, cwd=directory)
    assert imported.returncode == 0, imported.stderr
    return url


@pytest.fixture(scope="module")
def three_runs_url(tmp_path_factory: pytest.TempPathFactory, filled_store_url: str) -> str:
    """The three-run store (three_runs_store), built once for its pages and its reports."""
    return three_runs_store(tmp_path_factory.mktemp("three-runs"), filled_store_url)


@pytest.fixture(scope="module", params=["one-run", "three-runs"])
def dashboard_on(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, filled_store_url: str
) -> Iterator[tuple[str, str]]:
    """(store name, address) of one dashboard per store, shared by that store's page visits."""
    require_browser()
    directory = tmp_path_factory.mktemp(request.param)
    if request.param == "one-run":
        url = copy_store(filled_store_url, directory / "one-run.db")
    else:
        url = request.getfixturevalue("three_runs_url")
    with serve_dashboard(url, directory) as address:
        server = SERVERS[address]
        yield request.param, address
    # What the server printed while every page was drawn: a warning there (e.g. Altair's "I don't
    # know how to infer vegalite type") is a chart the page drew wrong, even if it looks whole.
    printed = server.stdout.read() if server.stdout else ""
    assert server_problems(printed) == [], printed[-3000:]


def server_problems(printed: str) -> list[str]:
    """The lines of a server's output that say a page drew something wrong: a warning. (A page's
    exception shows on the page and is caught there; a traceback here can be Streamlit's own
    websocket closing as the server stops, seen on a loaded machine, which says nothing of a page.)"""
    return [line for line in printed.splitlines() if "Warning" in line]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One browser context for every page visit of this file: its HTTP cache keeps Streamlit's
    scripts parsed between visits (a new context per page, as `browser.new_page()` makes, loaded
    and compiled them each time: about 0.4 s and a fifth of the browser's CPU a page)."""
    require_browser()
    with chromium() as launched:
        context = launched.new_context(viewport={"width": 1400, "height": 1000})
        yield context
        context.close()


def settled(page: Any) -> None:
    """Wait until the script has run to its end, the charts are drawn and stable, and the tables
    hold their cells."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    wait_until_charts_settled(page)
    # A table's cells come after the page's script has finished, late on a loaded machine: 15 s
    # was once too short, and a table read before its cells counted as a table with no problem.
    # (An empty frame is drawn with a blank row's cells too; the bound only stops a hang.)
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(
            """() => [...document.querySelectorAll('[data-testid="stDataFrame"]')]
                     .every((table) => table.querySelector('td'))""",
            timeout=90_000,
        )


def page_problems(page: Any) -> list[str]:
    """What is wrong on the page: an exception or error box, then each chart's problems."""
    main = page.locator('[data-testid="stMain"]')
    problems = [f"exception: {box.inner_text()[:300]}" for box in main.locator('[data-testid="stException"]').all()]
    problems += [
        f"error: {box.inner_text()[:300]}" for box in main.locator('[data-testid="stAlertContentError"]').all()
    ]
    for index, chart in enumerate(main.locator('[data-testid="stVegaLiteChart"] svg.marks').all()):
        problems += [f"chart {index}: {problem}" for problem in chart.evaluate(CHART_PROBLEMS)]
    # The table's cells as its accessible grid holds them: what the one table format replaced.
    cells = main.locator('[data-testid="stDataFrame"] td').all_text_contents()
    problems += [f"raw table cell: {cell.strip()!r}" for cell in cells if cell.strip() in RAW_CELLS]
    return problems


def whole_page(page: Any) -> None:
    """Streamlit scrolls its main block inside a window-high frame, so a full-page screenshot
    would show one screen: the viewport is made as tall as the page's content first."""
    height = page.evaluate(
        """() => Math.max(
                 ...[...document.querySelectorAll('[data-testid="stMain"], [data-testid="stMainBlockContainer"]')]
                 .map((element) => element.scrollHeight), document.body.scrollHeight)"""
    )
    page.set_viewport_size({"width": 1400, "height": min(int(height) + 40, 12_000)})
    settled(page)  # the tables and charts drawn again at the new size, not their grey placeholders


@pytest.fixture(scope="module")
def reader(dashboard_on: tuple[str, str], browser: Any) -> Iterator[Any]:
    """One browser page on the store's dashboard, moved from page to page by its sidebar's links as
    a reader moves: the app stays loaded and only each page's script runs. (Loading every page by
    its URL cost Chromium 38-45 s of CPU for the 11 pages; through the links, 11 s. Loading by URL
    is the root URL test's.)"""
    _, address = dashboard_on
    page = browser.new_page()
    page.goto(f"{address}/")
    wait_until_charts_settled(page)
    yield page
    page.close()


def navigate(page: Any, path: str) -> None:
    """Follow the sidebar's link to ``path`` and wait until that page's script has drawn its heading
    (until then the app may still show the page before, idle)."""
    from playwright.sync_api import expect

    if re.search(rf"/{path}(\?.*)?$", page.url):
        return
    heading = page.locator('[data-testid="stMain"] h1').first
    before = page.locator('[data-testid="stMain"] h1').all_inner_texts()[:1]
    page.locator(f'[data-testid="stSidebarNav"] a[href$="/{path}"]').click()
    page.wait_for_url(re.compile(rf"/{path}(\?.*)?$"), timeout=60_000)
    if before:
        expect(heading).not_to_have_text(before[0], timeout=120_000)
    expect(heading).to_be_attached(timeout=120_000)


def test_the_root_url_opens_the_first_page_at_its_own_url(dashboard_on: tuple[str, str], reader: Any) -> None:
    store, address = dashboard_on
    page = reader  # opened at the root URL
    expected = "review" if store == "three-runs" else "history"
    # The page's own query (the review's run and baseline) may follow its address.
    page.wait_for_url(re.compile(rf"/{expected}(\?.*)?$"), timeout=60_000)
    page.goto(f"{address}/{expected}")  # the link itself shows the page, not "page not found"
    wait_until_charts_settled(page)
    assert page.locator('[data-testid="stDialog"]').count() == 0
    heading = page.locator('[data-testid="stMain"] h1').first.inner_text()
    assert heading == expected.title(), heading


def test_the_sidebar_links_every_page_at_its_own_address(dashboard_on: tuple[str, str], reader: Any) -> None:
    """What a reader bookmarks or shares: each page's link is its own path on the server."""
    _, address = dashboard_on
    links = reader.locator('[data-testid="stSidebarNav"] a').evaluate_all("(links) => links.map((a) => a.href)")
    assert links == [f"{address}/{path}" for path in PAGES], links


@pytest.mark.parametrize("path", PAGES)
def test_the_page_draws_whole_charts_without_errors(dashboard_on: tuple[str, str], reader: Any, path: str) -> None:
    store, _ = dashboard_on
    page = reader
    navigate(page, path)
    settled(page)
    problems = page_problems(page)
    # A whole-page picture draws every chart again at the page's full height (about 2 s a page on
    # 2 cores): taken when asked for, after the checks, which read every chart in the document.
    if os.environ.get("DECODELAB_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(exist_ok=True)
        whole_page(page)
        page.screenshot(path=str(SCREENSHOTS / f"pages-{store}-{path}.png"), full_page=True)
        page.set_viewport_size({"width": 1400, "height": 1000})  # the next page is read at the usual size
    assert problems == [], f"{store} {path}: " + "; ".join(problems)


@contextlib.contextmanager
def broken_charts_page(directory: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """tests/fixtures/broken_charts.py served by Streamlit itself on a free port until the block
    ends: its address and its process (whose output the test reads once it has stopped)."""
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(FIXTURES / "broken_charts.py"),
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
            "--server.address",
            "127.0.0.1",
        ],
        cwd=directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not healthy(address):
            assert time.monotonic() < deadline and server.poll() is None, "the broken-charts page did not come up"
            time.sleep(0.1)  # polling the health endpoint, not a pause
        yield address, server
    finally:
        server.terminate()
        server.wait(timeout=20)


BROKEN: dict[str, str | None] = {
    "whole": None,
    "cut_legend": "cut text: a series named",
    "cut_axis_title": "cut text: seconds per token",
    "outside": "mark outside the plot area",
    "unlabeled_bars": "axis labels",
    "untitled": "a chart without a title",
    "exception": "exception: RuntimeError",
    "raw_table": "raw table cell: 'true'",
    "warning": None,  # drawn whole in the browser; caught in the server's output below
    "small": "plot area",
    "small_explained": None,  # small, with the reason in its subtitle
    "small_empty_reason": "plot area",  # "small on purpose:" and no reason
    "overlapping_ticks": "tick labels overlap",
    "clipped_title": "clipped title",
    "alike_legend": "legend marks alike",
    "cut_legend_entries": "legend cut",
}


def test_each_kind_of_broken_chart_is_caught_and_a_whole_one_passes(browser: Any, tmp_path: Path) -> None:
    """The page test's checks against charts each broken one way on purpose: every one must be
    named, and the whole control chart must pass (a check that cannot fail proves nothing)."""
    found: dict[str, list[str]] = {}
    with broken_charts_page(tmp_path) as (address, server):
        for kind in BROKEN:
            page = browser.new_page()
            page.set_viewport_size({"width": 900, "height": 700})
            page.goto(f"{address}/?kind={kind}")
            settled(page)
            found[kind] = page_problems(page)
            page.close()
    printed = server.stdout.read() if server.stdout else ""
    assert any("infer vegalite type" in line for line in server_problems(printed)), printed[-3000:]
    for kind, expected in BROKEN.items():
        if expected is None:
            assert found[kind] == [], (kind, found[kind])
        else:
            assert any(expected in problem for problem in found[kind]), (kind, found[kind])


# Every chart a report file draws, as a reader's browser shows it: the HTML report's inline SVGs
# (vl-convert's drawing, not the page's Vega), and anything the Markdown report would draw once
# rendered (an inline SVG, an image, a canvas).
REPORT_CHARTS = "figure > svg, body > svg, img, canvas"
# The window a report is read in (the newcomer's): a chart wider than it runs off its edge.
REPORT_WINDOW: ViewportSize = {"width": 1440, "height": 1000}


def report_problems(page: Any, path: Path) -> tuple[int, list[str]]:
    """(charts found, what is wrong with them) in the report file at ``path`` opened in Chromium:
    each SVG read by the page checks, a chart vl-convert could not draw, an image or canvas (no
    report draws one: where one appears it must be read too)."""
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    charts = page.locator(REPORT_CHARTS).all()
    problems: list[str] = []
    for index, chart in enumerate(charts):
        tag = chart.evaluate("(element) => element.tagName.toLowerCase()")
        if tag != "svg":
            problems.append(f"chart {index}: a {tag} the checks cannot read")
            continue
        problems += [f"chart {index}: {problem}" for problem in chart.evaluate(CHART_PROBLEMS)]
    problems += [f"not drawn: {text}" for text in page.locator("figure > p.warning").all_inner_texts()]
    return len(charts), problems


def test_each_kind_of_broken_chart_is_caught_in_a_report_too(browser: Any, tmp_path: Path) -> None:
    """The same checks on the broken charts drawn as the offline report draws its own (inline SVG
    from vl-convert at the report's size): each caught, the whole one and the one small on purpose
    with its reason passing."""
    from analysis.report_render import STYLE, to_svg
    from tests.fixtures.broken_charts import CHART_KINDS, chart_of

    page = browser.new_page()
    page.set_viewport_size(REPORT_WINDOW)
    found: dict[str, list[str]] = {}
    for kind in CHART_KINDS:
        path = tmp_path / f"{kind}.html"
        path.write_text(
            f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{STYLE}</style></head>"
            f"<body><figure>{to_svg(chart_of(kind, sized=True))}</figure></body></html>"
        )
        count, found[kind] = report_problems(page, path)
        assert count == 1, (kind, count)
    page.close()
    for kind in CHART_KINDS:
        expected = BROKEN[kind]
        if expected is None:
            assert found[kind] == [], (kind, found[kind])
        else:
            assert any(expected in problem for problem in found[kind]), (kind, found[kind])


def test_the_run_report_draws_whole_charts_in_both_formats(three_runs_url: str, browser: Any, tmp_path: Path) -> None:
    """`decodelab report run` on the three-run store (run 2, a copy of run 1 an hour later, against
    run 1): the HTML report's every chart read in Chromium by the page checks; the Markdown report,
    rendered as a pull request shows it, draws no chart to read and says where they are."""
    from markdown_it import MarkdownIt

    written = {}
    for report_format in ("html", "md"):
        out = tmp_path / f"report.{report_format}"
        result = run_decodelab(
            "report", "run", "--run", "2", "--baseline", "1", "--db", three_runs_url,
            "--format", report_format, "--out", str(out), cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        written[report_format] = out
    page = browser.new_page()
    page.set_viewport_size(REPORT_WINDOW)
    count, problems = report_problems(page, written["html"])
    assert count == written["html"].read_text().count("<figure>") >= 3, count  # timed, KV cache, speculative
    assert problems == [], "; ".join(problems)
    markdown = written["md"].read_text()
    rendered = tmp_path / "report-md.html"
    rendered.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
        + MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
        + "</body></html>"
    )
    count, problems = report_problems(page, rendered)
    page.close()
    assert (count, problems) == (0, []), problems
    assert "the HTML report (`--format html`)" in markdown
