"""Why the compiled impl is slower or faster than eager static on this machine: the compiled step
built with each set of inductor options, each timed against the eager static loop side by side
(paired, one process), with the recompiles counted and the threads the generated code runs on.

    python benchmarks/compiled_options.py [--db URL] [--tokens 256] [--pairs 5]

Prints one line per option set (µs per token, its ratio to static with the band over pairs, how
many graphs dynamo compiled, the first call's seconds) and ``name=value`` lines.
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from runner.decoding import compiled as compiled_decode
from runner.decoding.choices import COMPILED
from runner.decoding.decode import generate
from runner.measure.timing import Harness
from runner.model.corpus import load_corpus
from runner.model.train import train_or_reuse
from runner.spec.sweeps import load_preset
from store.store import Store

# Each a set of inductor options the compiled step is built with.
OPTION_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "freezing": {"freezing": True},
    "cpp_wrapper": {"cpp_wrapper": True},
    "freezing_cpp_wrapper": {"freezing": True, "cpp_wrapper": True},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads when the step is compiled and run")
    parser.add_argument("--only", nargs="*", default=None, help="option sets to time (default: all)")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    spec = load_preset("quick")
    corpus = load_corpus()
    store = Store(arguments.db)
    trained = train_or_reuse(store.results, spec.model_config(len(corpus.vocabulary)), spec.train_config(), corpus)
    model = trained.model.eval()
    prompt = corpus.encode(corpus.text[:1])
    n = arguments.tokens
    harness = Harness()
    static = functools.partial(generate, model, prompt, n, temperature=0.0, impl="static")
    reference = static().tokens
    print(f"torch {torch.__version__}, torch threads {torch.get_num_threads()}, {n} tokens, {arguments.pairs} pairs")
    lines: dict[str, float] = {}
    for name, options in OPTION_SETS.items():
        if arguments.only and name not in arguments.only:
            continue
        torch._dynamo.reset()
        compiled_decode._STEPS.clear()
        compiled_decode.OPTIONS = options
        counters.clear()
        started = time.perf_counter()
        tokens = generate(model, prompt, n, temperature=0.0, impl=COMPILED).tokens
        first_call = time.perf_counter() - started
        paired = harness.paired(
            static, functools.partial(generate, model, prompt, n, temperature=0.0, impl=COMPILED), pairs=arguments.pairs
        )
        graphs = counters["stats"]["unique_graphs"]
        compiled_us = min(paired.candidate_seconds) / n * 1e6
        static_us = min(paired.baseline_seconds) / n * 1e6
        print(
            f"{name:22} {compiled_us:7.1f} us/token   static {static_us:7.1f}   static/compiled {paired.median:.2f}x "
            f"[{paired.low:.2f}-{paired.high:.2f}]   graphs compiled {graphs}   first call {first_call:.1f} s   "
            f"same tokens as static: {tokens == reference}"
        )
        lines[f"{name}_us_per_token"] = compiled_us
        lines[f"{name}_speedup_vs_static"] = paired.median
        lines[f"{name}_graphs_compiled"] = graphs
    lines["torch_threads"] = torch.get_num_threads()
    for key, value in lines.items():
        print(f"{key}={value:.6g}")


if __name__ == "__main__":
    main()
