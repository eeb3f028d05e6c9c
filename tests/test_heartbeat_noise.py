"""benchmarks/heartbeat_noise.py: samples with and without background store writes, and with the
writes waiting for the gap between samples."""

from __future__ import annotations

import math
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "heartbeat_noise.py"


def run_script(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def test_every_mode_prints_its_figures_and_only_the_background_modes_write() -> None:
    result = run_script("--samples", "10", "--blocks", "1", "--every", "0.05")
    assert result.returncode == 0, result.stderr
    figures = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    for mode in ("none", "anywhere", "between_samples"):
        assert 0 <= int(figures[f"heartbeat_slow_samples_{mode}"]) <= 10
        assert math.isfinite(float(figures[f"heartbeat_largest_slowdown_{mode}"]))
    assert int(figures["heartbeat_writes_none"]) == 0
    # Ten samples of at least 50 ms each: half a second, a write every 0.05 s.
    assert int(figures["heartbeat_writes_anywhere"]) > 0 and int(figures["heartbeat_writes_between_samples"]) > 0
    assert figures["heartbeat_samples_per_mode"] == "10"


def test_bad_input_is_refused_in_one_line() -> None:
    result = run_script("--samples", "3")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "--samples 3, --blocks 2, --every 0.5: samples must be 10 or more, blocks 1 or more, every between 0.01 and "
        "60 seconds"
    )
