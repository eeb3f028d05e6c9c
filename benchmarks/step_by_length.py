"""Where a fast-path step's time goes as its cache grows: a fixed part (reading the parameters)
and a part per cached position (attention over the float32 K/V), each set against the roof.

Greedy generations of the quick model (trained, or reused from the store) of several lengths,
float32 and int8, timed by the library's kernel clock (runner.decoding.fast_library.kernel_seconds:
no Python around the passes), pinned to one CPU, the lengths interleaved over rounds and the
fastest of each kept. A least-squares line through microseconds per token against the mean
cached position gives the two parts; their bytes (runner.cost.roofline_model: the parameters a
pass reads, the K/V of one position) over their times give the bandwidth each part reaches,
beside this machine's probe (the store's profile, measured first if it has none) at the working
set of the longest generation's middle step. Where the roof fraction falls with the length, it
is the attention part that reaches less of the probe's bandwidth.

    python benchmarks/step_by_length.py [--db URL] [--lengths 32,64,128,256,512] [--repeats 20] [--rounds 3]

Prints, per precision (fp32, int8): ``step_us_per_token_<precision>_at_<n>=`` and
``roof_fraction_<precision>_at_<n>=`` (the roofline's time over the measured one),
``step_fixed_us_<precision>=``, ``step_per_position_ns_<precision>=``,
``fixed_part_bandwidth_fraction_<precision>=`` and ``per_position_bandwidth_fraction_<precision>=``
(the bandwidth each part reaches over the probe's), after the load average at the start and end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

from runner.cost import roofline_model
from runner.decoding.decode import generate
from runner.decoding.fast_library import kernel_seconds
from runner.execution.execute import ensure_profile
from runner.measure.machine import fingerprint
from runner.model.corpus import load_corpus
from runner.model.gpt import CharGPT
from runner.model.quantize import quantize_model
from runner.model.train import train_or_reuse
from runner.spec.sweeps import load_preset
from store.store import Store

PRECISIONS = ("fp32", "int8")


def kernel_us_per_token(model: CharGPT, prompt: list[int], tokens: int, repeats: int) -> float:
    """The fastest of ``repeats`` generations of ``tokens``, by the kernel clock, per token."""
    generate(model, prompt, tokens, temperature=0.0, impl="fast")  # warm: its scratch cache, its pages
    best = float("inf")
    for _ in range(repeats):
        start = kernel_seconds()
        generate(model, prompt, tokens, temperature=0.0, impl="fast")
        best = min(best, kernel_seconds() - start)
    return best / tokens * 1e6


def parse_lengths(text: str) -> list[int]:
    try:
        lengths = sorted({int(part) for part in text.split(",")})
    except ValueError:
        lengths = []
    if len(lengths) < 2 or lengths[0] < 2:
        raise SystemExit(f"--lengths: {text!r} (allowed: two or more integers of at least 2, comma-separated)")
    return lengths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="the store whose quick model and profile are used")
    parser.add_argument("--lengths", default="32,64,128,256,512", help="generation lengths (tokens)")
    parser.add_argument("--repeats", type=int, default=20, help="generations per length and round (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over the lengths (default 3)")
    arguments = parser.parse_args()
    lengths = parse_lengths(arguments.lengths)
    if arguments.repeats < 1 or arguments.rounds < 1:
        print(f"--repeats {arguments.repeats}, --rounds {arguments.rounds}: each must be 1 or more", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    spec = load_preset("quick")
    corpus = load_corpus()
    store = Store(arguments.db)
    try:
        trained = train_or_reuse(store.results, spec.model_config(len(corpus.vocabulary)), spec.train_config(), corpus)
        roof = ensure_profile(store, store.results.machine_id(fingerprint()), print)
    finally:
        store.close()
    model = trained.model.eval()
    prompt = corpus.encode(corpus.text[:1])
    longest = model.config.context_length - len(prompt) + 1
    if lengths[-1] > longest:
        print(f"--lengths: {lengths[-1]} (allowed: at most {longest}, the model's context)", file=sys.stderr)
        return 2
    targets = {"fp32": model, "int8": quantize_model(model, "int8", kernel="fast_int8")}
    if hasattr(os, "sched_setaffinity"):  # one CPU: no migration inside a generation (Linux)
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    measured: dict[tuple[str, int], float] = {}
    with torch.inference_mode():
        for _ in range(arguments.rounds):
            for tokens in lengths:
                for precision, target in targets.items():
                    seconds = kernel_us_per_token(target, prompt, tokens, arguments.repeats)
                    measured[(precision, tokens)] = min(seconds, measured.get((precision, tokens), float("inf")))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    shape = roofline_model.Shape.of(model.config)
    for precision in PRECISIONS:
        positions, times = [], []
        for tokens in lengths:
            us = measured[(precision, tokens)]
            passes = roofline_model.generation_cost(shape, "fast", precision, len(prompt), tokens, cached=True)
            roofline_us = roofline_model.place(passes, roof).roofline_seconds / tokens * 1e6
            print(f"step_us_per_token_{precision}_at_{tokens}={us:.4g}")
            print(f"roof_fraction_{precision}_at_{tokens}={roofline_us / us:.3f}")
            positions.append(len(prompt) + (tokens - 1) / 2)  # the mean cached position of its steps
            times.append(us)
        per_position_us, fixed_us = statistics.linear_regression(positions, times)  # least squares
        if fixed_us <= 0 or per_position_us <= 0:
            print(
                f"{precision}: the times do not grow with the length ({fixed_us:.2f} us + {per_position_us * 1e3:.1f} "
                "ns a position): no parts to split; a busy machine? rerun with more --repeats",
                file=sys.stderr,
            )
            continue
        middle = round(positions[-1])
        probe = roofline_model.bandwidth_at(
            roofline_model.pass_cost(shape, "fast", precision, 1, middle).working_set_bytes, roof["sweep"]
        )
        fixed_rate = roofline_model.parameter_bytes(shape, "fast", precision) / (fixed_us * 1e-6)
        position_rate = roofline_model.cache_bytes(shape, 1) / (per_position_us * 1e-6)
        print(
            f"{precision}: {fixed_us:.2f} us a step + {per_position_us * 1e3:.1f} ns per cached position; "
            f"the parameters read at {fixed_rate / 1e9:.0f} GB/s, the K/V at {position_rate / 1e9:.0f} GB/s, "
            f"the probe {probe / 1e9:.0f} GB/s at the working set of step {middle}"
        )
        print(f"step_fixed_us_{precision}={fixed_us:.4g}")
        print(f"step_per_position_ns_{precision}={per_position_us * 1e3:.4g}")
        print(f"fixed_part_bandwidth_fraction_{precision}={fixed_rate / probe:.3f}")
        print(f"per_position_bandwidth_fraction_{precision}={position_rate / probe:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
