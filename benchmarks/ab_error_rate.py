"""How often `decodelab ab` is wrong on this machine: A/A sessions (a revision against a trivial
change of itself) for false alerts, and sessions against a test patch that slows the fast_int8
kernel by 10% (every call into the compiled path of an int8 model busy-waits a tenth of its own
time) for recall on the cases that use that kernel, and alerts anywhere else.

    python benchmarks/ab_error_rate.py [--sessions 4] [--rounds 3] [--preset quick | --spec FILE]
        [--only quantization] [--db URL]
    python benchmarks/ab_error_rate.py --db URL --judge RUN,RUN,...

``--judge`` measures nothing: it judges sessions an earlier invocation stored in ``--db`` (their
candidate runs, A/A and slowed alternating from an A/A one, as this benchmark runs them) with the
review as it is now, and prints the same figures (the wall time is each pair's stored one).

The quick preset's quantization cases by default: at its model size the compiled kernel is most
of a timed generation, so a 10% slower kernel is a slower case (in the tiny spec's 8-token
generations Python's overhead is most of the time: the same patch moved them 1-2%). The quick
model is trained on the first session; give ``--db`` to keep it for the next invocation.

It copies this checkout's files (as the working tree has them) into a temporary repository at
three commits (base, a README change, the slowing patch), runs 2 × sessions `decodelab ab`
sessions into a temporary store and prints:

- ab_false_alert_rate: regressed or improved timed verdicts over the tested timed verdicts of the
  A/A sessions (target ≤ 0.01 over at least 4 sessions);
- ab_recall_single_kernel_at_10pct: the share of the slowed sessions' headline timed rows of the
  fast_int8 cases that say regressed (target ≥ 0.9);
- ab_alerts_elsewhere: regressed or improved rows of the slowed sessions on any other case;
- ab_session_wall_seconds_median: one session's wall time, from the command's start to its review.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "fast_int8"
SLOWER_BY = 0.10
TESTED = ("regressed", "improved", "within noise", "unknown drift")
ALERTS = ("regressed", "improved")
IDENTITY = ("-c", "user.name=decodelab benchmark", "-c", "user.email=benchmark@decodelab.invalid")
# The test patch: FastDecoder talks to the library of an int8 model through a wrapper whose calls
# busy-wait SLOWER_BY of their own time after returning.
ANCHOR = "        self._library = loaded if loaded is not None else library(march)\n"
PATCH = ANCHOR + (
    "        from runner.model.quantize import quantization_of  # benchmarks/ab_error_rate.py: 10% slower\n"
    '        if quantization_of(model).kernel == "fast_int8":\n'
    "            self._library = _Slowed(self._library)  # type: ignore[assignment]\n"
)
SLOWED_CLASS = f'''

class _Slowed:
    """benchmarks/ab_error_rate.py's test patch: every call of the library busy-waits after itself."""

    def __init__(self, wrapped: ctypes.CDLL) -> None:
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        import time

        function = getattr(self._wrapped, name)
        if not name.startswith(("dl_forward", "dl_sample", "dl_verify")):
            return function

        def slowed(*args: Any) -> Any:
            started = time.perf_counter()
            result = function(*args)
            until = time.perf_counter() + (time.perf_counter() - started) * {SLOWER_BY}
            while time.perf_counter() < until:
                pass
            return result

        return slowed
'''


def git(repository: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repository), *IDENTITY, *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def slowed(fast_module: str) -> str:
    """runner/decoding/fast.py's text with the test patch applied (tests/test_ab.py builds a
    decoder from it, so that a change to fast.py cannot leave the patch applying but broken)."""
    if ANCHOR not in fast_module:
        raise SystemExit("runner/decoding/fast.py has changed: the benchmark's patch no longer applies")
    return fast_module.replace(ANCHOR, PATCH, 1) + SLOWED_CLASS


def make_repository(folder: Path) -> None:
    """This checkout's files committed as ``base``; ``aa`` (a README change) and ``slow`` (the
    patch) on top of it."""
    listed = git(ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "-z").split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    git(folder, "init", "-q", "-b", "main")
    git(folder, "add", "-A")
    git(folder, "commit", "-qm", "base")
    git(folder, "tag", "base")
    (folder / "README.md").write_text((folder / "README.md").read_text() + "\n<!-- A/A -->\n")
    git(folder, "commit", "-qam", "aa")
    git(folder, "tag", "aa")
    git(folder, "checkout", "-q", "--detach", "base")
    fast = folder / "runner/decoding/fast.py"
    fast.write_text(slowed(fast.read_text()))
    git(folder, "commit", "-qam", "slow the fast_int8 kernel by 10%")
    git(folder, "tag", "slow")
    git(folder, "checkout", "-q", "main")


def session(repository: Path, db: str, candidate: str, arguments: argparse.Namespace) -> tuple[pd.DataFrame, float]:
    """One `decodelab ab` session of base against ``candidate``: its review table and wall time."""
    command = [sys.executable, "-m", "cli", "ab", "--repo", str(repository), "--db", db]
    command += ["--baseline", "base", "--candidate", candidate]
    command += ["--spec", str(arguments.spec)] if arguments.spec else ["--preset", arguments.preset]
    command += ["--rounds", str(arguments.rounds), *(["--only", arguments.only] if arguments.only else [])]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"a session failed: {done.stderr.strip().splitlines()[-1:]}")
    print(done.stdout.strip().splitlines()[0], file=sys.stderr)
    return judged(db, None), wall


def judged(db: str, candidate_run: int | None) -> pd.DataFrame:
    """The timed rows of the review of a stored session (its candidate run; None: the newest run)."""
    from analysis import review_inputs
    from analysis import runs as runs_module
    from store import frames
    from store.store import Store

    store = Store(db)
    try:
        runs = frames.runs(store)
        candidate_run = int(runs["run_id"].max()) if candidate_run is None else candidate_run
        baseline_run = runs_module.default_baseline(runs, candidate_run)  # its session's baseline
        assert baseline_run is not None and runs_module.interleaved_pair(runs, candidate_run, baseline_run)
        table = review_inputs.judge(review_inputs.read_inputs(store, candidate_run, baseline_run, runs))
    finally:
        store.close()
    return table[table["kind"] == "timed"]


def stored_wall(db: str, candidate_run: int) -> float:
    from store import frames
    from store.store import Store

    store = Store(db)
    try:
        runs = frames.runs(store)
        return float(runs.loc[runs["run_id"] == candidate_run, "wall_seconds"].iloc[0])
    finally:
        store.close()


class Tally:
    """The sessions' verdicts counted as the figures printed."""

    def __init__(self) -> None:
        self.walls: list[float] = []
        self.aa_tested = self.aa_alerts = self.hits = self.affected = self.elsewhere = 0

    def add_aa(self, table: pd.DataFrame, wall: float) -> None:
        self.walls.append(wall)
        self.aa_tested += int(table["verdict"].isin(TESTED).sum())
        self.aa_alerts += int(table["verdict"].isin(ALERTS).sum())
        for row in table[table["verdict"].isin(ALERTS)].to_dict("records"):
            print(f"A/A alert {row['point']}: {row['verdict']}, change {row['change']:+.1%}", file=sys.stderr)

    def add_slowed(self, table: pd.DataFrame, wall: float) -> None:
        self.walls.append(wall)
        uses = table["point"].str.contains(KERNEL, regex=False)
        for row in table[uses].to_dict("records"):  # what each kernel row saw, for the reader
            print(
                f"slowed {row['metric']} {row['point']}: {row['verdict']}, change {row['change']:+.1%}, "
                f"adjusted p {row['adjusted_p']:.3g}, would have seen ≥ {row['detectable']:.1%}",
                file=sys.stderr,
            )
        self.affected += int(uses.sum())
        self.hits += int((table[uses]["verdict"] == "regressed").sum())
        self.elsewhere += int(table[~uses]["verdict"].isin(ALERTS).sum())

    def report(self) -> None:
        print(f"ab_false_alert_rate={self.aa_alerts / self.aa_tested if self.aa_tested else float('nan'):.6g}")
        print(f"ab_false_alert_verdicts={self.aa_tested}")
        print(f"ab_recall_single_kernel_at_10pct={self.hits / self.affected if self.affected else float('nan'):.6g}")
        print(f"ab_kernel_rows={self.affected}")
        print(f"ab_alerts_elsewhere={self.elsewhere}")
        print(f"ab_sessions={len(self.walls)}")
        print(f"ab_session_wall_seconds_median={statistics.median(self.walls):.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4, help="A/A sessions, and as many slowed ones (default 4)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per timed case (default 3)")
    parser.add_argument("--preset", default="quick", help="the preset the sessions run (default quick)")
    parser.add_argument("--spec", type=Path, help="a sweep spec file instead, e.g. tests/fixtures/tiny.toml")
    parser.add_argument("--only", default="quantization", help="one experiment of the spec ('' for all)")
    parser.add_argument("--db", help="the store (default: a temporary SQLite file); its models are reused")
    parser.add_argument("--judge", help="judge these stored sessions' candidate runs (A/A first), measure nothing")
    arguments = parser.parse_args()
    tally = Tally()
    if arguments.judge:
        if not arguments.db:
            raise SystemExit("--judge: give the store that holds the sessions with --db")
        candidates = [int(run) for run in arguments.judge.split(",")]
        for number, candidate_run in enumerate(candidates):
            add = tally.add_aa if number % 2 == 0 else tally.add_slowed
            add(judged(arguments.db, candidate_run), stored_wall(arguments.db, candidate_run))
        tally.report()
        return 0
    folder = Path(tempfile.mkdtemp(prefix="decodelab-ab-benchmark-"))
    try:
        repository = folder / "decodelab"
        make_repository(repository)
        db = arguments.db or f"sqlite:///{folder / 'ab.db'}"
        for _ in range(arguments.sessions):
            tally.add_aa(*session(repository, db, "aa", arguments))
            tally.add_slowed(*session(repository, db, "slow", arguments))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    tally.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
