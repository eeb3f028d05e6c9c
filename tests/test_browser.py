"""The dashboard in a real browser: `decodelab dashboard` on a free port in headless Chromium
(Debian's, driven by Playwright): a tiny sweep launched from the sidebar and run to completion by
the worker the dashboard starts, the review page's tags, notes and download, the machines
comparison and the launch form's data folder. Every page's charts are checked in
tests/test_browser_pages.py. With DECODELAB_SCREENSHOTS=1 screenshots go to screenshots/ (ignored by git)."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from store import frames
from tests.browser_helpers import (
    SERVERS,
    chromium,
    open_page,
    require_browser,
    screenshot,
    serve_dashboard,
    wait_until_idle,
)
from tests.conftest import QUICK_SPEC, TINY_SPEC, copy_store

if TYPE_CHECKING:
    from playwright.sync_api import WebSocketRoute

# The sidebar's jobs panel reruns every 2 seconds, and each run's end collects files no element
# refers to (a file Streamlit generated for a click is one: collected by the second run that ends
# after it). A client that asked for such a file later than that got a cancelled download.
SLOW_CLIENT_SECONDS = 5.0

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def dashboard(tmp_path: Path, filled_store_url: str) -> Iterator[tuple[str, str]]:
    require_browser()
    # A private copy of the session's filled store (one real tiny run): the test launches more.
    url = copy_store(filled_store_url, tmp_path / "browser.db")
    with serve_dashboard(url, tmp_path) as address:
        yield address, url


def wait_for(condition: Callable[[], bool], timeout_seconds: float, what: str) -> None:
    """Poll ``condition`` (a store query) until it holds; fail naming ``what`` after the timeout."""
    deadline = time.monotonic() + timeout_seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_seconds:.0f} s waiting for {what}")
        time.sleep(0.2)  # polling the store, not a pause


class SlowLink:
    """Streamlit's websocket with the server-to-page direction held back while ``delaying``."""

    def __init__(self) -> None:
        self.delaying = False
        self._held: list[str | bytes] = []
        self._page_side: WebSocketRoute | None = None

    def route(self, page_side: WebSocketRoute) -> None:
        self._page_side = page_side
        server_side = page_side.connect_to_server()
        server_side.on_message(self._from_server)

    def _from_server(self, message: str | bytes) -> None:
        assert self._page_side is not None
        if self.delaying:
            self._held.append(message)
        else:
            self._page_side.send(message)

    def release(self) -> None:
        """Deliver what was held, in order, and stop delaying."""
        assert self._page_side is not None
        for message in self._held:
            self._page_side.send(message)
        self._held.clear()
        self.delaying = False


def test_a_sweep_launches_from_the_sidebar_and_its_worker_stops_with_the_dashboard(dashboard: tuple[str, str]) -> None:
    from playwright.sync_api import expect

    from store.store import Store

    address, url = dashboard
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        # Every page's charts and tables are checked in tests/test_browser_pages.py, on this store
        # and on one with three runs: here, the sidebar on the default page.
        open_page(page, address)
        sidebar = page.locator('[data-testid="stSidebar"]')
        expect(sidebar.get_by_role("heading", name="Launch a sweep")).to_be_visible(timeout=30_000)
        wait_until_idle(page)  # the jobs panel's 2-second rerun may be under way
        sidebar.get_by_text("spec", exact=True).click()
        wait_until_idle(page)  # choosing "spec" reruns the page and swaps the preset box for a text area
        # The quick spec: launching and completing a job is what is tested, not the experiments.
        sidebar.locator("textarea").fill(QUICK_SPEC)
        wait_until_idle(page)
        sidebar.locator("textarea").press("Control+Enter")  # the estimate follows the text before the click
        expect(sidebar.get_by_text(re.compile(r"\d+ cases, about"))).to_be_visible(timeout=60_000)
        wait_until_idle(page)
        sidebar.get_by_role("button", name="Launch").click()
        launched = sidebar.get_by_text("Job 1 queued").or_(sidebar.get_by_text("job 1 · custom")).first
        expect(launched).to_be_visible(timeout=60_000)

        store = Store(url)

        def job_finished() -> bool:
            jobs = frames.jobs(store)
            return not jobs.empty and jobs.iloc[0]["status"] not in ("queued", "running")

        wait_for(job_finished, 600, "the launched job to finish")
        job = frames.jobs(store).iloc[0]
        assert job["status"] == "done", job["error"]
        assert job["cases_done"] == job["cases_total"] > 0
        assert len(frames.runs(store)) == 2
        expect(sidebar.get_by_text(f"job {job['job_id']} · custom · done")).to_be_visible(timeout=30_000)
        screenshot(page, "after-launch.png")

    # Ctrl-C on the dashboard stops the worker it started (in a session of its own, the
    # terminal's Ctrl-C never reaches it), which would otherwise idle on for ten minutes.
    workers = frames.workers(store)
    pids = [int(pid) for pid in workers[workers["state"] == "live"]["pid"]]
    assert pids, "the dashboard started a worker"
    server = SERVERS[address]
    server.send_signal(signal.SIGINT)
    server.wait(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.2)
    assert not any(alive(pid) for pid in pids), "the worker outlived the dashboard"


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by init, counts as stopped)."""
    try:
        with open(f"/proc/{pid}/stat") as status:
            return status.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def reviewed_dashboard(tmp_path: Path, filled_store_url: str) -> Iterator[tuple[str, str, int]]:
    """The dashboard on steady copies of the session's real tiny run, the later one's speculative
    decodes made 100 times slower (tests/review_helpers.py)."""
    from store.store import Store
    from tests.review_helpers import reviewed_pair

    require_browser()
    url = copy_store(filled_store_url, tmp_path / "review.db")
    _, slowed = reviewed_pair(Store(url))
    with serve_dashboard(url, tmp_path) as address:
        yield address, url, slowed


def test_the_review_page_lists_the_regression_first_keeps_tags_and_notes_and_downloads_a_closed_report(
    reviewed_dashboard: tuple[str, str, int], tmp_path: Path
) -> None:
    from playwright.sync_api import Route, expect

    from store.store import Store

    address, url, slowed = reviewed_dashboard
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1400}, accept_downloads=True)
        slow_link = SlowLink()
        page.route_web_socket("**/_stcore/stream", slow_link.route)
        open_page(page, address)  # two runs: the Review page is the default
        main = page.locator('[data-testid="stMain"]')
        expect(main.get_by_role("heading", name="Review")).to_be_visible(timeout=60_000)
        first = main.locator('[data-testid="stMarkdownContainer"]').filter(has_text="Look at these first:")
        first = first.locator("li").first
        expect(first).to_contain_text("regressed · speculative · speedup_median", timeout=120_000)
        expect(main.locator('[data-testid="stVegaLiteChart"] svg.marks').first).to_be_visible(timeout=60_000)
        # reviewed_pair imports the steady baseline just before the slowed run.
        assert f"run={slowed}" in page.url and f"baseline={slowed - 1}" in page.url, "the choice lives in the URL"
        screenshot(page, "review.png")

        wait_until_idle(page)
        main.get_by_role("textbox", name="Another tag (a-z, 0-9, . _ -)").fill("reviewed")
        main.get_by_role("textbox", name="Note", exact=True).fill("slower on purpose: the browser test's fixture")
        main.get_by_role("button", name="Save tags and note").click()
        expect(main.get_by_text("Tags and note of run")).to_be_visible(timeout=30_000)
        store = Store(url)
        wait_for(lambda: store.annotations.note(slowed) is not None, 60, "the note to be saved")
        page.reload()
        wait_until_idle(page)
        expect(main.get_by_role("textbox", name="Note", exact=True)).to_have_value(
            "slower on purpose: the browser test's fixture", timeout=60_000
        )
        expect(main.get_by_role("button", name="Remove reviewed")).to_be_visible()  # the tag's chip
        assert frames.runs(store).set_index("run_id").loc[slowed, "tags"] == "reviewed"

        # A slow link: what the server sends reaches the page SLOW_CLIENT_SECONDS late, from the click.
        wait_until_idle(page)
        slow_link.delaying = True
        with page.expect_download(timeout=120_000) as download:
            main.get_by_role("button", name="Download the report (HTML)").click()
            page.wait_for_timeout(SLOW_CLIENT_SECONDS * 1000)  # the latency simulated, not a wait for something
            slow_link.release()
        report_path = tmp_path / "report.html"
        download.value.save_as(report_path)
        document = report_path.read_text(encoding="utf-8")
        assert "regressed" in document and "slower on purpose" in document

        # Opened with every request refused: a self-contained report asks for nothing and still draws.
        requested: list[str] = []

        def refuse(route: Route) -> None:
            requested.append(route.request.url)
            route.abort()

        closed = browser.new_page()
        closed.route("**/*", refuse)
        closed.set_content(document)
        expect(closed.locator("svg").first).to_be_visible()
        closed.wait_for_load_state("networkidle")
        assert requested == [], requested
        assert closed.locator("svg").count() >= 2


@pytest.fixture
def machines_dashboard(tmp_path: Path, two_machines_url: str) -> Iterator[str]:
    """The dashboard on the lean spec run as two machines (alpha and beta, tests/conftest.py)."""
    require_browser()
    url = copy_store(two_machines_url, tmp_path / "machines.db")
    with serve_dashboard(url, tmp_path) as address:
        yield address


def test_the_compare_page_opens_on_both_machines_their_fingerprints_and_an_audit_that_finds_them_equal(
    machines_dashboard: str,
) -> None:
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        open_page(page, machines_dashboard, "compare")
        main = page.locator('[data-testid="stMain"]')
        expect(main.get_by_role("heading", name="Compare machines")).to_be_visible(timeout=60_000)
        # The preset run on most machines is chosen: the spec's runs ("custom"), on alpha and beta.
        expect(main.get_by_text("deterministic figures, all equal")).to_be_visible(timeout=120_000)
        wait_until_idle(page)
        audit = main.locator('[data-testid="stAlertContentSuccess"]').first.inner_text()
        assert audit.startswith("alpha, beta (model "), audit

        fingerprints = main.locator('[data-testid="stTable"]').first
        expect(fingerprints.locator("thead th").last).to_have_text("differs", timeout=30_000)
        header = [cell.strip() for cell in fingerprints.locator("thead th").all_inner_texts()]
        assert header[-3:] == ["alpha", "beta", "differs"], header
        fields = fingerprints.locator("tbody tr").all_inner_texts()
        assert any(row.startswith("cpu_model") for row in fields) and any(row.startswith("seed") for row in fields)
        assert any(row.startswith("run_id") and row.rstrip().endswith("differs") for row in fields)

        # st.dataframe draws on a canvas; its accessibility table holds the cells it shows.
        matrix = main.locator('[data-testid="stDataFrame"]').first
        expect(matrix.locator('th[role="columnheader"]').filter(has_text="beta / alpha")).to_have_count(1)
        matrix_header = [cell.strip() for cell in matrix.locator('th[role="columnheader"]').all_inner_texts()]
        assert matrix_header[:6] == ["experiment", "metric", "case", "alpha", "beta", "beta / alpha"], matrix_header
        expect(main.locator('[data-testid="stVegaLiteChart"] svg.marks').first).to_be_visible(timeout=60_000)
        wait_until_idle(page)
        cells = []
        for table in main.locator('[data-testid="stDataFrame"], [data-testid="stTable"]').all():
            cells += table.locator('td, [role="gridcell"]').all_inner_texts()
        assert len(cells) > 50 and not [cell for cell in cells if "{" in cell or "}" in cell]
        assert page.locator('[data-testid="stException"]').count() == 0
        screenshot(page, "compare-machines.png")


def test_the_launch_form_offers_the_data_folder_and_refuses_any_other_file(tmp_path: Path) -> None:
    """`decodelab dashboard --data-dir`: the form lists the folder's file as a corpus, and a spec
    naming a server file gets the one line that says nothing about it; nothing is queued."""
    from playwright.sync_api import expect

    from store.store import Store

    require_browser()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).close()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "fox.txt").write_text("The quick brown fox jumps over the lazy dog. " * 40)
    spec = TINY_SPEC.read_text().replace('corpus = "default"', 'corpus = "/etc/passwd"')
    with serve_dashboard(url, tmp_path, "--data-dir", "data") as address, chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        open_page(page, address)
        sidebar = page.locator('[data-testid="stSidebar"]')
        expect(sidebar.get_by_role("heading", name="Launch a sweep")).to_be_visible(timeout=30_000)
        # The sidebar's jobs panel reruns every 2 s and may close a list opened just before it:
        # open it again (at most three times) until the folder's file shows.
        for attempt in range(3):
            wait_until_idle(page)
            sidebar.get_by_role("combobox", name=re.compile("^Corpus")).click()
            try:
                expect(page.get_by_role("option", name="fox.txt")).to_be_visible(timeout=10_000)
                break
            except AssertionError:
                if attempt == 2:
                    raise
                page.keyboard.press("Escape")
        page.keyboard.press("Escape")
        wait_until_idle(page)
        sidebar.get_by_text("spec", exact=True).click()
        wait_until_idle(page)
        sidebar.locator("textarea").fill(spec)
        sidebar.locator("textarea").press("Control+Enter")
        wait_until_idle(page)
        sidebar.get_by_role("button", name="Launch").click()
        refusal = "corpus: only 'default' or a file in the data folder (1 files there) may be used from the dashboard"
        expect(sidebar.get_by_text(refusal)).to_be_visible(timeout=60_000)
    store = Store(url)
    assert frames.jobs(store).empty
    store.close()
