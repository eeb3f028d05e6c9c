"""Speculative decoding: a draft proposes k tokens, the target checks all k + 1 positions in one
pass, and the accept rule keeps the target's distribution exactly.

The target pass runs through an impl, as plain decoding does (runner.decoding.decode): ``static`` is the
eager preallocated-cache forward, ``fast`` the compiled multi-position pass (runner.decoding.fast).
A speedup is only meaningful against plain decoding through the same impl.

How many proposals a pass drafts is the schedule's call (``Schedule``), as the engines decide it:
``fixed`` k every pass; ``heuristic`` (Hugging Face's assisted generation) starts at k, +2 after a
fully accepted pass, −1 otherwise, within 1..k_max; ``confidence`` (llama.cpp's ``--draft-p-min``)
drafts while the draft's top probability stays at least p_min, at most k_max.

``verify`` applies the accept rule (runner.decoding.accept_rule), or one of its deliberately broken
variants, in Python or in the C++ verification alike, so that the distribution check can show it
catches them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from runner.decoding.accept_rule import RULE_VARIANTS, accept_rule, argmax, probabilities, sample_index
from runner.decoding.choices import MAX_DRAFT_LENGTH, SCHEDULES, SPECULATIVE_IMPLS
from runner.decoding.decode import uniforms
from runner.model.gpt import CharGPT, KVCache

if TYPE_CHECKING:
    from runner.decoding.drafts import CompiledTable
    from runner.decoding.fast import FastDecoder


@dataclass(frozen=True)
class Schedule:
    """How many proposals each pass drafts. ``k`` is the first pass's length (every pass's for
    ``fixed``); ``k_max`` bounds ``heuristic`` and ``confidence``; ``p_min`` is ``confidence``'s
    threshold on the draft's top probability (runner.decoding.accept_rule.top_probability: greedy,
    its softmax's)."""

    kind: str = "fixed"
    k: int = 4
    k_max: int = 4
    p_min: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.kind!r}")
        if not 1 <= self.k <= self.k_max <= MAX_DRAFT_LENGTH:
            raise ValueError(f"k must be in 1..{MAX_DRAFT_LENGTH} and at most k_max, got k={self.k} k_max={self.k_max}")
        if not 0.0 <= self.p_min <= 1.0:
            raise ValueError(f"p_min must be in 0..1, got {self.p_min}")

    @property
    def longest(self) -> int:
        """The most proposals one pass can draft."""
        return self.k if self.kind == "fixed" else self.k_max

    @property
    def first(self) -> int:
        return self.k_max if self.kind == "confidence" else self.k

    @property
    def threshold(self) -> float:
        """The draft's p_min: 0 (never stop early) but for ``confidence``."""
        return self.p_min if self.kind == "confidence" else 0.0

    def next_length(self, length: int, drafted: int, accepted: int) -> int:
        """The next pass's requested length after a pass that drafted ``drafted`` and kept ``accepted``."""
        if self.kind != "heuristic":
            return length
        return min(self.k_max, length + 2) if accepted == drafted else max(1, length - 1)


def fixed(k: int) -> Schedule:
    return Schedule("fixed", k, k)


# Logits (len(tokens) × vocab) after feeding ``tokens`` from position cache.length; advances the cache.
TargetPass = Callable[[list[int], KVCache], torch.Tensor]


class CompiledTarget:
    """The fast impl's target: its pass, and a verification that runs the pass and the accept rule in
    one C++ call (Python's accept rule costs more than the pass it judges)."""

    def __init__(self, model: CharGPT) -> None:
        from runner.decoding.fast import decoder_for

        self.decoder = decoder_for(model)

    def __call__(self, tokens: list[int], cache: KVCache) -> torch.Tensor:
        return self.decoder.forward(tokens, cache)

    def verify(
        self,
        tokens: list[int],
        cache: KVCache,
        q: torch.Tensor,
        temperature: float,
        randoms: torch.Tensor,
        variant: str = "correct",
    ) -> tuple[int, list[int], list[float]]:
        return self.decoder.verify(tokens, cache, q, temperature, randoms, variant=RULE_VARIANTS.index(variant))


def target_pass(model: CharGPT, impl: str) -> TargetPass:
    if impl == "fast":
        return CompiledTarget(model)
    if impl == "static":

        def eager(tokens: list[int], cache: KVCache) -> torch.Tensor:
            return model.forward_cached(torch.tensor([tokens], device=model.device), cache)[0]

        return eager
    raise ValueError(f"impl must be one of {SPECULATIVE_IMPLS} for speculative decoding, got {impl!r}")


@dataclass
class SpeculativeResult:
    tokens: list[int]
    target_passes: int
    proposed: int
    accepted: int
    # accepted_histogram[a] = passes in which exactly a proposals were accepted (0..k)
    accepted_histogram: list[int]
    # TV(p, q) at every position whose proposal was decided (for 1 − mean TV ≈ acceptance)
    total_variations: list[float]
    # proposals accepted in each pass, in order (each pass emitted that many + 1 tokens)
    accepted_per_pass: list[int] = field(default_factory=list)
    # proposals drafted in each pass (the schedule's choice)
    drafted_per_pass: list[int] = field(default_factory=list)
    # draft calls: one per proposal, and one more in a pass the confidence schedule stopped early
    # (the draft computed the distribution whose top probability was below p_min, then dropped it)
    draft_calls: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def chars_per_target_pass(self) -> float:
        return len(self.tokens) / self.target_passes if self.target_passes else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Accepted proposals per pass + 1 (the correction or bonus), as vLLM reports it."""
        return self.accepted / self.target_passes + 1 if self.target_passes else 0.0

    @property
    def mean_draft_length(self) -> float:
        return self.proposed / self.target_passes if self.target_passes else 0.0

    @property
    def mean_draft_calls(self) -> float:
        return self.draft_calls / self.target_passes if self.target_passes else 0.0

    @property
    def system_efficiency(self) -> float:
        """Tokens emitted ÷ the k + 1 positions the passes verified (1 when every proposal is kept)."""
        verified = self.proposed + self.target_passes
        return (self.accepted + self.target_passes) / verified if verified else 0.0


def acceptance_at_positions(accepted_per_pass: list[int], drafted_per_pass: list[int], longest: int) -> list[float]:
    """For each draft position i in 1..longest: of the passes that drafted at least i proposals,
    the fraction that kept the i-th (and so every one before it). Under independent acceptances
    with probability α this is α^i; clustered rejections bend it. A position no pass drafted is nan."""
    rates = []
    for position in range(1, longest + 1):
        reached = [
            accepted
            for accepted, drafted in zip(accepted_per_pass, drafted_per_pass, strict=True)
            if drafted >= position
        ]
        rates.append(sum(accepted >= position for accepted in reached) / len(reached) if reached else float("nan"))
    return rates


@dataclass(frozen=True)
class Verdict:
    accepted: int  # proposals kept, 0..k
    emitted: list[int]  # the kept proposals, then the correction or bonus token
    total_variations: list[float]  # TV(p, q) at each decided position


def verify(
    run_target: TargetPass,
    cache: KVCache,
    last: int,
    proposals: list[int],
    q: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
    variant: str = "correct",
) -> Verdict:
    """One target pass over the last committed token and the k proposals, and the accept rule.

    Leaves the k + 1 new positions in ``cache``; the caller rolls it back to what was kept.
    ``q`` holds the draft's k distributions (k + 1 for ``bonus_from_draft``, whose bonus token
    is drawn from the last).
    """
    k = len(proposals)
    if isinstance(run_target, CompiledTarget):
        draws = uniforms(2 * k + 1, temperature, generator)
        return Verdict(*run_target.verify([last, *proposals], cache, q, temperature, draws, variant=variant))
    p_rows = probabilities(run_target([last, *proposals], cache).float(), temperature).cpu()
    q_rows = q.float().cpu()
    # TV at every proposed position in one op (only the decided ones are kept).
    decided_variations = (0.5 * (p_rows[:k] - q_rows[:k]).abs().sum(dim=-1)).tolist()
    p, q_list = p_rows.tolist(), q_rows.tolist()
    randoms = uniforms(2 * k + 1, temperature, generator).tolist()
    emitted: list[int] = []
    for index, proposal in enumerate(proposals):
        kept, token = accept_rule(
            p[index], q_list[index], proposal, randoms[2 * index], randoms[2 * index + 1], variant
        )
        emitted.append(token)
        if not kept:
            return Verdict(index, emitted, decided_variations[: index + 1])
    # Every proposal kept: the target's last position gives one more token for free.
    bonus = q_list[k] if variant == "bonus_from_draft" else p[k]
    emitted.append(argmax(bonus) if temperature == 0.0 else sample_index(bonus, randoms[2 * k]))
    return Verdict(k, emitted, decided_variations)


class Draft(Protocol):
    """What the speculative loop needs of a draft: follow the committed text, propose k."""

    name: str

    def start(self, prompt: list[int]) -> None:
        """Forget everything; the committed text is ``prompt``."""
        ...

    def propose(
        self, k: int, temperature: float, generator: torch.Generator | None, p_min: float = 0.0
    ) -> tuple[list[int], torch.Tensor]:
        """Up to k tokens continuing the committed text, and the distributions they were drawn
        from (the i-th by inverse CDF at the i-th of k uniforms drawn from ``generator``; all k are
        drawn whatever is used). It stops before a token whose distribution's top probability is
        below ``p_min`` (never before the first)."""
        ...

    def commit(self, accepted: int, emitted: list[int]) -> None:
        """The first ``accepted`` proposals were kept and ``emitted`` (accepted ones, then the
        correction or bonus token) now extend the committed text."""
        ...

    def distributions(self, tokens: list[int], temperature: float) -> torch.Tensor:
        """The next-token distributions (len(tokens) × vocab) the draft would propose from after
        each prefix of ``tokens``, leaving its state alone (an a-priori prediction reads them on
        held-out text)."""
        ...


@torch.inference_mode()
def speculative_decode(
    target: CharGPT,
    draft: Draft,
    k: int,
    prompt: list[int],
    new_tokens: int,
    *,
    temperature: float = 1.0,
    seed: int = 0,
    impl: str = "static",
    schedule: Schedule | None = None,
    compiled_loop: bool = True,
) -> SpeculativeResult:
    """Generate ``new_tokens`` with the target's distribution, ``k`` draft tokens per target pass
    (or as many as ``schedule`` says, which then overrides k).

    With the fast impl and a draft that proposes through the compiled path, the whole loop runs in
    one C++ call (``_compiled_loop``) unless ``compiled_loop`` is False; it emits the same tokens.

    The target's cache holds every committed token but the last, which is fed first in the
    next verification pass together with the proposals (k + 1 positions in one pass). After
    a rejection the cache is rolled back to the committed text by resetting its length.
    """
    if schedule is None:
        if not 1 <= k <= MAX_DRAFT_LENGTH:
            raise ValueError(f"k must be in 1..{MAX_DRAFT_LENGTH}, got {k}")
        schedule = fixed(k)
    if not prompt:
        raise ValueError("prompt must hold at least one token")
    longest = schedule.longest
    capacity = len(prompt) + new_tokens + longest
    if capacity > target.config.context_length:
        raise ValueError(
            f"prompt + new tokens + k = {capacity} exceeds the model context {target.config.context_length}"
        )
    run_target = target_pass(target, impl)
    generator = torch.Generator(device=target.device).manual_seed(seed)
    cache = target.new_cache(capacity=capacity)
    if len(prompt) > 1:
        run_target(prompt[:-1], cache)
    draft.start(prompt)
    if compiled_loop and new_tokens > 0 and runs_compiled(run_target, draft):
        assert isinstance(run_target, CompiledTarget)
        return _compiled_loop(run_target, draft, cache, prompt, new_tokens, temperature, generator, schedule)
    last = prompt[-1]
    committed = len(prompt)
    output: list[int] = []
    result = SpeculativeResult([], 0, 0, 0, [0] * (longest + 1), [])
    length = schedule.first
    while len(output) < new_tokens:
        proposals, q = draft.propose(length, temperature, generator, schedule.threshold)
        verdict = verify(run_target, cache, last, proposals, q, temperature, generator)
        result.target_passes += 1
        result.proposed += len(proposals)
        result.total_variations += verdict.total_variations
        result.accepted += verdict.accepted
        result.accepted_histogram[verdict.accepted] += 1
        result.accepted_per_pass.append(verdict.accepted)
        result.drafted_per_pass.append(len(proposals))
        result.draft_calls += len(proposals) + (len(proposals) < length)
        cache.length = committed + verdict.accepted  # keep the committed text and the accepted proposals
        draft.commit(verdict.accepted, verdict.emitted)
        output += verdict.emitted
        committed += len(verdict.emitted)
        last = verdict.emitted[-1]
        length = schedule.next_length(length, len(proposals), verdict.accepted)
    result.tokens = output[:new_tokens]
    return result


@runtime_checkable
class CompiledDraft(Protocol):
    """A draft that can hand its state to the compiled loop (runner.decoding.drafts.ModelDraft)."""

    def compiled_decoder(self) -> FastDecoder | None:
        """Its compiled decoder, or None when it proposes in Python."""
        ...

    def loop_state(self) -> tuple[KVCache, list[int]]:
        """Its cache and the committed tokens it has not fed."""
        ...

    def follow(self, text: list[int]) -> None:
        """After the compiled loop: ``text`` is the committed text, its cache (length set by the loop)
        holds a prefix of it and the rest waits to be fed."""
        ...


@runtime_checkable
class CompiledTableDraft(Protocol):
    """A draft that the compiled loop reads as a table (runner.decoding.drafts.ContextTableDraft)."""

    def table_compiles(self) -> bool:
        """Whether the loop can read it (else it proposes in Python)."""
        ...

    def compiled_table(self, temperature: float) -> CompiledTable | None:
        """Its rows at ``temperature`` as the loop reads them, or None when it proposes in Python."""
        ...

    def history(self) -> list[int]:
        """The committed tokens its next proposal reads."""
        ...

    def follow(self, text: list[int]) -> None:
        """After the compiled loop: ``text`` is the committed text."""
        ...


SCHEDULE_KINDS = {"fixed": 0, "heuristic": 1, "confidence": 2}  # speculative_loop.h ScheduleKind


def runs_compiled(run_target: TargetPass, draft: Draft) -> bool:
    """Whether speculative_decode runs this target pass and draft in one C++ call: the fast impl's
    target with a draft that proposes through the compiled path, or with a context table (an n-gram or
    bigram draft) that the loop can read."""
    if not isinstance(run_target, CompiledTarget):
        return False
    if isinstance(draft, CompiledTableDraft):
        return draft.table_compiles()
    if not isinstance(draft, CompiledDraft):
        return False
    decoder = draft.compiled_decoder()
    # One library runs both packed models: a draft built for another instruction set proposes in Python.
    return decoder is not None and decoder._library is run_target.decoder._library


def _compiled_loop(
    target: CompiledTarget,
    draft: Draft,
    cache: KVCache,
    prompt: list[int],
    new_tokens: int,
    temperature: float,
    generator: torch.Generator,
    schedule: Schedule,
) -> SpeculativeResult:
    """speculative_decode's loop in one C++ call: the uniforms every pass could read drawn at once
    (torch's float64 stream is the same drawn at once or in parts, so the tokens are the Python
    loop's), the result assembled from what the loop reports."""
    from runner.decoding import fast_loop

    most = new_tokens * (3 * schedule.longest + 1)  # every pass emits at least one token
    draws = uniforms(most, temperature, generator)
    kind = (SCHEDULE_KINDS[schedule.kind], schedule.k, schedule.k_max, schedule.threshold)
    if isinstance(draft, CompiledTableDraft):
        table = draft.compiled_table(temperature)
        assert table is not None, "runs_compiled: a table the loop reads"
        outcome = fast_loop.speculate_table(
            target.decoder, table, draft.history(), cache, prompt[-1], new_tokens, kind, temperature, draws
        )
        draft.follow(prompt + outcome.emitted)
    else:
        assert isinstance(draft, CompiledDraft)
        decoder = draft.compiled_decoder()
        assert decoder is not None
        draft_cache, pending = draft.loop_state()
        state = fast_loop.LoopState(cache, draft_cache, prompt[-1], pending)
        outcome = fast_loop.speculate(target.decoder, decoder, state, new_tokens, kind, temperature, draws)
        text = prompt + outcome.emitted
        draft.follow(text)
        assert len(text) - draft_cache.length == outcome.unfed, "the loop and the draft disagree on what it fed"

    histogram = [0] * (schedule.longest + 1)
    for accepted in outcome.accepted_per_pass:
        histogram[accepted] += 1
    return SpeculativeResult(
        tokens=outcome.emitted[:new_tokens],
        target_passes=len(outcome.accepted_per_pass),
        proposed=sum(outcome.drafted_per_pass),
        accepted=sum(outcome.accepted_per_pass),
        accepted_histogram=histogram,
        total_variations=outcome.total_variations,
        accepted_per_pass=outcome.accepted_per_pass,
        drafted_per_pass=outcome.drafted_per_pass,
        draft_calls=outcome.draft_calls,
    )
