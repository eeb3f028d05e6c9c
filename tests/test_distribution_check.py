"""The distribution check can fail: it runs through a draft's real proposal path, a draft that
samples from another distribution than the one it reports is caught, and a draft close to the
target is reported as giving the check no power."""

from __future__ import annotations

import torch

from runner.decode import inverse_cdf, uniforms
from runner.distribution_check import check_first_tokens, chi2_pvalue, tv_noise_bounds

P = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)


class FixedDraft:
    """Proposes from ``sampled`` by inverse CDF (as every draft does) and reports ``reported`` as
    the distribution it drew from: honest when the two are equal."""

    name = "fixed"

    def __init__(self, sampled: torch.Tensor, reported: torch.Tensor | None = None) -> None:
        self.sampled = sampled
        self.reported = sampled if reported is None else reported
        self.starts = 0

    def start(self, prompt: list[int]) -> None:
        self.starts += 1

    def propose(self, k: int, temperature: float, generator: torch.Generator | None) -> tuple[list[int], torch.Tensor]:
        cumulative = self.sampled.cumsum(dim=0).tolist()
        tokens = [inverse_cdf(cumulative, u) for u in uniforms(k, temperature, generator).tolist()]
        return tokens, self.reported.repeat(k, 1)

    def commit(self, accepted: int, emitted: list[int]) -> None: ...

    def distributions(self, tokens: list[int], temperature: float) -> torch.Tensor:
        return self.reported.repeat(len(tokens), 1)


def test_an_honest_bad_draft_passes_and_the_broken_rule_is_caught() -> None:
    q = torch.tensor([0.1, 0.1, 0.2, 0.6], dtype=torch.float64)
    draft = FixedDraft(q)
    check = check_first_tokens(draft, [0], P, 20_000, 1.0, seed=7)
    assert draft.starts == 20_000, "every sample goes through start() and propose()"
    assert check.within_sampling_noise and check.chi2_pvalue > 1e-3
    assert check.detects_broken_rule and check.chi2_pvalue_broken_rule < 1e-12
    assert check.tvd_direct <= check.tvd_noise_bound


def test_a_draft_that_samples_from_what_it_does_not_report_is_caught() -> None:
    # The accept rule corrects towards p only if q is what the proposals came from.
    lying = FixedDraft(sampled=torch.tensor([0.1, 0.1, 0.2, 0.6], dtype=torch.float64), reported=P.clone())
    check = check_first_tokens(lying, [0], P, 20_000, 1.0, seed=7)
    assert not check.within_sampling_noise
    assert check.chi2_pvalue < 1e-12


def test_a_draft_equal_to_the_target_leaves_the_check_without_power() -> None:
    check = check_first_tokens(FixedDraft(P.clone()), [0], P, 5_000, 1.0, seed=3)
    assert check.within_sampling_noise
    assert not check.detects_broken_rule, "accepting everything emits q = p: nothing to catch"


def test_chi_square_pools_rare_characters_and_refuses_forbidden_ones() -> None:
    p = torch.tensor([0.6, 0.3995, 0.0005, 0.0], dtype=torch.float64)
    tokens = torch.tensor([0] * 600 + [1] * 399 + [2])
    assert chi2_pvalue(tokens, p) > 0.5  # the rare character shares a bin; the fit is good
    assert chi2_pvalue(torch.tensor([0] * 999 + [3]), p) == 0.0, "a character p forbids"
    assert chi2_pvalue(torch.tensor([1] * 1000), p) < 1e-12


def test_the_noise_bound_shrinks_with_samples() -> None:
    small, large = tv_noise_bounds(P, 1_000)[1], tv_noise_bounds(P, 100_000)[1]
    assert large < small / 5
