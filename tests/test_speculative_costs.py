"""The a-priori prediction's parts: α from distributions, expected characters per pass, the dry
run along held-out text, and the cost sessions that replay passes."""

from __future__ import annotations

import pytest
import torch

from runner.cost.speculative import expected_chars_per_pass
from runner.decoding.drafts import BigramDraft, ModelDraft
from runner.decoding.speculative import speculative_decode
from runner.experiments.speculative_costs import (
    CostSession,
    alpha_a_priori,
    dry_run_passes,
    held_out_windows,
    passes_of_run,
)
from runner.measure.timing import Harness
from runner.model.gpt import CharGPT
from tests.shared_parts import VOCAB, peaked_target


@pytest.fixture(scope="module")
def target() -> CharGPT:
    return peaked_target()


def test_expected_chars_per_pass_is_the_geometric_sum() -> None:
    assert expected_chars_per_pass(0.0, 4) == 1.0
    assert expected_chars_per_pass(1.0, 4) == 5.0
    assert expected_chars_per_pass(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_alpha_is_one_for_the_target_itself_and_matches_a_direct_overlap(target: CharGPT) -> None:
    windows = held_out_windows(torch.arange(300) % VOCAB, target.config.context_length)
    assert alpha_a_priori(target, ModelDraft(target, "itself"), windows, 1.0) == pytest.approx(1.0, abs=1e-5)
    bigram = BigramDraft(torch.randint(0, VOCAB, (400,), generator=torch.Generator().manual_seed(1)), VOCAB)
    alpha = alpha_a_priori(target, bigram, windows, 1.0)
    with torch.inference_mode():
        p = torch.cat([torch.softmax(target(torch.tensor([window]))[0], dim=-1) for window in windows])
    q = torch.cat([bigram.distributions(window, 1.0) for window in windows])
    assert 0.0 < alpha < 1.0
    assert alpha == pytest.approx(float(torch.minimum(p, q).sum(dim=-1).mean()), abs=1e-6)
    # Greedy: α is the share of positions where the two argmaxes agree.
    greedy = alpha_a_priori(target, bigram, windows, 0.0)
    assert greedy == pytest.approx(float((p.argmax(dim=-1) == q.argmax(dim=-1)).double().mean()))


def test_a_dry_run_keeps_proposals_while_they_match_the_text(target: CharGPT) -> None:
    text = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4] * 3
    itself = ModelDraft(target, "itself")
    # The target's own greedy continuation is kept whole: k + 1 characters a pass.
    from runner.decoding.decode import generate

    greedy_text = [3, 1, 4] + generate(target, [3, 1, 4], 30, temperature=0.0).tokens
    passes = dry_run_passes(itself, greedy_text, 3, 4, 0.0, seed=0, count=5)
    assert [accepted for accepted, _, _ in passes] == [4] * 5
    assert [(begin, end) for _, begin, end in passes][:2] == [(3, 8), (8, 13)]
    passes = dry_run_passes(itself, text, 3, 4, 0.0, seed=0, count=50)
    assert all(begin < end == begin + accepted + 1 for accepted, begin, end in passes)
    assert all(first[2] == second[1] for first, second in zip(passes, passes[1:], strict=False))


def test_a_cost_session_replays_the_loops_passes(target: CharGPT) -> None:
    draft = ModelDraft(target, "itself")
    run = speculative_decode(target, draft, 3, [1, 2], 40, temperature=1.0, seed=5)
    passes = passes_of_run(run, 2)
    assert passes[-1][2] >= 42 and passes[0][1] == 2
    session = CostSession(target, "static", draft, 3, 1.0, [1, 2] + run.tokens, passes, seed=5, harness=Harness())
    costs = session()
    assert costs.draft_turn_seconds > 0 and costs.verify_seconds > 0
    with pytest.raises(ValueError, match="at least one pass"):
        CostSession(target, "static", draft, 3, 1.0, [1, 2], [], seed=5, harness=Harness())
