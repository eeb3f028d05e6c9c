"""How much each impl's generation slows while another process streams memory on another core,
beside reference workloads that no change to decodelab can move: whether one reference could
stand for "the machine was slower in this run" and correct a review's absolute times.

A shared VM's other tenants are such processes. In blocks, alternately quiet and with a
neighbour (a process copying a 16 MB array over and over, pinned to another CPU), this process,
pinned to one CPU, times interleaved steady samples (the harness the experiments use) of greedy
generations of the quick model's shape (untrained: timing needs no training) with the fast,
static and naive impls, and of three references: a float32 matrix product with 4 MB of weights,
2,000 small products and a pure-Python loop.

    python benchmarks/neighbour_sensitivity.py [--blocks 6] [--samples 5]

Prints ``neighbour_slowdown_<name>=`` (the median over busy blocks of the block's median time,
over the quiet blocks', less 1) for each generation and reference, and
``neighbour_corrected_<impl>_by_<reference>=`` (the impl's slowdown left after dividing by the
reference's): a reference that tracked the machine would leave 0 for every impl. Needs two CPUs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from runner.decoding.decode import generate
from runner.measure.timing import Harness
from runner.model.gpt import CharGPT, ModelConfig

NEIGHBOUR = "import numpy\nsource = numpy.ones(2 * 1024 * 1024)\nwhile True:\n    copy = source.copy()\n"
IMPLS = ("fast", "static", "naive")
REFERENCES = ("matrix_product", "small_products", "python_loop")


def workloads() -> dict[str, Callable[[], object]]:
    torch.manual_seed(0)
    model = CharGPT(ModelConfig(vocab_size=96, d_model=128, n_layer=3, n_head=4, context_length=1024)).eval()
    prompt = list(range(20))
    activations, weights = torch.randn(256, 1024), torch.randn(1024, 1024)
    small = torch.randn(64, 64)

    def matrix_product() -> None:
        for _ in range(4):
            torch.mm(activations, weights)

    def small_products() -> None:
        for _ in range(2000):
            torch.mm(small, small)

    def python_loop() -> int:
        total = 0
        for value in range(200_000):
            total += value
        return total

    # Lengths that make each generation last a few milliseconds: the naive impl recomputes every prefix.
    tokens = {"fast": 128, "static": 64, "naive": 32}
    generations = {
        impl: (
            lambda impl=impl: generate(
                model, prompt, tokens[impl], use_cache=impl != "naive", temperature=0.0, impl=impl
            )
        )
        for impl in IMPLS
    }
    return {
        **generations,
        "matrix_product": matrix_product,
        "small_products": small_products,
        "python_loop": python_loop,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=6, help="blocks, quiet and busy alternately (default 6)")
    parser.add_argument("--samples", type=int, default=5, help="interleaved samples per block (default 5)")
    arguments = parser.parse_args()
    if not hasattr(os, "sched_setaffinity"):
        print("pinning a process to a CPU is not available here (Linux only)", file=sys.stderr)
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    if arguments.blocks < 2 or arguments.samples < 1:
        print(f"--blocks {arguments.blocks} (at least 2), --samples {arguments.samples} (at least 1)", file=sys.stderr)
        return 2
    if len(cpus) < 2:
        print(f"this process may run on {len(cpus)} CPU: the neighbour needs another", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {cpus[0]})
    calls = workloads()
    names = list(calls)
    harness = Harness("cpu")
    medians: dict[bool, list[list[float]]] = {False: [], True: []}
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    for block in range(arguments.blocks):
        busy = block % 2 == 1
        neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) if busy else None
        try:
            if neighbour is not None:
                os.sched_setaffinity(neighbour.pid, {cpus[1]})
                time.sleep(0.5)  # its array allocated and copying
            with torch.inference_mode():
                seconds = harness.interleaved([calls[name] for name in names], arguments.samples, steady=True)
            if neighbour is not None and neighbour.poll() is not None:
                print(
                    f"the neighbour stopped (exit status {neighbour.returncode}): block {block + 1} was not busy",
                    file=sys.stderr,
                )
                return 1
        finally:
            if neighbour is not None:
                neighbour.kill()
                neighbour.wait()
        medians[busy].append([statistics.median(values) for values in seconds])
        print(
            f"block {block + 1} ({'busy' if busy else 'quiet'}): "
            + ", ".join(
                f"{name} {statistics.median(values) * 1e3:.2f} ms" for name, values in zip(names, seconds, strict=True)
            )
        )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    slowdowns = {
        name: statistics.median(block[index] for block in medians[True])
        / statistics.median(block[index] for block in medians[False])
        for index, name in enumerate(names)
    }
    for name, ratio in slowdowns.items():
        print(f"neighbour_slowdown_{name}={ratio - 1:.4f}")
    for impl in IMPLS:
        for reference in REFERENCES:
            print(f"neighbour_corrected_{impl}_by_{reference}={slowdowns[impl] / slowdowns[reference] - 1:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
