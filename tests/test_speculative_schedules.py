"""Draft-length schedules (fixed, heuristic, confidence) on a scripted draft, the engines' metrics
(per-position acceptance, mean accepted length, system efficiency) against hand-made sequences,
and the a-priori simulation on scripted calibrations."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from runner.cost.speculative_prediction import (
    Calibration,
    Prediction,
    calibrate,
    draft_rollouts,
    kept_given_next,
    simulate,
    stop_reading,
)
from runner.decoding.decode import generate
from runner.decoding.drafts import ContextTableDraft, ModelDraft
from runner.decoding.speculative import Schedule, acceptance_at_positions, speculative_decode
from runner.experiments.parts.speculative_a_priori import priced_pass
from runner.experiments.parts.speculative_costs import PassCosts
from runner.model.gpt import CharGPT, ModelConfig
from tests.shared_parts import VOCAB, peaked_target

PROMPT = [3, 1, 4]


@pytest.fixture(scope="module")
def target() -> CharGPT:
    return peaked_target()


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Many tiny passes: one torch thread, as the runner's presets time them."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class ScriptedDraft:
    """A greedy draft that knows the target's greedy text: in its i-th pass it proposes the text's
    next ``script[i]`` characters, then a wrong one, so that a greedy verification keeps exactly
    min(script[i], length) proposals. It records the length each pass asked for."""

    name = "scripted"

    def __init__(self, text: list[int], script: list[int]) -> None:
        self.text, self.script = text, script
        self.asked: list[int] = []

    def start(self, prompt: list[int]) -> None:
        self.position, self.passes = 0, 0

    def propose(
        self, k: int, temperature: float, generator: torch.Generator | None, p_min: float = 0.0
    ) -> tuple[list[int], torch.Tensor]:
        self.asked.append(k)
        right = self.script[self.passes % len(self.script)]
        upcoming = self.text[self.position : self.position + k]
        tokens = [token if index < right else (token + 1) % VOCAB for index, token in enumerate(upcoming)]
        return tokens, torch.nn.functional.one_hot(torch.tensor(tokens), VOCAB).float()

    def commit(self, accepted: int, emitted: list[int]) -> None:
        self.position += len(emitted)
        self.passes += 1

    def distributions(self, tokens: list[int], temperature: float) -> torch.Tensor:
        raise NotImplementedError


def scripted_run(target: CharGPT, script: list[int], schedule: Schedule, impl: str = "static") -> ScriptedDraft:
    text = generate(target, PROMPT, 80, temperature=0.0).tokens
    draft = ScriptedDraft(text, script)
    result = speculative_decode(target, draft, schedule.k, PROMPT, 60, temperature=0.0, impl=impl, schedule=schedule)
    assert result.tokens == text[:60], "greedy speculative output is the target's greedy text"
    assert result.drafted_per_pass == draft.asked
    assert result.accepted_per_pass == [
        min(right, asked) for right, asked in zip(script * 60, draft.asked, strict=False)
    ]
    return draft


@pytest.mark.parametrize("impl", ["static", "fast"])
def test_the_fixed_schedule_drafts_k_every_pass(target: CharGPT, impl: str) -> None:
    draft = scripted_run(target, [0, 5, 2], Schedule("fixed", 3, 3), impl)
    assert set(draft.asked) == {3}


@pytest.mark.parametrize("impl", ["static", "fast"])
def test_the_heuristic_schedule_grows_by_two_after_a_full_pass_and_shrinks_by_one(target: CharGPT, impl: str) -> None:
    # Passes keep 9, 9, 9, 0, 0, 1, ...: lengths 2, 4 (+2), 6 (+2, at k_max 6), 6, 5 (−1), 4, 3 ...
    draft = scripted_run(target, [9, 9, 9, 0, 0, 1, 0, 0, 0, 0, 9], Schedule("heuristic", 2, 6), impl)
    assert draft.asked[:11] == [2, 4, 6, 6, 5, 4, 3, 2, 1, 1, 1]
    assert draft.asked[11] == 3, "a full pass at length 1: +2"


def test_the_confidence_schedule_stops_before_an_unsure_proposal() -> None:
    class Table(ContextTableDraft):
        """Sure (top 0.9) after even characters, unsure (top 0.3) after odd ones; proposes the next
        character up."""

        history_length = 1

        def tables(self) -> list[torch.Tensor]:
            rows = []
            for previous in range(VOCAB):
                top = 0.9 if previous % 2 == 0 else 0.3
                row = torch.full((VOCAB,), (1 - top) / (VOCAB - 1))
                row[(previous + 1) % VOCAB] = top
                rows.append(row.log())
            return [torch.stack(rows)]

        def locate(self, context: tuple[int, ...]) -> tuple[int, int]:
            return 0, context[-1]

    draft = Table()
    draft.start([1])
    tokens, rows = draft.propose(6, 0.0, None, p_min=0.5)
    # Greedy rows are one-hot (top 1): the stop reads the softmax's top, as the engines do.
    assert tokens == [2, 3] and rows.max(dim=-1).values.tolist() == [1.0, 1.0], "greedy: it stops before 4 (0.3)"
    draft.start([1])
    tokens, rows = draft.propose(6, 1.0, torch.Generator().manual_seed(0), p_min=0.95)
    assert len(tokens) == 1 and rows.shape == (1, VOCAB), "nothing is sure enough: the first is always drafted"
    draft.start([1])
    tokens, _ = draft.propose(6, 1.0, torch.Generator().manual_seed(0), p_min=0.2)
    assert len(tokens) == 6, "p_min below every top: all six"
    for seed in range(10):  # sampled: the stop depends on what was drawn
        draft.start([1])
        tokens, rows = draft.propose(6, 1.0, torch.Generator().manual_seed(seed), p_min=0.5)
        assert len(rows) == len(tokens)
        assert all(previous % 2 == 0 for previous in tokens[:-1]), "every proposal after the first was a sure one"
        assert len(tokens) == 6 or tokens[-1] % 2 == 1, "it stopped only before an unsure one"


@pytest.mark.parametrize("temperature", [1.0, 0.0])
@pytest.mark.parametrize("p_min", [0.3, 0.5, 0.7])
def test_a_model_draft_stops_at_p_min_through_the_compiled_path_as_the_eager_one(
    target: CharGPT, p_min: float, temperature: float
) -> None:
    """Each proposal after the first had a softmax top at or above p_min, and a stop came before one
    below it; greedy too, though greedy rows are one-hot."""
    fast, eager = ModelDraft(target, "fast", fast=True), ModelDraft(target, "eager")
    lengths = set()
    for seed in range(12):
        proposals = []
        prompt = [1, 2, 3, seed % VOCAB]
        for draft in (fast, eager):
            draft.start(prompt)
            proposals.append(draft.propose(8, temperature, torch.Generator().manual_seed(seed), p_min))
        (fast_tokens, fast_q), (eager_tokens, eager_q) = proposals
        assert fast_tokens == eager_tokens
        assert torch.allclose(fast_q, eager_q, atol=1e-5)
        with torch.inference_mode():
            logits = target(torch.tensor([prompt + eager_tokens]))[0, len(prompt) - 1 :]
        tops = torch.softmax(logits, dim=-1).max(dim=-1).values.tolist()
        assert all(top >= p_min for top in tops[1 : len(eager_tokens)])
        if len(eager_tokens) < 8:  # the next distribution was unsure
            assert tops[len(eager_tokens)] < p_min
        lengths.add(len(eager_tokens))
    assert len(lengths) > 1, f"lengths {lengths}: the threshold bit in some passes, not in others"


def test_the_confidence_schedule_runs_the_loop_to_the_targets_distribution(target: CharGPT) -> None:
    torch.manual_seed(2)
    small = CharGPT(ModelConfig(vocab_size=VOCAB, d_model=16, n_layer=1, n_head=2, context_length=128)).eval()
    outputs = []
    for impl in ("static", "fast"):
        result = speculative_decode(
            target,
            ModelDraft(small, "small", fast=True),
            6,
            PROMPT,
            50,
            temperature=1.0,
            seed=3,
            impl=impl,
            schedule=Schedule("confidence", 6, 6, 0.2),
        )
        assert min(result.drafted_per_pass) >= 1 and max(result.drafted_per_pass) <= 6
        outputs.append((result.tokens, result.drafted_per_pass))
    assert outputs[0] == outputs[1], "both impls decide the same"
    greedy = speculative_decode(
        target, ModelDraft(small, "small"), 6, PROMPT, 50, temperature=0.0, schedule=Schedule("confidence", 6, 6, 0.9)
    )
    assert greedy.tokens == generate(target, PROMPT, 50, temperature=0.0).tokens


def test_per_position_acceptance_against_a_hand_made_sequence() -> None:
    accepted, drafted = [2, 0, 3, 1, 0], [3, 3, 3, 2, 1]
    # Position 1: 5 passes drafted it, 3 kept it; position 2: 4 drafted, 2 kept (2 and 3);
    # position 3: 3 drafted, 1 kept; position 4: none drafted.
    rates = acceptance_at_positions(accepted, drafted, 4)
    assert rates[:3] == [3 / 5, 2 / 4, 1 / 3]
    assert rates[3] != rates[3], "nan where no pass drafted"


def test_the_engines_metrics_from_a_run(target: CharGPT) -> None:
    text = generate(target, PROMPT, 80, temperature=0.0).tokens
    result = speculative_decode(
        target, ScriptedDraft(text, [0, 5, 2]), 3, PROMPT, 60, temperature=0.0, schedule=Schedule("fixed", 3, 3)
    )
    # Passes keep 0, 3, 2 in turn: 1 + 4 + 3 = 8 characters per three passes.
    passes = result.target_passes
    assert result.accepted_per_pass[:3] == [0, 3, 2]
    assert result.mean_accepted_length == pytest.approx(result.accepted / passes + 1)
    assert result.mean_draft_length == 3
    assert result.system_efficiency == pytest.approx((result.accepted + passes) / (4 * passes))
    assert acceptance_at_positions(result.accepted_per_pass[:3], result.drafted_per_pass[:3], 3) == [
        2 / 3,
        2 / 3,
        1 / 3,
    ]


def test_the_simulation_follows_the_calibration_and_the_schedule() -> None:
    # Every position kept for sure: every pass keeps all it drafts.
    sure = Calibration([[1.0] * 100], [[1.0] * 100])
    fixed = simulate(sure, Schedule("fixed", 4, 4), seed=0)
    assert fixed.chars_per_pass == 5 and fixed.mean_draft_length == 4
    heuristic = simulate(sure, Schedule("heuristic", 1, 7), seed=0, repeats=1)
    # Lengths 1, 3, 5 (+2 each), then 7 (k_max) for the 11 passes that fit in 100 positions.
    assert heuristic.draft_length_share == pytest.approx([1 / 14, 0, 1 / 14, 0, 1 / 14, 0, 11 / 14])
    # Never kept: one character per pass, the heuristic shrinks to 1.
    never = Calibration([[0.0] * 100], [[1.0] * 100])
    assert simulate(never, Schedule("fixed", 4, 4), seed=0).chars_per_pass == 1
    assert simulate(never, Schedule("heuristic", 4, 8), seed=0).mean_draft_length < 1.2
    # Clustered: alternate stretches of 20 sure and 20 hopeless positions, mean α = 0.5. The
    # i.i.d. formula gives (1 − 0.5^5) / 0.5 = 1.94 per pass; the loop crosses a sure stretch in
    # about 4 passes of 5 and a hopeless one in 20 of 1: about 40 / 24 = 1.67 per pass.
    clustered = Calibration([([1.0] * 20 + [0.0] * 20) * 5], [[1.0] * 200])
    prediction = simulate(clustered, Schedule("fixed", 4, 4), seed=0)
    assert 1.55 < prediction.chars_per_pass < 1.8
    # Confidence: a draft unsure everywhere drafts one.
    unsure = Calibration([[0.5] * 100], [[0.1] * 100])
    stopped = simulate(unsure, Schedule("confidence", 6, 6, 0.5), seed=0)
    assert stopped.mean_draft_length == 1
    assert stopped.mean_draft_calls == 2, "each pass also computed the unsure distribution it dropped"
    assert fixed.mean_draft_calls == 4, "a fixed length calls the draft once per proposal"


def test_a_pass_keeps_a_proposal_with_its_chance_given_the_texts_next_character() -> None:
    """p = (0.5, 0.5, 0), q = (0.9, 0.1, 0): a_t = 0.6. Given the text's next character 0 the
    accept rule kept the proposal for sure (min(1, 0.9 / 0.5)); given 1, with 0.2 (0.1 / 0.5):
    averaged over p, a_t again. Greedy (one-hot rows), it is a_t itself."""
    p = torch.tensor([[0.5, 0.5, 0.0]] * 3)
    q = torch.tensor([[0.9, 0.1, 0.0]] * 3)
    assert kept_given_next(p, q, [2, 0, 1]) == pytest.approx([1.0, 0.2])
    averaged_over_p = 0.5 * 1.0 + 0.5 * 0.2
    assert float(torch.minimum(p, q).sum(dim=-1)[0]) == pytest.approx(averaged_over_p)
    one_hot = torch.eye(3)
    target_rows, draft_rows = one_hot[[0, 1, 2]], one_hot[[0, 2, 2]]  # the draft misses at position 1
    assert kept_given_next(target_rows, draft_rows, [2, 0, 1]) == [1.0, 0.0]
    assert torch.minimum(target_rows, draft_rows).sum(dim=-1)[:2].tolist() == [1.0, 0.0]


def test_the_stops_read_the_text_while_the_pass_keeps_and_the_drafts_own_proposals_after() -> None:
    tops = [0.1 * index for index in range(10)]
    rollouts = [[0.9, 0.8, 0.7, 0.6]] * 6
    # Kept proposals are the text's characters: the top along the text after them.
    assert stop_reading(tops, rollouts, position=2, keeps=3, proposed=2) == tops[4]
    assert stop_reading(tops, rollouts, position=2, keeps=3, proposed=3) == tops[5]
    # Past the first rejected proposal (the second), the rollout from there: one own proposal on.
    assert stop_reading(tops, rollouts, position=2, keeps=1, proposed=2) == 0.8
    assert stop_reading(tops, rollouts, position=2, keeps=0, proposed=3) == 0.6
    assert stop_reading(tops, None, position=2, keeps=0, proposed=3) == tops[5], "no rollouts: the text"


def test_the_simulation_keeps_proposals_with_their_chance_given_the_text() -> None:
    """a_t = 0.5 everywhere, but given the text's characters a proposal is kept for sure at even
    positions and never at odd ones: every pass from an even position keeps one and is rejected
    at the next, 2 characters per pass exactly. Drawn apart from the text, with a_t, the i.i.d.
    (1 − 0.5^5) / 0.5 = 1.94."""
    given_text = Calibration([[0.5] * 100], [[1.0] * 100], kept_given_text=[[1.0, 0.0] * 50])
    apart = Calibration([[0.5] * 100], [[1.0] * 100])
    fixed = Schedule("fixed", 4, 4)
    assert simulate(given_text, fixed, seed=0).chars_per_pass == 2.0
    assert simulate(apart, fixed, seed=0).chars_per_pass == pytest.approx((1 - 0.5**5) / 0.5, abs=0.05)


class SelfDoubtingDraft:
    """Sure (0.9) of its next character after an even character, unsure (0.3) after an odd one, and
    it proposes only odd characters: along the target's text it is often sure, along its own
    proposals never after the first (a draft whose confidence along the text says little of its
    confidence while it drafts)."""

    name = "self-doubting"
    odd = list(range(1, VOCAB, 2))

    def start(self, prompt: list[int]) -> None:
        self.history = list(prompt)

    def row(self, last: int) -> torch.Tensor:
        top = 0.9 if last % 2 == 0 else 0.3
        distribution = torch.zeros(VOCAB)
        distribution[self.odd] = (1 - top) / (len(self.odd) - 1)
        distribution[self.odd[(last // 2) % len(self.odd)]] = top
        return distribution

    def propose(
        self, k: int, temperature: float, generator: torch.Generator | None, p_min: float = 0.0
    ) -> tuple[list[int], torch.Tensor]:
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for _ in range(k):
            row = self.row((self.history + tokens)[-1])
            if tokens and float(row.max()) < p_min:
                break
            rows.append(row)
            tokens.append(int(torch.multinomial(row, 1, generator=generator)))
        return tokens, torch.stack(rows)

    def commit(self, accepted: int, emitted: list[int]) -> None:
        self.history += emitted

    def distributions(self, tokens: list[int], temperature: float) -> torch.Tensor:
        return torch.stack([self.row(token) for token in tokens])


def test_the_confidence_stops_read_the_drafts_own_proposals(target: CharGPT) -> None:
    assert VOCAB % 2 == 0
    draft = SelfDoubtingDraft()
    text = PROMPT + generate(target, PROMPT, 60, temperature=1.0, seed=3).tokens
    rollouts = draft_rollouts(draft, [text], 1.0, 4, seed=0, device=torch.device("cpu"))
    assert all(tops[1:] == pytest.approx([0.3, 0.3, 0.3]) for tops in rollouts[0])
    calibration = calibrate(target, draft, [text], 1.0)
    schedule = Schedule("confidence", 4, 4, 0.5)
    # Along the text alone, past a rejected proposal the draft looks sure wherever the text's next
    # character is even: it would draft more than one.
    assert simulate(calibration, schedule, seed=0).mean_draft_length > 1.1
    # Its own proposals are what the loop's draft reads: one proposal, then a stop.
    own = simulate(dataclasses.replace(calibration, rollout_tops=rollouts), schedule, seed=0)
    loop = speculative_decode(target, draft, 4, PROMPT, 60, temperature=1.0, schedule=schedule)
    assert own.mean_draft_length == loop.mean_draft_length == 1
    assert own.mean_draft_calls == loop.mean_draft_calls == 2


@pytest.mark.parametrize(
    ("schedule", "stops"), [(Schedule("fixed", 4, 4), False), (Schedule("confidence", 6, 6, 0.5), True)]
)
def test_draft_calls_count_every_forward_of_the_draft_a_pass_made(
    target: CharGPT, schedule: Schedule, stops: bool
) -> None:
    torch.manual_seed(2)
    small = CharGPT(ModelConfig(vocab_size=VOCAB, d_model=16, n_layer=1, n_head=2, context_length=128)).eval()
    draft = ModelDraft(small, "small")  # eager: one forward_cached per draft call
    forwards, proposing = [0], [False]
    real_forward, real_propose = small.forward_cached, draft.propose

    def counted_forward(*args: Any, **kwargs: Any) -> Any:
        forwards[0] += proposing[0]
        return real_forward(*args, **kwargs)

    def counted_propose(*args: Any, **kwargs: Any) -> Any:
        proposing[0] = True
        try:
            return real_propose(*args, **kwargs)
        finally:
            proposing[0] = False

    small.forward_cached = counted_forward  # type: ignore[method-assign]
    draft.propose = counted_propose  # type: ignore[method-assign]
    result = speculative_decode(target, draft, schedule.k, PROMPT, 50, temperature=1.0, seed=3, schedule=schedule)
    assert result.draft_calls == forwards[0]
    assert (result.draft_calls > result.proposed) == stops, (result.draft_calls, result.proposed)
    assert result.mean_draft_calls == result.draft_calls / result.target_passes


def test_greedy_the_simulation_replays_the_loop_pass_for_pass(target: CharGPT) -> None:
    """Greedy, the calibration text is the loop's own text and every a_t is 0 or 1: the simulation
    over it, its stops read on the draft's own proposals, must be the loop's passes exactly."""
    draft_model = peaked_target()
    torch.manual_seed(5)
    with torch.no_grad():
        for parameter in draft_model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)  # near the target: it agrees often
    draft = ModelDraft(draft_model, "near")
    text = PROMPT[:1] + generate(target, PROMPT[:1], 100, temperature=0.0).tokens
    calibration = calibrate(target, draft, [text], 0.0)
    rollouts = draft_rollouts(draft, [text], 0.0, 4, seed=0, device=torch.device("cpu"))
    later_tops = sorted(top for tops in rollouts[0] for top in tops[1:])
    # The threshold sits mid-way in the widest gap between the draft's tops around their median,
    # not on one of them: the loop reads its tops step by step through its cache, the simulation
    # through one forward over the window, and the two round differently on different CPUs' kernels
    # (a threshold equal to a top flipped a stop on an AVX-512 EPYC). 1e-3 is far above that rounding.
    middle = later_tops[len(later_tops) // 4 : 3 * len(later_tops) // 4 + 1]
    gap, below = max((above - below, below) for below, above in itertools.pairwise(middle))
    assert gap > 1e-3, "the draft's tops leave no room for a threshold between them"
    schedule = Schedule("confidence", 4, 4, below + gap / 2)  # stops about half
    loop = speculative_decode(target, draft, 4, PROMPT[:1], 100, temperature=0.0, schedule=schedule)
    assert loop.tokens == text[1:]
    # The loop's passes the simulation also makes: it stops short of the text's end by k_max.
    kept, position = [], 0
    for accepted, drafted in zip(loop.accepted_per_pass, loop.drafted_per_pass, strict=True):
        if position + schedule.longest >= len(text):
            break
        kept.append((accepted, drafted))
        position += accepted + 1
    simulated = simulate(dataclasses.replace(calibration, rollout_tops=rollouts), schedule, seed=0, repeats=1)
    assert simulated.mean_draft_length == pytest.approx(sum(drafted for _, drafted in kept) / len(kept))
    assert simulated.chars_per_pass == pytest.approx(sum(accepted + 1 for accepted, _ in kept) / len(kept))
    assert 1 < simulated.mean_draft_length < 4 and simulated.chars_per_pass > 1, "stops and acceptances both"


def test_an_adaptive_pass_is_priced_length_by_length() -> None:
    """Turns of 1, 2 and 4 calls cost 2, 3 and 5 µs (1 µs fixed, 1 µs a call); verifications of 2,
    3 and 5 positions 8, 8 and 12 µs (blocks of rows, not a line). Passes drafting 1 and 4 half
    each, with a stop's dropped call in half the passes: 0.5·2 + 0.5·5 + 0.5·1 µs of draft turn,
    0.5·8 + 0.5·12 µs of verification (not the cost of 2.5 proposals)."""
    costs = {1: PassCosts(2e-6, 8e-6), 2: PassCosts(3e-6, 8e-6), 4: PassCosts(5e-6, 12e-6)}
    asked: list[int] = []

    def session(k: int) -> PassCosts:
        asked.append(k)
        return costs[k]

    adaptive = Prediction(2.0, 2.5, 3.0, [1.0, 0.5, 0.5, 0.5], [0.5, 0.0, 0.0, 0.5])
    draft_turn, verify = priced_pass(adaptive, 4, session)
    assert draft_turn == pytest.approx(4e-6) and verify == pytest.approx(10e-6)
    assert set(asked) == {1, 4}, "only the lengths the schedule drafts"
    fixed = Prediction(2.0, 2.0, 2.0, [1.0, 0.5], [0.0, 1.0])
    assert priced_pass(fixed, 2, session) == (3e-6, 8e-6), "one length: its session's costs"
    stopping = Prediction(1.5, 1.0, 2.0, [0.5], [1.0])
    assert priced_pass(stopping, 4, session)[0] == pytest.approx(3e-6), "a stop's call priced from the next length"
