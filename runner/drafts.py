"""Drafts for speculative decoding, all behind ``runner.speculative.Draft``.

- ``BigramDraft``: a next-character table counted from the training text (add-one smoothed).
- ``NGramDraft``: the next character after the last order−1 characters, interpolated with
  shorter contexts by absolute discounting.
- ``ModelDraft``: any model with the CharGPT decode API (the int8 or 4-bit quantized target,
  or a small trained model), keeping its own KV cache in step with the committed text; a
  float32 model on the CPU proposes through the compiled path, sampling included.

Every draft draws its i-th proposal by inverse CDF at the i-th of k uniforms from the loop's
generator, as plain decoding does.
"""

from __future__ import annotations

import torch

from runner.decode import choose_token, uniforms
from runner.model import CharGPT, KVCache
from runner.speculative import inverse_cdf, probabilities


class ContextTableDraft:
    """A draft whose next-token distribution depends on the last ``history_length`` tokens only.
    Rows are computed once per (context, temperature) and kept with their cumulative sums, so a
    proposal costs a dictionary lookup and a bisection."""

    name = "table"
    history_length = 1

    def __init__(self) -> None:
        self._rows: dict[tuple[tuple[int, ...], float], tuple[torch.Tensor, list[float]]] = {}
        self._history: list[int] = []

    def log_distribution(self, context: tuple[int, ...]) -> torch.Tensor:
        """Log-probabilities (vocab) of the next token after ``context`` (at most history_length tokens)."""
        raise NotImplementedError

    def _row(self, context: tuple[int, ...], temperature: float) -> tuple[torch.Tensor, list[float]]:
        key = (context, temperature)
        row = self._rows.get(key)
        if row is None:
            distribution = probabilities(self.log_distribution(context), temperature)
            row = self._rows[key] = (distribution, distribution.double().cumsum(dim=0).tolist())
        return row

    def start(self, prompt: list[int]) -> None:
        self._history = list(prompt[-self.history_length :])

    def propose(self, k: int, temperature: float, generator: torch.Generator | None) -> tuple[list[int], torch.Tensor]:
        draws = uniforms(k, temperature, generator).tolist()
        history = list(self._history)
        tokens, rows = [], []
        for draw in draws:
            distribution, cumulative = self._row(tuple(history[len(history) - self.history_length :]), temperature)
            token = inverse_cdf(cumulative, draw)  # the argmax at temperature 0, where draws are 0
            tokens.append(token)
            rows.append(distribution)
            history.append(token)
        return tokens, torch.stack(rows)

    def commit(self, accepted: int, emitted: list[int]) -> None:
        self._history = (self._history + emitted)[-self.history_length :]


class BigramDraft(ContextTableDraft):
    """q(next | previous character) from counts over the training text (add-one smoothed)."""

    def __init__(self, tokens: torch.Tensor, vocab_size: int, name: str = "bigram") -> None:
        super().__init__()
        counts = torch.ones(vocab_size, vocab_size)
        counts.index_put_((tokens[:-1], tokens[1:]), torch.ones(len(tokens) - 1), accumulate=True)
        self.log_table = (counts / counts.sum(dim=-1, keepdim=True)).log()
        self.name = name

    def log_distribution(self, context: tuple[int, ...]) -> torch.Tensor:
        return self.log_table[context[-1]]


class NGramDraft(ContextTableDraft):
    """q(next | last order−1 characters) from the training text, by interpolated absolute
    discounting: each context level keeps its counts less ``discount`` and passes the mass it
    freed to the next shorter context, down to the add-one unigram. Unseen contexts defer to
    the longest seen suffix."""

    def __init__(
        self, tokens: torch.Tensor, vocab_size: int, order: int = 3, name: str = "ngram", discount: float = 0.75
    ) -> None:
        super().__init__()
        if order < 2:
            raise ValueError("an n-gram draft needs order 2 or more")
        self.order, self.vocab_size, self.name, self.discount = order, vocab_size, name, discount
        self.history_length = order - 1
        sequence = tokens.tolist()
        # counts[length][context] = next-token counts, for every context length 1..order−1
        self.counts: list[dict[tuple[int, ...], dict[int, int]]] = [{} for _ in range(order)]
        for index in range(1, len(sequence)):
            following = sequence[index]
            for length in range(1, min(order - 1, index) + 1):
                table = self.counts[length].setdefault(tuple(sequence[index - length : index]), {})
                table[following] = table.get(following, 0) + 1
        unigram = torch.bincount(tokens, minlength=vocab_size).double() + 1
        self.unigram = unigram / unigram.sum()

    def log_distribution(self, context: tuple[int, ...]) -> torch.Tensor:
        distribution = self.unigram
        for length in range(1, min(len(context), self.order - 1) + 1):
            table = self.counts[length].get(context[len(context) - length :])
            if table is None:
                break  # no longer context was seen either
            total = sum(table.values())
            level = distribution * (self.discount * len(table) / total)
            for token, count in table.items():
                level[token] += max(count - self.discount, 0.0) / total
            distribution = level
        return distribution.log().float()


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
        self._committed_length = 0

    def start(self, prompt: list[int]) -> None:
        self._cache = self.model.new_cache()
        self._pending = list(prompt)

    @torch.inference_mode()
    def propose(self, k: int, temperature: float, generator: torch.Generator | None) -> tuple[list[int], torch.Tensor]:
        assert self._cache is not None, "start() first"
        draws = uniforms(k, temperature, generator)
        self._committed_length = self._cache.length + len(self._pending)
        feed, self._pending = self._pending, []
        if self._fast is not None:
            return self._fast.sample(feed, k, temperature, draws, self._cache)
        tokens, distributions = [], []
        step = torch.tensor([feed], device=self.model.device)
        for draw in draws.tolist():
            # Feeds the pending text, then each proposal but the last (which may be rejected).
            logits = self.model.forward_cached(step, self._cache)[:, -1].float()
            step = choose_token(logits, temperature, draw)
            tokens.append(int(step))
            distributions.append(probabilities(logits[0], temperature))
        return tokens, torch.stack(distributions)

    def commit(self, accepted: int, emitted: list[int]) -> None:
        assert self._cache is not None
        # Fed so far: the committed text and proposals 1..k−1. Keep the accepted ones.
        fed_proposals = self._cache.length - self._committed_length
        kept = min(accepted, fed_proposals)
        self._cache.length = self._committed_length + kept
        self._pending = emitted[kept:]
