"""The compiled speculative loop's Python side (runner/decoding/csrc/speculative_loop.h): one C++ call runs
every pass of runner.decoding.speculative.speculative_decode for a fast target, its draft a fast model
(``speculate``) or a context table, an n-gram or bigram draft (``speculate_table``), reading the
uniforms in the order the Python loop reads its generator, so that both emit the same tokens."""

from __future__ import annotations

import array
import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from runner.model.gpt import KVCache

if TYPE_CHECKING:
    from runner.decoding.drafts import CompiledTable
    from runner.decoding.fast import FastDecoder


@dataclass
class LoopState:
    """Where a compiled speculative loop starts: the target's cache (the committed text but its last
    token, ``last``), the draft's cache and the committed tokens it has not fed (``pending``)."""

    target_cache: KVCache
    draft_cache: KVCache
    last: int
    pending: list[int]


@dataclass(frozen=True)
class LoopOutcome:
    """What a compiled speculative loop did: every pass's emitted tokens in order, per pass the
    proposals drafted and kept, TV(p, q) of every decided position, the draft's calls, and how many
    of the last emitted tokens the draft has not fed."""

    emitted: list[int]
    drafted_per_pass: list[int]
    accepted_per_pass: list[int]
    total_variations: list[float]
    draft_calls: int
    unfed: int


class _Buffers:
    """What both loops read and write besides the draft: the checked target cache, the uniforms, the
    output arrays and the replay."""

    def __init__(
        self,
        target: FastDecoder,
        target_cache: KVCache,
        last: int,
        new_tokens: int,
        schedule: tuple[int, int, int, float],
        uniforms: torch.Tensor,
        replay: tuple[list[int], list[int]] | None,
    ) -> None:
        kind, k, k_max, _ = schedule
        longest = k if kind == 0 else k_max
        keys, values, capacity = target._cache_pointers(target_cache)
        if not 1 <= k <= k_max or new_tokens < 1:
            raise RuntimeError(f"need 1 <= k <= k_max and new_tokens >= 1, got k={k} k_max={k_max} {new_tokens}")
        if uniforms.dtype != torch.float64 or uniforms.device.type != "cpu":
            raise RuntimeError("uniforms: float64 CPU tensor")
        self.uniforms = uniforms.contiguous()
        target._tokens([last])
        target._positions_fit(target_cache.length, new_tokens + longest, capacity)
        self.target = (keys, values, capacity, target_cache.length)
        self.emitted = array.array("q", bytes(8 * (new_tokens + longest)))
        self.drafted, self.accepted = (array.array("i", bytes(4 * max(new_tokens, 1))) for _ in range(2))
        self.variations = array.array("f", bytes(4 * max(new_tokens * longest, 1)))
        self.state = array.array("q", bytes(8 * 8))
        if replay is not None and len(replay[1]) < new_tokens + longest:  # as many as ``emitted`` holds
            raise RuntimeError(f"replay: need {new_tokens + longest} tokens to emit, got {len(replay[1])}")
        # The tokens to emit are checked as fed tokens are: the loop feeds them to the models.
        self.replay_kept = array.array("i", [] if replay is None else replay[0])
        self.replay_tokens = array.array("q") if replay is None else target._tokens(replay[1])
        self.replaying = replay is not None

    def schedule_arguments(
        self, last: int, new_tokens: int, schedule: tuple[int, int, int, float], temperature: float
    ) -> list[Any]:
        kind, k, k_max, p_min = schedule
        return [last, new_tokens, kind, k, k_max, p_min, temperature, self.uniforms.data_ptr(), self.uniforms.numel()]

    def output_arguments(self) -> list[Any]:
        return [
            self.emitted.buffer_info()[0],
            self.drafted.buffer_info()[0],
            self.accepted.buffer_info()[0],
            self.variations.buffer_info()[0],
            self.state.buffer_info()[0],
            self.replay_kept.buffer_info()[0] if self.replaying else None,
            len(self.replay_kept),
            self.replay_tokens.buffer_info()[0] if self.replaying else None,
        ]

    def outcome(self, status: int, target_cache: KVCache) -> tuple[LoopOutcome, int]:
        """What the loop did, the target's cache length set; and the draft's cache length it reported."""
        if status != 0:
            raise RuntimeError("the speculative loop ran past a cache or its uniforms")
        count, passes, draft_calls, _uniforms_read, decided, target_length, draft_length, unfed = self.state
        target_cache.length = target_length
        outcome = LoopOutcome(
            self.emitted[:count].tolist(),
            self.drafted[:passes].tolist(),
            self.accepted[:passes].tolist(),
            self.variations[:decided].tolist(),
            draft_calls,
            unfed,
        )
        return outcome, draft_length


def speculate(
    target: FastDecoder,
    draft: FastDecoder,
    loop: LoopState,
    new_tokens: int,
    schedule: tuple[int, int, int, float],
    temperature: float,
    uniforms: torch.Tensor,
    replay: tuple[list[int], list[int]] | None = None,
) -> LoopOutcome:
    """The whole speculative loop in one call, ``target`` verifying and ``draft`` proposing, from
    ``loop``'s caches and committed text, reading ``uniforms`` in the order
    runner.decoding.speculative.speculative_decode reads its generator. ``schedule`` is (kind: 0 fixed,
    1 heuristic, 2 confidence; k; k_max; p_min). Updates the two caches' lengths; returns what the loop
    did.

    ``replay`` (the proposals each pass keeps, and the tokens to emit) replays given passes instead of
    applying the accept rule: a cost session's passes, priced as the loop pays them."""
    draft_keys, draft_values, draft_capacity = draft._cache_pointers(loop.draft_cache)
    pending = draft._tokens(loop.pending)
    if draft.vocab_size != target.vocab_size:
        raise RuntimeError("the draft's vocabulary differs from the target's")
    if draft._library is not target._library:  # one library runs both packed models
        raise RuntimeError("the draft's decoder was built for another instruction set than the target's")
    buffers = _Buffers(target, loop.target_cache, loop.last, new_tokens, schedule, uniforms, replay)
    status = target._library.dl_speculate(
        target._handle,
        draft._handle,
        *buffers.schedule_arguments(loop.last, new_tokens, schedule, temperature),
        *buffers.target,
        draft_keys,
        draft_values,
        draft_capacity,
        loop.draft_cache.length,
        pending.buffer_info()[0],
        len(pending),
        *buffers.output_arguments(),
    )
    outcome, loop.draft_cache.length = buffers.outcome(status, loop.target_cache)
    return outcome


def _table_arguments(target: FastDecoder, table: CompiledTable, history: list[int]) -> tuple[list[Any], Any]:
    """The table's arrays as dl_speculate_table and dl_propose_table read them, then the history."""
    if any(level.shape[-1] != target.vocab_size for level in table.distributions):
        raise RuntimeError("the draft's vocabulary differs from the target's")
    if not history or len(history) > table.history_length:
        raise RuntimeError(f"history: 1..{table.history_length} tokens, got {len(history)}")
    levels = len(table.distributions)
    distributions, cumulative, tops = (
        (ctypes.c_void_p * levels)(*(tensor.data_ptr() for tensor in tensors))
        for tensors in (table.distributions, table.cumulative, table.tops)
    )
    arrays: list[Any] = [table.level_keys.data_ptr(), table.keys.data_ptr(), table.rows.data_ptr()]
    arrays += [distributions, cumulative, tops]
    return arrays, target._tokens(history)


def propose_table(
    target: FastDecoder, table: CompiledTable, history: list[int], count: int, p_min: float, uniforms: torch.Tensor
) -> int:
    """One turn of a context table alone, as the compiled loop runs it: how many it proposed (each kept
    by the library's clock of a draft's turn, for a cost session to time)."""
    arrays, fed = _table_arguments(target, table, history)
    if uniforms.dtype != torch.float64 or uniforms.numel() < count or not uniforms.is_contiguous():
        raise RuntimeError(f"need {count} contiguous float64 CPU uniforms")
    proposals = array.array("q", bytes(8 * max(count, 1)))
    q = torch.empty(max(count, 1), target.vocab_size)
    drafted = target._library.dl_propose_table(
        target.vocab_size,
        table.history_length,
        *arrays,
        fed.buffer_info()[0],
        len(fed),
        count,
        p_min,
        uniforms.data_ptr(),
        proposals.buffer_info()[0],
        q.data_ptr(),
    )
    if drafted < 0:
        raise RuntimeError("the table found no row for its history")
    return int(drafted)


def speculate_table(
    target: FastDecoder,
    table: CompiledTable,
    history: list[int],
    target_cache: KVCache,
    last: int,
    new_tokens: int,
    schedule: tuple[int, int, int, float],
    temperature: float,
    uniforms: torch.Tensor,
    replay: tuple[list[int], list[int]] | None = None,
) -> LoopOutcome:
    """``speculate`` with a context table proposing (runner.decoding.drafts.ContextTableDraft.compiled_table,
    prepared at ``temperature``) after ``history``, the committed text's last tokens (at most the
    table's history_length). Its draft calls are lookups: it keeps no cache, and nothing is left unfed."""
    arrays, fed = _table_arguments(target, table, history)
    buffers = _Buffers(target, target_cache, last, new_tokens, schedule, uniforms, replay)
    status = target._library.dl_speculate_table(
        target._handle,
        table.history_length,
        *arrays,
        fed.buffer_info()[0],
        len(fed),
        *buffers.schedule_arguments(last, new_tokens, schedule, temperature),
        *buffers.target,
        *buffers.output_arguments(),
    )
    outcome, _ = buffers.outcome(status, target_cache)
    return outcome
