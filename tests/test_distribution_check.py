"""The distribution check has the power it states: the detectable TV against a simulation, each
bug variant of the accept rule caught through each impl's production verification for a far
draft, the correct rule passing, and a near draft left within the stated limit."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from scipy import stats

from runner.decoding.accept_rule import accept_rule
from runner.decoding.decode import inverse_cdf, uniforms
from runner.decoding.drafts import BigramDraft, ModelDraft
from runner.experiments.parts.distribution_check import (
    BUG_VARIANTS,
    SIGNIFICANCE,
    check_passes,
    chi2_pvalue,
    chi_square,
    first_position_output,
    target_rows,
    tv_noise_bounds,
)
from runner.experiments.parts.distribution_power import (
    POWER,
    SIMULATION_SLACK,
    detectable_tv,
    least_favourable_shift,
    reach,
    simulated_power,
)
from runner.model.gpt import CharGPT
from runner.model.quantize import quantize_model
from tests.shared_parts import VOCAB, peaked_target

P = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
PROMPT = [2, 7, 1]


@pytest.fixture(scope="module")
def target() -> CharGPT:
    return peaked_target()


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """The checks run thousands of tiny passes: one thread, as the runner's presets time them (on
    a busy machine a second torch thread makes each small op wait for it)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_the_detectable_tv_is_detected_with_80_percent_power_in_simulation() -> None:
    """The least favourable deviation of TV δ moves δ between two halves of the mass; at the
    computed δ, simulated samples are caught about 80% of the time (and far less at δ/2)."""
    p = np.full(10, 0.1)
    samples, trials = 4000, 600
    delta = detectable_tv(samples, degrees_of_freedom=len(p) - 1)
    assert 0.01 < delta < 0.1
    generator = np.random.default_rng(5)

    def detection_rate(tv: float) -> float:
        shifted = p + np.where(np.arange(10) < 5, tv / 5, -tv / 5)  # TV = tv exactly
        caught = 0
        for _ in range(trials):
            counts = generator.multinomial(samples, shifted)
            caught += stats.chisquare(counts, p * samples).pvalue < SIGNIFICANCE
        return caught / trials

    assert detection_rate(delta) == pytest.approx(0.8, abs=0.06)
    assert detection_rate(delta / 2) < 0.2


def test_chi_square_pools_rare_characters_and_refuses_forbidden_ones() -> None:
    p = torch.tensor([0.6, 0.3995, 0.0005, 0.0], dtype=torch.float64)
    tokens = torch.tensor([0] * 600 + [1] * 399 + [2])
    assert chi2_pvalue(tokens, p) > 0.5  # the rare character shares a bin; the fit is good
    assert chi2_pvalue(torch.tensor([0] * 999 + [3]), p) == 0.0, "a character p forbids"
    assert chi2_pvalue(torch.tensor([1] * 1000), p) < 1e-12
    # Positions test together: one degree of freedom per bin, less one per position.
    observed = [torch.tensor([50.0, 50.0, 0.0]), torch.tensor([30.0, 30.0, 40.0])]
    expected = [torch.tensor([50.0, 50.0, 0.0]), torch.tensor([30.0, 30.0, 40.0])]
    both = chi_square(observed, expected)
    assert both.degrees_of_freedom == 1 + 2 and both.pvalue == pytest.approx(1.0)


def test_the_bug_variants_emit_what_their_closed_forms_say() -> None:
    """first_position_output, which states each variant's effect, against the rule itself."""
    q = torch.tensor([0.1, 0.1, 0.2, 0.6], dtype=torch.float64)
    generator = torch.Generator().manual_seed(3)
    draws = 40_000
    for variant in ("correct", "accept_all", "inverted_ratio", "residual_unnormalised"):
        expected = first_position_output(P, q, variant)
        emitted = []
        for u, proposal_draw, draw in uniforms(3 * draws, 1.0, generator).view(-1, 3).tolist():
            proposal = inverse_cdf(q.cumsum(0).tolist(), proposal_draw)
            emitted.append(accept_rule(P.tolist(), q.tolist(), proposal, u, draw, variant)[1])
        counts = torch.bincount(torch.tensor(emitted), minlength=4).double()
        assert chi2_pvalue(torch.tensor(emitted), expected) > 1e-3, variant
        assert float(expected.sum()) == pytest.approx(1.0) and counts.sum() == draws
    assert torch.allclose(first_position_output(P, q, "correct"), P)


@pytest.mark.parametrize("impl", ["static", "fast"])
def test_every_bug_variant_is_caught_for_a_far_draft_and_the_correct_rule_passes(target: CharGPT, impl: str) -> None:
    tokens = torch.randint(0, VOCAB, (400,), generator=torch.Generator().manual_seed(1))
    far = BigramDraft(tokens, VOCAB)  # counted from random text: far from the peaked target
    check = check_passes(target, impl, far, PROMPT, 2, 3000, 1.0, seed=4)
    assert check.passes, f"the correct rule: p = {check.correct.chi_square.pvalue}"
    assert check.draft_target_tvd > check.detectable_tv
    for variant in BUG_VARIANTS:
        assert check.detects(variant), variant
    # accept_all emits the draft's distribution: far beyond what the check states it detects.
    assert check.must_detect("accept_all")


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_near_draft_stays_within_the_stated_limit(target: CharGPT, temperature: float) -> None:
    near = ModelDraft(quantize_model(target, "int8", kernel="fast_int8"), "fast_int8", fast=True)
    check = check_passes(target, "fast", near, PROMPT, 2, 1500, temperature, seed=2)
    assert check.passes
    assert check.draft_target_tvd < check.detectable_tv
    # Accepting everything emits the draft's distribution: within the limit the check states,
    # so it is not due to be caught, and the record says so rather than claiming power.
    assert not check.must_detect("accept_all")
    assert check.variants["accept_all"].effect_tv == pytest.approx(check.draft_target_tvd)


class LyingDraft:
    """Proposes as ``draft`` does but reports the target's own distribution as the one it drew
    from: the accept rule then corrects towards nothing and the output follows the draft."""

    name = "lying"

    def __init__(self, draft: BigramDraft, target: CharGPT) -> None:
        self.draft, self.target = draft, target

    def start(self, prompt: list[int]) -> None:
        self.prompt = list(prompt)
        self.draft.start(prompt)

    def propose(
        self, k: int, temperature: float, generator: torch.Generator | None, p_min: float = 0.0
    ) -> tuple[list[int], torch.Tensor]:
        tokens, _ = self.draft.propose(k, temperature, generator)
        with torch.inference_mode():
            logits = self.target(torch.tensor([self.prompt + tokens]))[0, len(self.prompt) - 1 : -1]
        return tokens, torch.softmax(logits / temperature, dim=-1)

    def commit(self, accepted: int, emitted: list[int]) -> None: ...

    def distributions(self, tokens: list[int], temperature: float) -> torch.Tensor:
        raise NotImplementedError


def test_a_draft_that_samples_from_what_it_does_not_report_is_caught(target: CharGPT) -> None:
    tokens = torch.randint(0, VOCAB, (400,), generator=torch.Generator().manual_seed(1))
    lying = LyingDraft(BigramDraft(tokens, VOCAB), target)
    check = check_passes(target, "fast", lying, PROMPT, 2, 1000, 1.0, seed=4, variants=("correct",))
    assert not check.passes and check.correct.chi_square.pvalue < 1e-12


def test_the_expected_rows_are_the_targets_distributions_after_each_prefix(target: CharGPT) -> None:
    emitted = [[5], [5, 2, 9], [1, 4], [5, 2, 3]]
    rows = target_rows(target, PROMPT, emitted, 0.7)
    assert set(rows) == {(), (5, 2), (1,)}, "one entry per distinct pass, its last token left out"
    for prefix, got in rows.items():
        with torch.inference_mode():
            logits = target(torch.tensor([PROMPT + list(prefix)]))[0, len(PROMPT) - 1 :]
        assert torch.allclose(got, torch.softmax(logits.double() / 0.7, dim=-1), atol=1e-5)


def test_the_noise_bound_shrinks_with_samples() -> None:
    small, large = tv_noise_bounds(P, 1_000)[1], tv_noise_bounds(P, 100_000)[1]
    assert large < small / 5


def test_greedy_is_refused(target: CharGPT) -> None:
    with pytest.raises(ValueError, match="temperature > 0"):
        check_passes(target, "static", ModelDraft(target, "itself"), PROMPT, 2, 10, 0.0, seed=0)


def test_the_least_favourable_shift_moves_exactly_the_tv_between_two_halves() -> None:
    shares = np.array([0.4, 0.3, 0.2, 0.1])
    shifted = least_favourable_shift(shares, 0.05)
    assert shifted is not None
    assert shifted.sum() == pytest.approx(1.0) and 0.5 * np.abs(shifted - shares).sum() == pytest.approx(0.05)
    assert least_favourable_shift(shares, 0.6) is None, "the lighter half holds less than the TV"


def test_the_power_statement_stands_where_the_simulation_backs_it_and_not_where_it_cannot() -> None:
    shares = [np.full(10, 0.1)]
    tv = detectable_tv(4000, degrees_of_freedom=9)
    assert simulated_power(shares, [4000], 0, tv, seed=3) >= POWER - SIMULATION_SLACK
    assert simulated_power(shares, [4000], 0, tv / 2, seed=3) < 0.2
    # Two positions, one joint test: the second, reached by a tenth of the passes, sees a TV about
    # √10 times as large, and the simulation of the joint statistic backs that too.
    observed = [torch.full((10,), 400.0), torch.full((10,), 40.0)]
    expected = [torch.full((10,), 400.0), torch.full((10,), 40.0)]
    first, second = reach(observed, expected, seed=1)
    assert (first.position, first.samples, second.position, second.samples) == (1, 4000, 2, 400)
    assert second.detectable_tv == pytest.approx(first.detectable_tv * 10**0.5, rel=0.01)
    assert first.backed and second.backed
    # Twelve passes: no deviation of the TV the approximation names fits between the halves.
    few = reach([torch.full((4,), 3.0)], [torch.full((4,), 3.0)], seed=1)[0]
    assert np.isnan(few.simulated_power) and not few.backed


def test_a_deviation_among_the_pooled_rare_characters_is_invisible_up_to_their_share() -> None:
    # Two common characters and twenty rare ones expected once each: 20 of 820 pooled.
    expected = torch.tensor([400.0, 400.0, *[1.0] * 20])
    moved = torch.tensor([400.0, 400.0, 20.0, *[0.0] * 19])  # every rare draw on one character
    (position,) = reach([expected], [expected], seed=1)
    assert position.pooled_share == pytest.approx(20 / 820)
    tv = 0.5 * float((moved - expected).abs().sum()) / 820
    assert tv == pytest.approx(19 / 820) and tv <= position.pooled_share
    assert chi_square([moved], [expected]).pvalue == pytest.approx(1.0), "the pooled bin's total is unchanged"
    between = torch.tensor([419.0, 381.0, *[1.0] * 20])  # a smaller TV across the common bins
    assert chi_square([between], [expected]).pvalue < chi_square([moved], [expected]).pvalue


def test_a_real_check_states_its_reach_per_position(target: CharGPT) -> None:
    tokens = torch.randint(0, VOCAB, (400,), generator=torch.Generator().manual_seed(1))
    check = check_passes(target, "static", BigramDraft(tokens, VOCAB), PROMPT, 2, 1500, 1.0, seed=4)
    positions = [position.position for position in check.reach]
    assert positions == list(range(1, len(positions) + 1)) and 1 <= len(positions) <= 3
    assert check.reach[0].samples == 1500 and check.detectable_tv == check.reach[0].detectable_tv
    samples = [position.samples for position in check.reach]
    assert samples == sorted(samples, reverse=True), "later positions are reached by fewer passes"
    for position in check.reach:
        assert 0.0 <= position.pooled_share < 1.0
        assert position.backed == (position.simulated_power >= POWER - SIMULATION_SLACK)
    # A variant is due only under a backed statement at its position.
    for variant in BUG_VARIANTS:
        at = check.reach[-1] if variant == "bonus_from_draft" else check.reach[0]
        assert check.must_detect(variant) == (at.backed and check.variants[variant].effect_tv > check.detectable_tv)
