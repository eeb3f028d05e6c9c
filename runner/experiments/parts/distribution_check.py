"""Does speculative sampling keep the target's distribution? A check with stated power.

From one fixed context, ``samples`` passes run through the draft's real proposal path (``start``
and ``propose``, its own sampler, the case's temperature) and the production verification of the
impl (``runner.decoding.speculative.verify``: Python's accept rule for ``static``, the C++ one for
``fast``). Every token a pass emits, at positions 1..k and the bonus, is due to follow the
target's distribution given the tokens before it in that pass; the target's distribution there is
known (its pass over the context and the emitted prefix). So the verdict is one Pearson
chi-square test (scipy) over (position, token) bins, the expected count of each the sum of the
target's probabilities over the passes that reached that position, characters expected fewer
than MIN_EXPECTED_PER_BIN times pooled into one bin per position.

What a pass rules out, per position (``reach``): the test is one joint statistic, so each
emitted position has its own reach, from the passes that reached it. At a position, the smallest
total variation the joint test detects with POWER by the noncentral approximation (the least
favourable deviation of a TV moves it between two halves of the bins' mass, chi-square divergence
4·TV², noncentrality 4·n·TV²), the share of its probability pooled into the rare bin (a deviation
among those characters moves no bin and is invisible, up to that share), and the power a
simulation of the same test at that TV reached. The power statement stands only where the
simulation backs it (``PositionReach.backed``); ``detectable_tv`` is the first position's.

Controls: the same proposals decided by deliberately broken rules (``RULE_VARIANTS``) through the
same path; each one's ``detected`` and its effect (the TV of what it emits, exact at the first
position, for the bonus variant the bonus position's TV scaled to the full sample count) say
whether the check catches what it should: a variant is due (``must_detect``) where its effect
exceeds ``detectable_tv`` and the power statement at its position is backed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from runner.decoding.accept_rule import RULE_VARIANTS, probabilities
from runner.decoding.decode import inverse_cdf, uniforms
from runner.decoding.speculative import Draft, TargetPass, target_pass, verify
from runner.experiments.parts.distribution_power import (
    MIN_EXPECTED_PER_BIN,
    SIGNIFICANCE,
    PositionReach,
    reach,
)
from runner.model.gpt import CharGPT, KVCache

NOISE_CONFIDENCE = 0.999
BUG_VARIANTS = RULE_VARIANTS[1:]
ROWS_PER_BATCH = 512  # prefixes per target forward when computing the expected counts


def total_variation(first: torch.Tensor, second: torch.Tensor) -> float:
    return 0.5 * float((first.double() - second.double()).abs().sum())


def empirical(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    return torch.bincount(tokens, minlength=vocab_size).double() / len(tokens)


def tv_noise_bounds(p: torch.Tensor, samples: int, confidence: float = NOISE_CONFIDENCE) -> tuple[float, float]:
    """For an empirical distribution of ``samples`` draws from p: an upper bound on the expected
    TV (Jensen: ½ Σ √(p(1−p)/n)), and that plus a McDiarmid deviation, exceeded with probability
    at most 1 − confidence (one draw moves the TV by at most 1/n)."""
    expected = 0.5 * float(torch.sqrt(p.double() * (1 - p.double()) / samples).sum())
    return expected, expected + math.sqrt(math.log(1 / (1 - confidence)) / (2 * samples))


@dataclass(frozen=True)
class ChiSquare:
    statistic: float
    degrees_of_freedom: int
    pvalue: float


def pooled_bins(observed: torch.Tensor, expected: torch.Tensor) -> tuple[list[float], list[float]] | None:
    """One position's bins: the characters expected at least MIN_EXPECTED_PER_BIN times, and one
    bin pooling the rest. None when a character the expectation forbids was observed."""
    if bool((observed[expected <= 0] > 0).any()):
        return None
    common = expected >= MIN_EXPECTED_PER_BIN
    observed_bins, expected_bins = observed[common].tolist(), expected[common].tolist()
    rare_expected = float(expected[~common].sum())
    if rare_expected > 0:
        observed_bins.append(float(observed[~common].sum()))
        expected_bins.append(rare_expected)
    # Rounding leaves the two totals apart by ~1e-12; scipy insists they agree.
    scale = sum(observed_bins) / sum(expected_bins)
    return observed_bins, [value * scale for value in expected_bins]


def chi_square(observed: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> ChiSquare:
    """Pearson's test over every position's pooled bins at once (scipy.stats.chisquare, one degree
    of freedom less per position: each position's total is fixed). A forbidden character is a
    p-value of 0; no freedom at all (one bin per position) a p-value of 1."""
    observed_bins: list[float] = []
    expected_bins: list[float] = []
    positions = 0
    for seen, due in zip(observed, expected, strict=True):
        if float(seen.sum()) == 0:
            continue
        bins = pooled_bins(seen.double(), due.double())
        if bins is None:
            return ChiSquare(math.inf, 0, 0.0)
        observed_bins += bins[0]
        expected_bins += bins[1]
        positions += 1
    freedom = len(observed_bins) - positions
    if freedom < 1:
        return ChiSquare(0.0, 0, 1.0)
    from scipy import stats  # here, not at the top: only a distribution case needs scipy

    result = stats.chisquare(observed_bins, expected_bins, ddof=positions - 1)
    return ChiSquare(float(result.statistic), freedom, float(result.pvalue))


def chi2_pvalue(tokens: torch.Tensor, p: torch.Tensor) -> float:
    """Pearson's chi-square test of ``tokens`` against one distribution p."""
    observed = torch.bincount(tokens, minlength=len(p)).double()
    return chi_square([observed], [p.double() * len(tokens)]).pvalue


def first_position_output(p: torch.Tensor, q: torch.Tensor, variant: str) -> torch.Tensor:
    """What a rule variant emits at the first position, exactly, from target p and draft q (one
    row each; the bonus variant differs only at the bonus position)."""
    p, q = p.double(), q.double()
    if variant == "accept_all":
        return q
    ratio_of = (q / p) if variant == "inverted_ratio" else (p / q)
    keep = torch.where(ratio_of.isnan(), torch.zeros_like(p), ratio_of.clamp(max=1.0))
    kept = q * keep
    rejected = 1.0 - float(kept.sum())
    residual = (p - q).clamp(min=0.0)
    total = float(residual.sum())
    if total <= 0.0:
        return kept + rejected * p
    if variant != "residual_unnormalised":
        return kept + rejected * residual / total
    # The draw is compared with the unscaled cumulative sum: each character keeps its residual
    # mass, the rest of the draws fall through to the argmax.
    correction = residual.clone()
    correction[int(residual.argmax())] += 1.0 - total
    return kept + rejected * correction


@dataclass
class PassSamples:
    """Emitted tokens of every sampled pass, and the target's distribution at each of them."""

    emitted: list[list[int]]
    target_rows: list[torch.Tensor]  # per pass: len(emitted) × vocab

    def counts(self, longest: int, vocab_size: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Observed and expected counts per position 1..longest + 1."""
        observed = [torch.zeros(vocab_size, dtype=torch.float64) for _ in range(longest + 1)]
        expected = [torch.zeros(vocab_size, dtype=torch.float64) for _ in range(longest + 1)]
        for tokens, rows in zip(self.emitted, self.target_rows, strict=True):
            for position, token in enumerate(tokens):
                observed[position][token] += 1
                expected[position] += rows[position]
        return observed, expected


@torch.inference_mode()
def target_rows(
    target: CharGPT, prompt: list[int], emitted: Sequence[list[int]], temperature: float
) -> dict[tuple[int, ...], torch.Tensor]:
    """For each distinct pass (its emitted tokens but the last), the target's distribution before
    each of its tokens (prompt + the pass's earlier tokens): the prompt fed once, its K/V copied
    into a batched cache, and the passes fed as one batch (right padding: a causal model's earlier
    positions do not see it)."""
    longest = max(len(tokens) for tokens in emitted)
    prefixes = sorted({tuple(tokens[:-1]) for tokens in emitted})
    shared = target.new_cache(capacity=len(prompt) + longest)
    if len(prompt) > 1:
        target.forward_cached(torch.tensor([prompt[:-1]], device=target.device), shared)
    rows_of: dict[tuple[int, ...], torch.Tensor] = {}
    for begin in range(0, len(prefixes), ROWS_PER_BATCH):
        chunk = prefixes[begin : begin + ROWS_PER_BATCH]
        cache = target.new_cache(batch_size=len(chunk), capacity=shared.capacity)
        cache.keys[:, :, :, : shared.length] = shared.keys[:, :, :, : shared.length]
        cache.values[:, :, :, : shared.length] = shared.values[:, :, :, : shared.length]
        cache.length = shared.length
        batch = torch.tensor([[prompt[-1], *prefix, *[0] * (longest - 1 - len(prefix))] for prefix in chunk])
        logits = target.forward_cached(batch.to(target.device), cache).float()
        distributions = probabilities(logits, temperature).double().cpu()
        for index, prefix in enumerate(chunk):
            rows_of[prefix] = distributions[index, : len(prefix) + 1]
    return rows_of


class _RememberedPass:
    """The eager target's pass, computed once per distinct input: every rule variant decides the
    same proposals (Python's rule itself runs each time). The compiled target is never wrapped: its
    pass and rule are one C++ call, and that call is what the check must exercise."""

    def __init__(self, run_target: TargetPass) -> None:
        self._run_target = run_target
        self._logits: dict[tuple[int, tuple[int, ...]], torch.Tensor] = {}

    def __call__(self, tokens: list[int], cache: KVCache) -> torch.Tensor:
        key = (cache.length, tuple(tokens))
        if key not in self._logits:
            self._logits[key] = self._run_target(tokens, cache)
            cache.length -= len(tokens)
        cache.length += len(tokens)
        return self._logits[key]


@dataclass(frozen=True)
class VariantResult:
    chi_square: ChiSquare
    effect_tv: float  # what the check must see: TV of the variant's output (0 for the correct rule)

    @property
    def detected(self) -> bool:
        return self.chi_square.pvalue < SIGNIFICANCE


@dataclass(frozen=True)
class CheckResult:
    samples: int
    draft_target_tvd: float
    detectable_tv: float  # the first position's (reach[0]), stated only where reach[0].backed
    tvd: float  # the correct rule's first emitted characters against the target's, by TV
    tvd_direct: float  # direct draws from the target, the same count: sampling noise alone
    tvd_noise_bound: float
    variants: dict[str, VariantResult]
    reach: tuple[PositionReach, ...]  # per emitted position of the correct rule, first to bonus

    @property
    def correct(self) -> VariantResult:
        return self.variants["correct"]

    @property
    def passes(self) -> bool:
        return not self.correct.detected

    def detects(self, variant: str) -> bool:
        return self.variants[variant].detected

    def must_detect(self, variant: str) -> bool:
        """Whether a backed power statement covers this variant's effect: the effect beyond
        ``detectable_tv`` (the bonus variant's scaled to the full sample count), and the simulation
        backing the statement at the position the variant changes (the bonus: the last)."""
        position = self.reach[-1] if variant == "bonus_from_draft" else self.reach[0]
        return position.backed and self.variants[variant].effect_tv > self.detectable_tv


@dataclass
class SampledPasses:
    """What ``samples`` passes emitted under each rule variant, and the draft's rows the check
    compares with: its first row (the same proposals for every pass) and, for the bonus variant,
    the row its bonus token came from in each pass that accepted all k."""

    emitted: dict[str, list[list[int]]]
    bonus_q_rows: list[torch.Tensor]
    q_first: torch.Tensor


def sample_passes(
    run_target: TargetPass,
    cache: KVCache,
    draft: Draft,
    prompt: list[int],
    k: int,
    samples: int,
    temperature: float,
    generator: torch.Generator,
    variants: Sequence[str],
) -> SampledPasses:
    """``samples`` passes of k proposals after ``prompt``, each verified under every variant from
    the committed prompt (``cache`` holds it)."""
    committed = cache.length
    emitted: dict[str, list[list[int]]] = {variant: [] for variant in variants}
    bonus_q_rows: list[torch.Tensor] = []
    q_first: torch.Tensor | None = None
    for _ in range(samples):
        draft.start(prompt)
        # One more than k: the bonus variant draws its bonus token from the draft's next row.
        proposals, q = draft.propose(k + 1, temperature, generator)
        q_first = q[0] if q_first is None else q_first
        for variant in variants:
            cache.length = committed
            q_rows = q if variant == "bonus_from_draft" else q[:k]
            verdict = verify(run_target, cache, prompt[-1], proposals[:k], q_rows, temperature, generator, variant)
            emitted[variant].append(verdict.emitted)
            if variant == "bonus_from_draft" and verdict.accepted == k:
                bonus_q_rows.append(q[k].double().cpu())
    assert q_first is not None
    return SampledPasses(emitted, bonus_q_rows, q_first)


def bonus_effect(sampled: SampledPasses, rows: list[torch.Tensor], k: int, samples: int) -> float:
    """The bonus variant's effect: TV between the draft's and the target's mean rows at the bonus
    position, over the passes that reached it, scaled to the full sample count."""
    emitted = sampled.emitted["bonus_from_draft"]
    bonus_p_rows = [row[k] for tokens, row in zip(emitted, rows, strict=True) if len(tokens) == k + 1]
    if not bonus_p_rows:
        return 0.0
    return total_variation(torch.stack(sampled.bonus_q_rows).mean(0), torch.stack(bonus_p_rows).mean(0)) * math.sqrt(
        len(bonus_p_rows) / samples
    )


def variant_results(
    sampled: SampledPasses,
    rows_of: dict[tuple[int, ...], torch.Tensor],
    p_first: torch.Tensor,
    k: int,
    vocab: int,
    seed: int,
) -> tuple[dict[str, VariantResult], list[PositionReach]]:
    """Each variant's chi-square test of its emitted tokens against the target's distributions and
    the effect it must show, and the first variant's (the correct rule's) reach per position."""
    variants = list(sampled.emitted)
    samples = len(sampled.emitted[variants[0]])
    results: dict[str, VariantResult] = {}
    reached: list[PositionReach] = []
    for variant in variants:
        rows = [rows_of[tuple(tokens[:-1])] for tokens in sampled.emitted[variant]]
        observed, expected = PassSamples(sampled.emitted[variant], rows).counts(k, vocab)
        if variant == variants[0]:
            reached = reach(observed, expected, seed)
        if variant == "bonus_from_draft":
            effect = bonus_effect(sampled, rows, k, samples)
        else:
            effect = total_variation(first_position_output(p_first, sampled.q_first.double().cpu(), variant), p_first)
        results[variant] = VariantResult(chi_square(observed, expected), effect)
    return results, reached


@torch.inference_mode()
def check_passes(
    target: CharGPT,
    impl: str,
    draft: Draft,
    prompt: list[int],
    k: int,
    samples: int,
    temperature: float,
    seed: int,
    variants: Sequence[str] = RULE_VARIANTS,
) -> CheckResult:
    """``samples`` passes of k proposals after ``prompt`` through the draft and the impl's
    verification, under the correct rule and each variant in ``variants`` (the same proposals for
    all), each variant's emitted tokens tested against the target's distributions."""
    if temperature <= 0.0:
        raise ValueError("the distribution check samples (temperature > 0); greedy output is checked for equality")
    run_target: TargetPass = target_pass(target, impl)
    if impl != "fast":
        run_target = _RememberedPass(run_target)
    cache = target.new_cache(capacity=len(prompt) + k + 1)
    if len(prompt) > 1:
        run_target(prompt[:-1], cache)
    generator = torch.Generator().manual_seed(seed)
    sampled = sample_passes(run_target, cache, draft, prompt, k, samples, temperature, generator, variants)
    vocab = target.config.vocab_size
    p_first = (
        probabilities(target(torch.tensor([prompt], device=target.device))[0, -1].float(), temperature).double().cpu()
    )
    every_pass = [tokens for variant in variants for tokens in sampled.emitted[variant]]
    results, reached = variant_results(
        sampled, target_rows(target, prompt, every_pass, temperature), p_first, k, vocab, seed
    )
    first_tokens = torch.tensor([tokens[0] for tokens in sampled.emitted[variants[0]]])
    # Direct draws from the target, as many: the sampling noise alone, for scale.
    cumulative = p_first.cumsum(dim=0).tolist()
    direct = torch.tensor([inverse_cdf(cumulative, u) for u in uniforms(samples, 1.0, generator).tolist()])
    return CheckResult(
        samples=samples,
        draft_target_tvd=total_variation(sampled.q_first.double().cpu(), p_first),
        detectable_tv=reached[0].detectable_tv,
        tvd=total_variation(empirical(first_tokens, vocab), p_first),
        tvd_direct=total_variation(empirical(direct, vocab), p_first),
        tvd_noise_bound=tv_noise_bounds(p_first, samples)[1],
        variants=results,
        reach=tuple(reached),
    )
