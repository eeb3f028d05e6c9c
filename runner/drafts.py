"""Drafts for speculative decoding, all behind ``runner.decode.Draft``.

- ``BigramDraft``: a next-character table counted from the training text.
- ``ModelDraft``: any model with the CharGPT decode API (the int8 or 4-bit quantized target,
  or a small trained model), keeping its own KV cache in step with the committed text.
"""

from __future__ import annotations

import torch

from runner.decode import probabilities
from runner.model import CharGPT, KVCache


def _draw(distribution: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    if temperature == 0.0 or generator is None:
        return int(distribution.argmax())
    return int(torch.multinomial(distribution, 1, generator=generator)[0])


class BigramDraft:
    """q(next | previous character) from counts over the training text (add-one smoothed)."""

    def __init__(self, tokens: torch.Tensor, vocab_size: int, name: str = "bigram") -> None:
        counts = torch.ones(vocab_size, vocab_size)
        counts.index_put_((tokens[:-1], tokens[1:]), torch.ones(len(tokens) - 1), accumulate=True)
        self.log_table = (counts / counts.sum(dim=-1, keepdim=True)).log()
        self.name = name
        self._last = 0

    def start(self, prompt: list[int]) -> None:
        self._last = prompt[-1]

    def propose(self, k: int, temperature: float, generator: torch.Generator | None) -> tuple[list[int], torch.Tensor]:
        tokens, distributions = [], []
        previous = self._last
        for _ in range(k):
            distribution = probabilities(self.log_table[previous], temperature)
            previous = _draw(distribution, temperature, generator)
            tokens.append(previous)
            distributions.append(distribution)
        return tokens, torch.stack(distributions)

    def commit(self, accepted: int, emitted: list[int]) -> None:
        self._last = emitted[-1]


class ModelDraft:
    """A model proposing with its own cache. Its cache holds every token it has fed; tokens
    committed but not yet fed wait in ``_pending``."""

    def __init__(self, model: CharGPT, name: str) -> None:
        self.model = model
        self.name = name
        self._cache: KVCache | None = None
        self._pending: list[int] = []
        self._fed_proposals = 0

    def start(self, prompt: list[int]) -> None:
        self._cache = self.model.new_cache()
        self._pending = list(prompt)

    @torch.inference_mode()
    def propose(self, k: int, temperature: float, generator: torch.Generator | None) -> tuple[list[int], torch.Tensor]:
        assert self._cache is not None, "start() first"
        device = self.model.device
        feed = torch.tensor([self._pending], device=device)
        self._committed_length = self._cache.length + len(self._pending)
        tokens, distributions = [], []
        for index in range(k):
            logits = self.model.forward_cached(feed, self._cache)[0, -1]
            distribution = probabilities(logits.float(), temperature)
            token = _draw(distribution, temperature, generator)
            tokens.append(token)
            distributions.append(distribution)
            if index < k - 1:
                feed = torch.tensor([[token]], device=device)
        self._pending = []
        return tokens, torch.stack(distributions)

    def commit(self, accepted: int, emitted: list[int]) -> None:
        assert self._cache is not None
        # Fed so far: the committed text and proposals 1..k−1. Keep the accepted ones.
        fed_proposals = self._cache.length - self._committed_length
        kept = min(accepted, fed_proposals)
        self._cache.length = self._committed_length + kept
        self._pending = emitted[kept:]
