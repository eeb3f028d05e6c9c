"""How much a timing moves from one process to the next, against how much it moves inside one
process: the part of a case's run-to-run spread that no sample inside a run can see.

    python benchmarks/process_spread.py [--processes 8] [--blocks 4] [--repack]

Each of ``--processes`` fresh Python processes builds the quick model's shape (untrained: timing
needs no training), then times ``--blocks`` blocks of interleaved steady samples (the harness the
experiments use) of five greedy generations: the fast impl with the cache (128 tokens), the fast
impl without it (64), the static impl with it (64), the static impl on the model fake-quantized
to int8 with its embeddings (64: the quick preset's quantization case, whose weights are
dequantized at every call) and the fast impl on the model quantized for the fast int8 kernel (64:
the quick preset's fast_int8 case). It prints, per generation,
``process_spread_between_<name>=`` (standard deviation of the log of the processes' medians) and
``process_spread_within_<name>=`` (median over the processes of the standard deviation of the log
of their blocks' medians). A between figure well above the within one is a property of the
process (where its memory landed, say), fixed for its life: a run's pairs all share it, so a
review learns it only from earlier runs (its between-run floor, analysis/between_runs.py).
``--repack``: before each block the fast path packs its models' weights anew, elsewhere
(runner.decoding.fast.new_placements, what the experiments do between pairs; the static
generations' weights stay where they are): where that moves the within figure up to the between
one, what differs between processes is where the weights landed, and a run that repacks between
its pairs averages it. On the Zen 5 EPYC (2026-12-06, 8 processes, 4 blocks) the fast int8
generation read 4.6% between and 1.4% within; with ``--repack`` 1.8% between and 2.5% within.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys

NAMES = ("fast_cache", "fast_no_cache", "static_cache", "static_fake_int8", "fast_int8")

CHILD = """
import json, statistics, sys, torch
torch.set_num_threads(1)
from runner.decoding.decode import generate
from runner.decoding.fast import new_placements
from runner.measure.timing import Harness
from runner.model.gpt import CharGPT, ModelConfig
from runner.model.quantize import quantize_model
torch.manual_seed(0)
model = CharGPT(ModelConfig(vocab_size=96, d_model=128, n_layer=3, n_head=4, context_length=1024)).eval()
fake_int8 = quantize_model(model, "int8", kernel="fake", embeddings=True)
fast_int8 = quantize_model(model, "int8", kernel="fast_int8")
prompt = list(range(20))
harness = Harness("cpu")
calls = [
    lambda: generate(model, prompt, 128, use_cache=True, temperature=0.0, impl="fast"),
    lambda: generate(model, prompt, 64, use_cache=False, temperature=0.0, impl="fast"),
    lambda: generate(model, prompt, 64, use_cache=True, temperature=0.0, impl="static"),
    lambda: generate(fake_int8, prompt, 64, use_cache=True, temperature=0.0, impl="static"),
    lambda: generate(fast_int8, prompt, 64, use_cache=True, temperature=0.0, impl="fast"),
]
blocks = []
for block in range(int(sys.argv[1])):
    if sys.argv[2] == "repack" and block > 0:
        new_placements(model, fast_int8)
    blocks.append([statistics.median(seconds) for seconds in harness.interleaved(calls, 5, steady=True)])
print(json.dumps(blocks))
"""


def standard_deviation(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8, help="fresh processes (default 8, at least 2)")
    parser.add_argument("--blocks", type=int, default=4, help="blocks of samples per process (default 4, at least 2)")
    parser.add_argument("--repack", action="store_true", help="the fast path packs the weights anew before each block")
    arguments = parser.parse_args()
    if arguments.processes < 2 or arguments.blocks < 2:
        print(
            f"--processes {arguments.processes}, --blocks {arguments.blocks}: each must be 2 or more", file=sys.stderr
        )
        return 2
    per_process: list[list[list[float]]] = []  # process → block → seconds per generation
    for index in range(arguments.processes):
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(arguments.blocks), "repack" if arguments.repack else "same"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(f"process {index + 1} failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return 1
        per_process.append(json.loads(done.stdout))
        medians = [statistics.median(block[position] for block in per_process[-1]) for position in range(len(NAMES))]
        print(
            f"process {index + 1}: "
            + ", ".join(f"{name} {seconds * 1e3:.3f} ms" for name, seconds in zip(NAMES, medians, strict=True))
        )
    for position, name in enumerate(NAMES):
        logs = [[math.log(block[position]) for block in blocks] for blocks in per_process]
        between = standard_deviation([statistics.median(values) for values in logs])
        within = statistics.median(standard_deviation(values) for values in logs)
        print(f"process_spread_between_{name}={between:.4f}")
        print(f"process_spread_within_{name}={within:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
