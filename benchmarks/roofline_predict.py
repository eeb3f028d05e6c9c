"""What the roofline predicts for decode_vs_transformers.py's fast-path figures on a machine, from
a stored roof and the counts alone, beside the figures that benchmark printed there.

    python benchmarks/roofline_predict.py --profile PROFILE.json --bench LINES.txt [--bench ...]
    python benchmarks/roofline_predict.py --db URL --machine NAME [--bench LINES.txt | --measure]

``--profile`` is a machine profile as a JSON file (the stored figures: ``decodelab machine
profile``'s, as in tests/fixtures/*-profile.json), so nothing is measured and no store is needed:
a developer on one CPU checks the model against the other's files. ``--bench`` is a file of the
benchmark's ``name=value`` lines (e.g. another machine's), given as often as there are files; a
``--measure`` output's sentence ``measured acceptance A: measured Sx`` is read too (older
outputs printed the speculative figures only that way), as is the benchmark's own ``fast
speculative, fast_int8 draft, k=4: Sx ... at acceptance A`` line, and ``--measured-acceptance`` /
``--measured-speedup`` give them where no file holds them. The predictions need only the roof,
so a machine that cannot run here is judged by its profile.
``--measure`` times the figures here instead, in seconds rather than the benchmark's minutes
(its fast fp32 and int8 steps paired, its verification in plain steps, and speculative decoding
with the fast_int8 draft at k = 4 against plain fast decoding, judged at the acceptance it
measured: the verdict, wins or loses, against the roofline's), with the
quick model from ``--db`` and the load average beside them: on a shared machine, run it pinned
to one core at a raised priority (``taskset -c 1 chrt -f 10 python ...``) and quote the load.
Prints the roofline's and the predicted (runner.cost.roofline_model.Placement.predicted_seconds) µs per
token of the fast fp32 and int8 steps beside the measured ones, a 5-position
verification in plain steps, and the speculative speedup of a fast_int8 draft at k = 4 over a
range of acceptances (the overhead per pass is left out: no fit is known for another machine).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from runner.cost import roofline_model
from runner.cost import speculative as speculative_cost
from store.store import Store

QUICK = roofline_model.Shape(vocab=103, d_model=128, layers=3, heads=4)  # the quick model, default corpus
TOKENS, VERIFY_K = 256, 4


# An older --measure output's speculative sentence (its figures had no name=value lines), and
# decode_vs_transformers.py's (its acceptance has no name=value line): (acceptance, speedup) each.
MEASURED_SENTENCE = re.compile(r"measured acceptance (?P<acceptance>[0-9.]+): measured (?P<speedup>[0-9.]+)x")
BENCH_SENTENCE = re.compile(
    rf"fast speculative, fast_int8 draft, k={VERIFY_K}: (?P<speedup>[0-9.]+)x plain fast decoding .* "
    r"at acceptance (?P<acceptance>[0-9.]+)"
)


def read_bench(paths: list[Path]) -> dict[str, float]:
    """Every ``name=value`` line of the files (a later file's value wins), and the speculative
    figures of an older --measure output's sentence or of the benchmark's k = 4 line."""
    measured: dict[str, float] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            name, _, value = line.partition("=")
            try:
                measured[name.strip()] = float(value)
            except ValueError:
                found = MEASURED_SENTENCE.search(line) or BENCH_SENTENCE.search(line)
                if found:
                    measured[f"fast_int8_draft_k{VERIFY_K}_acceptance"] = float(found["acceptance"])
                    measured[f"fast_int8_draft_k{VERIFY_K}_speedup"] = float(found["speedup"])
    return measured


def read_profile(path: Path) -> dict[str, Any]:
    try:
        figures = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: --profile: cannot read {str(path)!r} as a machine profile's JSON ({error})") from None
    missing = [key for key in ("peak_operations_per_second", "bandwidth", "sweep", "caches") if key not in figures]
    if missing:
        raise SystemExit(f"error: --profile: {str(path)!r} is not a machine profile (no {', '.join(missing)})")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, default=None, help="a machine profile's JSON file (no store)")
    parser.add_argument("--db", default=None)
    parser.add_argument("--machine", default=None)
    parser.add_argument("--bench", type=Path, action="append", default=[])
    parser.add_argument("--measure", action="store_true", help="time the figures here (see above)")
    parser.add_argument("--measured-acceptance", type=float, default=None)
    parser.add_argument("--measured-speedup", type=float, default=None)
    parser.add_argument("--pairs", type=int, default=7)
    arguments = parser.parse_args()
    if arguments.profile is not None:
        if arguments.measure:
            raise SystemExit("error: --measure: needs --db (the quick model is read from a store), not --profile")
        roof = read_profile(arguments.profile)
    elif arguments.db is None or arguments.machine is None:
        raise SystemExit("error: give --profile FILE, or --db URL and --machine NAME")
    else:
        roofs = Store(arguments.db).profiles.by_machine_name()
        if arguments.machine not in roofs:
            raise SystemExit(f"error: --machine: no profile of {arguments.machine!r} (profiled: {', '.join(roofs)})")
        roof = roofs[arguments.machine]
    measured = read_bench(arguments.bench)
    if arguments.measure:
        measured |= measure_here(arguments.db, arguments.pairs)
    if arguments.measured_acceptance is not None:
        measured[f"fast_int8_draft_k{VERIFY_K}_acceptance"] = arguments.measured_acceptance
    if arguments.measured_speedup is not None:
        measured[f"fast_int8_draft_k{VERIFY_K}_speedup"] = arguments.measured_speedup
    predict(roof, measured)


def predict(roof: dict[str, Any], measured: dict[str, float]) -> None:
    """Print the roofline's figures on ``roof`` beside the ``measured`` ones (by benchmark name)."""
    steps: dict[str, roofline_model.Placement] = {}
    for name, precision in (("fast", "fp32"), ("fast_int8", "int8")):
        passes = roofline_model.generation_cost(QUICK, "fast", precision, 1, TOKENS, cached=True)
        steps[name] = roofline_model.place(passes, roof)
        roofline = steps[name].roofline_seconds / TOKENS * 1e6
        predicted = steps[name].predicted_seconds / TOKENS * 1e6
        seen = measured.get(f"{name}_us_per_token")
        against = (
            f", measured {seen:.1f}: {roofline / seen:.0%} of the roof, "
            f"prediction error {(predicted - seen) / seen:+.0%}"
            if seen
            else ""
        )
        print(
            f"{name}: {steps[name].regime} in {steps[name].level}, roofline {roofline:.1f} us/token, "
            f"predicted {predicted:.1f}{against}"
        )
        print(f"{name}_predicted_us_per_token={predicted:.4g}")
    verifications = [roofline_model.pass_cost(QUICK, "fast", "fp32", VERIFY_K + 1, start) for start in range(TOKENS)]
    verify = roofline_model.place(verifications, roof)
    ratio = verify.predicted_seconds / steps["fast"].predicted_seconds
    seen = measured.get(f"fast_verify_k{VERIFY_K}_steps")
    against = f", measured {seen:.2f}: error {(ratio - seen) / seen:+.0%}" if seen else ""
    print(f"fast verification of {VERIFY_K + 1} positions: {verify.regime}, predicted {ratio:.2f} plain steps{against}")
    print(f"fast_verify_k{VERIFY_K}_predicted_steps={ratio:.4g}")
    step = steps["fast"].predicted_seconds / TOKENS
    draft = steps["fast_int8"].predicted_seconds / TOKENS
    verify_seconds = verify.predicted_seconds / TOKENS
    break_even = speculative_cost.break_even_acceptance(VERIFY_K, step, draft, verify_seconds)
    for acceptance in (0.5, 0.7, 0.9, 0.98):
        speedup = speculative_cost.speculative_speedup(acceptance, VERIFY_K, step, draft, verify_seconds)
        print(f"fast_int8 draft, k={VERIFY_K}, acceptance {acceptance}: roofline speedup {speedup:.2f}x")
    print(f"fast_int8_draft_break_even_acceptance={break_even if break_even is not None else 1.0:.3g}")
    acceptance_seen = measured.get(f"fast_int8_draft_k{VERIFY_K}_acceptance")
    speedup_seen = measured.get(f"fast_int8_draft_k{VERIFY_K}_speedup")
    if acceptance_seen is not None and speedup_seen is not None:
        speedup = speculative_cost.speculative_speedup(acceptance_seen, VERIFY_K, step, draft, verify_seconds)
        verdict = "right" if (speedup >= 1.0) == (speedup_seen >= 1.0) else "wrong"
        print(
            f"fast_int8 draft, k={VERIFY_K}, measured acceptance {acceptance_seen:.3f}: measured {speedup_seen:.2f}x, "
            f"roofline {speedup:.2f}x (error {(speedup - speedup_seen) / speedup_seen:+.0%}): verdict {verdict}"
        )
        print(f"fast_int8_draft_k{VERIFY_K}_roofline_speedup={speedup:.4g}")
        print(f"fast_int8_draft_k{VERIFY_K}_roofline_verdict={verdict}")


def measure_here(url: str, pairs: int) -> dict[str, float]:
    """The fast fp32 and int8 steps (paired: each its least time over the pairs) and a 5-position
    verification in plain steps (decode_vs_transformers.verify_in_steps), on the quick model."""
    import functools
    import os

    import torch
    from decode_vs_transformers import verify_in_steps  # this script's folder is on the path

    from runner.decoding.decode import generate
    from runner.decoding.drafts import ModelDraft
    from runner.decoding.speculative import speculative_decode
    from runner.measure.timing import Harness
    from runner.model.corpus import load_corpus
    from runner.model.quantize import quantize_model
    from runner.model.train import train_or_reuse
    from runner.spec.sweeps import load_preset

    torch.set_num_threads(1)
    spec, corpus = load_preset("quick"), load_corpus()
    model_config = spec.model_config(len(corpus.vocabulary))
    model = train_or_reuse(Store(url).results, model_config, spec.train_config(), corpus).model.eval()
    if roofline_model.Shape.of(model.config) != QUICK:
        raise SystemExit(f"error: the quick model's shape {roofline_model.Shape.of(model.config)} is not {QUICK}")
    prompt, harness = corpus.encode(corpus.text[:1]), Harness()
    quantized = quantize_model(model, "int8", kernel="fast_int8")
    load_at_start = os.getloadavg()[0]
    steps = harness.paired(
        functools.partial(generate, model, prompt, TOKENS, temperature=0.0, impl="fast"),
        functools.partial(generate, quantized, prompt, TOKENS, temperature=0.0, impl="fast"),
        pairs=pairs,
    )
    verify = verify_in_steps(model, prompt, TOKENS, harness, pairs)
    # Speculative decoding on the fast impl with the fast_int8 draft, sampled as the quick preset.
    draft = ModelDraft(quantized, "fast_int8", fast=True)
    speculative = functools.partial(
        speculative_decode, model, draft, VERIFY_K, prompt, TOKENS, temperature=1.0, seed=1, impl="fast"
    )
    plain = functools.partial(generate, model, prompt, TOKENS, temperature=1.0, seed=1, impl="fast")
    decoded = speculative()
    speedup = harness.paired(plain, speculative, pairs=pairs)
    print(f"measured here at load average {load_at_start:.2f} (start) to {os.getloadavg()[0]:.2f} (end)")
    figures = {
        "fast_us_per_token": min(steps.baseline_seconds) / TOKENS * 1e6,
        "fast_int8_us_per_token": min(steps.candidate_seconds) / TOKENS * 1e6,
        f"fast_verify_k{VERIFY_K}_steps": 1 / verify.median,
        f"fast_int8_draft_k{VERIFY_K}_acceptance": decoded.acceptance_rate,
        f"fast_int8_draft_k{VERIFY_K}_speedup": speedup.median,
    }
    for name, value in figures.items():
        print(f"{name}={value:.4g}")
    return figures


if __name__ == "__main__":
    main()
