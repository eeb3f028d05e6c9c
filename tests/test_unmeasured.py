"""A case the machine cannot measure does not end the run: it is kept as not measured with its
reason, the run ends done and says how many, the review never judges it, and
`decodelab run --only-unmeasured RUN` measures it later into the same run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from analysis.review_inputs import judge, read_inputs
from cli.main import main
from runner.experiments import ExperimentContext, kv_cache
from runner.experiments.parts import kv_timing
from store import frames
from store.store import Store
from tests.conftest import LEAN_CASES, LEAN_SPEC


class TooBusyHarness:
    """A harness on a machine so busy that an n-token generation takes no longer than a 1-token one:
    every round of the prefill timing gives the two the same time."""

    def interleaved(
        self, functions: Sequence[Callable[[], object]], rounds: int, *args: Any, **kwargs: Any
    ) -> tuple[tuple[float, ...], tuple[float, ...]]:
        for function in functions:
            function()
        return (1e-3,) * rounds, (1e-3,) * rounds


def busy_for_one_case(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The real prefill timing, given the too-busy harness for the static impl's cached case only."""
    real = kv_timing.prefill
    hit: list[dict[str, Any]] = []

    def prefill(case: dict[str, Any], context: ExperimentContext) -> Any:
        if case["impl"] == "static" and case["cache"]:
            hit.append(case)
            return real(case, replace(context, harness=TooBusyHarness()))  # type: ignore[arg-type]
        return real(case, context)

    monkeypatch.setitem(kv_cache.PARTS, "prefill", prefill)
    return hit


@dataclass
class Ran:
    exit_code: int
    output: str  # stdout, then stderr


def run_command(capsys: pytest.CaptureFixture[str], *args: str) -> Ran:
    """The real entry point, in this process (so a test can make one timing fail): its exit code
    and every line it printed."""
    with pytest.raises(SystemExit) as ended:
        main(list(args))
    printed = capsys.readouterr()
    return Ran(int(ended.value.code or 0), printed.out + printed.err)


@pytest.mark.slow
def test_a_case_that_cannot_be_timed_is_kept_unmeasured_and_retried_later(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = run_command(capsys, "run", "--spec", str(LEAN_SPEC), "--db", sqlite_url)
    assert baseline.exit_code == 0, baseline.output
    hit = busy_for_one_case(monkeypatch)
    busy = run_command(capsys, "run", "--spec", str(LEAN_SPEC), "--db", sqlite_url)
    assert busy.exit_code == 0, busy.output
    assert len(hit) == 1, "one case met the busy machine"
    assert "Traceback" not in busy.output
    assert f"stored run 2 ({LEAN_CASES} cases, 1 not measured" in busy.output
    assert "1 cases not measured (retry them with `decodelab run --only-unmeasured 2`)" in busy.output
    store = Store(sqlite_url)
    runs = frames.runs(store).set_index("run_id")
    assert runs.loc[2, "status"] == "done"
    [(experiment, params, reason)] = store.results.unmeasured_cases(2)
    assert (experiment, params["part"], params["impl"], params["cache"]) == ("kv_cache", "prefill", "static", True)
    assert "too busy" in reason and "\n" not in reason
    # The review shows the case as not measured, with its reason, and judges none of its rows.
    table = judge(read_inputs(store, 2, 1), headline_only=False)
    missing = table[table["verdict"] == "not measured"]
    assert not missing.empty and set(missing["experiment"]) == {"kv_cache"}
    assert all(why.startswith("not measured (kv_cache prefill:") for why in missing["why"])
    # The roofline's predictions rest on the run's own timed fits (withheld where a fit misses
    # its points), so which of them a run holds may differ between two runs: left out here.
    lacking = table[(table["verdict"] == "only in baseline") & ~table["metric"].str.startswith("roofline_")]
    assert lacking.empty, "every row the run lacks is the unmeasured case's"
    store.close()

    monkeypatch.undo()  # the machine is quiet again: the retry measures the case into run 2
    refused = run_command(capsys, "run", "--only-unmeasured", "1", "--db", sqlite_url)
    assert refused.exit_code == 2 and "run 1 has no unmeasured cases" in refused.output
    retried = run_command(capsys, "run", "--only-unmeasured", "2", "--db", sqlite_url)
    assert retried.exit_code == 0, retried.output
    assert "stored run 2 (1 cases," in retried.output
    store = Store(sqlite_url)
    assert store.results.unmeasured_cases(2) == []
    assert len(store.results.recorded_case_keys(2)) == LEAN_CASES
    assert frames.runs(store).set_index("run_id").loc[2, "status"] == "done"
    table = judge(read_inputs(store, 2, 1), headline_only=False)
    assert not (table["verdict"] == "not measured").any()
    assert not ((table["verdict"] == "only in baseline") & ~table["metric"].str.startswith("roofline_")).any()
    store.close()


def test_only_unmeasured_refuses_what_it_cannot_retry(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    missing = run_command(capsys, "run", "--only-unmeasured", "5", "--db", sqlite_url)
    assert missing.exit_code == 2 and missing.output.strip().endswith("--only-unmeasured: no run 5 in this store")
    both = run_command(capsys, "run", "--only-unmeasured", "5", "--preset", "quick", "--db", sqlite_url)
    assert both.exit_code == 2 and "allowed: no --preset, --spec or --device" in both.output
