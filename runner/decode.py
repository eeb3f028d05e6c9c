"""Decoding loops: with and without the KV cache, greedy or seeded sampling."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from runner.model import CharGPT


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
) -> Generation:
    """Generate ``new_tokens`` after ``prompt``; temperature 0 is greedy.

    Without the cache every step feeds the whole sequence so far (contexts of len(prompt)
    .. len(prompt)+new_tokens−1); with it the prompt is prefilled once and each step feeds
    only the newest token. The last generated token is never fed, so a full-context
    generation may use every position of the model.
    """
    if not prompt:
        raise ValueError("prompt must hold at least one token")
    positions = len(prompt) + new_tokens - 1
    if positions > model.config.context_length:
        raise ValueError(
            f"prompt ({len(prompt)}) + new tokens ({new_tokens}) need {positions} positions, more than the "
            f"model context ({model.config.context_length})"
        )
    device = model.device
    generator = torch.Generator(device=device).manual_seed(seed) if temperature > 0 else None
    sequence = torch.tensor([prompt], dtype=torch.long, device=device)
    cache = model.new_cache(capacity=positions, rounding=cache_rounding) if use_cache else None
    step_input = sequence
    generated: list[torch.Tensor] = []
    kept: list[torch.Tensor] = []
    for _ in range(new_tokens):
        if cache is not None:
            logits = model.forward_cached(step_input, cache)[:, -1, :]
        else:
            logits = model(sequence)[:, -1, :]
        if keep_logits:
            kept.append(logits[0].clone())
        token = _choose(logits, temperature, generator)
        generated.append(token)
        if cache is None:
            sequence = torch.cat([sequence, token], dim=1)
        step_input = token
    tokens = torch.cat(generated, dim=1)[0].tolist() if generated else []
    return Generation(tokens=tokens, logits=torch.stack(kept) if keep_logits else None)
