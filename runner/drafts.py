"""Drafts for speculative decoding, all behind ``runner.decode.Draft``.

- ``BigramDraft``: a next-character table counted from the training text.
- ``NGramDraft``: the next character after the last order−1 characters, backing off to
  shorter contexts where the training text never showed the longer one.
- ``ModelDraft``: any model with the CharGPT decode API (the int8 or 4-bit quantized target,
  or a small trained model), keeping its own KV cache in step with the committed text; a
  float32 model can propose through the compiled fast step.
"""

from __future__ import annotations

import torch

from runner.decode import probabilities
from runner.model import CharGPT, KVCache


def _draw(distribution: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    if temperature == 0.0 or generator is None:
        return int(distribution.argmax())
    # Table drafts live on the CPU; the loop's generator lives on the target's device.
    return int(torch.multinomial(distribution.to(generator.device), 1, generator=generator)[0])


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


class NGramDraft:
    """q(next | last order−1 characters) from the training text, add-one smoothed over the
    vocabulary, backing off to the longest context that the text contains."""

    def __init__(self, tokens: torch.Tensor, vocab_size: int, order: int = 4, name: str = "ngram") -> None:
        if order < 2:
            raise ValueError("an n-gram draft needs order 2 or more")
        self.order, self.vocab_size, self.name = order, vocab_size, name
        sequence = tokens.tolist()
        # counts[length][context] = next-token counts, for every context length 0..order−1
        self.counts: list[dict[tuple[int, ...], dict[int, int]]] = [{} for _ in range(order)]
        for index in range(len(sequence)):
            following = sequence[index]
            for length in range(order):
                if index - length < 0:
                    break
                context = tuple(sequence[index - length : index])
                table = self.counts[length].setdefault(context, {})
                table[following] = table.get(following, 0) + 1
        self._distributions: dict[tuple[int, ...], torch.Tensor] = {}
        self._history: list[int] = []

    def distribution(self, history: list[int]) -> torch.Tensor:
        for length in range(min(self.order - 1, len(history)), -1, -1):
            context = tuple(history[len(history) - length :]) if length else ()
            if context in self.counts[length]:
                cached = self._distributions.get(context)
                if cached is None:
                    counts = torch.ones(self.vocab_size)
                    for token, count in self.counts[length][context].items():
                        counts[token] += count
                    cached = self._distributions[context] = (counts / counts.sum()).log()
                return cached
        return torch.full((self.vocab_size,), -float(torch.log(torch.tensor(float(self.vocab_size)))))

    def start(self, prompt: list[int]) -> None:
        self._history = list(prompt[-(self.order - 1) :])

    def propose(self, k: int, temperature: float, generator: torch.Generator | None) -> tuple[list[int], torch.Tensor]:
        history = list(self._history)
        tokens, distributions = [], []
        for _ in range(k):
            distribution = probabilities(self.distribution(history), temperature)
            token = _draw(distribution, temperature, generator)
            tokens.append(token)
            distributions.append(distribution)
            history.append(token)
        return tokens, torch.stack(distributions)

    def commit(self, accepted: int, emitted: list[int]) -> None:
        self._history = (self._history + emitted)[-(self.order - 1) :]


class ModelDraft:
    """A model proposing with its own cache. Its cache holds every token it has fed; tokens
    committed but not yet fed wait in ``_pending``."""

    def __init__(self, model: CharGPT, name: str, fast: bool = False) -> None:
        self.model = model
        self.name = name
        self._fast = None
        if fast:
            from runner.fast_decode import decoder_for

            self._fast = decoder_for(model)
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
            if self._fast is not None:
                for token in feed[0].tolist():
                    logits = self._fast.step(token, self._cache)
            else:
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
