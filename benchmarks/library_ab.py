"""This checkout's fast-path library against another revision's, interleaved in one process: a
forward of m positions (a plain step at m = 1, a verification of k + 1 at m = k + 1) through each.

On a host whose speed drifts by a fifth within minutes (the Zen 3 EPYC: the same benchmark run
twice read 58 and 79 us a step), two runs of decode_vs_transformers.py cannot tell a 5-10% kernel
change; here both libraries take turns within every round (which goes first alternates), on one
pinned CPU, so a drift slows both. The baseline's ``runner/decoding/csrc`` comes from ``git archive
REV`` and is built with this checkout's compiler, flags and -march (runner.decoding.native_build,
cached by its contents); a revision whose library lacks this checkout's entry points is refused.
The model is the quick preset's shape, seeded and untrained (a kernel's time does not depend on its
weights' values); int8 is its fast_int8 quantization.

    python benchmarks/library_ab.py --baseline REV [--positions 1,2,3,4,5,8] [--rounds 25] [--start 118]

Prints per precision (fp32, int8) the largest difference between the two libraries' logits over a
prompt (``library_ab_<precision>_max_logit_difference=``; above 1e-3 the run stops: a kernel that
computes something else gets no speed figure), then per m the lower quartile over rounds of each
library's microseconds per forward and ``library_ab_<precision>_m<m>_ratio=`` (this checkout's over
the baseline's: below 1 is faster), and the load average at the start and end.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

from runner.ab.revisions import resolve
from runner.decoding.fast import FastDecoder
from runner.decoding.fast_library import default_march, load_built
from runner.decoding.native_build import build
from runner.errors import InputError
from runner.measure.load import load_average
from runner.model.gpt import CharGPT, ModelConfig
from runner.model.quantize import quantize_model

ROOT = Path(__file__).resolve().parent.parent
SOURCES = "runner/decoding/csrc"
# Two builds of the same sum in another order differ in the last bits (the AVX2 attention reduction moved
# logits by ~1e-6); a wrong kernel moves them by whole units.
LOGIT_TOLERANCE = 1e-3
CALLS_PER_ROUND = 40  # forwards timed together: one reading is ~2-10 ms, far above the clock's grain


def positions_list(text: str) -> list[int]:
    try:
        positions = [int(part) for part in text.split(",")]
    except ValueError:
        positions = []
    if not positions or not all(1 <= m <= 64 for m in positions):
        raise SystemExit(f"error: --positions: {text!r} is not a list of whole numbers in 1..64 (e.g. 1,2,5)")
    return positions


def baseline_sources(asked: str, into: Path) -> Path:
    """The runner/decoding/csrc of the revision ``asked`` names (checked as `decodelab ab` checks its
    revisions: a commit of a decodelab tree, never an option), unpacked under ``into``."""
    try:
        revision = resolve(ROOT, "baseline", asked)
    except InputError as error:
        raise SystemExit(f"error: {error}") from None
    archived = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision.commit, SOURCES], capture_output=True
    )
    if archived.returncode != 0:
        message = archived.stderr.decode(errors="replace").strip().splitlines()
        reason = message[-1] if message else "git archive failed"
        raise SystemExit(f"error: --baseline: {asked!r} has no {SOURCES} ({reason})")
    with tarfile.open(fileobj=io.BytesIO(archived.stdout)) as archive:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            archive.extractall(into, filter="data")
        else:
            archive.extractall(into)
    return into / SOURCES


def described(load: float | None) -> str:
    return "unknown" if load is None else f"{load:.2f}"


def lower_quartile(values: list[float]) -> float:
    return sorted(values)[len(values) // 4]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the revision to compare against, e.g. HEAD~1")
    parser.add_argument("--positions", default="1,2,3,4,5,8", help="forwards of these many positions")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--start", type=int, default=118, help="cached positions before each forward")
    arguments = parser.parse_args()
    positions = positions_list(arguments.positions)
    if not 3 <= arguments.rounds <= 1000:
        raise SystemExit(f"error: --rounds: {arguments.rounds} is outside 3..1000")
    config = ModelConfig(vocab_size=103, d_model=128, n_layer=3, n_head=4, context_length=1024)
    if not 1 <= arguments.start <= config.context_length - max(positions):
        raise SystemExit(f"error: --start: {arguments.start} is outside 1..{config.context_length - max(positions)}")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    torch.set_num_threads(1)
    torch.manual_seed(0)
    march = default_march()  # both sides built for the same instruction set
    with tempfile.TemporaryDirectory() as folder:
        sources = baseline_sources(arguments.baseline, Path(folder))
        try:
            baseline = load_built(build("fast_decode.cpp", march, sources))
        except Exception as error:  # a compile failure, or a revision without this checkout's entry points
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise SystemExit(
                f"error: --baseline: {arguments.baseline}'s library did not build or load with this checkout's "
                f"entry points ({reason})"
            ) from None
    print(f"load average {described(load_average())} at the start; -march={march}; baseline {arguments.baseline}")
    base = CharGPT(config).eval()
    for precision, model in (("fp32", base), ("int8", quantize_model(base, "int8", kernel="fast_int8"))):
        sides = {"baseline": FastDecoder(model, loaded=baseline), "candidate": FastDecoder(model)}
        caches = {name: model.new_cache() for name in sides}
        logits = {name: decoder.forward([1] * arguments.start, caches[name]) for name, decoder in sides.items()}
        # A kernel that computes something else gets no speed figure: the two libraries' logits first.
        difference = float((logits["candidate"] - logits["baseline"]).abs().max())
        print(f"library_ab_{precision}_max_logit_difference={difference:.3g}")
        if not difference <= LOGIT_TOLERANCE:
            raise SystemExit(f"error: {precision} logits differ by {difference:.3g} (over {LOGIT_TOLERANCE}): untimed")
        times: dict[tuple[str, int], list[float]] = {(name, m): [] for name in sides for m in positions}
        for round_index in range(arguments.rounds):
            order = list(sides.items()) if round_index % 2 == 0 else list(reversed(sides.items()))
            for m in positions:
                for name, decoder in order:
                    cache = caches[name]
                    started = time.perf_counter()
                    for _ in range(CALLS_PER_ROUND):
                        cache.length = arguments.start
                        decoder.forward([2] * m, cache)
                    times[name, m].append((time.perf_counter() - started) / CALLS_PER_ROUND)
        for m in positions:
            before, after = lower_quartile(times["baseline", m]), lower_quartile(times["candidate", m])
            print(f"{precision} m={m}: baseline {before * 1e6:.1f} us, candidate {after * 1e6:.1f} us")
            print(f"library_ab_{precision}_m{m}_ratio={after / before:.4g}")
    print(f"load average {described(load_average())} at the end")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
