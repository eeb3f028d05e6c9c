"""Decoding loops: with and without the KV cache, greedy or seeded sampling, and speculative
decoding with any draft that follows the ``Draft`` protocol."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Protocol

import torch
from torch.nn import functional as F

from runner.model import CharGPT, KVCache


@dataclass(frozen=True)
class Generation:
    tokens: list[int]
    # Logits of every generated position (steps × vocab), kept only when asked for.
    logits: torch.Tensor | None


def _choose(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    if temperature == 0.0:
        return logits.argmax(dim=-1, keepdim=True)
    probabilities = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probabilities, 1, generator=generator)


IMPLS = ("naive", "static", "fast")


@torch.inference_mode()
def generate(
    model: CharGPT,
    prompt: list[int],
    new_tokens: int,
    *,
    use_cache: bool = True,
    temperature: float = 1.0,
    seed: int = 0,
    keep_logits: bool = False,
    cache_rounding: str | None = None,
    impl: str = "static",
) -> Generation:
    """Generate ``new_tokens`` after ``prompt``; temperature 0 is greedy.

    Without the cache every step feeds the whole sequence so far (contexts of len(prompt)
    .. len(prompt)+new_tokens−1); with it the prompt is prefilled once and each step feeds
    only the newest token. The last generated token is never fed, so a full-context
    generation may use every position of the model.

    ``impl`` picks how a cached step runs: ``naive`` grows K/V with ``torch.cat`` and builds a
    new input tensor every step (the write-ups' loop); ``static`` writes into a preallocated
    cache; ``fast`` runs the whole step in one compiled C++ call (runner.fast_decode).
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if not prompt:
        raise ValueError("prompt must hold at least one token")
    positions = len(prompt) + new_tokens - 1
    if positions > model.config.context_length:
        raise ValueError(
            f"prompt ({len(prompt)}) + new tokens ({new_tokens}) need {positions} positions, more than the "
            f"model context ({model.config.context_length})"
        )
    if cache_rounding is not None and (impl != "static" or not use_cache):
        raise ValueError("a rounded cache exists only on the static cached path")
    device = model.device
    if use_cache and impl == "fast" and temperature == 0.0 and not keep_logits and new_tokens > 0:
        from runner.fast_decode import decoder_for

        # Greedy needs no Python between steps: the whole loop runs in C++.
        cache = model.new_cache(capacity=positions)
        return Generation(tokens=decoder_for(model).greedy(prompt, new_tokens, cache), logits=None)
    generator = torch.Generator(device=device).manual_seed(seed) if temperature > 0 else None
    if use_cache and impl == "naive":
        next_logits = _naive_steps(model, prompt)
    elif use_cache and impl == "fast":
        next_logits = _fast_steps(model, prompt, positions)
    else:
        next_logits = _static_steps(model, prompt, positions if use_cache else 0, cache_rounding)
    generated: list[torch.Tensor] = []
    kept: list[torch.Tensor] = []
    logits = next(next_logits)
    for step in range(new_tokens):
        if keep_logits:
            kept.append(logits[0].clone())
        token = _choose(logits, temperature, generator)
        generated.append(token)
        if step < new_tokens - 1:
            logits = next_logits.send(token)
    tokens = torch.cat(generated, dim=1)[0].tolist() if generated else []
    return Generation(tokens=tokens, logits=torch.stack(kept) if keep_logits else None)


# Each stepper yields the logits (1 × vocab) for the next position and is sent the chosen token.
Stepper = Generator[torch.Tensor, torch.Tensor, None]


def _static_steps(model: CharGPT, prompt: list[int], capacity: int, rounding: str | None) -> Stepper:
    sequence = torch.tensor([prompt], dtype=torch.long, device=model.device)
    if capacity == 0:  # no cache: feed the whole sequence every step
        while True:
            token = yield model(sequence)[:, -1, :]
            sequence = torch.cat([sequence, token], dim=1)
    cache = model.new_cache(capacity=capacity, rounding=rounding)
    step_input = sequence
    while True:
        step_input = yield model.forward_cached(step_input, cache)[:, -1, :]


def _naive_steps(model: CharGPT, prompt: list[int]) -> Stepper:
    logits, past = model.forward_naive(torch.tensor([prompt], dtype=torch.long, device=model.device))
    while True:
        token = yield logits[:, -1, :]
        # The write-ups build a fresh input tensor from a Python int every step.
        logits, past = model.forward_naive(torch.tensor([[int(token)]], device=model.device), past)


def _fast_steps(model: CharGPT, prompt: list[int], capacity: int) -> Stepper:
    from runner.fast_decode import decoder_for

    decoder = decoder_for(model)
    cache = model.new_cache(capacity=capacity)
    for token in prompt:
        logits = decoder.step(token, cache)
    while True:
        chosen = yield logits.unsqueeze(0)
        logits = decoder.step(int(chosen), cache)


# ---- speculative decoding ----------------------------------------------------------------


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
    target: CharGPT,
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
    device = target.device
    step = torch.tensor([[last, *proposals]], device=device)
    p = probabilities(target.forward_cached(step, cache)[0].float(), temperature).tolist()
    q_rows = q.tolist()
    randoms = (
        torch.rand(2 * k + 1, generator=generator, device=device).tolist() if temperature > 0 else [0.5] * (2 * k + 1)
    )
    emitted: list[int] = []
    total_variations: list[float] = []
    for index, proposal in enumerate(proposals):
        total_variations.append(0.5 * sum(abs(a - b) for a, b in zip(p[index], q_rows[index], strict=True)))
        kept, token = accept_rule(p[index], q_rows[index], proposal, randoms[2 * index], randoms[2 * index + 1])
        emitted.append(token)
        if not kept:
            return Verdict(index, emitted, total_variations)
    # Every proposal kept: the target's last position gives one more token for free.
    bonus = p[k]
    emitted.append(argmax(bonus) if temperature == 0.0 else sample_index(bonus, randoms[2 * k]))
    accepted = k
    return Verdict(accepted, emitted, total_variations)


class Draft(Protocol):
    """What the speculative loop needs of a draft: follow the committed text, propose k."""

    name: str

    def start(self, prompt: list[int]) -> None:
        """Forget everything; the committed text is ``prompt``."""
        ...

    def propose(self, k: int, temperature: float, generator: torch.Generator | None) -> tuple[list[int], torch.Tensor]:
        """k tokens continuing the committed text, and the k × vocab distributions they were drawn from."""
        ...

    def commit(self, accepted: int, emitted: list[int]) -> None:
        """The first ``accepted`` proposals were kept and ``emitted`` (accepted ones, then the
        correction or bonus token) now extend the committed text."""
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
    device = target.device
    generator = torch.Generator(device=device).manual_seed(seed)
    cache = target.new_cache(capacity=capacity)
    if len(prompt) > 1:
        target.forward_cached(torch.tensor([prompt[:-1]], device=device), cache)
    draft.start(prompt)
    last = prompt[-1]
    committed = len(prompt)
    output: list[int] = []
    result = SpeculativeResult([], 0, 0, 0, [0] * (k + 1), [])
    while len(output) < new_tokens:
        proposals, q = draft.propose(k, temperature, generator)
        verdict = verify(target, cache, last, proposals, q, temperature, generator)
        result.target_passes += 1
        result.proposed += k
        result.total_variations += verdict.total_variations
        result.accepted += verdict.accepted
        result.accepted_histogram[verdict.accepted] += 1
        cache.length = committed + verdict.accepted  # keep the committed text and the accepted proposals
        draft.commit(verdict.accepted, verdict.emitted)
        output += verdict.emitted
        committed += len(verdict.emitted)
        last = verdict.emitted[-1]
    result.tokens = output[:new_tokens]
    return result
