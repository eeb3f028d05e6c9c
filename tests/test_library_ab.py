"""benchmarks/library_ab.py through its real entry point: its figures, and its one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "library_ab.py"


def run_script(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, cwd=ROOT, timeout=600
    )


def test_two_builds_of_the_same_sources_agree_exactly_and_get_a_ratio_each() -> None:
    """The baseline is HEAD's csrc, archived and built under its contents' key: where its files are this
    checkout's, the logits of both sides are the same bits; each precision and length gets a ratio."""
    result = run_script("--baseline", "HEAD", "--positions", "1,3", "--rounds", "3")
    assert result.returncode == 0, result.stderr
    figures = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    unchanged = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--", "runner/decoding/csrc"])
    for precision in ("fp32", "int8"):
        difference = float(figures[f"library_ab_{precision}_max_logit_difference"])
        assert difference == 0.0 if unchanged.returncode == 0 else difference <= 1e-3
        for m in (1, 3):
            assert 0.0 < float(figures[f"library_ab_{precision}_m{m}_ratio"]) < 100.0


def test_bad_input_is_refused_in_one_line_naming_the_option() -> None:
    for arguments, option in (
        (("--baseline", "no-such-revision"), "--baseline"),
        (("--baseline", "HEAD", "--positions", "0,2"), "--positions"),
        (("--baseline", "HEAD", "--rounds", "2"), "--rounds"),
        (("--baseline", "HEAD", "--start", "1020"), "--start"),
    ):
        result = run_script(*arguments)
        assert result.returncode != 0, arguments
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {option}"), result.stderr
