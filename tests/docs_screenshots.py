"""The screenshots of README.md and docs/dashboard.md from a real store, as a reader's
1440x1000 window shows each page:

    python -m tests.docs_screenshots --db sqlite:///a-copy-of-a-store.db

writes docs/dashboard-review.png and docs/dashboard-speculative.png, and every page's first screen
to screenshots/pages-<page>.png (ignored by git). The dashboard it serves may upgrade the store's
schema: give it a copy. Each page is photographed once its script has run and its charts are drawn
and stable (tests.browser_helpers), never after a fixed pause."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from dashboard import pages as dashboard_pages
from tests.browser_helpers import ROOT, SCREENSHOTS, chromium, serve_dashboard, wait_until_charts_settled

if TYPE_CHECKING:
    from playwright.sync_api import ViewportSize

WINDOW: ViewportSize = {"width": 1440, "height": 1000}
# Every page by its URL path, in the navigation's order (the one list: dashboard/pages.py).
PAGES = [page.name for page in dashboard_pages.pages()]
# The docs' pictures (README.md, docs/dashboard.md): page → file under docs/.
DOCS = {"review": "dashboard-review.png", "speculative": "dashboard-speculative.png"}


def photograph(url: str) -> list[Path]:
    """Every page of the dashboard on ``url`` at WINDOW; returns the files written."""
    written: list[Path] = []
    SCREENSHOTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as folder, serve_dashboard(url, Path(folder)) as address, chromium() as browser:
        context = browser.new_context(viewport=WINDOW)
        page = context.new_page()
        for path in PAGES:
            page.goto(f"{address}/{path}")
            wait_until_charts_settled(page)
            targets = [SCREENSHOTS / f"pages-{path}.png"] + ([ROOT / "docs" / DOCS[path]] if path in DOCS else [])
            for target in targets:
                page.screenshot(path=str(target))  # the window, as a reader first sees the page
                written.append(target)
        context.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the store's URL (a copy: the dashboard may upgrade its schema)")
    for written in photograph(parser.parse_args().db):
        print(written)


if __name__ == "__main__":
    main()
