"""decodelab's decode impls against transformers' generate, side by side on the same weights.

The quick model (trained, or reused from the store) is loaded into
``transformers.GPT2LMHeadModel``; each impl and ``generate(use_cache=True)`` produce 256 greedy
tokens, timed with the paired method. Then, on the CPU, three ratios of the fast path, each paired
in one run: a speculative verification of k + 1 = 5 positions against a plain step (in plain
steps; by wall clock with a Python call per verification, and by the library's kernel clock, as the
compiled loop pays it, in float32, int8 and bfloat16), the int8 and bfloat16 kernels against
float32, and what a compiled call costs before its arithmetic; and the fast fp32 and int8 steps on
this machine's measured roof (runner.experiments.parts.roofline_placement: ``fast_roof_fraction``,
``fast_int8_roof_fraction``, the roofline's time over the measured one; the roof is the store's
profile of this machine, measured first if it has none); and speculative decoding on the fast impl
against plain fast decoding, with the fast_int8 draft and the training text's n-gram table, counted and
distilled from the target, at k = 1..4, the best of those timed again on fresh pairs
(``best_fast_speculative_speedup``). Ends with ``name=value`` lines, after the 1-minute load average at
the start and the end (a time measured beside other work is not the machine's). Needs the bench extra.

    python benchmarks/decode_vs_transformers.py [--db URL] [--tokens 256] [--pairs 5]
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Callable

import torch

from runner.decoding.choices import COMPILED, IMPLS
from runner.decoding.decode import generate
from runner.measure.timing import Harness, Paired
from runner.model.corpus import load_corpus
from runner.model.gpt import CharGPT, to_transformers
from runner.model.quantize import quantize_model
from runner.model.train import train_or_reuse
from runner.spec.sweeps import load_preset
from store.store import Store

VERIFY_K = 4


def seconds_per_pass(function: Callable[[], object], repeats: int = 10) -> float:
    function()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def machine_floors(mults_per_token: int, weight_bytes: int) -> dict[str, float]:
    """Microseconds per token if only one cost counted: the arithmetic at this machine's big-matmul
    rate; reading the weights once at the rate a buffer of their size streams from the caches (one
    thread, and torch's threads); reading them once from DRAM (a 64 MB copy, which no cache holds)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    flops = 2 * 1024**3 / seconds_per_pass(lambda: a @ b)
    weights = torch.randn(weight_bytes // 4)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    one_thread = seconds_per_pass(weights.sum, repeats=200)
    torch.set_num_threads(os.cpu_count() or 1)
    all_threads = seconds_per_pass(weights.sum, repeats=200)
    torch.set_num_threads(threads)
    source = torch.randn(16 * 2**20)
    target = torch.empty_like(source)
    dram_bandwidth = 2 * source.numel() * 4 / seconds_per_pass(lambda: target.copy_(source))
    return {
        "arithmetic_floor_us_per_token": 2 * mults_per_token / flops * 1e6,
        "weights_stream_floor_us_per_token": one_thread * 1e6,
        "weights_stream_floor_all_threads_us_per_token": all_threads * 1e6,
        "dram_floor_us_per_token": weight_bytes / dram_bandwidth * 1e6,
    }


def verify_in_steps(model: CharGPT, prompt: list[int], n: int, harness: Harness, pairs: int) -> Paired:
    """Plain fast decoding of n tokens against n verifications of k + 1 positions, one at each
    position the plain steps fed (the cache rolled back after each): paired, the ratio of the
    candidate's time to the baseline's is a verification's cost in plain steps of this model's
    precision (the harness's clock decides what a side's time includes)."""
    from runner.decoding.fast import decoder_for

    decoder = decoder_for(model)
    text = generate(model, prompt, n + VERIFY_K, temperature=0.0, impl="fast").tokens
    cache = model.new_cache(capacity=len(prompt) + n + VERIFY_K)
    decoder.forward(prompt + text[: n + VERIFY_K - 1], cache)
    q = torch.full((VERIFY_K, model.config.vocab_size), 1.0 / model.config.vocab_size)
    randoms = torch.zeros(2 * VERIFY_K + 1, dtype=torch.float64)

    # Each verification's k + 1 tokens, cut before the clock starts: the timed side is the calls alone.
    fed = prompt + text
    sequences = [
        (position, fed[position : position + VERIFY_K + 1]) for position in range(len(prompt) - 1, len(prompt) - 1 + n)
    ]

    def verifications() -> None:
        for position, sequence in sequences:
            cache.length = position
            decoder.verify(sequence, cache, q, 0.0, randoms)

    return harness.paired(lambda: generate(model, prompt, n, temperature=0.0, impl="fast"), verifications, pairs=pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (the fast path runs on one; so does this, by default)"
    )
    arguments = parser.parse_args()
    device = arguments.device
    torch.set_num_threads(arguments.threads)
    spec = load_preset("quick")
    corpus = load_corpus()
    store = Store(arguments.db)
    trained = train_or_reuse(store.results, spec.model_config(len(corpus.vocabulary)), spec.train_config(), corpus)
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
    load_at_start = os.getloadavg()[0]  # a time on a shared machine means little without it
    # The fast path and the compiled step run on the CPU only.
    impls = [impl for impl in (*IMPLS, COMPILED) if device == "cpu" or impl not in ("fast", COMPILED)]
    print(
        f"model {trained.record.weights_hash[:12]}: d={model.config.d_model}, {model.config.n_layer} blocks, "
        f"{model.config.n_head} heads; {n} greedy tokens, {arguments.pairs} pairs; torch threads "
        f"{torch.get_num_threads()}"
    )
    results = {}
    for impl in impls:
        started = time.perf_counter()
        tokens = generate(model, prompt, n, temperature=0.0, impl=impl).tokens
        first_call = time.perf_counter() - started
        paired = harness.paired(
            transformers_generate,
            functools.partial(generate, model, prompt, n, temperature=0.0, impl=impl),
            pairs=arguments.pairs,
        )
        results[impl] = paired
        print(
            f"{impl:8} {min(paired.candidate_seconds) / n * 1e6:8.1f} us/token   transformers "
            f"{min(paired.baseline_seconds) / n * 1e6:8.1f} us/token   speedup {paired.median:5.2f}x "
            f"[{paired.low:.2f}-{paired.high:.2f}]   same tokens as transformers: {tokens == reference}   "
            f"first call {first_call:.1f} s"
        )
    best = max(results, key=lambda impl: results[impl].median)
    best_us = min(results[best].candidate_seconds) / n * 1e6
    transformers_us = min(min(paired.baseline_seconds) for paired in results.values()) / n * 1e6
    d, layers = model.config.d_model, model.config.n_layer
    mults = layers * 12 * d * d + model.config.vocab_size * d  # per token, attention aside
    floors = machine_floors(mults, 4 * (layers * 12 * d * d + model.config.vocab_size * d))
    stream = floors["weights_stream_floor_us_per_token"]
    print(
        f"floors: arithmetic {floors['arithmetic_floor_us_per_token']:.1f} us/token, streaming the weights once "
        f"{stream:.1f} (one thread) / {floors['weights_stream_floor_all_threads_us_per_token']:.1f} (all), from "
        f"DRAM {floors['dram_floor_us_per_token']:.1f}; {best} is {best_us / stream:.1f}x the one-thread "
        "streaming floor"
    )
    lines: dict[str, float | str] = {"transformers_us_per_token": transformers_us}
    for impl, paired in results.items():
        lines[f"{impl}_us_per_token"] = min(paired.candidate_seconds) / n * 1e6
        lines[f"{impl}_speedup_vs_transformers"] = paired.median
    lines.update(best_impl=best, speedup_vs_transformers=results[best].median, best_us_per_token=best_us)
    lines.update(floors)
    if device == "cpu":
        lines.update(fast_path_ratios(model, prompt, n, harness, arguments.pairs))
        lines.update(roof_fractions(store, model, len(prompt), n, lines))
        lines.update(speculative_figures(model, prompt, n, harness, arguments.pairs, corpus.split()[0]))
    load_at_end = os.getloadavg()[0]
    cpus = os.cpu_count()
    print(f"load average (1 min): {load_at_start:.2f} at the start, {load_at_end:.2f} at the end; {cpus} CPUs")
    for name, value in lines.items():
        print(f"{name}={value:.6g}" if isinstance(value, float) else f"{name}={value}")


def fast_path_ratios(model: CharGPT, prompt: list[int], n: int, harness: Harness, pairs: int) -> dict[str, float]:
    from runner.decoding.compiled import call_overhead_seconds
    from runner.decoding.fast_library import instruction_set, kernel_seconds, set_threads

    verify = verify_in_steps(model, prompt, n, harness, pairs)
    print(
        f"fast verification of {VERIFY_K + 1} positions: {1 / verify.median:.2f} plain steps "
        f"[{1 / verify.high:.2f}-{1 / verify.low:.2f}] (kernels: {instruction_set()}; wall clock, a Python call "
        "per verification)"
    )
    ratios = {f"fast_verify_k{VERIFY_K}_steps": 1 / verify.median}
    # What the compiled speculative loop pays: both sides timed by the library's clock of its entry points,
    # so the Python call around each verification (which the loop no longer makes) is left out; per
    # precision, since each one's plain step is its own unit.
    kernel_harness = Harness(harness.device, clock=kernel_seconds, warmup=harness.warmup)
    quantized_models = {
        precision: quantize_model(model, precision, kernel=f"fast_{precision}") for precision in ("int8", "bf16")
    }
    for precision, target in (("fp32", model), *quantized_models.items()):
        kernel_verify = verify_in_steps(target, prompt, n, kernel_harness, pairs)
        name = "fast" if precision == "fp32" else f"fast_{precision}"
        print(
            f"{name} verification of {VERIFY_K + 1} positions, kernel time: {1 / kernel_verify.median:.2f} plain "
            f"{precision} steps [{1 / kernel_verify.high:.2f}-{1 / kernel_verify.low:.2f}]"
        )
        ratios[f"{name}_verify_k{VERIFY_K}_kernel_steps"] = 1 / kernel_verify.median
    for precision, kernel in (("int8", "fast_int8"), ("bf16", "fast_bf16")):
        quantized = quantized_models[precision]
        paired = harness.paired(
            lambda: generate(model, prompt, n, temperature=0.0, impl="fast"),
            functools.partial(generate, quantized, prompt, n, temperature=0.0, impl="fast"),
            pairs=pairs,
        )
        print(f"{kernel}: {paired.median:.2f}x fast float32 [{paired.low:.2f}-{paired.high:.2f}]")
        ratios[f"{kernel}_us_per_token"] = min(paired.candidate_seconds) / n * 1e6
        ratios[f"{kernel}_speedup_vs_fp32"] = paired.median
    cores = os.cpu_count() or 1
    if cores > 1:

        def on_threads(count: int) -> Callable[[], object]:
            def run() -> object:
                set_threads(count)
                return generate(model, prompt, n, temperature=0.0, impl="fast")

            return run

        # Asked for before timing, so the harness does not pin this thread to one CPU, where the
        # helpers started during the pairs would inherit the pin and share that CPU with it.
        set_threads(cores)
        paired = harness.paired(on_threads(1), on_threads(cores), pairs=pairs)
        set_threads(1)
        print(f"fast on {cores} threads: {paired.median:.2f}x one thread [{paired.low:.2f}-{paired.high:.2f}]")
        ratios["fast_all_threads_us_per_token"] = min(paired.candidate_seconds) / n * 1e6
        ratios["fast_all_threads_speedup"] = paired.median
    overhead = call_overhead_seconds()
    print(f"an empty compiled call (guards, dispatch, its output) costs {overhead * 1e6:.1f} us")
    ratios["compiled_call_overhead_us"] = overhead * 1e6
    return ratios


SPECULATIVE_KS = (1, 2, 3, 4)
SPECULATIVE_TEMPERATURE = 1.0
NGRAM_ORDER = 3  # the speculative experiment's default


def outside_kernels(run: Callable[[], object], repeats: int = 7) -> float:
    """The share of ``run``'s wall time spent outside the compiled passes (median of ``repeats``), from
    the library's own clock of its entry points (runner.decoding.fast_library.kernel_seconds)."""
    from runner.decoding.fast_library import kernel_seconds

    run()
    shares = []
    for _ in range(repeats):
        kernel, started = kernel_seconds(), time.perf_counter()
        run()
        wall, kernel = time.perf_counter() - started, kernel_seconds() - kernel
        shares.append(1 - kernel / wall)
    return sorted(shares)[len(shares) // 2]


def speculative_figures(
    model: CharGPT, prompt: list[int], n: int, harness: Harness, pairs: int, train_tokens: torch.Tensor
) -> dict[str, float | str]:
    """Speculative decoding on the fast impl, paired against plain fast decoding of as many tokens at
    temperature 1 (same seed), with three drafts at each k, all proposing inside the compiled loop: the
    fast_int8 model (the target quantized), the n-gram table counted from the training text
    (NGRAM_ORDER) and the same table distilled from the target (NGramDraft.distill). The largest of
    those medians is picked, then timed again on fresh pairs: the best of many noisy medians is biased
    upward, its own second timing is not. Also what share of a speculative generation
    the loop spends outside the kernels, in C++ (the default) and in Python."""
    from runner.decoding.drafts import ModelDraft, NGramDraft, target_windows
    from runner.decoding.speculative import Draft, speculative_decode

    distilled = NGramDraft(train_tokens, model.config.vocab_size, order=NGRAM_ORDER, name="distilled_ngram")
    distilled.distill(target_windows(model, train_tokens))
    drafts: dict[str, Draft] = {
        "fast_int8": ModelDraft(quantize_model(model, "int8", kernel="fast_int8"), "fast_int8", fast=True),
        "ngram": NGramDraft(train_tokens, model.config.vocab_size, order=NGRAM_ORDER),
        "distilled_ngram": distilled,
    }
    tokens = min(n, model.config.context_length - len(prompt) - max(SPECULATIVE_KS))
    figures: dict[str, float | str] = {}

    def speculative(draft: Draft, k: int, compiled_loop: bool = True) -> Callable[[], object]:
        return lambda: speculative_decode(
            model,
            draft,
            k,
            prompt,
            tokens,
            temperature=SPECULATIVE_TEMPERATURE,
            impl="fast",
            compiled_loop=compiled_loop,
        )

    def plain() -> object:
        return generate(model, prompt, tokens, temperature=SPECULATIVE_TEMPERATURE, impl="fast")

    screened: dict[tuple[str, int], float] = {}
    for name, draft in drafts.items():
        for k in SPECULATIVE_KS:
            acceptance = speculative_decode(
                model, draft, k, prompt, tokens, temperature=SPECULATIVE_TEMPERATURE, impl="fast"
            ).acceptance_rate
            paired = harness.paired(plain, speculative(draft, k), pairs=pairs)
            print(
                f"fast speculative, {name} draft, k={k}: {paired.median:.2f}x plain fast decoding "
                f"[{paired.low:.2f}-{paired.high:.2f}] at acceptance {acceptance:.3f}"
            )
            # The fast_int8 figures keep their names from before the n-gram draft was timed here.
            figures[f"fast_speculative_{'' if name == 'fast_int8' else name + '_'}k{k}_speedup"] = paired.median
            screened[name, k] = paired.median
    best_draft, best_k = max(screened, key=screened.__getitem__)
    again = harness.paired(plain, speculative(drafts[best_draft], best_k), pairs=pairs)
    print(
        f"best: the {best_draft} draft at k={best_k}, {screened[best_draft, best_k]:.2f}x when picked, "
        f"{again.median:.2f}x [{again.low:.2f}-{again.high:.2f}] timed again"
    )
    figures["best_fast_speculative_screening_speedup"] = screened[best_draft, best_k]
    figures["best_fast_speculative_speedup"] = again.median
    figures["best_fast_speculative_k"] = float(best_k)
    figures["best_fast_speculative_draft"] = best_draft
    loop_k = max(SPECULATIVE_KS)
    compiled = outside_kernels(speculative(drafts["fast_int8"], loop_k))
    python = outside_kernels(speculative(drafts["fast_int8"], loop_k, compiled_loop=False))
    print(
        f"the speculative loop (fast_int8 draft, k={loop_k}) outside the kernels: {compiled:.1%} of its time in "
        f"C++, {python:.1%} in Python"
    )
    figures["speculative_loop_overhead_fraction"] = compiled
    figures["speculative_loop_overhead_fraction_python"] = python
    return figures


def roof_fractions(store: Store, model: CharGPT, prompt_tokens: int, n: int, lines: dict) -> dict[str, float | str]:
    """The fast fp32 and int8 steps placed on this machine's roof: the roofline's time (from the
    counts and the roof alone, no overhead) over the measured one, and the regime."""
    from runner.cost import roofline_model
    from runner.execution.execute import ensure_profile
    from runner.measure.machine import fingerprint

    roof = ensure_profile(store, store.results.machine_id(fingerprint()), print)
    shape = roofline_model.Shape.of(model.config)
    placed: dict[str, float | str] = {}
    for name, precision in (("fast", "fp32"), ("fast_int8", "int8")):
        passes = roofline_model.generation_cost(shape, "fast", precision, prompt_tokens, n, cached=True)
        placement = roofline_model.place(passes, roof)
        measured_us = float(lines[f"{name}_us_per_token"])
        roofline_us = placement.roofline_seconds / n * 1e6
        print(
            f"{name}: {placement.regime}, working set {placement.working_set_bytes / 1e6:.2f} MB in "
            f"{placement.level}, roofline {roofline_us:.1f} us/token against {measured_us:.1f} measured: "
            f"{roofline_us / measured_us:.0%} of the roof"
        )
        placed[f"{name}_roofline_us_per_token"] = roofline_us
        placed[f"{name}_roof_fraction"] = roofline_us / measured_us
        placed[f"{name}_regime"] = placement.regime
    return placed


if __name__ == "__main__":
    main()
