"""Every timed decode placed on its machine's roof: what the experiments call, once each, to record
beside a measured time its counts (runner.cost.roofline_model), the cache level and achieved rates, its
distance from the roofline, its regime, and the roofline's prediction made from the counts and
the roof alone, with its error.

The roof is the run's machine profile (ExperimentContext.roof; a run profiles its machine first
when the store has none). The per-pass overhead is the ``overhead`` experiment's intercept for
the impl (and, for the eager impls the fit prices, its slope): this run's fit once it is
recorded, else the machine's latest stored one, else none. Where the cost model withholds a
prediction (runner.cost.roofline_model.WITHHELD_REASONS: an eager step with no fit, an eager pass
of several positions) no predicted time or error is stored, only ``roofline_prediction_withheld``,
the reason's index. Without a roof nothing is recorded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.cost import roofline_model
from runner.cost import speculative as speculative_cost
from runner.cost.roofline_model import LEVELS, Placement, Shape, pass_cost
from runner.decoding.speculative import runs_compiled, target_pass
from runner.experiments.base import ExperimentContext
from runner.experiments.speculative import TABLE_DRAFTS
from store.records import MeasurementRecord, RecordedMeasurement, case_key

LEVEL_CODES = {level: code for code, level in enumerate(LEVELS, start=1)}  # the cache_level metric (unit "level")
PRECISION_OF_KERNEL = {"float32": "fp32", "fast_bf16": "bf16", "fast_int8": "int8"}


def overhead_seconds(context: ExperimentContext, impl: str) -> float:
    """The impl's fitted per-pass overhead: this run's overhead fit, else the stored one, else 0."""
    return overhead_fit(context, impl)[0]


def overhead_fit(context: ExperimentContext, impl: str) -> tuple[float, float | None, float]:
    """The impl's fitted per-pass overhead, price per multiplication (None: not fitted) and the
    fit's largest |error| on its own points: this run's overhead fit, else the machine's stored
    one; (0, None, 0) where neither was fitted."""
    fitted: dict[str, float] = {}
    for row in context.earlier("overhead"):
        if row.params.get("part") == "fit" and row.params.get("impl") == impl:
            fitted.setdefault(row.metric, row.value)
    if "overhead_seconds_per_token" not in fitted:
        fitted = {"overhead_seconds_per_token": context.overheads.get(impl, 0.0), **context.overhead_fits.get(impl, {})}
    slope = fitted.get("seconds_per_mult")
    return (
        max(0.0, fitted["overhead_seconds_per_token"]),
        None if slope is None else max(0.0, slope),
        fitted.get("max_fit_error", 0.0),
    )


def fast_threads(impl: str) -> int:
    if impl != "fast":
        return 1  # eager steps at these widths run on one thread whatever torch has
    from runner.decoding.fast_library import threads_wanted

    return max(1, threads_wanted())


def placement_records(
    placement: Placement, tokens: int, measured_seconds_per_token: float, suffix: str = ""
) -> list[MeasurementRecord]:
    """The figures of a placement spread over ``tokens`` generated tokens, beside the measured time."""
    measured = measured_seconds_per_token * tokens
    predicted = placement.predicted_seconds / tokens
    if placement.withheld is None:
        prediction = [
            MeasurementRecord(f"roofline_predicted_seconds_per_token{suffix}", predicted, "seconds"),
            MeasurementRecord(
                f"roofline_prediction_error{suffix}",
                (predicted - measured_seconds_per_token) / measured_seconds_per_token,
                "ratio",
            ),
        ]
    else:  # no figure rather than one the model cannot make (runner.cost.roofline_model.WITHHELD_REASONS)
        prediction = [MeasurementRecord(f"roofline_prediction_withheld{suffix}", placement.withheld, "reason")]
    return [
        MeasurementRecord(f"bytes_per_token{suffix}", placement.bytes_moved / tokens, "bytes"),
        MeasurementRecord(f"flops_per_token{suffix}", placement.flops / tokens, "flops"),
        MeasurementRecord(f"working_set_bytes{suffix}", placement.working_set_bytes, "bytes"),
        MeasurementRecord(f"cache_level{suffix}", LEVEL_CODES[placement.level], "level"),
        MeasurementRecord(f"achieved_bytes_per_second{suffix}", placement.bytes_moved / measured, "bytes/second"),
        MeasurementRecord(f"achieved_flops_per_second{suffix}", placement.flops / measured, "flops/second"),
        MeasurementRecord(f"roof_fraction{suffix}", placement.roofline_seconds / measured, "ratio"),
        MeasurementRecord(f"regime{suffix}", roofline_model.REGIMES.index(placement.regime), "regime"),
        *prediction,
    ]


def timed_generation(
    context: ExperimentContext,
    shape: Shape,
    impl: str,
    precision: str | None,
    prompt_tokens: int,
    new_tokens: int,
    measured: Mapping[str, tuple[bool, float]],
) -> list[MeasurementRecord]:
    """Generations of ``new_tokens`` after a prompt, one per ``measured`` entry: metric suffix →
    (with the cache?, measured seconds per token). A precision of None (a kernel the cost model
    does not count, e.g. fake quantization) places nothing."""
    if context.roof is None or precision is None:
        return []
    (overhead, seconds_per_mult, fit_error), threads = overhead_fit(context, impl), fast_threads(impl)
    records: list[MeasurementRecord] = []
    for suffix, (cached, seconds_per_token) in measured.items():
        passes = roofline_model.generation_cost(shape, impl, precision, prompt_tokens, new_tokens, cached)
        placement = roofline_model.place(passes, context.roof, overhead, threads, impl, seconds_per_mult, fit_error)
        records += placement_records(placement, new_tokens, seconds_per_token, suffix)
    return records


def named_draft_pass(
    name: str, target_shape: Shape, small_draft_d_model: int, start: int
) -> tuple[list[roofline_model.Cost], str | None] | None:
    """``draft_pass`` from a case's params alone (a stored run read back, no draft at hand): the
    speculative experiment's drafts by name (runner.experiments.parts.speculative_drafts); None for a
    draft whose shape the name does not give (a Hugging Face checkpoint's)."""
    if name in TABLE_DRAFTS:
        row = target_shape.vocab * roofline_model.FLOAT_BYTES
        return [roofline_model.Cost(row, {}, row)], None
    if name in ("fast_int8", "int8"):
        impl, precision = ("fast", "int8") if name == "fast_int8" else ("static", "fp32")
        return [roofline_model.pass_cost(target_shape, impl, precision, 1, start)], impl
    if name == "small":
        heads = 4 if small_draft_d_model % 4 == 0 else 1
        shape = Shape(target_shape.vocab, small_draft_d_model, 1, heads)
        return [roofline_model.pass_cost(shape, "fast", "fp32", 1, start)], "fast"
    return None


def draft_pass(draft: Any, target_shape: Shape, start: int) -> tuple[list[roofline_model.Cost], str | None]:
    """One draft proposal's passes and the impl they run through: a model draft's one-position
    pass, a table draft's read of one vocab-sized row of log-probabilities (no impl: no decode
    step's overhead applies to a table lookup)."""
    model = getattr(draft, "model", None)
    if model is None:
        row = target_shape.vocab * roofline_model.FLOAT_BYTES
        return [roofline_model.Cost(row, {}, row)], None
    impl = "fast" if draft.name in ("fast_int8", "small") and model.device.type == "cpu" else "static"
    precision = "int8" if draft.name == "fast_int8" else "fp32"
    return [roofline_model.pass_cost(Shape.of(model.config), impl, precision, 1, start)], impl


# Why a speculative case stores no roofline speedup (``roofline_speculative_withheld``, its index).
SPECULATIVE_WITHHELD_REASONS = (
    "an eager target: a verification of several positions is priced neither by the roof nor by the overhead fit",
    "no earlier case of this impl in the run: the loop's per-pass overhead is fitted on those",
)
EAGER_TARGET, NO_LOOP_FIT = range(len(SPECULATIVE_WITHHELD_REASONS))


def speculative(
    context: ExperimentContext, case: dict[str, Any], draft: Any, measured: Mapping[str, float]
) -> list[MeasurementRecord]:
    """The roofline's verification cost (k + 1 positions against one, half way through the
    generation, where the a-priori step calibrates) and speedup, beside the measured ones; and
    the acceptance at which drafts break even. ``measured``: the case's own figures by metric.

    A pass costs the roof's verification, its draft calls (each the roof's price of the draft's
    pass plus a fixed part: the case's timed price of a proposal beyond that price, ≥ 0), the fixed
    part of its draft turn (from the case's timed turns of one and of four proposals), the cache
    refill of the two models sharing the caches (loop_parts) and the loop's own per-pass overhead
    (sampling, the accept rule, cache rewinds, Python): what this run's earlier cases of the impl
    whose loop is of the same kind (one C++ call or Python) took beyond their priced parts (each
    case records its own, ``roofline_loop_overhead_seconds``), those of its schedule first in a
    Python loop, their median weighted by 1 / pass² (runner.cost.speculative.fitted_loop_overhead). Characters
    and draft calls per pass are the a-priori prediction's; the speedup is the case's measured plain
    step over that pass (LoopParts says why). An eager target's verification is not
    priced (runner.cost.roofline_model's module doc): withheld, as is the first case of a kind."""
    if context.roof is None:
        return []
    impl, k = case["impl"], case["k"]
    if impl not in roofline_model.ROOF_PRICED_IMPLS:
        return [MeasurementRecord("roofline_speculative_withheld", EAGER_TARGET, "reason")]
    start = len(context.prompt()) + case["new_tokens"] // 2
    shape, overhead, threads = Shape.of(context.model.config), overhead_seconds(context, impl), fast_threads(impl)
    draft_passes, draft_impl = draft_pass(draft, shape, start)
    draft_overhead = overhead_seconds(context, draft_impl) if draft_impl is not None else 0.0
    parts = loop_parts(
        shape,
        impl,
        k,
        start,
        context.roof,
        draft_passes,
        measured["draft_call_us"] * 1e-6,
        (overhead, draft_overhead),
        (threads, fast_threads(draft_impl or "static")),
        measured["target_step_seconds"],
        measured["draft_turn_us"] * 1e-6 if "draft_turn_us" in measured else None,
    )
    own_overhead = parts.loop_overhead(measured)
    ratio = parts.verify_seconds / parts.step_seconds
    compiled = runs_compiled(target_pass(context.model, impl), draft)
    records = [
        MeasurementRecord("roofline_loop_compiled", float(compiled), "bool"),
        MeasurementRecord("roofline_predicted_verify_cost_ratio", ratio, "ratio"),
        MeasurementRecord(
            "roofline_verify_cost_ratio_error",
            (ratio - measured["verify_cost_ratio"]) / measured["verify_cost_ratio"],
            "ratio",
        ),
        MeasurementRecord("roofline_verify_regime", roofline_model.REGIMES.index(parts.verify_regime), "regime"),
        MeasurementRecord("roofline_step_seconds", parts.step_seconds, "seconds"),
        MeasurementRecord("roofline_verify_seconds", parts.verify_seconds, "seconds"),
        MeasurementRecord("roofline_draft_call_seconds", parts.draft_call_seconds, "seconds"),
        MeasurementRecord("roofline_draft_fixed_seconds", parts.draft_fixed_seconds, "seconds"),
        MeasurementRecord("roofline_draft_turn_fixed_seconds", parts.draft_turn_fixed_seconds, "seconds"),
        MeasurementRecord("roofline_cache_refill_seconds", parts.cache_refill_seconds, "seconds"),
        MeasurementRecord("roofline_loop_overhead_seconds", own_overhead, "seconds"),
    ]
    fitted = speculative_cost.fitted_loop_overhead(
        earlier_loop_residuals(context.earlier("speculative"), impl, compiled),
        None if compiled else str(case.get("schedule", "fixed")),
    )
    if fitted is None:
        return [*records, MeasurementRecord("roofline_speculative_withheld", NO_LOOP_FIT, "reason")]
    speedup = parts.speedup(measured["predicted_chars_per_pass"], measured["predicted_mean_draft_calls"], fitted)
    break_even = parts.break_even_acceptance(k, fitted)
    measured_speedup = measured["speedup_median"]
    return [
        *records,
        MeasurementRecord("roofline_loop_overhead_fit_seconds", fitted, "seconds"),
        MeasurementRecord("roofline_predicted_speedup", speedup, "ratio"),
        MeasurementRecord("roofline_speedup_error", (speedup - measured_speedup) / measured_speedup, "ratio"),
        # 1.0 where even full acceptance loses: no draft of this cost can win.
        MeasurementRecord("roofline_break_even_acceptance", 1.0 if break_even is None else break_even, "ratio"),
    ]


# What a case must have recorded for its residual to join the fit.
LOOP_RESIDUAL_FIGURES = frozenset(
    ("roofline_loop_overhead_seconds", "target_step_seconds", "chars_per_target_pass_timed", "speedup_median")
)


def earlier_loop_residuals(
    rows: Sequence[RecordedMeasurement], impl: str, compiled: bool
) -> list[speculative_cost.LoopResidual]:
    """The residuals (``roofline_loop_overhead_seconds``) of the run's earlier speculative cases of
    ``impl`` whose loop is of the same kind: a loop in one C++ call pays far less per pass than one
    in Python (a case recorded before the flag ran in Python). Each with its schedule and its
    measured pass, which fitted_loop_overhead weighs it by."""
    figures: dict[str, dict[str, float]] = {}
    schedules: dict[str, str] = {}
    for row in rows:
        if row.params.get("impl") == impl and row.params.get("part") == "speculative":
            key = case_key(row.params)
            figures.setdefault(key, {})[row.metric] = float(row.value)
            schedules[key] = str(row.params.get("schedule", "fixed"))
    return [
        speculative_cost.LoopResidual(
            own["roofline_loop_overhead_seconds"],
            speculative_cost.measured_pass_seconds(
                own["target_step_seconds"], own["chars_per_target_pass_timed"], own["speedup_median"]
            ),
            schedules[key],
        )
        for key, own in figures.items()
        if own.keys() >= LOOP_RESIDUAL_FIGURES and bool(own.get("roofline_loop_compiled")) == compiled
    ]


@dataclass(frozen=True)
class LoopParts:
    """A speculative pass's priced parts (seconds): the plain step and the verification on the
    roof, a draft call as its pass's price on the roof plus a fixed part, the fixed part of the
    draft's turn (its one call a pass, whatever its proposals), and the cache refill: what the
    verification and the pass's first draft call cost beyond their own prices because the other
    model's data shares the caches (loop_parts).

    ``plain_step_seconds`` is the plain decoding step the speedup is relative to: the run's own
    measured one, where known. The roof predicts the pass; the plain step it is divided into was
    timed beside it, and the loop overhead is fitted against that measured step, so pricing the
    numerator on the roof mixed two units. Where a target's working set sits at a cache's edge the
    roof's price of its step is off by a third (the held-out spec's 2.1 MB target on the 2 MiB L2
    of two Xeons: 25 and 40 us priced, 36 and 57 us measured), and so was every speedup, with the
    verdicts of its best cases (docs/performance.md)."""

    step_seconds: float
    verify_seconds: float
    draft_token_seconds: float
    draft_fixed_seconds: float
    cache_refill_seconds: float = 0.0
    verify_regime: str | None = None  # the verification's regime on the roof (loop_parts sets it)
    plain_step_seconds: float | None = None  # the measured plain step the speedup is over, where known
    draft_turn_fixed_seconds: float = 0.0  # paid once a pass; 0 where the run timed no turn

    @classmethod
    def price(
        cls,
        step_seconds: float,
        verify_seconds: float,
        draft_token_seconds: float,
        draft_call_seconds: float,
        cache_refill_seconds: float = 0.0,
        verify_regime: str | None = None,
        plain_step_seconds: float | None = None,
        draft_turn_seconds: float | None = None,
    ) -> LoopParts:
        """The draft's costs from its timed calls: ``draft_call_seconds``, a turn of one proposal,
        and ``draft_turn_seconds``, a turn of TURN_PROPOSALS (None or NaN where the run timed none:
        every proposal then pays a whole one-proposal call). Their difference prices a proposal,
        at least its pass's roof price; what the one-proposal turn took beyond that is the turn's
        fixed part, paid once a pass (runner.cost.speculative.turn_fixed_seconds); and a proposal's time
        beyond its pass's roof price is the call's fixed part (``draft_fixed_seconds``)."""
        turn_fixed = 0.0
        if draft_turn_seconds is not None and not math.isnan(draft_turn_seconds):
            turn_fixed = speculative_cost.turn_fixed_seconds(
                draft_call_seconds, draft_turn_seconds, draft_token_seconds
            )
        return cls(
            step_seconds,
            verify_seconds,
            draft_token_seconds,
            max(0.0, draft_call_seconds - turn_fixed - draft_token_seconds),
            cache_refill_seconds,
            verify_regime,
            plain_step_seconds,
            turn_fixed,
        )

    @property
    def draft_call_seconds(self) -> float:
        return self.draft_token_seconds + self.draft_fixed_seconds

    @property
    def baseline_step_seconds(self) -> float:
        """The plain step a pass is weighed against: the measured one where given, else the roof's."""
        return self.step_seconds if self.plain_step_seconds is None else self.plain_step_seconds

    def loop_overhead(self, measured: Mapping[str, float]) -> float:
        """What the measured loop spent per pass beyond these parts (its own step, characters
        per pass, draft calls and speedup)."""
        return (
            speculative_cost.loop_overhead_seconds(
                measured["target_step_seconds"],
                measured["chars_per_target_pass_timed"],
                measured["speedup_median"],
                self.verify_seconds,
                measured["mean_draft_calls"],
                self.draft_call_seconds,
            )
            - self.once_a_pass_seconds
        )

    def residual(self, measured: Mapping[str, float], schedule: str) -> speculative_cost.LoopResidual:
        """The case's loop overhead (``loop_overhead``) with its measured pass and schedule: what
        speculative_cost.fitted_loop_overhead fits other cases' overhead on."""
        return speculative_cost.LoopResidual(
            self.loop_overhead(measured),
            speculative_cost.measured_pass_seconds(
                measured["target_step_seconds"], measured["chars_per_target_pass_timed"], measured["speedup_median"]
            ),
            schedule,
        )

    @property
    def once_a_pass_seconds(self) -> float:
        """The priced parts a pass pays once besides its verification and its proposals (the loop's
        fitted overhead apart): the cache refill and the fixed part of its draft turn."""
        return self.cache_refill_seconds + self.draft_turn_fixed_seconds

    def speedup(self, chars_per_pass: float, draft_calls_per_pass: float, loop_overhead_seconds: float) -> float:
        return speculative_cost.loop_speedup(
            chars_per_pass,
            draft_calls_per_pass,
            self.baseline_step_seconds,
            self.verify_seconds,
            self.draft_call_seconds,
            loop_overhead_seconds + self.once_a_pass_seconds,
        )

    def break_even_acceptance(self, k: int, loop_overhead_seconds: float) -> float | None:
        return speculative_cost.loop_break_even_acceptance(
            k,
            self.baseline_step_seconds,
            self.draft_call_seconds,
            self.verify_seconds,
            loop_overhead_seconds + self.once_a_pass_seconds,
        )


def loop_parts(
    shape: Shape,
    impl: str,
    k: int,
    start: int,
    roof: dict[str, Any],
    draft_passes: list[roofline_model.Cost],
    draft_call_seconds: float,
    overheads: tuple[float, float] = (0.0, 0.0),
    threads: tuple[int, int] = (1, 1),
    plain_step_seconds: float | None = None,
    draft_turn_seconds: float | None = None,
) -> LoopParts:
    """The priced parts of a pass of k proposals at cache position ``start``: the plain step and the
    verification of ``impl`` in float32, the draft's pass (``draft_passes``) and its timed call and
    turn (LoopParts.price). ``overheads`` and ``threads``: the target's and the draft's per-pass
    overhead and threads; ``plain_step_seconds``: the measured plain step the speedup is over.

    The loop runs both models through one set of caches, so each pass finds part of its data evicted
    by the other: the verification and the pass's first draft call are priced again with the other's
    working set beside theirs (roofline_model.beside), and the difference is the cache refill. On a
    Xeon with 2 MiB of L2 the fast int8 draft's 1.5 MB fits alone but not beside the target's 3.2 MB,
    and its loop spent about 40 us a pass beyond its standalone parts; the refill prices that, where a
    fixed loop overhead could not tell it from the small draft's 10 us."""
    target_overhead, draft_overhead = overheads
    target_threads, draft_threads = threads

    def priced(passes: list[roofline_model.Cost], overhead: float, thread_count: int) -> float:
        return roofline_model.place(passes, roof, overhead, thread_count).predicted_seconds

    verification = pass_cost(shape, impl, "fp32", k + 1, start)
    draft_bytes = max(cost.working_set_bytes for cost in draft_passes)
    verify_placement = roofline_model.place([verification], roof, target_overhead, target_threads)
    verify = verify_placement.predicted_seconds
    draft_token = priced(draft_passes, draft_overhead, draft_threads)
    shared_verify = priced([roofline_model.beside(verification, draft_bytes)], target_overhead, target_threads)
    shared_draft = priced(
        [roofline_model.beside(cost, verification.working_set_bytes) for cost in draft_passes],
        draft_overhead,
        draft_threads,
    )
    # An overhead-bound pass (priced by the fit, not the roof) pays no refill; a withheld one is NaN.
    refill = sum(
        max(0.0, shared - alone)
        for shared, alone in ((shared_verify, verify), (shared_draft, draft_token))
        if not (math.isnan(shared) or math.isnan(alone))
    )
    return LoopParts.price(
        priced([pass_cost(shape, impl, "fp32", 1, start)], target_overhead, target_threads),
        verify,
        draft_token,
        draft_call_seconds,
        refill,
        verify_placement.regime,
        plain_step_seconds,
        draft_turn_seconds,
    )
