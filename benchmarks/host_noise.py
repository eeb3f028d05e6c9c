"""The timing floor of this machine: how much two identical back-to-back calls differ before any
experiment's own noise, and how much taking the least of k alternated calls per side removes.

Two greedy decodes of the quick model's shape (untrained: the weights do not change the work),
one through the ``static`` impl and one through ``naive``, alternate A B A B … for ``--calls``
rounds in one pinned, one-thread process with the collector off. It prints, after the 1-minute
load average at the start and the end:

- ``host_call_seconds_median=`` and ``host_call_cpu_fraction=`` (thread CPU time over wall time:
  1.0 while the guest sees the process running the whole time, so a stretch that shows in both
  clocks comes from outside the guest: the host's other tenants or its clock speed);
- ``host_call_log_sd=``: the standard deviation of one call's log time around its side's median;
- ``host_pair_spread_median_k{K}=`` and ``host_pair_spread_max_k{K}=``: the spread of issue 42
  (largest minus smallest log ratio A/B over 5 pairs, median and maximum over the groups of 5)
  when a pair's sample on each side is the least of K alternated calls, for K = 1, 3, 5, 10.

K = 1 is what a one-call sample can reach on this machine; no harness setting makes a paired
timing quieter than this without taking more calls per sample.

    python benchmarks/host_noise.py [--calls 150] [--tokens 64] [--cpu 0]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import time
from collections.abc import Callable

import torch

from runner.decoding.decode import generate
from runner.measure.load import load_average
from runner.model.gpt import CharGPT, ModelConfig

GROUP_PAIRS = 5
LEAST_OF = (1, 3, 5, 10)


def decode(model: CharGPT, prompt: list[int], tokens: int, impl: str) -> Callable[[], object]:
    def call() -> object:
        with torch.inference_mode():
            return generate(model, prompt, tokens, use_cache=True, temperature=0.0, impl=impl)

    return call


def spreads(log_ratios: list[float]) -> list[float]:
    return [
        max(log_ratios[start : start + GROUP_PAIRS]) - min(log_ratios[start : start + GROUP_PAIRS])
        for start in range(0, len(log_ratios) - GROUP_PAIRS + 1, GROUP_PAIRS)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=150, help="alternated calls per side (default 150)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per decode (default 64)")
    parser.add_argument("--cpu", type=int, default=0, help="the CPU to pin to (default 0)")
    arguments = parser.parse_args()
    if arguments.calls < GROUP_PAIRS * max(LEAST_OF):
        parser.error(f"--calls: {arguments.calls} (allowed: {GROUP_PAIRS * max(LEAST_OF)} or more)")
    if not 1 <= arguments.tokens <= 512:
        parser.error(f"--tokens: {arguments.tokens} (allowed: 1 to 512)")
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {arguments.cpu})
    print(f"load_average_start={load_average()}")
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=65, d_model=128, n_layer=3, n_head=4, context_length=1024)
    model = CharGPT(config).eval()
    prompt = list(range(20))
    sides = [decode(model, prompt, arguments.tokens, impl) for impl in ("static", "naive")]
    for _ in range(3):
        for call in sides:
            call()
    wall: list[list[float]] = [[], []]
    cpu: list[list[float]] = [[], []]
    gc.disable()
    try:
        for _ in range(arguments.calls):
            for index, call in enumerate(sides):
                wall_start, cpu_start = time.perf_counter(), time.thread_time()
                call()
                wall[index].append(time.perf_counter() - wall_start)
                cpu[index].append(time.thread_time() - cpu_start)
    finally:
        gc.enable()
    print(f"load_average_end={load_average()}")
    everything = wall[0] + wall[1]
    print(f"host_call_seconds_median={statistics.median(everything):.6g}")
    print(f"host_call_cpu_fraction={sum(cpu[0] + cpu[1]) / sum(everything):.4g}")
    deviations = [math.log(seconds / statistics.median(side)) for side in wall for seconds in side]
    print(f"host_call_log_sd={statistics.stdev(deviations):.4g}")
    for least in LEAST_OF:
        log_ratios = [
            math.log(min(wall[0][start : start + least]) / min(wall[1][start : start + least]))
            for start in range(0, arguments.calls - least + 1, least)
        ]
        found = spreads(log_ratios)
        print(f"host_pair_spread_median_k{least}={statistics.median(found):.4g}")
        print(f"host_pair_spread_max_k{least}={max(found):.4g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
