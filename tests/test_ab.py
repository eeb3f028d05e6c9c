"""`decodelab ab`: two revisions of this repository (a temporary copy at several commits) measured
interleaved, stored as an A/B pair and reviewed; every bad input refused in one line naming the
side, with nothing stored."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from runner.ab.session import Session, combined
from store.records import case_key
from tests.conftest import ROOT, TINY_SPEC, run_decodelab

GIT_IDENTITY = ("-c", "user.name=decodelab tests", "-c", "user.email=tests@decodelab.invalid")


def git(repository: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repository), *GIT_IDENTITY, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def commit_change(repository: Path, name: str, path: str, change: Any) -> str:
    """A commit on top of ``base`` that changes one file, tagged ``name``; the checkout back on base."""
    git(repository, "checkout", "-q", "--detach", "base")
    file = repository / path
    if change is None:
        file.unlink()
    else:
        file.write_text(change(file.read_text()))
    git(repository, "commit", "-qam", name)
    git(repository, "tag", name)
    git(repository, "checkout", "-q", "main")
    return git(repository, "rev-parse", name)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This repository's files (as the working tree has them) committed as ``base``, and commits
    on top of it: ``trivial`` (a comment), ``old`` (the newest migration removed: a revision
    older than the store's schema), ``broken`` (C++ that does not compile), ``deps`` (one more
    dependency); ``main`` is ``trivial``."""
    folder = tmp_path_factory.mktemp("ab") / "decodelab"
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / name)
    git(folder, "init", "-q", "-b", "main")
    git(folder, "add", "-A")
    git(folder, "commit", "-qm", "base")
    git(folder, "tag", "base")
    newest_migration = sorted((folder / "store/migrations/versions").glob("0*.py"))[-1]
    commit_change(folder, "old", str(newest_migration.relative_to(folder)), None)
    commit_change(folder, "broken", "runner/decoding/csrc/fast_decode.cpp", lambda text: text + "\n#error broken\n")
    commit_change(
        folder,
        "deps",
        "pyproject.toml",
        lambda text: text.replace("dependencies = [", 'dependencies = [\n    "left-pad>=1",', 1),
    )
    git(folder, "checkout", "-q", "main")
    (folder / "README.md").write_text((folder / "README.md").read_text() + "\n<!-- a trivial change -->\n")
    git(folder, "commit", "-qam", "trivial")
    git(folder, "tag", "trivial")
    yield folder
    shutil.rmtree(folder.parent, ignore_errors=True)


def ab(repository: Path, db: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_decodelab("ab", "--repo", str(repository), "--db", db, *args, cwd=cwd, timeout=900)


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The refusal: exit 2, its last stderr line (a failed side may follow progress lines) one line."""
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: "), result.stderr
    return line


def stored_runs(db: str) -> int:
    engine = sa.create_engine(db)
    try:
        with engine.connect() as connection:
            if not sa.inspect(connection).has_table("run"):
                return 0
            return int(connection.execute(sa.text("select count(*) from run")).scalar_one())
    finally:
        engine.dispose()


def worktrees(repository: Path) -> list[str]:
    return [line for line in git(repository, "worktree", "list").splitlines() if line]


# ---- end to end ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_ab_end_to_end_interleaves_stores_a_pair_and_finds_no_change(
    repository: Path, tmp_path: Path, store_url: str
) -> None:
    db = store_url  # a SQLite file, and a PostgreSQL schema at head: both workers open it with their own code
    rounds = 3
    result = ab(
        repository, db, "--baseline", "base", "--candidate", "HEAD", "--spec", str(TINY_SPEC),
        "--only", "quantization", "--rounds", str(rounds), "--fail-on", "changed",
        "--out", str(tmp_path / "ab.md"), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    base, head = git(repository, "rev-parse", "base"), git(repository, "rev-parse", "HEAD")
    engine = sa.create_engine(db)
    with engine.connect() as connection:
        runs = connection.execute(sa.text("select id, status, code_version from run order by id")).all()
        tags = connection.execute(sa.text("select run_id, name from run_tag order by run_id, name")).all()
        samples = connection.execute(
            sa.text(
                "select m.run_id, c.experiment, c.case_key, m.metric, s.pair_index, s.side, s.round_index "
                "from sample s "
                'join measurement m on m.id = s.measurement_id join "case" c on c.id = m.case_id'
            )
        ).all()
    engine.dispose()
    (baseline_run, baseline_status, baseline_code), (candidate_run, candidate_status, candidate_code) = runs
    assert (baseline_status, candidate_status) == ("done", "done")
    assert (baseline_code, candidate_code) == (base[:12], head[:12])
    pair = f"ab:{baseline_run}-{candidate_run}"
    assert sorted(tags) == sorted(
        [
            (baseline_run, pair),
            (baseline_run, f"rev:{base[:12]}"),
            (candidate_run, pair),
            (candidate_run, f"rev:{head[:12]}"),
        ]
    )
    # The interleaving, read back from the stored rounds and indexes: for each timed measurement,
    # every round holds both runs' samples, one run's pairs then the other's (no index on both
    # sides), and the run that goes first alternates from round to round.
    by_measurement: dict[tuple[str, str, str], dict[int, list[tuple[int, int]]]] = {}
    for run_id, experiment, key, metric, pair_index, _side, round_index in samples:
        by_measurement.setdefault((experiment, key, metric), {}).setdefault(round_index, []).append(
            (pair_index, run_id)
        )
    assert by_measurement
    for measurement, by_round in by_measurement.items():
        assert sorted(by_round) == list(range(rounds)), measurement
        firsts = []
        for _, round_samples in sorted(by_round.items()):
            order = [run_id for _, run_id in sorted(set(round_samples))]
            split = order.index(order[-1])
            assert set(order[:split]) | set(order[split:]) == {baseline_run, candidate_run}, measurement
            assert len(set(order[:split])) == 1 and len(set(order[split:])) == 1, measurement
            firsts.append(order[0])
        assert all(first != after for first, after in zip(firsts, firsts[1:], strict=False)), measurement
    # A/A (a README change): every deterministic figure equal, the timed rows tested round by
    # round, and the review defaults to the session's baseline and needs no drift allowance.
    # Whether a timed row alerts is chance, not a property of the code: its rate on A/A sessions
    # is benchmarks/ab_error_rate.py's figure (a CI run of this test, the other core busy with the
    # suite, once met one regressed row in three rounds), so the gate here fails on `changed` only.
    report = (tmp_path / "ab.md").read_text()
    assert "no drift allowance is needed" in report
    # Its first line never points a session to a session; where it cannot see 25%, to more rounds.
    seen = next(line for line in report.splitlines() if "could have flagged" in line)
    assert "--baseline REV" not in seen, seen
    assert ("cannot see" not in seen) or seen.endswith("(`decodelab ab --rounds 10`) would lower it**"), seen
    assert "paired t test on log values, rounds matched in time" in report
    assert "deterministic figures, computed once per revision: " in result.stdout
    assert " 0 differ; review: " in result.stdout
    again = run_decodelab(
        "report", "run", "--run", str(candidate_run), "--out", "-", "--format", "md", "--db", db,
        "--fail-on", "changed", cwd=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert f"against baseline {baseline_run}" in again.stderr
    assert len(worktrees(repository)) == 1  # both worktrees removed again


# ---- the session's order, with stand-in workers -------------------------------------------------


class FakeRevision:
    def __init__(self, side: str) -> None:
        self.side, self.short, self.option = side, side[:4], f"--{side}"


class FakeWorker:
    """Answers like a worker: case 0 timed (two pairs of samples), case 1 deterministic."""

    def __init__(self, side: str, calls: list[tuple[str, int, bool]]) -> None:
        self.revision = FakeRevision(side)
        self.calls = calls
        self.handed_back: list[tuple[int, int, list[dict[str, Any]]]] = []  # (process, case index, figures)
        self.process = 0

    def stop(self) -> None:
        self.calls.append((self.revision.side, -2, False))

    def start(self) -> None:
        self.calls.append((self.revision.side, -1, False))
        self.process += 1

    def ask(self, request: dict[str, Any], doing: str) -> dict[str, Any]:
        if request["op"] == "prepare":
            return {"ok": True, "model_id": 1, "cases": [["kv_cache", {"n": 8}], ["context_cost", {"n": 4}]]}
        if request["op"] == "record":
            self.handed_back.append((self.process, request["index"], request["measurements"]))
        if request["op"] != "case":
            return {"ok": True}
        self.calls.append((self.revision.side, request["index"], request["first"]))
        if request["index"] == 0:
            samples = [[0, "A", 1.0], [0, "B", 2.0], [1, "A", 1.0], [1, "B", 2.0]]
            timed = {"metric": "measured_speedup", "value": 0.5, "unit": "ratio", "samples": samples}
            return {"ok": True, "measurements": [timed]}
        return {"ok": True, "measurements": [{"metric": "weight_bytes", "value": 64.0, "unit": "bytes", "samples": []}]}


def test_rounds_run_in_fresh_workers_alternate_sides_and_a_deterministic_case_runs_once() -> None:
    calls: list[tuple[str, int, bool]] = []
    session = Session(FakeWorker("baseline", calls), FakeWorker("candidate", calls), 4, lambda _: None)  # type: ignore[arg-type]
    session.prepare({})
    session.run()

    # Both workers end before either starts again, the side started first alternating with the round
    # (-2: ended, -1: started).
    def restart(first: str, second: str) -> list[tuple[str, int, bool]]:
        return [(first, -2, False), (second, -2, False), (first, -1, False), (second, -1, False)]

    restart_baseline_first, restart_candidate_first = restart("baseline", "candidate"), restart("candidate", "baseline")
    assert calls == [
        ("baseline", 0, True), ("candidate", 0, True), ("candidate", 1, True), ("baseline", 1, True),
        *restart_candidate_first, ("candidate", 0, False), ("baseline", 0, False),
        *restart_baseline_first, ("baseline", 0, False), ("candidate", 0, False),
        *restart_candidate_first, ("candidate", 0, False), ("baseline", 0, False),
    ]  # fmt: skip
    baseline, candidate = session.sides
    timed = baseline.records()[0].measurements[0]
    # Each round's two pairs keep their A and B together, numbered after everything before them,
    # and every sample keeps its round.
    assert sorted({sample.pair_index for sample in timed.samples}) == [0, 1, 6, 7, 8, 9, 14, 15]
    assert sorted({(s.pair_index, s.round_index) for s in candidate.records()[0].measurements[0].samples}) == [
        (2, 0), (3, 0), (4, 1), (5, 1), (10, 2), (11, 2), (12, 3), (13, 3),
    ]  # fmt: skip
    assert [record.params for record in candidate.records()] == [{"n": 8}, {"n": 4}]
    assert len(baseline.rounds[("kv_cache", case_key({"n": 8}))]) == 4
    assert len(baseline.rounds[("context_cost", case_key({"n": 4}))]) == 1
    # Every fresh process (1, 2, 3) got round 0's figures of both cases back.
    timed_figure = [{"metric": "measured_speedup", "value": 0.5, "unit": "ratio"}]
    deterministic_figure = [{"metric": "weight_bytes", "value": 64.0, "unit": "bytes"}]
    for worker in (baseline.worker, candidate.worker):
        assert worker.handed_back == [  # type: ignore[attr-defined]
            (process, index, figures)
            for process in (1, 2, 3)
            for index, figures in ((0, timed_figure), (1, deterministic_figure))
        ]


def test_rounds_combine_to_the_median_and_keep_every_sample() -> None:
    rounds = [
        [{"metric": "measured_speedup", "value": value, "unit": "ratio", "samples": [[index, "A", value]]}]
        for index, value in enumerate([1.0, 3.0, 2.0])
    ]
    (record,) = combined(rounds)
    assert record.value == 2.0 and [sample.pair_index for sample in record.samples] == [0, 1, 2]


# ---- bad input: one line naming the side, nothing stored ----------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        (("--baseline", "no-such-rev", "--candidate", "HEAD"), ("--baseline: 'no-such-rev' is not a revision",)),
        (("--baseline", "base", "--candidate", "deps"), ("--candidate:", "dependencies differ", "left-pad")),
        (("--baseline", "old", "--candidate", "HEAD"), ("--baseline: old", "older than the store's schema")),
        (("--baseline", "base", "--candidate", "broken"), ("--candidate (", "building its fast path failed", "#error")),
        (("--baseline", "base", "--candidate", "HEAD", "--only", "nope"), ("--only: 'nope' is not an experiment",)),
    ],
    ids=["unknown revision", "dependencies differ", "older than the schema", "failed build", "unknown experiment"],
)
def test_bad_input_is_one_line_naming_the_side(
    repository: Path, tmp_path: Path, arguments: tuple[str, ...], fragments: tuple[str, ...]
) -> None:
    db = f"sqlite:///{tmp_path / 'ab.db'}"
    result = ab(repository, db, "--spec", str(TINY_SPEC), "--only", "quantization", *arguments, cwd=tmp_path)
    line = error_line(result)
    for fragment in fragments:
        assert fragment in line, line
    assert stored_runs(db) == 0
    assert len(worktrees(repository)) == 1


@pytest.mark.slow
def test_a_dirty_checkout_refuses_to_measure_head(repository: Path, tmp_path: Path) -> None:
    readme = repository / "README.md"
    before = readme.read_text()
    readme.write_text(before + "\nnot committed\n")
    try:
        result = ab(repository, f"sqlite:///{tmp_path / 'ab.db'}", "--baseline", "base", "--candidate", "HEAD",
                    "--spec", str(TINY_SPEC), cwd=tmp_path)  # fmt: skip
    finally:
        readme.write_text(before)
    line = error_line(result)
    assert "--candidate: HEAD" in line and "uncommitted changes (README.md)" in line
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ab.db").exists()


def test_an_ab_pair_is_its_own_review_and_never_another_runs_baseline_or_drift() -> None:
    import pandas as pd

    from analysis import runs as runs_module

    runs = pd.DataFrame(
        {
            "run_id": [1, 2, 3, 4],
            "started_at": pd.to_datetime(["2026-01-01", "2026-01-02", "2026-01-02", "2026-01-03"]),
            "status": ["done"] * 4,
            "preset": ["quick"] * 4,
            "spec": [None] * 4,
            "machine_fingerprint": ["m"] * 4,
            "tags": ["", "ab:2-3, rev:aaaaaaaaaaaa", "ab:2-3, rev:bbbbbbbbbbbb", ""],
        }
    )
    assert runs_module.ab_pair("ab:2-3, rev:aaaaaaaaaaaa") == (2, 3) and runs_module.ab_pair("baseline") is None
    assert runs_module.interleaved_pair(runs, 3, 2) and not runs_module.interleaved_pair(runs, 2, 3)
    assert not runs_module.interleaved_pair(runs, 4, 1)
    assert runs_module.default_baseline(runs, 3) == 2  # the candidate: its session's baseline
    assert runs_module.default_baseline(runs, 4) == 1  # a later run: never an A/B run
    assert runs_module.earlier_comparable_runs(runs, 4) == [1]
    assert runs_module.machine_runs_before(runs, 4) == [1]


def test_the_error_rate_benchmarks_patch_slows_the_int8_library_and_nothing_else() -> None:
    """benchmarks/ab_error_rate.py slows its candidate by patching the text of
    runner/decoding/fast.py: the patched module must still build decoders (a refactor once left the
    patch's anchor in place but the names it read gone, so every fast case of the slowed revision
    would have failed), wrap the library of an int8 model and leave a float32 one's alone."""
    import importlib.util
    import sys
    import types

    import torch

    from runner.decoding.fast import FastDecoder
    from runner.model.gpt import CharGPT, ModelConfig
    from runner.model.quantize import quantize_model

    spec = importlib.util.spec_from_file_location("ab_error_rate", ROOT / "benchmarks" / "ab_error_rate.py")
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    patched = types.ModuleType("slowed_fast")
    sys.modules[patched.__name__] = patched
    try:
        text = benchmark.slowed((ROOT / "runner" / "decoding" / "fast.py").read_text())
        exec(compile(text, "slowed_fast.py", "exec"), patched.__dict__)
        torch.manual_seed(0)
        model = CharGPT(ModelConfig(vocab_size=40, d_model=32, n_layer=1, n_head=2, context_length=64)).eval()
        int8 = quantize_model(model, "int8", kernel="fast_int8")
        slowed_int8, slowed_float = patched.FastDecoder(int8), patched.FastDecoder(model)
        assert isinstance(slowed_int8._library, patched._Slowed)
        assert not isinstance(slowed_float._library, patched._Slowed)
        tokens = [1, 2, 3, 4]
        assert torch.equal(
            slowed_int8.forward(tokens, int8.new_cache()), FastDecoder(int8).forward(tokens, int8.new_cache())
        )
    finally:
        del sys.modules[patched.__name__]
