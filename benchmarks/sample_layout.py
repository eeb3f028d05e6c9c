"""What interleaving a steady pair call by call buys on this machine: the A/A spread of issue 42
(largest minus smallest log ratio over 5 pairs) when each sample loops one side's calls and then
the other's (``block``, the harness before), against the harness' own call-by-call interleaving
(``interleaved``, runner.measure.timing.Harness.time_interleaved).

Both sides are the same greedy decode of the quick model's shape (untrained: the weights do not
change the work), at several lengths, in one pinned, one-thread process; each sample lasts
MIN_SAMPLE_SECONDS as in the harness. It prints, per length, after the load average:

- ``layout_call_ms_<tokens>t=``: one call's time, and ``layout_loops_<tokens>t=`` the calls a sample;
- ``layout_spread_median_block_<tokens>t=`` and ``layout_spread_median_interleaved_<tokens>t=``
  (median over ``--groups`` groups of 5 pairs), and the same with ``max``.

Interleaving can only help where a sample holds several calls: a call that fills a sample alone
sees its own phases of the host whatever the layout.

Interleaving could also bias a ratio: each call now starts after the other side's, whose weights
or cache may have evicted its own. Two unlike pairs of the quick sweep (float32 against the
dynamic_int8 kernel at 64 tokens, as quantization times them; no cache against the cache at 64
tokens, as kv_cache does) print ``layout_ratio_median_<layout>_<pair>=`` (median over every pair
of every group) and ``layout_bias_<pair>=``, the interleaved median over the block one, less 1.

First, what the harness itself adds to every timed call: ``harness_timed_noop_us_median=`` and
``..._min=``, a call of nothing timed NOOP_CALLS times with ``time_once`` (two clock reads and the
call between them; 0.19 us on the Xeon VM, 0.81 us while each timed call also asked torch for the
device).

    python benchmarks/sample_layout.py [--groups 12] [--cpu 0]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from collections.abc import Callable

import torch

from runner.decoding.decode import generate
from runner.measure.load import load_average
from runner.measure.timing import Harness
from runner.model.gpt import CharGPT, ModelConfig
from runner.model.quantize import quantize_model

PAIRS = 5
NOOP_CALLS = 20_000  # about 4 ms: a median of a fraction of a microsecond steady to 1%
LENGTHS = ((8, "static"), (32, "static"), (64, "naive"), (128, "static"))


def decode(model: CharGPT, prompt: list[int], tokens: int, impl: str, use_cache: bool = True) -> Callable[[], object]:
    def call() -> object:
        with torch.inference_mode():
            return generate(model, prompt, tokens, use_cache=use_cache, temperature=0.0, impl=impl)

    return call


def timed_noop_seconds(harness: Harness) -> list[float]:
    """NOOP_CALLS timings of a call that does nothing: the harness' own share of every sample."""
    return [harness.time_once(lambda: None) for _ in range(NOOP_CALLS)]


def spread(ratios: list[float]) -> float:
    logs = [math.log(ratio) for ratio in ratios]
    return max(logs) - min(logs)


def block_ratios(
    harness: Harness, first: Callable[[], object], second: Callable[[], object], loops: int
) -> list[float]:
    """The old layout: per pair, one side's whole loop, then the other's (the leader alternating)."""
    ratios = []
    for pair in range(PAIRS):
        order = (first, second) if pair % 2 == 0 else (second, first)
        seconds = {side: harness.time_once(side, loops) for side in order}
        ratios.append(seconds[first] / seconds[second])
    return ratios


def interleaved_ratios(
    harness: Harness, first: Callable[[], object], second: Callable[[], object], loops: int
) -> list[float]:
    ratios = []
    for pair in range(PAIRS):
        one, other = harness.time_interleaved([first, second], [loops, loops], pair)
        ratios.append(one / other)
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=12, help="groups of 5 pairs per layout and length (default 12)")
    parser.add_argument("--cpu", type=int, default=0, help="the CPU to pin to (default 0)")
    arguments = parser.parse_args()
    if not 2 <= arguments.groups <= 1000:
        parser.error(f"--groups: {arguments.groups} (allowed: 2 to 1000)")
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {arguments.cpu})
    print(f"load_average_start={load_average()}")
    torch.manual_seed(0)
    model = CharGPT(ModelConfig(vocab_size=65, d_model=128, n_layer=3, n_head=4, context_length=1024)).eval()
    prompt = list(range(16))
    harness = Harness()
    noop = timed_noop_seconds(harness)
    print(f"harness_timed_noop_us_median={statistics.median(noop) * 1e6:.3g}")
    print(f"harness_timed_noop_us_min={min(noop) * 1e6:.3g}")
    for tokens, impl in LENGTHS:
        first, second = decode(model, prompt, tokens, impl), decode(model, prompt, tokens, impl)
        for _ in range(3):
            first(), second()
        call_seconds = harness.time_once(first)
        loops = harness.loops_for(first)
        found: dict[str, list[float]] = {"block": [], "interleaved": []}
        for _ in range(arguments.groups):
            found["block"].append(spread(block_ratios(harness, first, second, loops)))
            found["interleaved"].append(spread(interleaved_ratios(harness, first, second, loops)))
        print(f"layout_call_ms_{tokens}t={call_seconds * 1e3:.3g}")
        print(f"layout_loops_{tokens}t={loops}")
        for layout, spreads in found.items():
            print(f"layout_spread_median_{layout}_{tokens}t={statistics.median(spreads):.4g}")
            print(f"layout_spread_max_{layout}_{tokens}t={max(spreads):.4g}")
    reference_int8 = quantize_model(model, "int8", group_size=32, kernel="dynamic_int8")
    unlike = {
        "int8": (decode(model, prompt, 64, "static"), decode(reference_int8, prompt, 64, "static")),
        "kv_cache": (decode(model, prompt, 64, "static", use_cache=False), decode(model, prompt, 64, "static")),
    }
    for name, (first, second) in unlike.items():
        for _ in range(3):
            first(), second()
        loops = harness.loops_for(second)
        ratios: dict[str, list[float]] = {"block": [], "interleaved": []}
        for _ in range(arguments.groups):
            ratios["block"] += block_ratios(harness, first, second, loops)
            ratios["interleaved"] += interleaved_ratios(harness, first, second, loops)
        for layout, found_ratios in ratios.items():
            print(f"layout_ratio_median_{layout}_{name}={statistics.median(found_ratios):.4g}")
        bias = statistics.median(ratios["interleaved"]) / statistics.median(ratios["block"]) - 1
        print(f"layout_bias_{name}={bias:.4g}")
    print(f"load_average_end={load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
