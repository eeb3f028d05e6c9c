"""The whole path: spec → model → experiments → store, in-process and through a worker."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.execution.execute import execute
from runner.experiments import context_cost
from runner.spec.sweeps import load_spec_file
from store import frames
from store.store import Store
from tests.conftest import LEAN_CASES, LEAN_SPEC, TINY_SPEC, run_decodelab

# training_summary 1; kv_cache 27 (two impls: equivalence 2, no_mask, counter_check, recomputation,
# counts 2, timing 4, width, fit 2, prefill 4, memory 4, writeup_model 2, rounded_cache, aa 2); overhead 12
# (aa 3); quantization 8 (fp32, int8 fake/dynamic/fast, int4 fake, bf16 fast, aa 2); speculative 90
# (distribution 8: 2 drafts × 2 temperatures × 2 impls; per impl aa, 28 at T = 1: 7 drafts × (fixed
# k 1 and 3, heuristic, confidence), 4 at each of T = 0.7 and greedy (bigram only), a choice per
# temperature and one accuracy); context_cost 3
TINY_CASES = 141


def quiet(_: str) -> None:
    pass


def cases_held(store: Store, run_id: int) -> int:
    """The run's cases, measured or (a loaded machine could not time one) held as not measured."""
    return len(store.results.recorded_case_keys(run_id)) + len(store.results.unmeasured_cases(run_id))


def test_the_tiny_spec_plans_and_the_session_run_recorded_every_case(filled_store_url: str) -> None:
    """The whole tiny sweep is run once a session (filled_store_url): every case it plans is there."""
    assert load_spec_file(TINY_SPEC).cases_total() == TINY_CASES
    store = Store(filled_store_url)
    assert cases_held(store, 1) == TINY_CASES
    store.close()


@pytest.mark.slow
def test_run_records_every_case_and_a_rerun_reuses_the_model(sqlite_url: str) -> None:
    import sqlite3

    import torch

    store = Store(sqlite_url)
    # The lean sweep: every experiment in a few seconds; the tiny one's count is checked above.
    spec = load_spec_file(LEAN_SPEC)
    threads_before = torch.get_num_threads()
    first = execute(store, spec, show_progress=False, log=quiet)
    assert first.cases_recorded == spec.cases_total() == LEAN_CASES
    # The experiments ran on the spec's one thread, recorded with the machine; torch is left as it was.
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as connection:
        assert connection.execute("SELECT threads FROM machine").fetchall() == [(spec.raw["threads"],)] == [(1,)]
    assert torch.get_num_threads() == threads_before
    from runner.decoding.fast_library import threads_wanted

    assert threads_wanted() == 1, "the fast path is back on its default"
    run = frames.runs(store).to_dict("records")[0]
    assert run["status"] == "done" and run["wall_seconds"] > 0
    measured = frames.measurements(store, first.run_id)
    summary = measured[measured["experiment"] == "training_summary"].set_index("metric")["value"]
    assert summary["parameter_count"] == 32 * 103 + 64 * 32 + 12 * 32 * 32 + 13 * 32 + 2 * 32
    assert summary["seconds_per_token"] > 0
    counted = measured[measured["metric"] == "per_position_mults_counted"]["value"].item()
    assert counted == 4 * 16 * 16 + 2 * 16 * 64
    second = execute(store, spec, show_progress=False, log=quiet)
    assert frames.runs(store)["model_hash"].nunique() == 1, "the second run reused the stored model"
    assert second.run_id != first.run_id


@pytest.mark.slow
def test_an_interrupted_run_keeps_its_cases_and_resumes_without_duplicates(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(sqlite_url)
    spec = load_spec_file(LEAN_SPEC)
    real_run_case = context_cost.EXPERIMENT.run_case
    calls = {"count": 0}

    def interrupted_on_the_second(case: dict[str, Any], context: Any = None) -> Any:
        calls["count"] += 1
        if calls["count"] == 2:
            raise KeyboardInterrupt
        return real_run_case(case, context)

    monkeypatch.setattr(context_cost.EXPERIMENT, "run_case", interrupted_on_the_second)
    # Summary cases (fits, the speculative choice) read the cases this process just measured from
    # memory: a fresh run reads no measurements back from the store; a resumed one reads the
    # earlier attempt's once per experiment.
    read_back: list[str] = []
    real_measurements = store.results.measurements

    def counted_measurements(run_id: int, experiment: str) -> Any:
        read_back.append(experiment)
        return real_measurements(run_id, experiment)

    monkeypatch.setattr(store.results, "measurements", counted_measurements)
    job_id = store.jobs.enqueue(spec.raw, cases_total=spec.cases_total())
    worker = store.workers.register(
        name="test-worker", kind="worker", machine_name="test-machine", host="h", pid=0, stale_after_seconds=60
    )
    job = store.jobs.claim(worker)
    assert job is not None
    with pytest.raises(KeyboardInterrupt):
        execute(store, spec, job=job, requeue_on_interrupt=True, show_progress=False, log=quiet)
    run = frames.runs(store).iloc[0]
    assert run["status"] == "interrupted"
    assert store.jobs.status(job_id) == "queued", "a worker stopped by a signal requeues its job"
    run_id = int(run["run_id"])
    # Everything before the interrupted second context_cost case (context_cost runs last, three
    # cases) is held: measured, or, where a loaded machine could not time one, as not measured.
    unmeasured_before = len(store.results.unmeasured_cases(run_id))
    assert len(store.results.recorded_case_keys(run_id)) + unmeasured_before == LEAN_CASES - 2
    assert read_back == [], "a fresh run's summary cases read the cases measured in memory"
    monkeypatch.setattr(context_cost.EXPERIMENT, "run_case", real_run_case)

    # The next claim resumes the same run and fills in only what is missing.
    resumed_job = store.jobs.claim(worker)
    assert resumed_job is not None and resumed_job.run_id == run_id
    outcome = execute(store, spec, job=resumed_job, show_progress=False, log=quiet)
    # The two missing cases, and a second try at any the first attempt could not time.
    retried = 2 + unmeasured_before
    assert (outcome.run_id, outcome.cases_recorded, outcome.cases_skipped) == (run_id, retried, LEAN_CASES - retried)
    assert cases_held(store, run_id) == LEAN_CASES, "each case once: a retried case replaces its not-measured row"
    assert frames.runs(store).iloc[0]["status"] == "done"
    assert sorted(read_back) == sorted(set(read_back)), "the earlier attempt's cases read once per experiment"
    assert "speculative" in read_back


@pytest.mark.slow
def test_a_queued_job_runs_end_to_end_through_worker_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"

    def decodelab(*args: str) -> subprocess.CompletedProcess[str]:
        return run_decodelab(*args, "--db", url, cwd=tmp_path, DECODELAB_MACHINE="ci-box")

    queued = decodelab("enqueue", "--spec", str(LEAN_SPEC), "--machine", "ci-box")
    assert queued.returncode == 0, queued.stderr
    assert f"job 1 queued ({LEAN_CASES} cases) for machine ci-box" in queued.stdout
    worked = decodelab("worker", "--once")
    assert worked.returncode == 0, worked.stderr
    store = Store(url)
    job = frames.jobs(store).iloc[0]
    assert (job["status"], job["cases_done"], job["cases_total"]) == ("done", LEAN_CASES, LEAN_CASES)
    runs = frames.runs(store)
    assert runs.loc[0, "status"] == "done" and runs.loc[0, "machine"] == "ci-box"
    # The worker's caller, the command line, kept the machine's drift after the done run.
    run = runs.to_dict("records")[0]
    kept = store.drift.of_fingerprint(str(run["machine_fingerprint"]))
    assert kept is not None and kept.run_id == run["run_id"]
    exported = decodelab("export", "--format", "json", "--out", str(tmp_path / "out.json"))
    assert exported.returncode == 0, exported.stderr
    rows = json.loads((tmp_path / "out.json").read_text())
    assert {row["experiment"] for row in rows} == {
        "training_summary",
        "kv_cache",
        "overhead",
        "quantization",
        "speculative",
        "context_cost",
    }
    long_format = ["run_id", "machine", "experiment", "params", "metric", "value", "unit"]
    assert all(list(row)[:7] == long_format for row in rows), "the long format first, import extras after"
    idle = decodelab("worker", "--once")
    assert idle.returncode == 0 and "no queued job" in idle.stderr


def test_bad_spec_from_the_cli_writes_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(TINY_SPEC.read_text().replace("repeats = 2", "repeats = 99"))
    result = run_decodelab("run", "--spec", str(spec), "--db", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: experiments.training_summary.repeats: 99 is above the maximum (allowed 1..50)"
    )
    assert not (tmp_path / "s.db").exists()
