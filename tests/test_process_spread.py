"""benchmarks/process_spread.py: a timing's spread between fresh processes and within one."""

from __future__ import annotations

import math
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "process_spread.py"


def run_script(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def test_two_processes_give_both_spreads_of_every_generation() -> None:
    result = run_script("--processes", "2", "--blocks", "2")
    assert result.returncode == 0, result.stderr
    figures = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    for name in ("fast_cache", "fast_no_cache", "static_cache", "static_fake_int8", "fast_int8"):
        for kind in ("between", "within"):
            value = float(figures[f"process_spread_{kind}_{name}"])
            assert math.isfinite(value) and value >= 0.0
    assert result.stdout.count("process ") >= 2, "each process's medians are printed as it ends"


def test_fewer_than_two_processes_or_blocks_are_refused_in_one_line() -> None:
    result = run_script("--processes", "1")
    assert result.returncode == 2
    assert result.stderr.strip() == "--processes 1, --blocks 4: each must be 2 or more"
