"""The metric catalogue: every metric an experiment records, once, with its unit, its kind, which
way is better, its band and its old names (the entry: runner.metric_entry.Metric). Pages, reports,
the review's verdicts and the machines audit look metrics up here; adding a metric is adding one
entry, here or in its experiment's declaration (runner.declarations), which also names the
experiment's headlines and its place in the order.

Kinds (what a second run may do to the figure):
- ``exact``: integers, byte counts, equality flags, seeded counts and ratios of them: equal on
  every machine for the same model, seed and code;
- ``numerical``: floating results (losses, logit differences, entropies) that reproduce on one
  machine but may differ in the last bits across instruction sets: equal within
  NUMERICAL_TOLERANCE;
- ``sampled``: statistics of seeded sampling from floating probabilities (distances, p-values):
  as numerical;
- ``timed``: read from the clock (seconds, measured speedups): judged against a noise floor;
- ``predicted``: computed from timings by a model (speedup formulas, choices): noisy, not judged;
- ``fitted``: a fit over timed points (slopes, intercepts): noisy, not judged.

Torch-free (the standard library and the declarations): the CLI, the runner, the store's read
path and the dashboard all import it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from runner import declarations
from runner.declarations import Declaration
from runner.metric_entry import BAND_SUFFIXES as BAND_SUFFIXES
from runner.metric_entry import DETERMINISTIC_KINDS as DETERMINISTIC_KINDS
from runner.metric_entry import KINDS as KINDS
from runner.metric_entry import Metric as Metric
from runner.metric_entry import exact, paired, timed

# How far a numerical or sampled figure may move across instruction sets: the fast path's
# kernels differ from eager PyTorch by about 1e-4 in the logits (tests/test_fast_kernels.py
# holds them to 1e-4 absolute); relative 1e-3 leaves room for the losses summed from them.
NUMERICAL_TOLERANCE = {"absolute": 1e-4, "relative": 1e-3}
# Where an experiment's headlines come in a review, the machines matrix and the pages' lists:
# its declaration's ``order`` (runner.declarations).
EXPERIMENT_ORDER = tuple(declaration.name for declaration in declarations.ordered())

# The entries kept here; an experiment's own may also come from its declaration
# (Declaration.metrics), after these: catalogue() is both. Which ones a review shows first is each
# declaration's ``headlines``.
ENTRIES: tuple[Metric, ...] = (
    Metric("seconds_per_token", "seconds", "timed", "lower", help="min-of-N seconds per generated token"),
    Metric(
        "reference_loop_seconds",
        "seconds",
        "timed",
        help="the machine's own speed while the case was timed: the median reading of a fixed pure-Python loop "
        "read between its samples (runner.measure.reference)",
    ),
    Metric("val_loss", "nats", "numerical", help="held-out cross-entropy"),
    Metric("parameter_count", "parameters", "exact"),
    *paired("measured_speedup", "no cache over cache, paired, through one impl"),
    *paired("speedup_vs_eager_no_cache", "the eager no-cache path over the impl's cache, paired"),
    Metric("strings_identical", "bool", "exact"),
    Metric("greedy_identical", "bool", "exact"),
    Metric("max_logit_diff", "logit", "numerical", help="largest |logit difference| compared"),
    Metric("counter_matches_closed_form", "bool", "exact"),
    Metric("arithmetic_ratio", "ratio", "exact", help="multiplications without over with the cache"),
    Metric("arithmetic_ratio_causal", "ratio", "exact"),
    Metric("kv_computations_no_cache", "computations", "exact"),
    Metric("cache_bytes", "bytes", "exact"),
    *paired("speedup_vs_fp32", "float32 over the quantized model, paired"),
    Metric("loss_increase", "nats", "numerical", help="held-out loss minus float32's"),
    Metric("weight_bytes", "bytes", "exact"),
    Metric("divergence_position_greedy", "tokens", "exact"),
    Metric("divergence_position_sampled", "tokens", "exact"),
    *paired(
        "speedup_median",
        "plain decoding over speculative, paired (the A/A case: the plain decode against itself); "
        "pair i of every run generates its own seeded text",
        band=("speedup_min", "speedup_max"),
        seeded_pairs=True,
    ),
    Metric("acceptance_rate", "ratio", "exact", help="accepted over proposed, seeded"),
    Metric("chars_per_target_pass", "chars", "exact"),
    Metric("target_passes", "passes", "exact"),
    Metric("mean_accepted_length", "tokens", "exact", help="accepted draft tokens per pass + 1"),
    Metric(
        "distribution_check_passes",
        "bool",
        "sampled",
        help="chi-square over every emitted position, p ≥ 0.001",
    ),
    Metric("check_detects_accept_all", "bool", "sampled", help="the accept-all bug caught"),
    Metric("quad_ratio", "ratio", "exact"),
    Metric("linear_ratio", "ratio", "exact"),
    Metric("crossover_n", "tokens", "exact"),
    Metric("fast_us_per_token", "microseconds", "timed", "lower"),
    Metric("speedup_vs_transformers", "ratio", "timed", "higher"),
    # ---- the A/A cases: calibrate the verdicts, never compared themselves
    *paired("aa_speedup", "one decode paired against itself: the paired method's noise floor"),
    Metric("aa_min_ratio", "ratio", "timed", help="one decode's minimum over its own: the min-of-N noise floor"),
    # ---- training_summary
    Metric("train_loss", "nats", "numerical"),
    Metric("unigram_entropy", "nats", "numerical"),
    # ---- kv_cache
    *exact("bool", "tokens_identical_no_cache_vs_cache", "exceeds_tolerance", "within_tolerance"),
    *exact(
        "multiplications",
        "closed_form_mults_cache",
        "closed_form_mults_no_cache",
        "closed_form_mults_no_cache_causal",
        "counted_mults_cache",
        "counted_mults_no_cache",
        "counted_mults_no_cache_causal",
        "head_closed_form_mults_no_cache",
        "head_counted_mults_no_cache",
        "head_mults_per_token_cache",
        "head_mults_per_token_no_cache",
        "mults_cache",
        "mults_no_cache",
        "mults_no_cache_causal",
        "mults_cache_with_lm_head",
        "mults_no_cache_with_lm_head",
        "mults_per_token",
    ),
    *exact("computations", "kv_computations_cache", "kv_computations_cache_per_layer"),
    *exact("computations", "kv_computations_no_cache_per_layer"),
    *exact("ratio", "arithmetic_ratio_with_lm_head", "arithmetic_ratio_writeup_model", "bytes_ratio_vs_fp32"),
    Metric("cache_bytes{suffix}", "bytes", "exact", help="the cache of fewer K/V heads (_kv_heads_N)"),
    Metric("cache_bytes_allocated", "bytes", "exact"),
    Metric("cache_elements", "elements", "exact"),
    Metric("cache_elements{suffix}", "elements", "exact"),
    Metric("cache_to_weight_ratio", "ratio", "exact"),
    Metric("cache_to_weight_ratio{suffix}", "ratio", "exact"),
    Metric("last_logit_diff", "logit", "numerical"),
    Metric("top2_margin", "logit", "numerical"),
    Metric("top2_margin_step", "tokens", "exact"),
    Metric("reference_max_output_diff", "value", "numerical"),
    *timed(
        "seconds",
        "seconds_cache",
        "seconds_no_cache",
        "seconds_eager_no_cache",
        "seconds_per_token_cache",
        "prefill_seconds",
        "decode_seconds_per_token",
    ),
    Metric("min_ratio_speedup", "ratio", "timed", "higher", help="the write-ups' ratio of minima"),
    Metric(
        "prefill_to_decode_ratio",
        "ratio",
        "timed",
        help="median first-token seconds over median decode seconds per token"
        " (runs before 2026-12-02: median of per-round ratios)",
    ),
    Metric("received_fraction", "ratio", "timed", "higher", help="measured speedup over the arithmetic ratio"),
    Metric("received_fraction_causal", "ratio", "timed", "higher"),
    Metric("slope_{mode}", "exponent", "fitted", help="time ∝ n^slope, least squares on log–log axes"),
    Metric("fit_scale_{mode}", "seconds", "fitted"),
    Metric("max_fit_error_{mode}", "ratio", "fitted"),
    # ---- overhead
    Metric("overhead_seconds_per_token", "seconds", "fitted", help="a of seconds = a + b·mults"),
    Metric("seconds_per_mult", "seconds", "fitted", help="b of seconds = a + b·mults"),
    Metric("max_fit_error", "ratio", "fitted"),
    Metric("widths_fitted", "count", "exact"),
    # ---- quantization
    Metric("weight_bytes_fp32", "bytes", "exact"),
    Metric("seconds_per_token_fp32", "seconds", "timed", "lower"),
    # ---- speculative: its own entries are its declaration's (runner.experiments.speculative_metrics)
    # ---- context_cost
    *exact("pairs", "append_pairs", "causal_pairs", "generate_pairs", "wasted_pairs"),
    *exact("multiplications", "linear_mults", "quad_mults", "total_mults", "per_position_mults_counted"),
    Metric("max_context_for_bytes", "tokens", "exact"),
    Metric("score_bytes", "bytes", "exact"),
    # ---- roofline placement of every timed decode (runner.experiments.parts.roofline_placement;
    # kv_cache adds a _no_cache copy)
    *(
        Metric(name + suffix, unit, kind, help=text)
        for suffix in ("", "_no_cache")
        for name, unit, kind, text in (
            (
                "bytes_per_token",
                "bytes",
                "exact",
                "weights at stored precision, K/V and activations moved, counted",
            ),
            ("flops_per_token", "flops", "exact", "multiply-adds × 2, counted from the shape"),
            ("working_set_bytes", "bytes", "exact", "what one step touches, counted"),
            ("cache_level", "level", "predicted", "the cache level (1-4, 4 = DRAM) that holds the working set here"),
            ("achieved_bytes_per_second", "bytes/second", "timed", "bytes per token over the measured time"),
            ("achieved_flops_per_second", "flops/second", "timed", "flops per token over the measured time"),
            ("roof_fraction", "ratio", "timed", "roofline time over the measured time"),
            ("regime", "regime", "predicted", "0 memory-, 1 compute-, 2 overhead-bound"),
            ("roofline_predicted_seconds_per_token", "seconds", "predicted", "from the roof and counts, before timing"),
            ("roofline_prediction_error", "ratio", "predicted", "predicted over measured, minus one"),
            (
                "roofline_prediction_withheld",
                "reason",
                "predicted",
                "no prediction stored: 0 an eager step with no overhead fit yet, 1 an eager pass of several positions, "
                "2 the overhead fit misses its own points by more than 25%",
            ),
        )
    ),
    Metric("roofline_predicted_verify_cost_ratio", "ratio", "predicted"),
    Metric("roofline_verify_cost_ratio_error", "ratio", "predicted"),
    Metric("roofline_predicted_speedup", "ratio", "predicted"),
    Metric("roofline_speedup_error", "ratio", "predicted"),
    Metric("roofline_verify_regime", "regime", "predicted"),
    Metric("roofline_break_even_acceptance", "ratio", "predicted"),
    Metric("roofline_step_seconds", "seconds", "predicted", help="a plain step on the roof, overhead added"),
    Metric("roofline_verify_seconds", "seconds", "predicted", help="a k + 1-position verification on the roof"),
    Metric(
        "roofline_draft_call_seconds",
        "seconds",
        "fitted",
        help="a proposal's price: its pass on the roof and its fixed part (a whole one-proposal call in runs "
        "that timed no draft turn, so larger there)",
    ),
    Metric("roofline_draft_fixed_seconds", "seconds", "fitted", help="a proposal's time beyond its pass's roof price"),
    Metric(
        "roofline_draft_turn_fixed_seconds",
        "seconds",
        "fitted",
        help="a draft turn's fixed part, paid once a pass whatever its proposals (draft_call_us, draft_turn_us)",
    ),
    Metric(
        "roofline_cache_refill_seconds",
        "seconds",
        "predicted",
        help="a pass's verification and first draft call priced beside the other model's working set, "
        "beyond their own prices",
    ),
    Metric(
        "roofline_loop_overhead_seconds",
        "seconds",
        "fitted",
        help="the loop's time per pass beyond its roof-priced verification, draft turn and cache refill",
    ),
    Metric(
        "roofline_loop_compiled",
        "bool",
        "exact",
        help=(
            "the loop ran in one C++ call (fast target, a compiled model draft or a table draft): its overhead is "
            "fitted on such cases only"
        ),
    ),
    Metric(
        "roofline_loop_overhead_fit_seconds",
        "seconds",
        "fitted",
        help="the run's earlier cases' loop overhead (a Python loop's: its schedule's first), their median weighted "
        "by 1 / pass²: what the speedup prediction adds per pass",
    ),
    Metric(
        "roofline_speculative_withheld",
        "reason",
        "predicted",
        help="no roofline speedup: 0 an eager target, 1 no earlier case of the impl to fit the loop overhead on",
    ),
    # ---- a local Hugging Face checkpoint's peers (runner.experiments.parts.hf_peer)
    Metric("seconds_transformers_cache", "seconds", "timed", "lower"),
    *paired("speedup_vs_transformers_cache", "transformers' own cached generate over decodelab's impl, paired"),
    Metric("transformers_tokens_identical", "bool", "exact"),
    Metric("hf_assisted_seconds", "seconds", "timed", "lower"),
    *paired("speedup_vs_hf_assisted", "Hugging Face assisted generation over this loop, paired"),
    Metric("hf_assisted_greedy_identical", "bool", "exact"),
    # ---- bench (each benchmark script's name=value lines; cli.bench)
    Metric("benchmark_seconds", "seconds", "timed", "lower"),
)


def catalogue() -> tuple[Metric, ...]:
    """Every entry: this file's, then each declared experiment's own, in their order."""
    return _index(declarations.ordered()).entries


@dataclass(frozen=True)
class _Index:
    entries: tuple[Metric, ...]
    by_name: dict[str, Metric]
    families: list[tuple[re.Pattern[str], Metric]]
    renamed: dict[str, str]


@functools.lru_cache(maxsize=4)
def _index(declared: tuple[Declaration, ...]) -> _Index:
    """The catalogue's lookups, built once per set of declarations (a test may declare one more)."""
    entries = ENTRIES + tuple(metric for declaration in declared for metric in declaration.metrics)
    by_name: dict[str, Metric] = {}
    families: list[tuple[re.Pattern[str], Metric]] = []
    for metric in entries:
        if metric.kind not in KINDS:
            raise ValueError(f"metric {metric.name}: kind {metric.kind!r} is not one of {', '.join(KINDS)}")
        if "{" in metric.name:
            pattern = re.sub(r"\\\{[a-z_]+\\\}", "[a-z0-9_]+", re.escape(metric.name))
            families.append((re.compile(pattern + "$"), metric))
        elif metric.name in by_name:
            raise ValueError(f"metric {metric.name}: in the catalogue twice (each name has one entry)")
        else:
            by_name[metric.name] = metric
    renamed = {old: metric.name for metric in entries for old in metric.old_names}
    return _Index(entries, by_name, families, renamed)


# Old name → current name: older runs keep the names they were recorded under.
RENAMED_METRICS = _index(declarations.ordered()).renamed


@dataclass(frozen=True)
class Retired:
    """A name older runs recorded whose figure came to mislead: where its case also recorded
    ``replacement`` the read path (store.compatibility) drops it, elsewhere it is read as
    ``replacement`` (what it meant before it misled). The store and an export keep it as recorded."""

    replacement: str
    why: str


RETIRED_METRICS = {
    "a_priori_regret": Retired(
        "a_priori_regret_measured",
        "set to 0 inside the noise band in runs that also recorded a_priori_regret_measured (dropped there); "
        "the measured regret itself in the runs before them (read as a_priori_regret_measured)",
    ),
}


def lookup(name: str) -> Metric | None:
    """The catalogue's entry for a metric name (current or old), None for an unknown one."""
    index = _index(declarations.ordered())
    name = index.renamed.get(name, name)
    found = index.by_name.get(name)
    if found is not None:
        return found
    return next((metric for pattern, metric in index.families if pattern.match(name)), None)


# The kind of a metric the catalogue does not know (a benchmark's own line, a newer run's), by unit.
COUNT_UNITS = frozenset(
    {"multiplications", "pairs", "tokens", "passes", "bytes", "bool", "chars", "parameters", "count"}
    | {"computations", "elements", "calls"}
)
FLOATING_UNITS = frozenset({"probability", "nats", "logit", "value"})


def has_seeded_pairs(name: str) -> bool:
    """Whether pair i of the metric's samples times the same seeded workload in every run
    (Metric.seeded_pairs)."""
    entry = lookup(name)
    return entry is not None and entry.seeded_pairs


def kind_of(name: str, unit: str) -> str:
    """A metric's kind; an unknown one's from its unit: counts exact, losses and logits
    numerical, anything else (seconds, ratios) timed."""
    metric = lookup(name)
    if metric is not None:
        return metric.kind
    return "exact" if unit in COUNT_UNITS else "numerical" if unit in FLOATING_UNITS else "timed"


def is_deterministic(name: str, unit: str) -> bool:
    """Whether the metric must reproduce in a second identical run on one machine."""
    return kind_of(name, unit) in DETERMINISTIC_KINDS


def headlines() -> tuple[tuple[str, Metric], ...]:
    """(experiment, metric) of every headline: the experiments in their declarations' order, each
    one's in its declaration's ``headlines`` order. A headline the catalogue lacks is an error, not
    a row quietly missing from every review."""
    found: list[tuple[str, Metric]] = []
    for declaration in declarations.ordered():
        for name in declaration.headlines:
            metric = lookup(name)
            if metric is None:
                raise ValueError(f"experiment {declaration.name}: headline {name!r} is not in the metric catalogue")
            found.append((declaration.name, metric))
    return tuple(found)


def band_of(name: str) -> tuple[str, str]:
    """The (low, high) metric names that band ``name``."""
    metric = lookup(name)
    if metric is not None and metric.band is not None:
        return metric.band
    return name + BAND_SUFFIXES[0], name + BAND_SUFFIXES[1]
