"""decodelab's decode impls against transformers' generate, side by side on the same weights.

The quick model (trained, or reused from the store) is loaded into
``transformers.GPT2LMHeadModel``; each impl and ``generate(use_cache=True)`` produce 256 greedy
tokens, timed with the paired method. Ends with ``name=value`` lines. Needs the bench extra.

    python benchmarks/decode_vs_transformers.py [--db URL] [--tokens 256] [--pairs 5]
"""

from __future__ import annotations

import argparse
import functools
import time

import torch

from runner.corpus import load_corpus
from runner.decode import IMPLS, generate
from runner.model import to_transformers
from runner.sweeps import load_preset
from runner.timing import Harness
from runner.train import train_or_reuse
from store.store import Store


def machine_floors(mults_per_token: int, weight_bytes: int) -> tuple[float, float]:
    """Microseconds per token if only arithmetic (at this machine's big-matmul rate) or only
    reading the weights once (at its copy bandwidth) cost time."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    start = time.perf_counter()
    for _ in range(10):
        a @ b
    flops = 10 * 2 * 1024**3 / (time.perf_counter() - start)
    source = torch.randn(16 * 2**20)
    target = torch.empty_like(source)
    target.copy_(source)
    start = time.perf_counter()
    for _ in range(10):
        target.copy_(source)
    bandwidth = 10 * 2 * source.numel() * 4 / (time.perf_counter() - start)
    return 2 * mults_per_token / flops * 1e6, weight_bytes / bandwidth * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    arguments = parser.parse_args()
    device = arguments.device
    spec = load_preset("quick")
    corpus = load_corpus()
    trained = train_or_reuse(
        Store(arguments.db).results, spec.model_config(len(corpus.vocabulary)), spec.train_config(), corpus
    )
    model = trained.model.eval().to(device)
    gpt2 = to_transformers(model).to(device)
    prompt = corpus.encode(corpus.text[:1])
    n = arguments.tokens
    ids = torch.tensor([prompt], device=device)

    def transformers_generate() -> torch.Tensor:
        with torch.inference_mode():
            return gpt2.generate(
                ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=0
            )

    reference = transformers_generate()[0, len(prompt) :].tolist()
    harness = Harness(device=device)
    # The compiled fast step runs on the CPU only.
    impls = [impl for impl in IMPLS if device == "cpu" or impl != "fast"]
    print(
        f"model {trained.record.weights_hash[:12]}: d={model.config.d_model}, {model.config.n_layer} blocks, "
        f"{model.config.n_head} heads; {n} greedy tokens, {arguments.pairs} pairs; torch threads "
        f"{torch.get_num_threads()}"
    )
    results = {}
    for impl in impls:
        tokens = generate(model, prompt, n, temperature=0.0, impl=impl).tokens
        paired = harness.paired(
            transformers_generate,
            functools.partial(generate, model, prompt, n, temperature=0.0, impl=impl),
            pairs=arguments.pairs,
        )
        results[impl] = paired
        print(
            f"{impl:8} {min(paired.candidate_seconds) / n * 1e6:8.1f} us/token   transformers "
            f"{min(paired.baseline_seconds) / n * 1e6:8.1f} us/token   speedup {paired.median:5.2f}x "
            f"[{paired.low:.2f}-{paired.high:.2f}]   same tokens as transformers: {tokens == reference}"
        )
    best = max(results, key=lambda impl: results[impl].median)
    best_us = min(results[best].candidate_seconds) / n * 1e6
    transformers_us = min(min(paired.baseline_seconds) for paired in results.values()) / n * 1e6
    d, layers = model.config.d_model, model.config.n_layer
    mults = layers * 12 * d * d + model.config.vocab_size * d  # per token, attention aside
    arithmetic_us, memory_us = machine_floors(mults, 4 * (layers * 12 * d * d + model.config.vocab_size * d))
    print(
        f"floors: arithmetic {arithmetic_us:.1f} us/token, reading the weights once {memory_us:.1f} us/token; "
        f"{best} is {best_us / arithmetic_us:.0f}x the arithmetic floor and {best_us / memory_us:.1f}x the memory one"
    )
    print(f"transformers_us_per_token={transformers_us:.1f}")
    for impl, paired in results.items():
        print(f"{impl}_us_per_token={min(paired.candidate_seconds) / n * 1e6:.1f}")
        print(f"{impl}_speedup_vs_transformers={paired.median:.2f}")
    print(f"best_impl={best}")
    print(f"speedup_vs_transformers={results[best].median:.2f}")
    print(f"best_us_per_token={best_us:.1f}")
    print(f"arithmetic_floor_us_per_token={arithmetic_us:.2f}")
    print(f"memory_floor_us_per_token={memory_us:.2f}")


if __name__ == "__main__":
    main()
