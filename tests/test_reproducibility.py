"""Two identical runs on one stored model agree exactly on every deterministic metric: what the
compare page and the determinism checks treat as machine-independent of the clock must be so."""

from __future__ import annotations

from pathlib import Path

import pytest

from dashboard.metrics import is_deterministic
from runner.execution.execute import execute
from runner.spec.sweeps import load_spec_file
from store import frames
from store.records import case_key
from store.store import Store
from tests.conftest import LEAN_SPEC, copy_store


@pytest.mark.slow
def test_a_second_identical_run_reproduces_every_deterministic_metric(filled_store_url: str, tmp_path: Path) -> None:
    # Two lean runs (every experiment, a lean speculative grid) on the session's stored tiny model:
    # a third as long as one more run of the whole tiny spec.
    store = Store(copy_store(filled_store_url, tmp_path / "again.db"))
    spec = load_spec_file(LEAN_SPEC)
    first = execute(store, spec, show_progress=False, log=lambda _: None).run_id
    second = execute(store, spec, show_progress=False, log=lambda _: None).run_id
    assert frames.runs(store)["model_hash"].nunique() == 1, "both on the stored model"

    def values(run_id: int, wanted: bool) -> dict[tuple[str, str, str], float]:
        rows = frames.measurements(store, run_id)
        return {
            (row["experiment"], case_key(row["params"]), row["metric"]): row["value"]
            for row in rows.to_dict("records")
            if is_deterministic(row["metric"], row["unit"]) == wanted
        }

    before, after = values(first, True), values(second, True)
    assert before.keys() == after.keys()
    assert len(before) > 300, "every experiment contributes"
    differing = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    assert not differing, differing
    # The comparison is not vacuous: the timed figures, left out, do differ between the runs.
    timed_before, timed_after = values(first, False), values(second, False)
    assert any(timed_before[key] != timed_after[key] for key in timed_before)
    store.close()


def test_two_different_edits_of_one_commit_are_two_code_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean checkout is its commit; a modified one adds +dirty and its diff's hash, so the
    calibration (which pairs runs of one code version) never pairs two different drafts."""
    from runner.measure import machine

    outputs = {"rev-parse": "abc123def456", "status": " M runner/measure/timing.py", "diff": "one draft"}
    monkeypatch.setattr(machine, "git", lambda root, *arguments: outputs[arguments[0]])
    first = machine.code_version.__wrapped__()
    assert first.startswith("abc123def456+dirty.") and len(first) == len("abc123def456+dirty.") + 8
    assert machine.code_version.__wrapped__() == first, "the same edit, the same version"
    outputs["diff"] = "another draft"
    assert machine.code_version.__wrapped__() != first
    outputs["status"] = ""
    assert machine.code_version.__wrapped__() == "abc123def456"
