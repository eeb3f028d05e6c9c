"""Run the tests most likely to fail at random (browser, fleet, timing-sensitive) N times, each
time in a fresh pytest process, and print every test that failed at least once: its id, failures
out of runs, and the first line of its first error. Exits 1 if any test failed.

    python benchmarks/test_flakiness.py --runs 20 [-k EXPR] [--load] [--group browser --group fleet]
        [--workers N] [--max-minutes M] [--keep-reports DIR]

A first error line is rarely enough to find a cause, so every failure is kept whole: for each run,
DIR/run-N/pytest-output.txt (the run's console output, its FAILURES section included) and one
file per failed test, DIR/run-N/<test id>.txt, with the full traceback (pytest's longrepr) and the
test's captured stdout, stderr and log. Without --keep-reports DIR is a new temporary folder, kept
and printed when something failed, removed when nothing did; a folder named with --keep-reports
is always kept.

--workers 2 runs each repetition as `make test` runs the suite, in two pytest-xdist processes a
test file each (so every test has the other process's tests beside it, on top of --load's core).

--load keeps one core busy for the whole measurement (a spinning child process this script
starts and stops), as a parallel job on a CI machine would. Each run has its own pytest base
temporary directory, removed afterwards; the environment is passed through, so
DECODELAB_TEST_PG_URL and DECODELAB_REQUIRE_BROWSER=1 apply as they do in CI.

Not a pytest module (pytest collects only tests/): the name says what it measures.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROUPS = {
    "browser": ["tests/test_browser.py", "tests/test_browser_pages.py", "tests/test_browser_roofline.py"],
    "fleet": ["tests/test_fleet.py"],
    "timing": ["tests/test_reliability.py", "tests/test_concurrency.py", "tests/test_timing.py"],
}
# A run that hangs is a failure of every test it did not finish, not a reason to wait forever
# (one run of the browser and fleet tests took 30 minutes on the 2 shared cores at a load of 25).
RUN_TIMEOUT_SECONDS = 3600


@dataclass
class Tally:
    runs: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    first_error: dict[str, str] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)
    seen: Counter[str] = field(default_factory=Counter)
    broken_runs: list[str] = field(default_factory=list)

    def record(self, test_id: str, error: str | None) -> None:
        self.seen[test_id] += 1
        if error is not None:
            self.failures[test_id] += 1
            self.first_error.setdefault(test_id, error)
            self.last_error[test_id] = error


def test_id(case: ElementTree.Element) -> str:
    """pytest's node id from a JUnit ``testcase`` (classname ``tests.test_x``, name ``test_y[p]``)."""
    module = case.get("classname", "").replace(".", "/")
    return f"{module}.py::{case.get('name', '')}"


def first_line(problem: ElementTree.Element) -> str:
    message = (problem.get("message") or problem.text or "").strip()
    return message.splitlines()[0] if message else problem.tag


def file_name(test: str) -> str:
    """A test id as a file name: path separators and brackets become underscores."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", test).strip("_")[:200] + ".txt"


def whole_failure(test: str, case: ElementTree.Element, problems: list[ElementTree.Element]) -> str:
    """Everything JUnit holds on a failed test: each failure or error (setup and teardown errors
    are separate ones) with its message and full longrepr, then the captured output."""
    parts = [test]
    for problem in problems:
        parts.append(f"== {problem.tag}: {problem.get('message', '')}\n{problem.text or ''}")
    for captured in ("system-out", "system-err"):
        for element in case.iter(captured):
            if element.text and element.text.strip():
                parts.append(f"== captured {captured.removeprefix('system-')}\n{element.text}")
    return "\n\n".join(parts) + "\n"


def read_report(report: Path, tally: Tally, kept: Path) -> None:
    """Tally every test in one run's JUnit report; write each failed test's whole report to ``kept``."""
    root = ElementTree.parse(report).getroot()
    for case in root.iter("testcase"):
        if case.find("skipped") is not None:
            continue
        problems = [child for child in case if child.tag in ("failure", "error")]
        name = test_id(case)
        tally.record(name, first_line(problems[0]) if problems else None)
        if problems:
            kept.mkdir(parents=True, exist_ok=True)
            (kept / file_name(name)).write_text(whole_failure(name, case, problems))


@contextmanager
def busy_core(enabled: bool) -> Iterator[None]:
    """One spinning child process for the duration of the block (nothing when not ``enabled``)."""
    if not enabled:
        yield
        return
    # The spinner stops itself once this script is gone (killed, not only ended): a busy core
    # outliving the measurement was seen loading a CI run that came after it.
    spinner = subprocess.Popen([sys.executable, "-c", f"import os\nwhile os.getppid() == {os.getpid()}:\n    pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def run_once(paths: list[str], expression: str | None, workers: int, number: int, tally: Tally, reports: Path) -> float:
    """One fresh pytest process over ``paths``; returns its wall seconds. A run with a failure
    leaves its console output and each failed test's whole report in ``reports``/run-N."""
    base = Path(tempfile.mkdtemp(prefix=f"flakiness-run{number}-"))
    report = base / "report.xml"
    kept = reports / f"run-{number}"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths]
    command += ["--basetemp", str(base / "tmp"), "--junitxml", str(report), "-o", "junit_family=xunit1"]
    # The captured stdout, stderr and log of a failed test go into the JUnit report with it.
    command += ["-o", "junit_logging=all", "-o", "junit_log_passing_tests=false"]
    if expression:
        command += ["-k", expression]
    if workers > 1:
        command += ["-n", str(workers), "--dist", "loadfile", "--no-loadscope-reorder"]
    started = time.monotonic()
    # Its own session: a run stopped for taking too long takes its servers and workers with it.
    pytest = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = pytest.communicate(timeout=RUN_TIMEOUT_SECONDS)
        if report.exists():
            read_report(report, tally, kept)
        if pytest.returncode not in (0, 1) or not report.exists():
            tail = output.strip().splitlines()[-1:] or ["no output"]
            tally.broken_runs.append(f"run {number}: pytest exited {pytest.returncode}: {tail[0]}")
        if pytest.returncode != 0:
            kept.mkdir(parents=True, exist_ok=True)
            (kept / "pytest-output.txt").write_text(output)
    except subprocess.TimeoutExpired:
        os.killpg(pytest.pid, signal.SIGKILL)
        output, _ = pytest.communicate()
        kept.mkdir(parents=True, exist_ok=True)
        (kept / "pytest-output.txt").write_text(output or "")
        tally.broken_runs.append(f"run {number}: over {RUN_TIMEOUT_SECONDS} s, stopped")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    tally.runs += 1
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1, help="fresh pytest processes, 1 to 1000 (default 1)")
    parser.add_argument("-k", dest="expression", help="pytest's -k: only tests whose names match")
    parser.add_argument("--load", action="store_true", help="keep one core busy while the tests run")
    parser.add_argument(
        "--workers", type=int, default=1, help="pytest-xdist processes per run, 1 to 16 (make test: 2; default 1)"
    )
    parser.add_argument(
        "--max-minutes", type=float, help="start no run after this many minutes (the figures say how many ran)"
    )
    parser.add_argument(
        "--group", action="append", choices=sorted(GROUPS), help="which tests (repeatable; default: all groups)"
    )
    parser.add_argument(
        "--keep-reports",
        type=Path,
        metavar="DIR",
        help="write each failed test's whole report here, kept (default: a temporary folder, kept on failure)",
    )
    arguments = parser.parse_args()
    if not 1 <= arguments.runs <= 1000:
        parser.error(f"--runs must be between 1 and 1000, got {arguments.runs}")
    if not 1 <= arguments.workers <= 16:
        parser.error(f"--workers must be between 1 and 16, got {arguments.workers}")
    if arguments.keep_reports is not None and arguments.keep_reports.exists() and not arguments.keep_reports.is_dir():
        parser.error(f"--keep-reports must name a folder, got the file {arguments.keep_reports}")
    paths = [path for group in arguments.group or sorted(GROUPS) for path in GROUPS[group]]
    reports = arguments.keep_reports or Path(tempfile.mkdtemp(prefix="flakiness-reports-"))
    reports.mkdir(parents=True, exist_ok=True)

    tally = Tally()
    seconds: list[float] = []
    started = time.monotonic()
    with busy_core(arguments.load):
        for number in range(1, arguments.runs + 1):
            if arguments.max_minutes is not None and time.monotonic() - started > arguments.max_minutes * 60:
                print(f"stopped after {tally.runs} of {arguments.runs} runs: --max-minutes {arguments.max_minutes:g}")
                break
            before = Counter(tally.failures)
            seconds.append(run_once(paths, arguments.expression, arguments.workers, number, tally, reports))
            failed_now = sorted((tally.failures - before).keys())
            print(f"run {number}/{arguments.runs}: {seconds[-1]:.0f} s, {len(failed_now)} failed", flush=True)
            for name in failed_now:
                print(f"  failed: {name}: {tally.last_error[name]}", flush=True)

    print(
        f"\n{len(tally.seen)} tests, {tally.runs} runs of {' '.join(paths)}"
        + (f" -k {arguments.expression!r}" if arguments.expression else "")
        + (f" in {arguments.workers} processes" if arguments.workers > 1 else "")
        + (" under one busy core" if arguments.load else "")
        + (f"; {min(seconds):.0f}-{max(seconds):.0f} s a run" if seconds else "")
    )
    for problem in tally.broken_runs:
        print(f"BROKEN {problem}")
    for name in sorted(tally.seen):
        failures = tally.failures[name]
        line = f"{'FAIL' if failures else 'ok  '} {failures}/{tally.seen[name]} {name}"
        if failures:
            line += f"\n      first error: {tally.first_error[name]}"
        print(line)
    failed = bool(tally.failures or tally.broken_runs)
    if failed or arguments.keep_reports is not None:
        print(f"whole failure reports (traceback and captured output per failed test, per run): {reports}")
    else:
        shutil.rmtree(reports, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
