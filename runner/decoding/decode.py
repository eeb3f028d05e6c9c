"""Decoding loops: with and without the KV cache, greedy or seeded sampling, in three impls
(speculative decoding lives in runner.decoding.speculative)."""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

import torch

from runner.decoding.choices import COMPILED, IMPLS
from runner.decoding.stepper import Stepper
from runner.model.gpt import CharGPT


@dataclass(frozen=True)
class Generation:
    tokens: list[int]
    # Logits of every generated position (steps × vocab), kept only when asked for.
    logits: torch.Tensor | None


def choose_token(logits: torch.Tensor, temperature: float, uniform: float) -> torch.Tensor:
    """The next token (1 × 1): the argmax at temperature 0, else the inverse CDF of
    softmax(logits / temperature) at ``uniform``, as the compiled path chooses (one uniform per
    token, so every impl draws the same tokens from the same seed)."""
    if temperature == 0.0:
        return logits.argmax(dim=-1, keepdim=True)
    distribution = torch.softmax(logits / temperature, dim=-1)
    if logits.device.type == "cpu":
        # In Python the cumulative sum is one C call and a bisection, cheaper than the tensor
        # ops (which a GPU keeps, to avoid a synchronisation per token).
        return torch.tensor([[inverse_cdf(list(itertools.accumulate(distribution[0].tolist())), uniform)]])
    return inverse_cdf_on_device(distribution, uniform)


def inverse_cdf(cumulative: list[float], uniform: float) -> int:
    """The first index whose cumulative weight exceeds ``uniform`` × the total (how every impl
    draws a token from one uniform)."""
    return min(bisect.bisect_right(cumulative, uniform * cumulative[-1]), len(cumulative) - 1)


def inverse_cdf_on_device(distribution: torch.Tensor, uniform: float) -> torch.Tensor:
    """The same choice as the CPU path in tensor ops, on the distribution's device (1 × 1)."""
    cumulative = distribution.double().cumsum(dim=-1)
    index = torch.searchsorted(cumulative, cumulative[..., -1:] * uniform, right=True)
    return index.clamp_(max=distribution.shape[-1] - 1)


def uniforms(count: int, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """``count`` float64 uniforms in [0, 1) from ``generator`` (zeros at temperature 0, where
    nothing is drawn), on the CPU where the choosing happens."""
    if temperature == 0.0 or generator is None:
        return torch.zeros(count, dtype=torch.float64)
    return torch.rand(count, generator=generator, dtype=torch.float64, device=generator.device).cpu()


def first_difference(first: list[int], second: list[int]) -> int:
    """The first position (0-based) where two generations differ; their length if they never do."""
    return next((index for index, (a, b) in enumerate(zip(first, second, strict=True)) if a != b), len(first))


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
    causal_mask: bool = True,
) -> Generation:
    """Generate ``new_tokens`` after ``prompt``; temperature 0 is greedy.

    Without the cache every step feeds the whole sequence so far (contexts of len(prompt)
    .. len(prompt)+new_tokens−1); with it the prompt is prefilled once and each step feeds
    only the newest token. The last generated token is never fed, so a full-context
    generation may use every position of the model.

    ``impl`` picks how a step runs, with the cache and without it alike, so that a cache's
    speedup is measured within one impl: ``naive`` grows K/V with ``torch.cat`` and builds a
    new input tensor from Python ints every step (the write-ups' loop); ``static`` writes into
    a preallocated cache (its no-cache path is the eager full forward); ``fast`` runs the
    whole generation in compiled C++ (runner.decoding.fast), its no-cache path a compiled
    full-prefix forward per step; ``compiled`` (cached only) runs each step through
    torch.compile's code for the static-cache step (runner.decoding.compiled).
    """
    if impl not in (*IMPLS, COMPILED):
        raise ValueError(f"impl must be one of {(*IMPLS, COMPILED)}, got {impl!r}")
    if impl == COMPILED and (not use_cache or cache_rounding is not None):
        raise ValueError("the compiled impl decodes with an exact cache only")
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
    if not causal_mask and (impl != "static" or use_cache):
        raise ValueError("the mask can be removed only from the static no-cache path")
    device = model.device
    generator = torch.Generator(device=device).manual_seed(seed) if temperature > 0 else None
    draws = uniforms(new_tokens, temperature, generator)
    if impl == "fast" and not keep_logits and new_tokens > 0:
        from runner.decoding.fast import decoder_for

        # No Python between steps: the whole loop, sampling included, runs in C++.
        decoder = decoder_for(model)
        if not use_cache:
            return Generation(tokens=decoder.sample_no_cache(prompt, new_tokens, temperature, draws), logits=None)
        return Generation(tokens=decoder.generate(prompt, new_tokens, temperature, draws), logits=None)
    if impl == COMPILED:
        from runner.decoding.compiled import compiled_steps

        next_logits = compiled_steps(model, prompt, positions)
    elif impl == "naive":
        next_logits = _naive_steps(model, prompt) if use_cache else _naive_no_cache_steps(model, prompt)
    elif impl == "fast":
        next_logits = _fast_steps(model, prompt, positions) if use_cache else _fast_no_cache_steps(model, prompt)
    else:
        next_logits = _static_steps(model, prompt, positions if use_cache else 0, cache_rounding, causal_mask)
    draw_list = draws.tolist()
    generated: list[torch.Tensor] = []
    kept: list[torch.Tensor] = []
    logits = next(next_logits)
    for step in range(new_tokens):
        if keep_logits:
            kept.append(logits[0].clone())
        token = choose_token(logits, temperature, draw_list[step])
        generated.append(token)
        if step < new_tokens - 1:
            logits = next_logits.send(token)
    tokens = torch.cat(generated, dim=1)[0].tolist() if generated else []
    return Generation(tokens=tokens, logits=torch.stack(kept) if keep_logits else None)


def _static_steps(
    model: CharGPT, prompt: list[int], capacity: int, rounding: str | None, causal_mask: bool = True
) -> Stepper:
    sequence = torch.tensor([prompt], dtype=torch.long, device=model.device)
    if capacity == 0:  # no cache: feed the whole sequence every step
        while True:
            token = yield model(sequence, causal=causal_mask)[:, -1, :]
            sequence = torch.cat([sequence, token], dim=1)
    cache = model.new_cache(capacity=capacity, rounding=rounding)
    step_input = sequence
    while True:
        step_input = yield model.forward_cached(step_input, cache)[:, -1, :]


def _naive_no_cache_steps(model: CharGPT, prompt: list[int]) -> Stepper:
    sequence = list(prompt)
    while True:
        # As the write-ups' loop does: a fresh input tensor from the Python list every step.
        token = yield model(torch.tensor([sequence], device=model.device))[:, -1, :]
        sequence.append(int(token))


def _fast_no_cache_steps(model: CharGPT, prompt: list[int]) -> Stepper:
    from runner.decoding.fast import decoder_for

    decoder = decoder_for(model)
    sequence = list(prompt)
    while True:
        # Every step a full-prefix pass from position 0 into a fresh scratch buffer.
        scratch = model.new_cache(capacity=len(sequence))
        token = yield decoder.forward(sequence, scratch)[-1].unsqueeze(0)
        sequence.append(int(token))


def _naive_steps(model: CharGPT, prompt: list[int]) -> Stepper:
    logits, past = model.forward_naive(torch.tensor([prompt], dtype=torch.long, device=model.device))
    while True:
        token = yield logits[:, -1, :]
        # The write-ups build a fresh input tensor from a Python int every step.
        logits, past = model.forward_naive(torch.tensor([[int(token)]], device=model.device), past)


def _fast_steps(model: CharGPT, prompt: list[int], capacity: int) -> Stepper:
    from runner.decoding.fast import decoder_for

    decoder = decoder_for(model)
    cache = model.new_cache(capacity=capacity)
    logits = decoder.forward(prompt, cache)[-1]
    while True:
        chosen = yield logits.unsqueeze(0)
        logits = decoder.step(int(chosen), cache)
