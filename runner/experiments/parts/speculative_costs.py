"""What speculative decoding costs, measured two ways for two different claims.

- A priori (a prediction, runner.experiments.parts.speculative_a_priori.a_priori_prediction): before the
  loop runs and from nothing it measures. Characters per pass and draft lengths are simulated over
  calibration text (runner.cost.speculative_prediction); the costs of a verification and a draft
  turn come from cost sessions that follow that text, keeping per pass what its per-position
  acceptance says (simulated_passes). α on held-out text (the ``alpha_a_priori`` metric:
  speculative_drafts.held_out_alpha, the mean of Σ min(p, q)) stays beside it for the
  write-ups' i.i.d. E = (1 − α^(k+1)) / (1 − α).
- Component model (a cost decomposition, not a forecast): the loop's own characters per pass
  over the verify and draft costs timed after each timed pair, replaying the loop's own passes.
  It checks that the loop's time is its passes' costs, nothing more.

A cost session alternates draft turns and verifications as the loop does, so each pays for
what the other evicts from the caches, and times a pass as the loop runs it: in one C++ call by
the library's clock of each entry point, or its Python rounds in one stretch (CostSession).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import torch

from runner.cost.speculative import TURN_PROPOSALS
from runner.decoding import fast_loop
from runner.decoding.fast_library import entry_point_seconds
from runner.decoding.speculative import (
    CompiledDraft,
    CompiledTableDraft,
    CompiledTarget,
    Draft,
    SpeculativeResult,
    TargetPass,
    runs_compiled,
    target_pass,
    uniforms,
    verify,
)
from runner.measure.timing import Harness
from runner.model.gpt import CharGPT

COST_CALLS = 16  # draft turns and verifications per cost session
SINGLE_CALL_REPEATS = 5  # single calls timed for the write-ups' cost table (the minimum is kept)
ALPHA_WINDOWS = 8  # held-out windows whose every position enters α
ALPHA_WINDOW_LENGTH = 256

# One pass of the loop: proposals kept, then the slice [begin, end) of the text it emitted.
Pass = tuple[int, int, int]


@dataclass(frozen=True)
class PassCosts:
    draft_turn_seconds: float
    verify_seconds: float


@dataclass(frozen=True)
class SingleCalls:
    """The write-ups' cost table and the draft's turn, each timed on its own (single_call_costs)."""

    target_pass_seconds: float  # one target pass over one token
    draft_call_seconds: float  # one draft turn of one proposal
    draft_turn_seconds: float  # one draft turn of TURN_PROPOSALS proposals; NaN where not timed


def held_out_windows(tokens: torch.Tensor, context_length: int) -> list[list[int]]:
    """ALPHA_WINDOWS windows spread evenly over held-out tokens."""
    length = min(ALPHA_WINDOW_LENGTH, context_length, len(tokens))
    starts = torch.linspace(0, len(tokens) - length, ALPHA_WINDOWS).long().unique().tolist()
    return [tokens[start : start + length].tolist() for start in starts]


def pricing_harness(harness: Harness, run_target: TargetPass, draft: Draft) -> Harness:
    """The harness that prices this target and draft's calls as the loop pays for them: where the loop
    runs in one C++ call (runs_compiled) it pays for the kernels and little else, so each call is
    timed by the time spent inside them (runner.decoding.fast_library.kernel_seconds, the library's own
    clock), not with the Python and ctypes around it that the loop no longer runs."""
    if not runs_compiled(run_target, draft):
        return harness
    from runner.decoding.fast_library import kernel_seconds

    return harness.with_clock(kernel_seconds)


def propose(run_target: TargetPass, draft: Draft, count: int, temperature: float, generator: torch.Generator) -> None:
    """One draft turn of ``count`` proposals as the loop makes it: where the loop runs in C++ with a
    context table, the table's turn in C++ (fast_loop.propose_table, on the library's clock of a draft's
    turn, which a table's Python propose never reaches), else the draft's own propose."""
    if isinstance(draft, CompiledTableDraft) and runs_compiled(run_target, draft):
        table = draft.compiled_table(temperature)
        assert table is not None, "runs_compiled: a table the loop reads"
        draws = uniforms(count, temperature, generator)
        fast_loop.propose_table(cast(CompiledTarget, run_target).decoder, table, draft.history(), count, 0.0, draws)
        return
    draft.propose(count, temperature, generator)


def passes_of_run(run: SpeculativeResult, prompt_length: int) -> list[Pass]:
    """The loop's own passes, as slices of prompt + its output."""
    boundaries = list(itertools.accumulate((accepted + 1 for accepted in run.accepted_per_pass), initial=prompt_length))
    return list(zip(run.accepted_per_pass, boundaries, boundaries[1:], strict=False))


class CostSession:
    """Times one draft turn and one verification, called in turn as the loop calls them.

    The draft turns replay ``passes`` along ``text``: propose k, then commit what that pass kept
    and emitted, so a draft follows the same contexts and feeds as many tokens per turn as in
    those passes. The verification is the (k+1)-position target pass and the accept rule at the
    position of the middle timed turn, the cache rolled back each time: both costs grow with their
    position (the attention reads every cached one), so the session prices the mean pass of a loop
    whose passes ``passes`` straddle (centred_passes)."""

    @torch.inference_mode()
    def __init__(
        self,
        target: CharGPT,
        impl: str,
        draft: Draft,
        k: int,
        temperature: float,
        text: list[int],
        passes: list[Pass],
        seed: int,
        harness: Harness,
    ) -> None:
        if not passes:
            raise ValueError("a cost session needs at least one pass to replay")
        self._draft, self._k, self._temperature, self._text = draft, k, temperature, text
        self._passes, self._harness = passes, harness
        self._rounds = max(1, min(COST_CALLS, len(passes) - 1))
        last_position = target.config.context_length - k - 1
        # The untimed first turn replays passes[0], the timed ones passes[1..rounds].
        self._start = min(passes[0][1], last_position)
        self._verify_at = min(passes[min(self._rounds // 2 + 1, len(passes) - 1)][1], last_position)
        self._run_target = target_pass(target, impl)
        self._harness = pricing_harness(harness, self._run_target, draft)
        timed_end = passes[min(self._rounds, len(passes) - 1)][2]
        self._cache = target.new_cache(
            capacity=min(target.config.context_length, max(self._verify_at, timed_end + 1) + k)
        )
        self._compiled = runs_compiled(self._run_target, draft)
        if self._verify_at > 1:
            self._run_target(text[: self._verify_at - 1], self._cache)
        self._generator = torch.Generator(device=target.device).manual_seed(seed)
        # The verification's proposals are the draft's at its own position, so that the accept rule
        # takes the path it takes there (proposals drawn elsewhere would be rejected at once).
        draft.start(text[: self._verify_at])
        self._proposals, self._q = draft.propose(k, temperature, self._generator)
        self._replay: Iterator[Pass] = iter([])
        self._draft_share: float | None = None  # a draft turn's share of a pass, timed call by call

    def _draft_turn(self) -> None:
        propose(self._run_target, self._draft, self._k, self._temperature, self._generator)
        accepted, begin, end = next(self._replay, self._passes[-1])  # past the end: the last pass again
        self._draft.commit(accepted, self._text[begin:end])

    def _verification(self) -> None:
        self._cache.length = self._verify_at - 1
        verify(
            self._run_target,
            self._cache,
            self._text[self._verify_at - 1],
            self._proposals,
            self._q,
            self._temperature,
            self._generator,
        )

    def _follow_text(self) -> None:
        self._replay = iter(self._passes)
        self._draft.start(self._text[: self._start])
        self._draft_turn()  # a model draft feeds its prompt on its first turn: untimed

    def _replayed(self, passes: list[Pass]) -> None:
        """The compiled loop over ``passes`` from the committed text's end (the target's cache
        holds it but its last token), keeping what each kept (at most k) and emitting the text."""
        target = cast(CompiledTarget, self._run_target)
        kept = [min(accepted, self._k) for accepted, _, _ in passes]
        emitted = sum(kept) + len(kept)
        committed = self._cache.length + 1
        last = self._text[committed - 1]
        draws = uniforms(len(passes) * (3 * self._k + 1), self._temperature, self._generator)
        replay = (kept, self._text[committed : committed + emitted + self._k])
        schedule = (0, self._k, self._k, 0.0)
        if isinstance(self._draft, CompiledTableDraft):
            table = self._draft.compiled_table(self._temperature)
            assert table is not None, "runs_compiled: a table the loop reads"
            history = self._draft.history()
            outcome = fast_loop.speculate_table(
                target.decoder, table, history, self._cache, last, emitted, schedule, self._temperature, draws, replay
            )
            self._draft.follow(self._text[: committed + len(outcome.emitted)])
            return
        draft = cast(CompiledDraft, self._draft)
        decoder = draft.compiled_decoder()
        assert decoder is not None, "runs_compiled: a draft with a compiled decoder"
        draft_cache, pending = draft.loop_state()
        loop = fast_loop.LoopState(self._cache, draft_cache, last, pending)
        outcome = fast_loop.speculate(
            target.decoder, decoder, loop, emitted, schedule, self._temperature, draws, replay=replay
        )
        draft.follow(self._text[: committed + len(outcome.emitted)])

    def _compiled_costs(self) -> PassCosts | None:
        """Where the loop runs in one C++ call, that loop itself replaying the passes: its draft turns
        and verifications by the library's clock of each. Between calls from Python, the Python (the
        uniforms, the tensors, the bookkeeping) evicted enough of the L2 to put a held-out fast_int8
        pass 13% above the loop's on the Xeon, and the loop runs none of it. None where the timed
        passes would run past the target's cache (the model's context)."""
        timed = self._passes[1 : 1 + self._rounds]
        if not timed or timed[-1][2] + self._k > min(self._cache.keys.shape[3], len(self._text)):
            return None
        self._cache.length = self._start - 1
        self._draft.start(self._text[: self._start])
        self._replayed(self._passes[:1])  # a model draft feeds its prompt on its first turn: untimed
        draft_before, verify_before = entry_point_seconds()
        self._replayed(timed)
        draft_after, verify_after = entry_point_seconds()
        return PassCosts((draft_after - draft_before) / len(timed), (verify_after - verify_before) / len(timed))

    def _rounds_in_one_stretch(self) -> float:
        """Seconds per round of a draft turn and a verification, the rounds timed in one stretch
        as the loop runs them (nothing of the harness's between the calls)."""
        self._follow_text()

        def rounds() -> None:
            for _ in range(self._rounds):
                self._draft_turn()
                self._verification()

        return self._harness.time_once(rounds) / self._rounds

    @torch.inference_mode()
    def __call__(self) -> PassCosts:
        """Where the loop runs in Python: the rounds timed in one stretch give the pass, and each
        call timed on its own (in the session's first call only: the split holds from pair to pair)
        the draft turn's share of it. Timed apart, each call pays for the harness's own Python run
        between them, which evicts what the loop's next call finds warm: on the Xeon a held-out
        n-gram draft's turn took 30 us timed apart and 19 in the loop, its verification 113 against
        105, and the a-priori prediction priced those passes 15% dear (docs/performance.md)."""
        if self._compiled and (costs := self._compiled_costs()) is not None:
            return costs
        if self._draft_share is None:
            draft_turns, verifications = self._harness.alternating(
                (self._draft_turn, self._verification), rounds=self._rounds, repeats=1, setup=self._follow_text
            )
            apart = draft_turns.minimum + verifications.minimum
            self._draft_share = draft_turns.minimum / apart if apart > 0 else 0.0
        pass_seconds = self._rounds_in_one_stretch()
        return PassCosts(pass_seconds * self._draft_share, pass_seconds * (1.0 - self._draft_share))


@torch.inference_mode()
def single_call_costs(
    target: CharGPT,
    impl: str,
    draft: Draft,
    text: list[int],
    position: int,
    temperature: float,
    seed: int,
    harness: Harness,
) -> SingleCalls:
    """The write-ups' cost table: one target pass over one token and one draft call for one
    character, each timed on its own at ``position`` of ``text`` (the minimum of
    SINGLE_CALL_REPEATS). Unlike the loop's costs, nothing runs between the calls: the write-ups
    found this under-counts a cheap draft's share of the loop. Beside them, one draft turn of
    TURN_PROPOSALS proposals from the same state, so that a turn's fixed part can be told from its
    part per proposal (runner.cost.speculative.turn_fixed_seconds): a table draft's turn is one Python call
    whose torch calls cost more than its lookups (in the Zen 5 EPYC's quick runs a turn of one
    proposal took 3.4-3.9 us and one of four 5.3-5.7), and pricing every proposal at a one-proposal
    call overstated its k = 4 passes by 8-10 us. The turn is left untimed (NaN) where the text holds
    fewer than TURN_PROPOSALS positions past ``position``, so that it never runs past a context."""
    run_target = target_pass(target, impl)
    harness = pricing_harness(harness, run_target, draft)
    cache = target.new_cache(capacity=position + 1)
    run_target(text[:position], cache)
    generator = torch.Generator(device=target.device).manual_seed(seed)

    def rewind() -> None:
        cache.length = position

    def follow() -> None:
        draft.start(text[: position + 1])

    (target_pass_seconds,) = harness.alternating(
        (lambda: run_target([text[position]], cache),), rounds=1, repeats=SINGLE_CALL_REPEATS, setup=rewind
    )
    # Each from the same state (a model draft's propose feeds its cache), so timed apart.
    (draft_call_seconds,) = harness.alternating(
        (lambda: propose(run_target, draft, 1, temperature, generator),),
        rounds=1,
        repeats=SINGLE_CALL_REPEATS,
        setup=follow,
    )
    draft_turn_seconds = math.nan
    if position + TURN_PROPOSALS <= len(text):
        (turn,) = harness.alternating(
            (lambda: propose(run_target, draft, TURN_PROPOSALS, temperature, generator),),
            rounds=1,
            repeats=SINGLE_CALL_REPEATS,
            setup=follow,
        )
        draft_turn_seconds = turn.minimum
    return SingleCalls(target_pass_seconds.minimum, draft_call_seconds.minimum, draft_turn_seconds)


def centred_passes(passes: list[Pass]) -> list[Pass]:
    """The passes a session replays (its untimed first turn, then one a round) centred on the
    middle one, so that its turns' mean position is the loop's: a turn's cost grows with its
    position (on the Xeon a held-out fast_int8 draft's step took 9.5 us at position 16, 13.6 at 120
    and 17.9 at 200, its attention reading every cached position), and sessions that started at
    the middle priced the held-out fast cases' draft turns 30% above the loop's."""
    first = max(0, min(len(passes) // 2 - COST_CALLS // 2 - 1, len(passes) - COST_CALLS - 1))
    return passes[first : first + COST_CALLS + 1]
