"""What every browser test shares: `decodelab dashboard` on a free port, Debian's Chromium driven
by Playwright, and waiting for Streamlit to finish a script run before acting on the page.

Acting while Streamlit is still running the page (or has a rerun queued) clicks elements that the
run is about to replace; waiting on the app's own script-run state instead of a fixed pause keeps
the tests both fast on a quiet machine and right on a loaded one."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import kill_job_workers

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "screenshots"
SERVER_START_SECONDS = 60
# Generous: under a parallel load a cold page run (imports, first queries) takes tens of seconds.
IDLE_TIMEOUT_MILLISECONDS = 120_000
EXPECT_TIMEOUT_MILLISECONDS = 30_000
# Streamlit's frontend marks the app root with the script-run state it last heard of.
IDLE_APP = '[data-testid="stApp"][data-test-script-state="notRunning"]'
# Something the page's script drew in the main area. Right after a page opens, Streamlit reports
# "notRunning" before its first run has begun; on a loaded machine that gap was long enough for a
# test to read a page with nothing on it yet (and find nothing wrong with it).
RENDERED = '[data-testid="stMain"] [data-testid="stElementContainer"]'
STATUS_WIDGET = '[data-testid="stStatusWidget"]'
# The dashboard processes serving now, by address: a test may stop its own as a person would.
SERVERS: dict[str, subprocess.Popen[str]] = {}


def screenshot(page: Page, name: str) -> None:
    """A full-page picture at screenshots/``name``, only with DECODELAB_SCREENSHOTS=1: a full-page
    capture draws every chart again at the page's full height (1-2 s a page on 2 cores)."""
    if os.environ.get("DECODELAB_SCREENSHOTS") != "1":
        return
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


def require_browser() -> None:
    """Skip without Chromium or Playwright, or fail when DECODELAB_REQUIRE_BROWSER=1 (CI)."""
    required = os.environ.get("DECODELAB_REQUIRE_BROWSER") == "1"
    missing = None
    if not Path(CHROMIUM).exists():
        missing = f"{CHROMIUM} is not installed (apt-get install chromium; .ci/run does)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "the playwright package is not installed (the dev extra)"
    if missing:
        if required:
            pytest.fail(f"DECODELAB_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def healthy(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"{address}/_stcore/health", timeout=2) as response:
            return bool(response.read() == b"ok")
    except OSError:
        return False


@contextlib.contextmanager
def serve_dashboard(url: str, cwd: Path, *options: str) -> Iterator[str]:
    """`decodelab dashboard` on ``url`` at a free port (and ``options``) until the block ends;
    yields its address. Workers the dashboard started for launched jobs are stopped with it."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "cli", "dashboard", "--db", url, "--port", str(port), *options],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    address = f"http://127.0.0.1:{port}"
    SERVERS[address] = server
    try:
        deadline = time.monotonic() + SERVER_START_SECONDS
        while not healthy(address):
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                output = server.stdout.read() if server.stdout else ""
                raise RuntimeError(f"the dashboard did not come up: {output}")
            time.sleep(0.1)  # polling the health endpoint, not a pause
        yield address
    finally:
        SERVERS.pop(address, None)
        if server.poll() is None:
            server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=20)
        kill_job_workers(url)


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's headless Chromium (Playwright cannot download its own here), closed afterwards."""
    from playwright.sync_api import expect, sync_playwright

    # Assertions wait 30 s, not Playwright's 5: a page's element drawn by a rerun on a loaded
    # 2-core machine can take longer than 5 s after the state an earlier wait saw.
    expect.set_options(timeout=EXPECT_TIMEOUT_MILLISECONDS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def wait_until_idle(page: Page, timeout_milliseconds: int = IDLE_TIMEOUT_MILLISECONDS) -> None:
    """Until the page's script has drawn something, and Streamlit has no script run in progress
    or requested and shows no running status.

    The sidebar's jobs panel is a fragment rerun every 2 seconds, so "idle" is a moment between
    runs, not a lasting state: wait for it right before each action, as a user would."""
    from playwright.sync_api import expect

    expect(page.locator(RENDERED).first).to_be_attached(timeout=timeout_milliseconds)
    expect(page.locator(IDLE_APP)).to_have_count(1, timeout=timeout_milliseconds)
    expect(page.locator(STATUS_WIDGET)).to_have_count(0, timeout=timeout_milliseconds)


# True once every chart on the page has drawn its marks and the charts' drawing (sizes, element
# counts) has stayed the same for CHART_STABLE_POLLS polls in a row: Vega draws again when its
# container resizes, and on a loaded machine one unchanged poll (200 ms) came between two draws.
CHART_STABLE_POLLS = 3
CHARTS_SETTLED = f"""
() => {{
  const charts = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')];
  const drawn = charts.map((chart) => chart.querySelector('svg.marks'));
  if (drawn.some((svg) => !svg)) {{ window.__decodelabCharts = null; return false; }}
  const drawing = drawn.map((svg) =>
    `${{svg.getAttribute('width')}}x${{svg.getAttribute('height')}}:${{svg.getElementsByTagName('*').length}}`).join('|');
  const previous = window.__decodelabCharts;
  const polls = previous && previous.drawing === drawing ? previous.polls + 1 : 0;
  window.__decodelabCharts = {{ drawing, polls }};
  return polls >= {CHART_STABLE_POLLS};
}}
"""
CHART_POLL_MILLISECONDS = 200


def wait_until_charts_settled(page: Page, timeout_milliseconds: int = IDLE_TIMEOUT_MILLISECONDS) -> None:
    """Until Streamlit is idle and every chart is drawn and stays the same for one poll (a layout
    change, such as a new viewport, may make Vega draw a chart again)."""
    wait_until_idle(page, timeout_milliseconds)
    page.evaluate("() => { window.__decodelabCharts = null; }")
    page.wait_for_function(CHARTS_SETTLED, polling=CHART_POLL_MILLISECONDS, timeout=timeout_milliseconds)


def open_page(page: Page, address: str, path: str = "") -> None:
    """Go to ``address/path`` and wait for its first script run to finish."""
    page.goto(f"{address}/{path}")
    wait_until_idle(page)
