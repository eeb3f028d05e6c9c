"""What the roofline predicts for decode_vs_transformers.py's fast-path figures on a machine, from
a stored roof and the counts alone, beside the figures that benchmark printed there.

    python benchmarks/roofline_predict.py --db URL --machine NAME [--bench LINES.txt]

``--bench`` is a file of the benchmark's ``name=value`` lines (e.g. another machine's); the
predictions need only the roof, so a machine that cannot run here is judged by its profile.
Prints the roofline's and the predicted (runner.cost_model.Placement.predicted_seconds) µs per
token of the fast fp32 and int8 steps beside the measured ones, a 5-position
verification in plain steps, and the speculative speedup of a fast_int8 draft at k = 4 over a
range of acceptances (the overhead per pass is left out: no fit is known for another machine).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from runner import cost_model
from store.store import Store

QUICK = cost_model.Shape(vocab=103, d_model=128, layers=3, heads=4)  # the quick model, default corpus
TOKENS, VERIFY_K = 256, 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--bench", type=Path, default=None)
    arguments = parser.parse_args()
    roofs = Store(arguments.db).profiles.by_machine_name()
    if arguments.machine not in roofs:
        raise SystemExit(f"error: --machine: no profile of {arguments.machine!r} (profiled: {', '.join(roofs)})")
    roof = roofs[arguments.machine]
    measured: dict[str, float] = {}
    if arguments.bench is not None:
        for line in arguments.bench.read_text().splitlines():
            name, _, value = line.partition("=")
            try:
                measured[name] = float(value)
            except ValueError:
                continue
    steps: dict[str, cost_model.Placement] = {}
    for name, precision in (("fast", "fp32"), ("fast_int8", "int8")):
        passes = cost_model.generation_cost(QUICK, "fast", precision, 1, TOKENS, cached=True)
        steps[name] = cost_model.place(passes, roof)
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
    verifications = [cost_model.pass_cost(QUICK, "fast", "fp32", VERIFY_K + 1, start) for start in range(TOKENS)]
    verify = cost_model.place(verifications, roof)
    ratio = verify.predicted_seconds / steps["fast"].predicted_seconds
    seen = measured.get(f"fast_verify_k{VERIFY_K}_steps")
    against = f", measured {seen:.2f}: error {(ratio - seen) / seen:+.0%}" if seen else ""
    print(f"fast verification of {VERIFY_K + 1} positions: {verify.regime}, predicted {ratio:.2f} plain steps{against}")
    print(f"fast_verify_k{VERIFY_K}_predicted_steps={ratio:.4g}")
    step = steps["fast"].predicted_seconds / TOKENS
    draft = steps["fast_int8"].predicted_seconds / TOKENS
    verify_seconds = verify.predicted_seconds / TOKENS
    break_even = cost_model.break_even_acceptance(VERIFY_K, step, draft, verify_seconds)
    for acceptance in (0.5, 0.7, 0.9, 0.98):
        speedup = cost_model.speculative_speedup(acceptance, VERIFY_K, step, draft, verify_seconds)
        print(f"fast_int8 draft, k={VERIFY_K}, acceptance {acceptance}: roofline speedup {speedup:.2f}x")
    print(f"fast_int8_draft_break_even_acceptance={break_even if break_even is not None else 1.0:.3g}")


if __name__ == "__main__":
    main()
