"""Drafts for speculative decoding, all behind ``runner.decoding.speculative.Draft``.

- ``BigramDraft``: a next-character table counted from the training text (add-one smoothed).
- ``NGramDraft``: the next character after the last order−1 characters, interpolated with
  shorter contexts by absolute discounting.
- ``ModelDraft``: any model with the CharGPT decode API (the int8 or 4-bit quantized target,
  or a small trained model), keeping its own KV cache in step with the committed text; a
  float32 model on the CPU proposes through the compiled path, sampling included.

Every draft draws its i-th proposal by inverse CDF at the i-th of k uniforms from the loop's
generator, as plain decoding does, and stops early (the confidence schedule) before a proposal
whose distribution's top probability is below ``p_min``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from runner.decoding.accept_rule import probabilities, top_probability
from runner.decoding.choices import MAX_NGRAM_ORDER
from runner.decoding.decode import choose_token, inverse_cdf, uniforms
from runner.model.gpt import CharGPT, KVCache

if TYPE_CHECKING:
    from runner.decoding.fast import FastDecoder


INT64_LIMIT = 2**63 - 1


@dataclass(frozen=True)
class CompiledTable:
    """A context table at one temperature, as runner/decoding/csrc/speculative_loop.h's Table reads it: per
    context length L (a level), the contexts with a row of their own as numbers in base vocab (first token
    most significant), sorted, at ``keys[level_keys[L]:level_keys[L + 1]]``, each with its row in that
    level's distributions, float64 cumulative sums and top probabilities (the draft's prepared tensors,
    not copies: an n-gram table over a large vocabulary is large)."""

    history_length: int
    level_keys: torch.Tensor  # int64, history_length + 2
    keys: torch.Tensor  # int64
    rows: torch.Tensor  # int64, one a key
    distributions: list[torch.Tensor]  # per level: float32, rows × vocab
    cumulative: list[torch.Tensor]  # per level: float64, rows × vocab
    tops: list[torch.Tensor]  # per level: float32, one a row


def context_number(context: tuple[int, ...], vocab: int) -> int:
    """A context as a number in base ``vocab``, its first token the most significant digit."""
    number = 0
    for token in context:
        number = number * vocab + token
    return number


class ContextTableDraft:
    """A draft whose next-token distribution depends on the last ``history_length`` tokens only,
    read from log-probability tables (``tables``, one row per context it tells apart; ``locate``
    finds a context's row). The first time a temperature is asked for, every table's distributions
    and cumulative sums are computed at once, so a proposal costs dictionary lookups and a
    bisection from the run's first pass on. Computed row by row on first use, an n-gram draft's
    4-token turn cost 24 us on fresh contexts and 8 us on seen ones (the held-out corpus, the
    Xeon): it grew cheaper as a run went on, and the cost sessions timed before its loop priced
    turns that loop no longer paid."""

    name = "table"
    history_length = 1

    def __init__(self) -> None:
        # Per temperature, per table: distributions, float64 cumulative sums, each row's top probability.
        self._prepared: dict[float, list[tuple[torch.Tensor, torch.Tensor, list[float]]]] = {}
        self._rows: dict[tuple[tuple[int, ...], float], tuple[torch.Tensor, list[float], float]] = {}
        self._history: list[int] = []
        self._compiled: dict[float, CompiledTable] = {}  # per temperature, for the compiled loop
        self._compiles: bool | None = None

    def tables(self) -> list[torch.Tensor]:
        """The log-probability tables (rows × vocab)."""
        raise NotImplementedError

    def locate(self, context: tuple[int, ...]) -> tuple[int, int]:
        """Which table and row hold the next-token distribution after ``context`` (at most
        history_length tokens)."""
        raise NotImplementedError

    def context_levels(self) -> list[tuple[list[tuple[int, ...]], int, list[int]]] | None:
        """For each context length 0..history_length, the contexts with a row of their own, the table
        holding those rows and the rows, such that ``locate`` reads the longest suffix of a history that
        has a row (level 0: the fallback where none has). None where ``locate`` follows another rule:
        such a draft proposes in Python."""
        return None

    def table_compiles(self) -> bool:
        """Whether the compiled speculative loop can read this draft: ``context_levels`` gives its rows
        and every context's number fits int64 (vocab^history_length)."""
        if self._compiles is None:  # asked before every generation: decided once (the contexts do not change)
            fits = self.tables()[0].shape[-1] ** self.history_length <= INT64_LIMIT
            self._compiles = fits and self.context_levels() is not None
        return self._compiles

    def compiled_table(self, temperature: float) -> CompiledTable | None:
        """The table as the compiled speculative loop reads it, at ``temperature``; None where it
        cannot (``table_compiles``)."""
        if temperature in self._compiled:
            return self._compiled[temperature]
        levels = self.context_levels()
        vocab = self.tables()[0].shape[-1]
        if levels is None or not self.table_compiles():
            return None
        if len(levels) != self.history_length + 1:  # the loop reads a level per context length
            raise ValueError(f"{self.name}: context_levels gave {len(levels)} levels, not {self.history_length + 1}")
        prepared = self._prepared.get(temperature)
        if prepared is None:
            prepared = self._prepared[temperature] = self._prepare(temperature)
        offsets, keys, rows = [0], [], []
        distributions, cumulative, tops = [], [], []
        for contexts, table, level_rows in levels:
            numbers = [context_number(context, vocab) for context in contexts]
            order = sorted(range(len(numbers)), key=numbers.__getitem__)
            keys += [numbers[i] for i in order]
            rows += [level_rows[i] for i in order]
            offsets.append(offsets[-1] + len(order))
            table_distributions, table_cumulative, table_tops = prepared[table]
            distributions.append(table_distributions.contiguous())
            cumulative.append(table_cumulative.contiguous())
            tops.append(torch.tensor(table_tops, dtype=torch.float32))
        compiled = CompiledTable(
            self.history_length,
            torch.tensor(offsets, dtype=torch.int64),
            torch.tensor(keys, dtype=torch.int64),
            torch.tensor(rows, dtype=torch.int64),
            distributions,
            cumulative,
            tops,
        )
        self._compiled[temperature] = compiled
        return compiled

    def history(self) -> list[int]:
        """The committed text's last history_length tokens: what the next proposal reads."""
        return list(self._history)

    def follow(self, text: list[int]) -> None:
        """After the compiled loop: ``text`` is the committed text."""
        self._history = list(text[max(0, len(text) - self.history_length) :])

    def log_distribution(self, context: tuple[int, ...]) -> torch.Tensor:
        """Log-probabilities (vocab) of the next token after ``context``."""
        table, row = self.locate(context)
        return self.tables()[table][row]

    def _prepare(self, temperature: float) -> list[tuple[torch.Tensor, torch.Tensor, list[float]]]:
        prepared = []
        for table in self.tables():
            distributions = probabilities(table, temperature)
            tops = top_probability(table, distributions, temperature).tolist()
            prepared.append((distributions, distributions.double().cumsum(dim=-1), tops))
        return prepared

    def _row(self, context: tuple[int, ...], temperature: float) -> tuple[torch.Tensor, list[float], float]:
        """The distribution, its cumulative sums and its top probability."""
        key = (context, temperature)
        row = self._rows.get(key)
        if row is None:
            prepared = self._prepared.get(temperature)
            if prepared is None:
                prepared = self._prepared[temperature] = self._prepare(temperature)
            table, index = self.locate(context)
            distributions, cumulative, tops = prepared[table]
            row = self._rows[key] = (distributions[index], cumulative[index].tolist(), tops[index])
        return row

    def start(self, prompt: list[int]) -> None:
        self._history = list(prompt[-self.history_length :])

    def propose(
        self, k: int, temperature: float, generator: torch.Generator | None, p_min: float = 0.0
    ) -> tuple[list[int], torch.Tensor]:
        draws = uniforms(k, temperature, generator).tolist()
        history = list(self._history)
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for draw in draws:
            # The last history_length tokens, or all of a shorter history (a prompt shorter than the context).
            context = tuple(history[max(0, len(history) - self.history_length) :])
            distribution, cumulative, top = self._row(context, temperature)
            if tokens and top < p_min:
                break
            token = inverse_cdf(cumulative, draw)  # the argmax at temperature 0, where draws are 0
            tokens.append(token)
            rows.append(distribution)
            history.append(token)
        return tokens, torch.stack(rows)

    def commit(self, accepted: int, emitted: list[int]) -> None:
        self._history = (self._history + emitted)[-self.history_length :]

    def distributions(self, tokens: list[int], temperature: float) -> torch.Tensor:
        return torch.stack(
            [
                self._row(tuple(tokens[max(0, end - self.history_length) : end]), temperature)[0]
                for end in range(1, len(tokens) + 1)
            ]
        )


class BigramDraft(ContextTableDraft):
    """q(next | previous character) from counts over the training text (add-one smoothed)."""

    def __init__(self, tokens: torch.Tensor, vocab_size: int, name: str = "bigram") -> None:
        super().__init__()
        counts = torch.ones(vocab_size, vocab_size)
        counts.index_put_((tokens[:-1], tokens[1:]), torch.ones(len(tokens) - 1), accumulate=True)
        self.log_table = (counts / counts.sum(dim=-1, keepdim=True)).log()
        self.name = name

    def tables(self) -> list[torch.Tensor]:
        return [self.log_table]

    def locate(self, context: tuple[int, ...]) -> tuple[int, int]:
        return 0, context[-1]

    def context_levels(self) -> list[tuple[list[tuple[int, ...]], int, list[int]]] | None:
        vocab = self.log_table.shape[0]
        return [([], 0, []), ([(token,) for token in range(vocab)], 0, list(range(vocab)))]


class NGramDraft(ContextTableDraft):
    """q(next | last order−1 characters) from the training text, by interpolated absolute
    discounting: each context length keeps its counts less ``discount`` and passes the mass it
    freed to the context one character shorter, down to the add-one unigram. An unseen context
    defers to its longest seen suffix. Every seen context's row is computed up front, in one
    tensor per context length, so proposing never waits on counting."""

    def __init__(
        self, tokens: torch.Tensor, vocab_size: int, order: int = 3, name: str = "ngram", discount: float = 0.75
    ) -> None:
        super().__init__()
        if not 2 <= order <= MAX_NGRAM_ORDER:
            raise ValueError(f"an n-gram draft needs order 2..{MAX_NGRAM_ORDER}, got {order}")
        self.order, self.name, self.history_length = order, name, order - 1
        unigram = torch.bincount(tokens, minlength=vocab_size).double() + 1
        self.unigram_log = (unigram / unigram.sum()).log().float()
        # levels[length] = (row of each seen context of that length, log-probability rows)
        self.levels: list[tuple[dict[tuple[int, ...], int], torch.Tensor]] = [({(): 0}, self.unigram_log[None])]
        parents = (unigram / unigram.sum())[None]
        for length in range(1, order):
            windows = tokens.unfold(0, length + 1, 1)  # every context of this length and the token after it
            contexts, row_of_window = torch.unique(windows[:, :length], dim=0, return_inverse=True)
            counts = torch.zeros(len(contexts), vocab_size, dtype=torch.float64)
            counts.index_put_((row_of_window, windows[:, length]), torch.ones(len(windows), dtype=torch.float64), True)
            totals = counts.sum(dim=1, keepdim=True)
            freed = discount * (counts > 0).sum(dim=1, keepdim=True) / totals
            keys = [tuple(context) for context in contexts.tolist()]
            # Every suffix of a seen context was seen too (followed by the same next token).
            parent_rows = [self.levels[length - 1][0][key[1:]] for key in keys]
            level = (counts - discount).clamp(min=0) / totals + freed * parents[parent_rows]
            self.levels.append(({key: row for row, key in enumerate(keys)}, level.log().float()))
            parents = level

    def tables(self) -> list[torch.Tensor]:
        return [table for _, table in self.levels]

    def distill(self, windows: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Make each context's row the mean of a target's next-token distributions wherever that context
        ends in ``windows`` (token windows, B × L, with the target's probabilities after each position,
        B × L × vocab): the draft then proposes what the target would say after those characters,
        averaged over the text, not what the text happened to say. Contexts the windows never show keep
        their counted rows."""
        vocab = self.levels[0][1].shape[-1]
        numbered = []
        for rows, table in self.levels:
            keys = torch.tensor([context_number(context, vocab) for context in rows], dtype=torch.int64)
            order = keys.argsort()
            row_of_key = torch.tensor(list(rows.values()), dtype=torch.int64)[order]
            numbered.append((keys[order], row_of_key, torch.zeros(table.shape, dtype=torch.float64)))
        counts = [torch.zeros(len(rows), dtype=torch.float64) for rows, _ in self.levels]
        for tokens, target_probabilities in windows:
            for length, (keys, row_of_key, sums) in enumerate(numbered):
                # Every context of this length in the windows (ending at position j), as a number.
                contexts = tokens.unfold(1, length, 1) if length else tokens.new_zeros(*tokens.shape, 0)
                powers = vocab ** torch.arange(length - 1, -1, -1, dtype=torch.int64)
                numbers = (contexts.long() * powers).sum(dim=-1).reshape(-1)
                after = target_probabilities[:, max(length - 1, 0) :].reshape(-1, vocab)
                found = torch.searchsorted(keys, numbers).clamp(max=len(keys) - 1)
                seen = keys[found] == numbers
                where = row_of_key[found[seen]]
                sums.index_add_(0, where, after[seen].double())
                counts[length].index_add_(0, where, torch.ones(len(where), dtype=torch.float64))
        for length, ((contexts_rows, table), (_, _, sums)) in enumerate(zip(self.levels, numbered, strict=True)):
            shown = counts[length] > 0
            distilled = table.clone()
            distilled[shown] = (sums[shown] / counts[length][shown, None]).log().float()
            self.levels[length] = (contexts_rows, distilled)
        self._prepared.clear()
        self._rows.clear()
        self._compiled.clear()

    def locate(self, context: tuple[int, ...]) -> tuple[int, int]:
        for length in range(min(len(context), self.order - 1), 0, -1):
            row = self.levels[length][0].get(context[len(context) - length :])
            if row is not None:
                return length, row
        return 0, 0  # levels[0]: the unigram

    def context_levels(self) -> list[tuple[list[tuple[int, ...]], int, list[int]]] | None:
        return [(list(rows), length, list(rows.values())) for length, (rows, _) in enumerate(self.levels)]


DISTILLATION_TOKENS = 100_000  # of the training text: the quick model's forward over them takes about 5 s
DISTILLATION_WINDOW = 256
DISTILLATION_BATCH = 32


@torch.inference_mode()
def target_windows(
    model: CharGPT, tokens: torch.Tensor, count: int = DISTILLATION_TOKENS
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The first ``count`` tokens in windows of the model's context (at most DISTILLATION_WINDOW), a batch
    at a time, each with the model's next-token distributions at temperature 1 after every position
    (``NGramDraft.distill``'s input)."""
    window = min(DISTILLATION_WINDOW, model.config.context_length)
    usable = min(count, len(tokens)) // window * window
    batches = tokens[:usable].reshape(-1, window)
    for start in range(0, len(batches), DISTILLATION_BATCH):
        batch = batches[start : start + DISTILLATION_BATCH]
        logits = model(batch.to(model.device)).float()
        yield batch, torch.softmax(logits, dim=-1).cpu()


class ModelDraft:
    """A model proposing with its own cache. Its cache holds every token it has fed (``_fed``);
    tokens committed but not yet fed wait in ``_pending``."""

    def __init__(self, model: CharGPT, name: str, fast: bool = False) -> None:
        self.model = model
        self.name = name
        self._fast: FastDecoder | None = None
        if fast:
            from runner.decoding.fast import decoder_for

            self._fast = decoder_for(model)
        self._cache: KVCache | None = None
        self._fed: list[int] = []
        self._pending: list[int] = []
        self._committed_length = 0

    def start(self, prompt: list[int]) -> None:
        """Follow ``prompt``, keeping what the cache already holds of it (a prompt cache: the K/V
        of a shared prefix are the same); its last token is always fed again, at the first
        proposal, for the logits that proposal is drawn from."""
        if self._cache is None:
            self._cache = self.model.new_cache()
        kept = 0
        limit = min(len(self._fed), len(prompt) - 1)
        while kept < limit and self._fed[kept] == prompt[kept]:
            kept += 1
        self._cache.length = kept
        self._fed = self._fed[:kept]
        self._pending = list(prompt[kept:])

    @torch.inference_mode()
    def propose(
        self, k: int, temperature: float, generator: torch.Generator | None, p_min: float = 0.0
    ) -> tuple[list[int], torch.Tensor]:
        assert self._cache is not None, "start() first"
        draws = uniforms(k, temperature, generator)
        self._committed_length = self._cache.length + len(self._pending)
        feed, self._pending = self._pending, []
        if self._fast is not None:
            tokens, distributions = self._fast.sample(feed, k, temperature, draws, self._cache, p_min)
        else:
            tokens, rows = [], []
            step = torch.tensor([feed], device=self.model.device)
            for draw in draws.tolist():
                # Feeds the pending text, then each proposal but the last (which may be rejected).
                logits = self.model.forward_cached(step, self._cache)[:, -1].float()
                row = probabilities(logits[0], temperature)
                if tokens and float(top_probability(logits[0], row, temperature)) < p_min:
                    break  # the last proposal was fed to see this: the cache holds it
                step = choose_token(logits, temperature, draw)
                tokens.append(int(step))
                rows.append(row)
            distributions = torch.stack(rows)
        # Fed: the pending text and every proposal but the last, or all of them after an early stop.
        self._fed += feed + tokens[: self._cache.length - self._committed_length]
        return tokens, distributions

    @torch.inference_mode()
    def distributions(self, tokens: list[int], temperature: float) -> torch.Tensor:
        logits = self.model(torch.tensor([tokens], device=self.model.device))[0].float()
        return probabilities(logits, temperature)

    def compiled_decoder(self) -> FastDecoder | None:
        return self._fast

    def loop_state(self) -> tuple[KVCache, list[int]]:
        assert self._cache is not None, "start() first"
        return self._cache, self._pending

    def follow(self, text: list[int]) -> None:
        assert self._cache is not None
        self._fed, self._pending = text[: self._cache.length], text[self._cache.length :]

    def commit(self, accepted: int, emitted: list[int]) -> None:
        assert self._cache is not None
        # Fed so far: the committed text and proposals 1..k−1. Keep the accepted ones.
        fed_proposals = self._cache.length - self._committed_length
        kept = min(accepted, fed_proposals)
        self._cache.length = self._committed_length + kept
        self._fed = self._fed[: self._cache.length]
        self._pending = emitted[kept:]
