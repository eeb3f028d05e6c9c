"""Speculative decoding: a draft proposes k tokens, the target checks all k + 1 positions in one
pass, and the accept rule keeps the target's distribution exactly.

The target pass runs through an impl, as plain decoding does (runner.decode): ``static`` is the
eager preallocated-cache forward, ``fast`` the compiled multi-position pass (runner.fast_decode).
A speedup is only meaningful against plain decoding through the same impl.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch.nn import functional as F

from runner.decode import uniforms
from runner.model import CharGPT, KVCache

SPECULATIVE_IMPLS = ("static", "fast")

# Logits (len(tokens) × vocab) after feeding ``tokens`` from position cache.length; advances the cache.
TargetPass = Callable[[list[int], KVCache], torch.Tensor]


class CompiledTarget:
    """The fast impl's target: its pass, and a verification that runs the pass and the accept rule in
    one C++ call (Python's accept rule costs more than the pass it judges)."""

    def __init__(self, model: CharGPT) -> None:
        from runner.fast_decode import decoder_for

        self.decoder = decoder_for(model)

    def __call__(self, tokens: list[int], cache: KVCache) -> torch.Tensor:
        return self.decoder.forward(tokens, cache)

    def verify(self, *arguments: Any) -> tuple[int, list[int], list[float]]:
        return self.decoder.verify(*arguments)


def target_pass(model: CharGPT, impl: str) -> TargetPass:
    if impl == "fast":
        return CompiledTarget(model)
    if impl == "static":

        def eager(tokens: list[int], cache: KVCache) -> torch.Tensor:
            return model.forward_cached(torch.tensor([tokens], device=model.device), cache)[0]

        return eager
    raise ValueError(f"impl must be one of {SPECULATIVE_IMPLS} for speculative decoding, got {impl!r}")


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The sampling distribution at this temperature; temperature 0 is the one-hot argmax,
    which turns the accept rule below into "accept iff the draft matches the target's argmax"."""
    if temperature == 0.0:
        return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits / temperature, dim=-1)


def accept_rule(p: list[float], q: list[float], proposal: int, uniform: float, draw: float) -> tuple[bool, int]:
    """The speculative rule at one position, on plain lists (k is small; tensor ops would cost
    more in dispatch than the arithmetic).

    Accept proposal x with probability min(1, p(x)/q(x)); otherwise emit the token at which the
    cumulative normalize(max(0, p − q)) first exceeds ``draw`` (a uniform in [0, 1)). Together
    the two branches emit exactly p. With one-hot p and q (greedy) it accepts exactly when the
    draft matches the target's argmax, and otherwise emits that argmax.
    """
    if uniform * q[proposal] < p[proposal]:  # u < p/q without dividing by a zero q
        return True, proposal
    residual = [max(0.0, a - b) for a, b in zip(p, q, strict=True)]
    if sum(residual) <= 0.0:  # p == q: nothing to correct towards (unreachable: p/q would be 1)
        residual = p
    return False, sample_index(residual, draw)


def argmax(weights: list[float]) -> int:
    return max(range(len(weights)), key=weights.__getitem__)


def sample_index(weights: list[float], draw: float) -> int:
    """The index where the cumulative weights first exceed ``draw`` × their total."""
    threshold, running = draw * sum(weights), 0.0
    for index, weight in enumerate(weights):
        running += weight
        if weight > 0.0 and running > threshold:
            return index
    return argmax(weights)  # rounding left the threshold unreached


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

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def chars_per_target_pass(self) -> float:
        return len(self.tokens) / self.target_passes if self.target_passes else 0.0


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
) -> Verdict:
    """One target pass over the last committed token and the k proposals, and the accept rule.

    Leaves the k + 1 new positions in ``cache``; the caller rolls it back to what was kept.
    """
    k = len(proposals)
    if isinstance(run_target, CompiledTarget):
        draws = uniforms(2 * k + 1, temperature, generator)
        return Verdict(*run_target.verify([last, *proposals], cache, q, temperature, draws))
    p_rows = probabilities(run_target([last, *proposals], cache).float(), temperature).cpu()
    q_rows = q.float().cpu()
    # TV at every proposed position in one op (only the decided ones are kept).
    decided_variations = (0.5 * (p_rows[:k] - q_rows).abs().sum(dim=-1)).tolist()
    p, q_list = p_rows.tolist(), q_rows.tolist()
    randoms = uniforms(2 * k + 1, temperature, generator).tolist()
    emitted: list[int] = []
    for index, proposal in enumerate(proposals):
        kept, token = accept_rule(p[index], q_list[index], proposal, randoms[2 * index], randoms[2 * index + 1])
        emitted.append(token)
        if not kept:
            return Verdict(index, emitted, decided_variations[: index + 1])
    # Every proposal kept: the target's last position gives one more token for free.
    bonus = p[k]
    emitted.append(argmax(bonus) if temperature == 0.0 else sample_index(bonus, randoms[2 * k]))
    return Verdict(k, emitted, decided_variations)


class Draft(Protocol):
    """What the speculative loop needs of a draft: follow the committed text, propose k."""

    name: str

    def start(self, prompt: list[int]) -> None:
        """Forget everything; the committed text is ``prompt``."""
        ...

    def propose(self, k: int, temperature: float, generator: torch.Generator | None) -> tuple[list[int], torch.Tensor]:
        """k tokens continuing the committed text, and the k × vocab distributions they were drawn
        from (the i-th by inverse CDF at the i-th of k uniforms drawn from ``generator``)."""
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
) -> SpeculativeResult:
    """Generate ``new_tokens`` with the target's distribution, ``k`` draft tokens per target pass.

    The target's cache holds every committed token but the last, which is fed first in the
    next verification pass together with the k proposals (k + 1 positions in one pass). After
    a rejection the cache is rolled back to the committed text by resetting its length.
    """
    if not 1 <= k <= 16:
        raise ValueError(f"k must be in 1..16, got {k}")
    if not prompt:
        raise ValueError("prompt must hold at least one token")
    capacity = len(prompt) + new_tokens + k
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
    last = prompt[-1]
    committed = len(prompt)
    output: list[int] = []
    result = SpeculativeResult([], 0, 0, 0, [0] * (k + 1), [])
    while len(output) < new_tokens:
        proposals, q = draft.propose(k, temperature, generator)
        verdict = verify(run_target, cache, last, proposals, q, temperature, generator)
        result.target_passes += 1
        result.proposed += k
        result.total_variations += verdict.total_variations
        result.accepted += verdict.accepted
        result.accepted_histogram[verdict.accepted] += 1
        result.accepted_per_pass.append(verdict.accepted)
        cache.length = committed + verdict.accepted  # keep the committed text and the accepted proposals
        draft.commit(verdict.accepted, verdict.emitted)
        output += verdict.emitted
        committed += len(verdict.emitted)
        last = verdict.emitted[-1]
    result.tokens = output[:new_tokens]
    return result
