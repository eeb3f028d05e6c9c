"""The Roofline page in a real browser: the session's tiny run on its machine's measured roof with
the second machine's (the xeon-amx quick run imported from its export, its roof from a profile
file) overlaid, chart rendered, the conclusions written, no error box."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.browser_helpers import (
    chromium,
    open_page,
    require_browser,
    screenshot,
    serve_dashboard,
    wait_until_charts_settled,
)
from tests.conftest import FIXTURES, ROOT, copy_store, run_decodelab

SECOND_MACHINE = "xeon-amx"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def store_with_two_roofs(filled_store_url: str, tmp_path: Path) -> tuple[str, str]:
    """A copy of the filled store with the xeon-amx run imported and that machine's roof stored."""
    from store.schema import Machine
    from store.store import Store

    url = copy_store(filled_store_url, tmp_path / "roofline.db")
    exported = tmp_path / "xeon-amx-quick.json"
    exported.write_bytes(gzip.decompress((FIXTURES / "xeon-amx-quick.json.gz").read_bytes()))
    result = run_decodelab("import", str(exported), "--db", url, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    store = Store(url)
    with store.read() as session:
        machine_id = session.scalars(select(Machine.id).where(Machine.name == SECOND_MACHINE)).one()
    figures = json.loads((FIXTURES / "xeon-amx-profile.json").read_text())
    store.profiles.save(machine_id, figures["instruction_set"], figures["quick"], figures)
    own_machine, _ = store.profiles.for_run(1)
    store.close()
    return url, own_machine


def test_the_roofline_page_overlays_a_second_machines_roof(filled_store_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    require_browser()
    url, own_machine = store_with_two_roofs(filled_store_url, tmp_path)
    with serve_dashboard(url, tmp_path) as address, chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        open_page(page, address, f"roofline?run=1&compare={SECOND_MACHINE}")
        main = page.locator('[data-testid="stMain"]')
        expect(main.get_by_role("heading", name="Roofline")).to_be_visible(timeout=60_000)
        chart = main.locator('[data-testid="stVegaLiteChart"]').first
        expect(chart.locator("svg.marks")).to_be_visible(timeout=60_000)
        # Both machines in the legend of the dashed ceilings: the run's own and the overlaid one.
        expect(chart.locator("svg text", has_text=SECOND_MACHINE).first).to_be_visible(timeout=30_000)
        expect(chart.locator("svg text", has_text=own_machine).first).to_be_visible()
        expect(main.get_by_text("On ", exact=False).filter(has_text="fast fp32 step").first).to_be_visible()
        expect(main.get_by_text("Median |prediction error| per impl", exact=False).first).to_be_visible()
        wait_until_charts_settled(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0
        screenshot(page, "roofline.png")
