"""The roofline's speculative speedup with the loop's own costs, recomputed from a stored run's
timed parts (no measuring): per case the measured speedup, the roofline's prediction and its
error, the verdict (wins / loses) of each, and the median |error| per impl; the verdicts are also
counted over the cases measured more than 10% from a tie (``clear_verdicts_right``).

    python benchmarks/speculative_roofline_check.py --db URL --run N [--profile FILE.json]

Another machine's run is read after ``decodelab import --db URL RUN.json``; ``--profile`` gives
the roof where the run's machine has no stored profile (a run made before the roofline). The
model (runner.experiments.parts.roofline_placement.speculative and loop_parts): a pass costs the roof's
verification, its draft turn (the turn's fixed part, once a pass, from the case's timed turns of
one proposal and of four, then each proposal at the roof's price of the draft's pass plus what its
timed price took beyond it; a run that timed no turn prices each proposal at its single timed call),
the cache refill of two models sharing the caches, and the loop's per-pass overhead, fitted on
the impl's *other* cases whose loop is of the same kind (one C++ call, or Python) from what their
loops took beyond their priced parts, those of the case's schedule first in a Python loop, their
median weighted by 1 / pass² (runner.cost.speculative.fitted_loop_overhead; a run fits on its
earlier cases only; read back, every other case is at hand). Characters and draft calls per pass
are the a-priori prediction's where the run recorded it, else the i.i.d. E at the calibrated
acceptance and k calls. The speedup is the case's measured plain step over the
predicted pass, and the plain steps a pass costs are counted in that measured step
(runner.experiments.parts.roofline_placement.LoopParts). Eager targets are withheld, as a run
withholds them.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.roofline import wide
from runner.cost import roofline_model
from runner.cost import speculative as speculative_cost
from runner.cost.roofline_model import Shape
from runner.errors import InputError
from runner.experiments.parts.roofline_placement import loop_parts, named_draft_pass
from runner.model.corpus import DEFAULT_CORPUS, load_corpus
from store import frames
from store.store import Store

# A measured speedup within this of 1.0 is a tie inside the loop's timing noise (its pairs' bands
# on a 2-core VM span 5-10%): its verdict is counted apart.
CLEAR_VERDICT = 0.10


def vocab_of(parameter_count: int, d_model: int, layers: int, context_length: int) -> int:
    """The vocabulary a CharGPT of this shape has from its parameter count: a tied embedding
    (vocab·d), learned positions (context·d), per block 12·d² weights and 13·d biases and
    LayerNorm figures, and a final LayerNorm (2·d)."""
    rest = parameter_count - context_length * d_model - layers * (12 * d_model**2 + 13 * d_model) - 2 * d_model
    if rest <= 0 or rest % d_model:
        raise SystemExit(f"error: parameter count {parameter_count} is not a CharGPT of d={d_model}, {layers} blocks")
    return rest // d_model


def figure(case: pd.Series, *names: str) -> float | None:
    for name in names:
        value = case.get(name)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            return float(value)
    return None


def vocabulary_size(store: Store, run_id: int, model_hash: str | None, model: dict[str, Any]) -> int:
    """The run's vocabulary: from its training summary's parameter count, else from the stored model
    (a spec without a training summary, such as benchmarks/specs/quick-speculative.toml), else from
    the run's corpus where this checkout holds it (an imported held-out run: its model stayed on its
    machine, its corpus is benchmarks/specs/held_out_corpus.txt)."""
    training = frames.measurements(store, run_id, "training_summary")
    counts = list(training[training["metric"] == "parameter_count"]["value"])
    record = store.results.find_model(weights_hash=model_hash) if model_hash and not counts else None
    if record is not None:
        counts = [record.parameter_count]
    if counts:
        return vocab_of(int(counts[0]), model["d_model"], model["n_layer"], model["context_length"])
    corpus = str(model.get("corpus", DEFAULT_CORPUS))
    try:
        return len(load_corpus(corpus).vocabulary)
    except InputError:
        raise SystemExit(
            f"error: --run: run {run_id} has no training summary, no stored model, and its corpus {corpus!r} "
            "is not here"
        ) from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--run", type=int, required=True)
    parser.add_argument("--profile", type=Path, default=None, help="the roof, where the run's machine has none")
    arguments = parser.parse_args()
    store = Store(arguments.db)
    runs = frames.runs(store).set_index("run_id")
    if arguments.run not in runs.index:
        raise SystemExit(f"error: --run: no run {arguments.run} in {arguments.db}")
    machine, roof = store.profiles.for_run(arguments.run)
    if arguments.profile is not None:
        roof = json.loads(arguments.profile.read_text())
    if roof is None:
        raise SystemExit(f"error: --profile: run {arguments.run}'s machine {machine} has no stored roof; give one")
    run = runs.loc[arguments.run]
    model = run["spec"]["model"]
    shape = Shape(
        vocabulary_size(store, arguments.run, run["model_hash"], model),
        model["d_model"],
        model["n_layer"],
        model["n_head"],
    )
    overhead_rows = frames.measurements(store, arguments.run, "overhead")
    intercepts = {
        row["params"].get("impl"): max(0.0, row["value"])
        for _, row in overhead_rows.iterrows()
        if row["params"].get("part") == "fit" and row["metric"] == "overhead_seconds_per_token"
    }
    cases = wide(frames.measurements(store, arguments.run, "speculative"))
    cases = cases[cases["part"] == "speculative"]
    priced: list[dict[str, Any]] = []
    for _, case in cases.iterrows():
        impl = case["impl"] if isinstance(case.get("impl"), str) else "static"
        if impl not in roofline_model.ROOF_PRICED_IMPLS:
            priced.append({"case": case, "impl": impl, "withheld": "eager target"})
            continue
        n = int(case["new_tokens"])
        start = 1 + n // 2
        length = figure(case, "mean_draft_length") or float(case["k"])
        k = min(int(case["k"]), max(1, round(length)))
        drafted = named_draft_pass(str(case["draft"]), shape, int(case.get("small_draft_d_model") or 64), start)
        if drafted is None:
            priced.append({"case": case, "impl": impl, "withheld": "draft of unknown shape"})
            continue
        draft_passes, draft_impl = drafted
        parts = loop_parts(
            shape,
            impl,
            k,
            start,
            roof,
            draft_passes,
            case["draft_call_us"] * 1e-6,
            (intercepts.get(impl, 0.0), intercepts.get(draft_impl or "", 0.0)),
            plain_step_seconds=case["target_step_seconds"],
            draft_turn_seconds=turn_us * 1e-6 if (turn_us := figure(case, "draft_turn_us")) is not None else None,
        )
        calls = figure(case, "mean_draft_calls") or float(k)
        measured = {
            "target_step_seconds": case["target_step_seconds"],
            "chars_per_target_pass_timed": figure(case, "chars_per_target_pass_timed", "chars_per_target_pass"),
            "speedup_median": case["speedup_median"],
            "mean_draft_calls": calls,
        }
        priced.append(
            {
                "case": case,
                "impl": impl,
                "parts": parts,
                "residual": parts.residual(measured, schedule_of(case)),
                "chars": figure(case, "predicted_chars_per_pass", "expected_chars_per_pass"),
                "calls": figure(case, "predicted_mean_draft_calls") or calls,
                "k": k,  # the verification priced: the loop's mean draft length, rounded
                "compiled": loop_compiled(case),
            }
        )
    errors: dict[str, list[float]] = {}
    verdicts: dict[str, list[bool]] = {}
    clear: dict[str, list[bool]] = {}  # the verdicts of cases measured more than CLEAR_VERDICT from 1.0
    best: dict[str, tuple[float, dict[str, Any] | None]] = {}  # the case each impl is predicted fastest in
    print(f"run {arguments.run} on {machine}: roofline speedup with the loop's costs, leave-one-out loop overhead")
    for index, row in enumerate(priced):
        case, impl = row["case"], row["impl"]
        label = f"{impl:<6} {case['draft']:<9} {case.get('schedule', 'fixed'):<10} T={case['temperature']}"
        if "withheld" in row:
            print(f"{label}  measured {case['speedup_median']:.2f}x  withheld ({row['withheld']})")
            continue
        others = [
            other["residual"]
            for j, other in enumerate(priced)
            if j != index and other["impl"] == impl and "parts" in other and other["compiled"] == row["compiled"]
        ]
        fitted = speculative_cost.fitted_loop_overhead(others, None if row["compiled"] else schedule_of(case))
        if fitted is None:
            print(f"{label}  measured {case['speedup_median']:.2f}x  withheld (no other case of its loop's kind)")
            continue
        parts = row["parts"]
        predicted = parts.speedup(row["chars"], row["calls"], fitted)
        measured_speedup = float(case["speedup_median"])
        error = (predicted - measured_speedup) / measured_speedup
        right = (predicted >= 1.0) == (measured_speedup >= 1.0)
        errors.setdefault(impl, []).append(abs(error))
        verdicts.setdefault(impl, []).append(right)
        if abs(measured_speedup - 1.0) > CLEAR_VERDICT:
            clear.setdefault(impl, []).append(right)
        if predicted > best.get(impl, (0.0, None))[0]:
            best[impl] = (predicted, {**row, "fitted": fitted})
        print(
            f"{label}  measured {measured_speedup:.2f}x  roofline {predicted:.2f}x ({error:+.0%}, verdict "
            f"{'right' if right else 'wrong'})  loop overhead {fitted * 1e6:.0f} us/pass, "
            f"a proposal {parts.draft_call_seconds * 1e6:.1f} us ({parts.draft_fixed_seconds * 1e6:.1f} beyond the "
            f"roof), turn fixed {parts.draft_turn_fixed_seconds * 1e6:.1f} us, "
            f"cache refill {parts.cache_refill_seconds * 1e6:.0f} us"
        )
    for impl, values in errors.items():
        print(f"{impl}_median_abs_roofline_speedup_error={statistics.median(values):.4g}")
        print(f"{impl}_verdicts_right={sum(verdicts[impl])}/{len(verdicts[impl])}")
        decided = clear.get(impl, [])
        print(f"{impl}_clear_verdicts_right={sum(decided)}/{len(decided)}")
        print(deciding_cost(impl, machine, *best[impl]))


def schedule_of(case: pd.Series) -> str:
    """The case's draft schedule; a run made before schedules drafted a fixed k."""
    schedule = case.get("schedule")
    return schedule if isinstance(schedule, str) else "fixed"


def loop_compiled(case: pd.Series) -> bool:
    """Whether the case's loop ran in one C++ call, as the run recorded it (roofline_loop_compiled);
    a run made before the record ran every loop in Python."""
    recorded = figure(case, "roofline_loop_compiled")
    return recorded is not None and bool(recorded)


def deciding_cost(impl: str, machine: str, predicted: float, row: dict[str, Any] | None) -> str:
    """Which cost decides speculative decoding on this machine's impl, in plain steps a pass of the
    case predicted fastest, and the acceptance its drafts need (k calls a pass, each proposal kept
    alike): what the Roofline page says of a run (analysis.roofline_conclusions.speculative_sentence)."""
    assert row is not None
    parts, case = row["parts"], row["case"]
    k = int(row["k"])
    costs = speculative_cost.pass_in_steps(
        step_seconds=parts.baseline_step_seconds,
        verify_seconds=parts.verify_seconds,
        draft_calls_per_pass=row["calls"],
        draft_call_seconds=parts.draft_call_seconds,
        draft_turn_fixed_seconds=parts.draft_turn_fixed_seconds,
        cache_refill_seconds=parts.cache_refill_seconds,
        loop_overhead_seconds=row["fitted"],
    )
    decider = speculative_cost.largest_cost(costs)
    break_even = parts.break_even_acceptance(k, row["fitted"])
    steps = ", ".join(f"{name} {value:.2f}" for name, value in costs.items())
    return (
        f"{machine} {impl}: best predicted {case['draft']} k={k} at {predicted:.2f}x, a pass {sum(costs.values()):.2f} "
        f"plain steps ({steps})\n{impl}_deciding_cost={decider}\n"
        f"{impl}_break_even_acceptance={1.0 if break_even is None else break_even:.3g}"
    )


if __name__ == "__main__":
    main()
