"""Every page in headless Chromium on two stores, read as a newcomer would: a store with one run,
and one with three runs of two presets on two machines (the second machine's run imported from
tests/fixtures/xeon-amx-quick.json.gz, a real quick run exported on a Xeon). Each page fails on
an exception or error box, a legend or axis text Vega had to cut short (it ends it with "…"), a
chart mark whose centre lies outside its plot area, or a discrete axis with fewer visible labels
than categories. Full-page screenshots go to screenshots/ (ignored by git); with
DECODELAB_DOCS_SCREENSHOTS=1 the README's (docs/*.png) are written from the three-run store."""

from __future__ import annotations

import gzip
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser_helpers import (
    ROOT,
    SCREENSHOTS,
    chromium,
    require_browser,
    serve_dashboard,
    wait_until_charts_settled,
)
from tests.conftest import FIXTURES, copy_store, run_decodelab

pytestmark = pytest.mark.browser

SECOND_MACHINE_RUN = FIXTURES / "xeon-amx-quick.json.gz"
# Every page by its URL path.
PAGES = [
    "review",
    "history",
    "compare",
    "kv_cache",
    "memory",
    "quantization",
    "speculative",
    "context_cost",
    "scale",
    "seeds",
]
# The README's screenshots: page → file under docs/.
DOCS_SCREENSHOTS = {"review": "dashboard-review.png", "speculative": "dashboard-speculative.png"}

# What a chart shows wrong, read from the SVG Vega drew: cut texts, marks off the plot area,
# discrete axes that label fewer categories than they have (the aria-label says how many).
CHART_PROBLEMS = """
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
  return problems;
}
"""


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
        url = three_runs_store(directory, filled_store_url)
    with serve_dashboard(url, directory) as address:
        yield request.param, address


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_browser()
    with chromium() as launched:
        yield launched


def whole_page(page: Any) -> None:
    """Streamlit scrolls its main block inside a window-high frame, so a full-page screenshot
    would show one screen: the viewport is made as tall as the page's content first."""
    height = page.evaluate(
        """() => Math.max(
                 ...[...document.querySelectorAll('[data-testid="stMain"], [data-testid="stMainBlockContainer"]')]
                 .map((element) => element.scrollHeight), document.body.scrollHeight)"""
    )
    page.set_viewport_size({"width": 1400, "height": min(int(height) + 40, 12_000)})
    wait_until_charts_settled(page)


def test_the_root_url_opens_the_first_page_at_its_own_url(dashboard_on: tuple[str, str], browser: Any) -> None:
    store, address = dashboard_on
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{address}/")
    expected = "review" if store == "three-runs" else "history"
    # The page's own query (the review's run and baseline) may follow its address.
    page.wait_for_url(re.compile(rf"/{expected}(\?.*)?$"), timeout=60_000)
    wait_until_charts_settled(page)
    page.goto(f"{address}/{expected}")  # the link itself shows the page, not "page not found"
    wait_until_charts_settled(page)
    assert page.locator('[data-testid="stDialog"]').count() == 0
    heading = page.locator('[data-testid="stMain"] h1').first.inner_text()
    assert heading == expected.title(), heading
    page.close()


@pytest.mark.parametrize("path", PAGES)
def test_the_page_draws_whole_charts_without_errors(dashboard_on: tuple[str, str], browser: Any, path: str) -> None:
    store, address = dashboard_on
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{address}/{path}")
    wait_until_charts_settled(page)
    main = page.locator('[data-testid="stMain"]')
    assert page.locator('[data-testid="stDialog"]').count() == 0, f"{path}: page not found"
    assert main.locator('[data-testid="stException"]').count() == 0, main.inner_text()[:2000]
    assert main.locator('[data-testid="stAlertContentError"]').count() == 0, main.inner_text()[:2000]
    problems = []
    for index, chart in enumerate(main.locator('[data-testid="stVegaLiteChart"] svg.marks').all()):
        problems += [f"chart {index}: {problem}" for problem in chart.evaluate(CHART_PROBLEMS)]
    SCREENSHOTS.mkdir(exist_ok=True)
    whole_page(page)
    page.screenshot(path=str(SCREENSHOTS / f"pages-{store}-{path}.png"), full_page=True)
    if store == "three-runs" and path in DOCS_SCREENSHOTS and os.environ.get("DECODELAB_DOCS_SCREENSHOTS") == "1":
        page.screenshot(path=str(ROOT / "docs" / DOCS_SCREENSHOTS[path]), full_page=True)
    page.close()
    assert problems == [], f"{store} {path}: " + "; ".join(problems)
