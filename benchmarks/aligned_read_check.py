"""Checks a machine profile's read bandwidth against an independent aligned read at the same
working sets: benchmarks/aligned_read.cpp (its own posix_memalign'd buffer, clock and
eight-accumulator loop, no code shared with the probe), built here with the system compiler.

    python benchmarks/aligned_read_check.py [--repeats 30] [--rounds 3]

Profiles this machine (runner.cost.machine_profile.profile, full) and prints, at each level's
working set and at each of the decode's own working sets, the profile's one-thread figure, the
independent read's best repeat over its rounds and their ratio, and ``all_within_20pct=`` (every ratio in
0.8–1.2). Both are best-of-repeats figures, so on a machine shared with other work both fall;
quote the load average printed beside them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from runner.cost import machine_profile

SOURCE = Path(__file__).with_name("aligned_read.cpp")


def build(folder: Path) -> Path:
    binary = folder / "aligned_read"
    subprocess.run(["g++", "-O3", "-march=native", "-std=c++17", str(SOURCE), "-o", str(binary)], check=True)
    return binary


def independent_read(binary: Path, size_bytes: int, repeats: int, rounds: int) -> float:
    """The best of ``rounds`` runs of the independent read (each the best of its repeats): on a
    shared machine one run can fall wholly inside another process's burst of DRAM traffic."""
    best = 0.0
    for _ in range(rounds):
        printed = subprocess.run(
            [str(binary), str(size_bytes), str(repeats)], check=True, capture_output=True, text=True
        )
        best = max(best, float(printed.stdout.split()[0]))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    load_at_start = os.getloadavg()[0]
    figures = machine_profile.profile(quick=False)
    sweep = {row["working_set_bytes"]: row["bytes_per_second"] for row in figures["sweep"]}
    checks = {f"{level} level": row["working_set_bytes"] for level, row in figures["bandwidth"].items()}
    checks |= figures["decode_working_sets"]
    print(f"read_alignment_bytes={figures['read_alignment_bytes']}")
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        binary = build(Path(folder))
        for name, size in checks.items():
            probe = (
                figures["bandwidth"][name.split()[0]]["one_thread"]["high"] if name.endswith(" level") else sweep[size]
            )
            independent = independent_read(binary, size, arguments.repeats, arguments.rounds)
            ratios.append(probe / independent)
            print(
                f"{name:<28} {size / 1024:>10,.0f} KiB  profile {probe / 1e9:6.1f} GB/s  "
                f"independent {independent / 1e9:6.1f} GB/s  ratio {probe / independent:.2f}"
            )
    print(f"all_within_20pct={all(0.8 <= ratio <= 1.2 for ratio in ratios)}")
    print(f"worst_ratio={max(ratios, key=lambda ratio: abs(ratio - 1)):.3f}")
    print(f"load average (1 min): {load_at_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
