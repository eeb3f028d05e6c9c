"""Does speculative sampling keep the target's distribution? A check that can fail.

From one fixed context, ``samples`` first characters are drawn through the draft's real
proposal path (``start`` + ``propose``, its own sampler, the case's temperature) and decided by
the loop's accept rule; their empirical distribution is compared with the target's by total
variation (against a bound on sampling noise) and by a chi-square test. The same proposals are
also decided by a deliberately broken rule that accepts every proposal, which emits the draft's
distribution instead of the target's: where that still passes, the check has no power for this
draft (it is within sampling noise of the target already) and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from scipy import stats

from runner.decode import inverse_cdf, uniforms
from runner.speculative import Draft, accept_rule

NOISE_CONFIDENCE = 0.999
# Chi-square needs about five expected counts per bin: rarer characters share one bin.
MIN_EXPECTED_PER_BIN = 5.0


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


def chi2_pvalue(tokens: torch.Tensor, p: torch.Tensor) -> float:
    """Pearson's chi-square test of ``tokens`` against p (scipy), the characters expected fewer
    than MIN_EXPECTED_PER_BIN times pooled into one bin. A character p forbids is a p-value of 0."""
    observed = torch.bincount(tokens, minlength=len(p)).double()
    expected = p.double() * len(tokens)
    if bool((observed[expected == 0] > 0).any()):
        return 0.0
    common = expected >= MIN_EXPECTED_PER_BIN
    observed_bins = observed[common].tolist()
    expected_bins = expected[common].tolist()
    rare_expected = float(expected[~common].sum())
    if rare_expected > 0:
        observed_bins.append(float(observed[~common].sum()))
        expected_bins.append(rare_expected)
    if len(expected_bins) < 2:
        return 1.0  # one bin holds everything: nothing can differ
    # Rounding leaves the two totals apart by ~1e-12; scipy insists they agree.
    scale = sum(observed_bins) / sum(expected_bins)
    return float(stats.chisquare(observed_bins, [value * scale for value in expected_bins]).pvalue)


@dataclass(frozen=True)
class CheckResult:
    tvd: float
    tvd_direct: float
    tvd_broken_rule: float
    tvd_expected_bound: float
    tvd_noise_bound: float
    chi2_pvalue: float
    chi2_pvalue_direct: float
    chi2_pvalue_broken_rule: float
    draft_target_tvd: float

    @property
    def within_sampling_noise(self) -> bool:
        return self.tvd <= self.tvd_noise_bound

    @property
    def detects_broken_rule(self) -> bool:
        """Whether the check would have caught an accept rule that keeps every proposal."""
        return self.tvd_broken_rule > self.tvd_noise_bound


def check_first_tokens(
    draft: Draft, prompt: list[int], p: torch.Tensor, samples: int, temperature: float, seed: int
) -> CheckResult:
    """``samples`` first characters after ``prompt`` through the draft and the accept rule, the
    broken rule on the same proposals, and ``samples`` direct draws from p (the target's own
    inverse-CDF sampler) as the baseline of what sampling noise alone looks like."""
    generator = torch.Generator().manual_seed(seed)
    p_row = p.double().tolist()
    emitted, proposed = [], []
    q_first: torch.Tensor | None = None
    for _ in range(samples):
        draft.start(prompt)
        proposals, q = draft.propose(1, temperature, generator)
        u, draw = uniforms(2, temperature, generator).tolist()  # as the loop's verify draws them
        emitted.append(accept_rule(p_row, q[0].double().tolist(), proposals[0], u, draw)[1])
        proposed.append(proposals[0])
        q_first = q[0] if q_first is None else q_first
    assert q_first is not None
    cumulative = p.double().cumsum(dim=0).tolist()
    direct = [inverse_cdf(cumulative, u) for u in uniforms(samples, 1.0, generator).tolist()]
    emitted_tokens, proposed_tokens, direct_tokens = (torch.tensor(t) for t in (emitted, proposed, direct))
    vocab = len(p)
    expected, high = tv_noise_bounds(p, samples)
    return CheckResult(
        tvd=total_variation(empirical(emitted_tokens, vocab), p),
        tvd_direct=total_variation(empirical(direct_tokens, vocab), p),
        tvd_broken_rule=total_variation(empirical(proposed_tokens, vocab), p),
        tvd_expected_bound=expected,
        tvd_noise_bound=high,
        chi2_pvalue=chi2_pvalue(emitted_tokens, p),
        chi2_pvalue_direct=chi2_pvalue(direct_tokens, p),
        chi2_pvalue_broken_rule=chi2_pvalue(proposed_tokens, p),
        draft_target_tvd=total_variation(q_first.double().cpu(), p),
    )
