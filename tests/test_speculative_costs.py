"""The a-priori prediction's parts: α from distributions, expected characters per pass, the
passes a cost session replays, the cost sessions, and the rounds that set them beside a step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from runner.cost.speculative import expected_chars_per_pass
from runner.cost.speculative_prediction import calibrate, simulated_passes
from runner.decoding import fast_loop
from runner.decoding.drafts import BigramDraft, ModelDraft
from runner.decoding.fast import decoder_for
from runner.decoding.fast_library import entry_point_seconds
from runner.decoding.fast_loop import LoopState
from runner.decoding.speculative import Draft, speculative_decode
from runner.experiments.parts import speculative_costs
from runner.experiments.parts.speculative_a_priori import A_PRIORI_COST_SESSIONS, cost_rounds
from runner.experiments.parts.speculative_costs import (
    COST_CALLS,
    CostSession,
    PassCosts,
    centred_passes,
    held_out_windows,
    passes_of_run,
)
from runner.measure.timing import Harness, MinOfN
from runner.model.gpt import CharGPT
from runner.model.quantize import quantize_model
from tests.shared_parts import VOCAB, peaked_target


@pytest.fixture(scope="module")
def target() -> CharGPT:
    return peaked_target()


def test_expected_chars_per_pass_is_the_geometric_sum() -> None:
    assert expected_chars_per_pass(0.0, 4) == 1.0
    assert expected_chars_per_pass(1.0, 4) == 5.0
    assert expected_chars_per_pass(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def alpha_a_priori(target: CharGPT, draft: Draft, windows: list[list[int]], temperature: float) -> float:
    """α as the experiment records it (speculative_drafts.held_out_alpha): the calibration's."""
    return calibrate(target, draft, windows, temperature).alpha


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


def test_simulated_passes_keep_what_the_calibration_says() -> None:
    sure = simulated_passes([1.0] * 40, start=3, k=4, seed=0, count=5)
    assert sure == [(4, 3, 8), (4, 8, 13), (4, 13, 18), (4, 18, 23), (4, 23, 28)], "k + 1 characters a pass"
    assert simulated_passes([0.0] * 40, start=3, k=4, seed=0, count=3) == [(0, 3, 4), (0, 4, 5), (0, 5, 6)]
    # Sure then hopeless: a pass keeps up to the hopeless position and stops there.
    assert simulated_passes([1.0] * 6 + [0.0] * 30, start=3, k=4, seed=0, count=2) == [(3, 3, 7), (0, 7, 8)]
    mixed = simulated_passes([0.5] * 200, start=3, k=4, seed=0, count=50)
    assert all(first[2] == second[1] for first, second in zip(mixed, mixed[1:], strict=False))
    assert len({kept for kept, _, _ in mixed}) > 2 and mixed[-1][2] + 4 <= 200


class RecordingDraft(ModelDraft):
    """A model draft that notes every start (its prompt's length) and commit (what was kept and
    emitted)."""

    def __init__(self, model: CharGPT) -> None:
        super().__init__(model, "itself")
        self.log: list[tuple[int, list[int]] | int] = []

    def start(self, prompt: list[int]) -> None:
        self.log.append(len(prompt))
        super().start(prompt)

    def commit(self, accepted: int, emitted: list[int]) -> None:
        self.log.append((accepted, list(emitted)))
        super().commit(accepted, emitted)


def test_a_cost_session_replays_the_loops_passes(target: CharGPT) -> None:
    run = speculative_decode(target, ModelDraft(target, "itself"), 3, [1, 2], 40, temperature=1.0, seed=5)
    passes = passes_of_run(run, 2)
    assert passes[-1][2] >= 42 and passes[0][1] == 2
    text = [1, 2] + run.tokens
    draft = RecordingDraft(target)
    session = CostSession(target, "static", draft, 3, 1.0, text, passes, seed=5, harness=Harness())
    costs = session()
    assert costs.draft_turn_seconds > 0 and costs.verify_seconds > 0
    # Every replay starts where the first pass does and commits the loop's passes in order: what
    # each kept and the text it emitted.
    expected = [(accepted, text[begin:end]) for accepted, begin, end in passes]
    replays: list[list[tuple[int, list[int]] | int]] = []
    for entry in draft.log:
        if isinstance(entry, int):
            replays.append([])
        else:
            replays[-1].append(entry)
    starts = [entry for entry in draft.log if isinstance(entry, int)]
    assert starts[1:] and set(starts[1:]) == {passes[0][1]}, "each replay starts at the first pass"
    timed = [replay for replay in replays[1:] if len(replay) > 1]
    assert timed, "the timed turns replay passes past the first"
    for replay in replays[1:]:
        assert replay == expected[: len(replay)]
    with pytest.raises(ValueError, match="at least one pass"):
        CostSession(target, "static", draft, 3, 1.0, [1, 2], [], seed=5, harness=Harness())


class ApartDearHarness(Harness):
    """A harness whose call-by-call timing finds each call dearer than the rounds run in one stretch
    (the harness's own Python between calls evicting what the next finds warm): a draft turn 1 ms
    and a verification 3 ms apart, a round 2 ms in one stretch."""

    def __init__(self) -> None:
        super().__init__()
        self.call_by_call = 0

    def alternating(
        self,
        functions: Sequence[Callable[[], object]],
        rounds: int,
        repeats: int = 3,
        setup: Callable[[], object] | None = None,
    ) -> tuple[MinOfN, ...]:
        self.call_by_call += 1
        return MinOfN((1e-3,)), MinOfN((3e-3,))

    def time_once(self, function: Callable[[], object], loops: int = 1) -> float:
        function()
        return 2e-3 * COST_CALLS


def test_a_python_loops_pass_is_timed_in_one_stretch_and_split_call_by_call(target: CharGPT) -> None:
    """Where the loop runs in Python, a session's pass is its rounds timed in one stretch, as the loop
    runs them; the calls timed apart only split it (a quarter draft turn, three quarters
    verification here), once a session: the split holds from pair to pair."""
    draft = ModelDraft(target, "itself")
    run = speculative_decode(target, draft, 3, [1, 2], 120, temperature=1.0, seed=5)
    assert len(run.accepted_per_pass) > COST_CALLS, "enough passes for a full session"
    harness = ApartDearHarness()
    session = CostSession(target, "static", draft, 3, 1.0, [1, 2] + run.tokens, passes_of_run(run, 2), 5, harness)
    for _ in range(3):
        costs = session()
        assert costs.draft_turn_seconds == pytest.approx(0.5e-3) and costs.verify_seconds == pytest.approx(1.5e-3)
    assert harness.call_by_call == 1


def test_centred_passes_straddle_the_generations_middle() -> None:
    """A turn's cost grows with its position: a session's timed turns must average the loop's."""
    passes = [(4, 2 + 5 * index, 7 + 5 * index) for index in range(40)]
    chosen = centred_passes(passes)
    assert len(chosen) == COST_CALLS + 1 and chosen == passes[11:28]
    timed = chosen[1:]
    mean_position = sum(begin for _, begin, _ in timed) / len(timed)
    assert abs(mean_position - passes[20][1]) <= 5, "the timed turns' mean position is the middle pass's"
    assert centred_passes(passes[:5]) == passes[:5], "fewer passes than a session takes: all of them"
    assert centred_passes(passes[:20]) == passes[1:18], "the timed ones straddle the middle (index 10)"


def test_the_compiled_loop_replays_given_passes(target: CharGPT) -> None:
    """runner.decoding.fast_loop.speculate's replay: each pass keeps what it is told (at most what it drafted) and
    emits the given text, so both caches advance as the replayed passes did."""
    draft_model = quantize_model(target, "int8", kernel="fast_int8")
    text = (torch.arange(80) * 7 % VOCAB).tolist()
    cache, draft = target.new_cache(capacity=80), ModelDraft(draft_model, "fast_int8", fast=True)
    decoder_for(target).forward(text[:9], cache)
    draft.start(text[:10])
    draft_cache, pending = draft.loop_state()
    kept = [4, 0, 2, 9]  # 9: more than the 4 drafted, so 4
    loop = LoopState(cache, draft_cache, text[9], pending)
    draws = torch.rand(4 * 13, dtype=torch.float64, generator=torch.Generator().manual_seed(0))  # 3k + 1 a pass
    before = entry_point_seconds()
    outcome = fast_loop.speculate(
        decoder_for(target), decoder_for(draft_model), loop, 14, (0, 4, 4, 0.0), 1.0, draws, replay=(kept, text[10:28])
    )
    after = entry_point_seconds()
    assert outcome.accepted_per_pass == [4, 0, 2, 4] and outcome.drafted_per_pass == [4, 4, 4, 4]
    assert outcome.emitted == text[10:24]
    assert cache.length == 9 + 14, "the target's cache holds the replayed text but its last token"
    assert after[0] > before[0] and after[1] > before[1], "the library clocks drafting and verifying apart"
    with pytest.raises(RuntimeError, match="replay: need 18 tokens"):
        fast_loop.speculate(
            decoder_for(target),
            decoder_for(draft_model),
            loop,
            14,
            (0, 4, 4, 0.0),
            1.0,
            draws,
            replay=(kept, text[10:20]),
        )


def test_a_fast_cost_session_replays_its_passes_in_the_compiled_loop(
    target: CharGPT, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the loop is compiled, a session runs that loop over its passes (the first untimed, then
    one a round, each keeping at most k) and prices them by the library's clocks over the timed ones."""
    draft = ModelDraft(quantize_model(target, "int8", kernel="fast_int8"), "fast_int8", fast=True)
    run = speculative_decode(target, draft, 3, [1, 2], 100, temperature=1.0, seed=5, impl="fast")
    passes = centred_passes(passes_of_run(run, 2))
    replayed: list[list[int]] = []
    speculate = fast_loop.speculate

    def spy(*arguments: Any, **keywords: Any) -> Any:
        assert keywords.get("replay") is not None, "a cost session replays"
        replayed.append(list(keywords["replay"][0]))
        return speculate(*arguments, **keywords)

    clocks = iter([(1.0, 2.0), (1.0 + 16 * 3e-6, 2.0 + 16 * 5e-6)])  # drafting, verifying: before, after
    monkeypatch.setattr(fast_loop, "speculate", spy)
    monkeypatch.setattr(speculative_costs, "entry_point_seconds", lambda: next(clocks))
    session = CostSession(target, "fast", draft, 3, 1.0, [1, 2] + run.tokens, passes, seed=5, harness=Harness())
    costs = session()
    assert len(passes) == COST_CALLS + 1
    assert replayed == [[min(passes[0][0], 3)], [min(kept, 3) for kept, _, _ in passes[1:]]]
    assert costs.draft_turn_seconds == pytest.approx(3e-6) and costs.verify_seconds == pytest.approx(5e-6)


def test_cost_rounds_divide_each_cost_by_its_own_rounds_step() -> None:
    """The machine's speed drifts between rounds (factors 1, 3, 1, 2, 1.5 after a slow warm-up):
    each round's plain step and session costs scale together, so the cost in steps stays 0.5 per
    call and k + 1 per verification; a step timed apart from them (the slow warm-up's) would not.
    One warm-up call, untimed: the iterator runs dry on a second."""
    now = [0.0]
    factors = iter([9.0, 1.0, 3.0, 1.0, 2.0, 1.5])
    speed = [1.0]

    def plain() -> None:
        speed[0] = next(factors)
        now[0] += 10 * 1e-3 * speed[0]  # 10 tokens of 1 ms at this speed

    def session(k: int) -> PassCosts:
        return PassCosts(k * 0.5e-3 * speed[0], (k + 1) * 1e-3 * speed[0])

    harness = Harness(clock=lambda: now[0])
    assert A_PRIORI_COST_SESSIONS == 5
    costs, step = cost_rounds(plain, 10, {1: lambda: session(1), 4: lambda: session(4)}, harness)
    assert step == pytest.approx(1.5e-3), "the median round's step (the warm-up excluded)"
    for k in (1, 4):
        assert costs[k].draft_turn_seconds / step == pytest.approx(k * 0.5)
        assert costs[k].verify_seconds / step == pytest.approx(k + 1)


def test_a_table_drafts_costs_on_the_fast_impl_are_its_turns_in_the_compiled_loop(target: CharGPT) -> None:
    """The loop runs a table draft's turns in C++: its single calls and a session's turns are timed
    there, by the library's clock of a draft's turn, which the table's Python propose never reaches
    (that clock then read 0), and a session replays its passes through the table's compiled loop."""
    tokens = torch.randint(0, VOCAB, (400,), generator=torch.Generator().manual_seed(8))
    draft = BigramDraft(tokens, VOCAB)
    run = speculative_decode(target, draft, 3, [1, 2], 100, temperature=1.0, seed=5, impl="fast")
    text = [1, 2] + run.tokens
    before = entry_point_seconds()[0]
    calls = speculative_costs.single_call_costs(target, "fast", draft, text, 40, 1.0, 5, Harness())
    assert entry_point_seconds()[0] > before, "the turns ran in the library"
    assert calls.draft_call_seconds > 0 and calls.draft_turn_seconds > 0
    session = CostSession(target, "fast", draft, 3, 1.0, text, centred_passes(passes_of_run(run, 2)), 5, Harness())
    costs = session()
    assert costs.draft_turn_seconds > 0 and costs.verify_seconds > costs.draft_turn_seconds
