"""Launches from the dashboard train only on 'default' or a file under the data folder; the
refusal says nothing about the path; the worker checks again where the job runs. The command
line keeps any readable path."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.launch import LaunchRequest, launch
from runner.errors import InputError
from runner.model.data_folder import DASHBOARD_JOB_KEY, MAX_CORPUS_BYTES, data_files
from runner.spec.sweeps import validate
from store import frames
from store.store import Store
from tests.conftest import HF_SPEC, ROOT, TINY_SPEC, run_decodelab

# The tiny model and one quick experiment, its corpus set by each test.
QUICK_SPEC = TINY_SPEC.read_text().split("[experiments.kv_cache]")[0]
TEXT = "The quick brown fox jumps over the lazy dog. " * 40


def spec_naming(corpus: str) -> str:
    return QUICK_SPEC.replace('corpus = "default"', f"corpus = {corpus!r}")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data folder with two corpora (one in a subfolder), a symlink out of it, a file over
    64 MiB (sparse), and a secret file beside it."""
    folder = tmp_path / "data"
    (folder / "more").mkdir(parents=True)
    (folder / "fox.txt").write_text(TEXT)
    (folder / "more" / "fox2.txt").write_text(TEXT)
    (tmp_path / "secret.txt").write_text("the server's secret " * 100)
    (folder / "link_out.txt").symlink_to(tmp_path / "secret.txt")
    with open(folder / "huge.txt", "wb") as huge:
        huge.truncate(MAX_CORPUS_BYTES + 1)
    return folder


REFUSAL = "corpus: only 'default' or a file in the data folder (2 files there) may be used from the dashboard"


def test_the_data_folder_lists_only_usable_files(data_dir: Path) -> None:
    assert data_files(data_dir) == ["fox.txt", "more/fox2.txt"]
    assert data_files(data_dir / "nowhere") == []


@pytest.mark.parametrize(
    "corpus",
    ["/etc/passwd", "../secret.txt", "SECRET", "link_out.txt", "huge.txt", "nosuch.txt", "more", "/etc/nosuch"],
)
def test_a_launch_naming_any_other_file_is_refused_alike(sqlite_url: str, data_dir: Path, corpus: str) -> None:
    store = Store(sqlite_url)
    corpus = str(data_dir.parent / "secret.txt") if corpus == "SECRET" else corpus
    for request in (
        LaunchRequest("spec", "quick", [], spec_naming(corpus), "", True),
        LaunchRequest("preset", "quick", ["training_summary"], "", "", True, corpus=corpus),
    ):
        with pytest.raises(InputError) as refused:
            launch(store, request, data_dir)
        assert str(refused.value) == REFUSAL  # the same line whatever the path: it reveals nothing
    assert frames.jobs(store).empty
    store.close()


def test_a_launch_naming_a_data_file_records_its_resolved_path_and_origin(sqlite_url: str, data_dir: Path) -> None:
    store = Store(sqlite_url)
    for corpus in ("more/fox2.txt", str(data_dir / "fox.txt"), "default"):
        launched = launch(store, LaunchRequest("spec", "quick", [], spec_naming(corpus), "", True), data_dir)
        job = store.jobs.claim(
            store.workers.register(name="t:1", kind="worker", machine_name="t", host="t", pid=1, stale_after_seconds=60)
        )
        assert job is not None and job.id == launched.job_id
        expected = corpus if corpus == "default" else str((data_dir / corpus).resolve())
        assert job.spec["model"]["corpus"] == expected
        assert job.spec[DASHBOARD_JOB_KEY] == {"data_dir": str(data_dir.resolve())}
        store.jobs.finish(job.claim, "done")
    store.close()


def test_a_spec_cannot_carry_the_dashboards_mark() -> None:
    raw = validate(tomllib.loads(QUICK_SPEC)).raw
    with pytest.raises(InputError, match=f"{DASHBOARD_JOB_KEY}: unknown key"):
        validate({**raw, DASHBOARD_JOB_KEY: {"data_dir": "/"}})


@pytest.mark.slow
def test_the_worker_refuses_a_dashboard_job_whose_corpus_left_the_folder(tmp_path: Path, data_dir: Path) -> None:
    """Launched on a data file that is then swapped for a symlink to a file outside: the
    worker, through the real CLI, fails the job with the same line and trains nothing."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store(url)
    launched = launch(store, LaunchRequest("spec", "quick", [], spec_naming("fox.txt"), "", True), data_dir)
    (data_dir / "fox.txt").unlink()
    (data_dir / "fox.txt").symlink_to(tmp_path / "secret.txt")
    store.close()
    result = run_decodelab("worker", "--once", "--db", url, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    store = Store(url)
    job = frames.jobs(store).set_index("job_id").loc[launched.job_id]
    assert job["status"] == "failed"
    assert job["error"] == REFUSAL.replace("(2 files", "(1 files")
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM model").scalar() == 0
    store.close()


@pytest.mark.slow
def test_the_command_line_keeps_any_readable_path(tmp_path: Path) -> None:
    (tmp_path / "anywhere.txt").write_text(TEXT)
    (tmp_path / "quick.toml").write_text(spec_naming(str(tmp_path / "anywhere.txt")))
    url = f"sqlite:///{tmp_path / 's.db'}"
    result = run_decodelab("enqueue", "--spec", "quick.toml", "--db", url, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    store = Store(url)
    queued = frames.jobs(store)
    store.close()
    assert str(tmp_path / "anywhere.txt") in json.dumps(queued["spec"].iloc[0]), "the job names the file given"


def test_the_form_offers_the_data_folders_files(
    sqlite_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    monkeypatch.setenv("DECODELAB_DATA_DIR", str(data_dir))
    from runner.measure.machine import machine_name

    store = Store(sqlite_url)
    # A live worker here: the dashboard starts none beside it (the job is looked at, not run).
    store.workers.register(
        name="t:1", kind="worker", machine_name=machine_name(), host="t", pid=1, stale_after_seconds=3600
    )
    store.close()
    app = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
    app.run()
    assert not app.exception
    assert app.selectbox(key="launch_corpus").options == ["default", "fox.txt", "more/fox2.txt"]
    app.selectbox(key="launch_corpus").set_value("more/fox2.txt")
    app.multiselect(key="launch_experiments_quick").set_value(["training_summary"]).run()
    if any(box.key == "launch_confirmed" for box in app.checkbox):  # training the quick model is long
        app.checkbox(key="launch_confirmed").check().run()
    app.button(key="launch_button").click().run()
    assert not app.exception
    assert any("queued" in success.value for success in app.sidebar.success), app.sidebar
    store = Store(sqlite_url)
    job = store.jobs.claim(
        store.workers.register(name="t:2", kind="worker", machine_name="t", host="t", pid=2, stale_after_seconds=60)
    )
    assert job is not None
    assert job.spec["model"]["corpus"] == str(data_dir.resolve() / "more" / "fox2.txt")
    store.close()


def hf_spec_naming(target: str, draft: str) -> str:
    """The tiny hf sweep naming these paths as its model and its hf: draft."""
    return HF_SPEC.read_text().replace("TARGET_DIR", target).replace("DRAFT_DIR", draft)


@pytest.fixture
def model_data_dir(tmp_path: Path, hf_checkpoints: Any) -> Path:
    """A data folder holding copies of the tiny hf target and draft, a model folder whose
    config.json links out, and a text file; the real checkpoints stay outside it."""
    folder = tmp_path / "data"
    folder.mkdir()
    shutil.copytree(hf_checkpoints.target, folder / "target")
    shutil.copytree(hf_checkpoints.draft, folder / "draft")
    (folder / "leaky").mkdir()
    (folder / "leaky" / "config.json").symlink_to(hf_checkpoints.target / "config.json")
    (folder / "fox.txt").write_text(TEXT)
    return folder


def model_refusal_line(field: str) -> str:
    return f"{field}: only a model folder in the data folder (2 there) may be used from the dashboard"


@pytest.mark.slow
def test_a_launch_naming_a_model_outside_the_folder_is_refused_alike(
    sqlite_url: str, model_data_dir: Path, hf_checkpoints: Any, tmp_path: Path
) -> None:
    """[model] path and hf: drafts, like corpora: a real checkpoint outside, a folder that is no
    model, a missing one, a file, a link out; one line per field, nothing read, nothing queued."""
    store = Store(sqlite_url)
    (tmp_path / "secret-folder").mkdir()
    (tmp_path / "secret-folder" / "config.json").write_text('{"model_type": "SECRET_TYPE"}')
    outside = [
        str(hf_checkpoints.target), "/root/.ssh", "/etc", "/nonexistent", "../secret-folder", "fox.txt", "leaky",
        str(model_data_dir / ".." / "secret-folder"),
    ]  # fmt: skip
    for path in outside:
        for text, field in (
            (hf_spec_naming(path, "draft"), "model.path"),
            (hf_spec_naming("target", path), "experiments.speculative.drafts[2]"),
        ):
            with pytest.raises(InputError) as refused:
                launch(store, LaunchRequest("spec", "quick", [], text, "", True), model_data_dir)
            assert str(refused.value) == model_refusal_line(field), path
    assert frames.jobs(store).empty
    launched = launch(
        store, LaunchRequest("spec", "quick", [], hf_spec_naming("target", "draft"), "", True), model_data_dir
    )
    with store.engine.connect() as connection:
        text = str(connection.exec_driver_sql(f"SELECT spec FROM job WHERE id = {launched.job_id}").scalar())
    assert str(model_data_dir.resolve() / "target") in text and f"hf:{model_data_dir.resolve() / 'draft'}" in text
    store.close()


@pytest.mark.slow
def test_the_worker_refuses_a_dashboard_job_whose_model_left_the_folder(
    tmp_path: Path, model_data_dir: Path, hf_checkpoints: Any
) -> None:
    """Launched on the data folder's model, which is then swapped for a link to a checkpoint
    outside: the worker, through the real CLI, fails the job with the fixed line and reads none
    of it (no config.json field in the error, no run)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store(url)
    request = LaunchRequest("spec", "quick", [], hf_spec_naming("target", "draft"), "", True)
    launched = launch(store, request, model_data_dir)
    store.close()
    shutil.rmtree(model_data_dir / "target")
    (model_data_dir / "target").symlink_to(hf_checkpoints.target)
    result = run_decodelab("worker", "--once", "--db", url, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    store = Store(url)
    job = frames.jobs(store).set_index("job_id").loc[launched.job_id]
    assert job["status"] == "failed"
    assert job["error"] == model_refusal_line("model.path").replace("(2 there)", "(1 there)")
    assert "gpt2" not in result.stdout + result.stderr and not store.results.run_exists(1)
    store.close()


@pytest.mark.browser
@pytest.mark.slow
def test_the_form_says_one_fixed_line_for_a_model_outside_the_folder(tmp_path: Path) -> None:
    """In Chromium, the sidebar's spec box with an hf model path and an hf: draft outside the data
    folder: the form's estimate shows the fixed line, and the page never says what the paths hold."""
    import re

    from playwright.sync_api import expect

    from tests.browser_helpers import chromium, open_page, require_browser, serve_dashboard, wait_until_idle

    require_browser()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).close()
    (tmp_path / "data").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "config.json").write_text('{"model_type": "SECRET_TYPE", "architectures": ["SECRET"]}')
    with serve_dashboard(url, tmp_path, "--data-dir", "data") as address, chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        open_page(page, address)
        sidebar = page.locator('[data-testid="stSidebar"]')
        for target, draft, field in (
            ("/root/.ssh", "/nonexistent", "model.path"),
            (str(tmp_path / "outside"), "/etc", "model.path"),
            ("data", str(tmp_path / "outside"), "model.path"),
        ):
            wait_until_idle(page)
            sidebar.get_by_text("spec", exact=True).click()
            wait_until_idle(page)
            sidebar.locator("textarea").fill(hf_spec_naming(target, draft))
            sidebar.locator("textarea").press("Control+Enter")
            line = f"{field}: only a model folder in the data folder (0 there) may be used from the dashboard"
            expect(sidebar.get_by_text(line)).to_be_visible(timeout=60_000)
            html = page.content()
            assert not re.search("SECRET|has no config|is not a directory|\\.ssh'", html)
    store = Store(url)
    assert frames.jobs(store).empty
    store.close()
