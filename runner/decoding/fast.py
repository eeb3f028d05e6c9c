"""The ``fast`` decode path: the whole model in one compiled C++ call.

At d=128 a decode step is about 0.6 million multiply-adds, microseconds of arithmetic, yet eager
PyTorch spends hundreds of microseconds dispatching its ~40 small ops. This path does the same
arithmetic (embedding, pre-LayerNorm blocks with cached attention, tanh GELU, tied lm head) over
weights packed for vector kernels (runner/decoding/csrc/linear.h: each lane one output row, so a row's sum
runs in column order whatever the number of positions in the pass), on one thread unless
``set_threads`` says otherwise, in a library built on first use and loaded with ctypes
(runner.decoding.fast_library). Logits agree with the eager path to float rounding, not bit for bit.

Three weight formats run through the same loop: float32 (the model as trained), and the blocks'
linear layers in bfloat16 (``fast_bf16``) or int8 with one scale per output row and activations
quantized per position (``fast_int8``), the models runner.model.quantize builds for those kernels.

Entry points: ``forward`` feeds m positions in one pass over the weights (a prompt, or a
speculative verification of k + 1 positions); ``sample`` runs a whole generation, choosing each
token in C++ from a given uniform (inverse CDF, as the eager loops choose); ``sample_no_cache``
does the same without a cache, feeding the whole sequence again every step (the compiled path's own
no-cache baseline); ``step`` is ``forward`` of one token; ``verify`` is a speculative verification
(the pass and the accept rule) in one call.
"""

from __future__ import annotations

import array
import ctypes
import threading
import weakref
from typing import Any

import torch
import torch.nn as nn

# instruction_set stays importable from here: `decodelab ab` workers ask runner.decoding.fast for it, in
# every revision they compare, older ones included.
from runner.decoding.fast_library import instruction_set as instruction_set
from runner.decoding.fast_library import library
from runner.decoding.fast_packing import RETIRED_BYTES, Packings, address
from runner.model.gpt import CharGPT, KVCache

BONUS_FROM_DRAFT = 4  # runner.decoding.accept_rule.RULE_VARIANTS' index of the variant whose q has k + 1 rows


class FastDecoder:
    """The compiled path for one model, writing into a KVCache."""

    def __init__(self, model: CharGPT, march: str | None = None, loaded: ctypes.CDLL | None = None) -> None:
        """``loaded``: a library other than this checkout's for ``march`` (fast_library.load_built)."""
        config = self._config = model.config
        self.vocab_size, self.context_length = config.vocab_size, config.context_length
        self._layout = (config.n_layer, 1, config.n_head, config.head_dim)
        self._library = loaded if loaded is not None else library(march)
        self._packings = Packings(self._library, model)
        # Held weakly: _DECODERS keys its decoders by their model, and a decoder holding its model
        # would keep both alive for good (a sweep builds a model a case); only repack reads it.
        self._model = weakref.ref(model)
        self._checked_cache: tuple[torch.Tensor, torch.Tensor, tuple[int, int, int]] | None = None
        self._scratch = threading.local()  # per thread: two threads' generations never share a cache
        self._retired_scratch: list[threading.local] = []

    @property
    def _handle(self) -> int:
        return self._packings.handle

    @property
    def packed_bytes(self) -> int:
        return self._packings.bytes

    def repack(self) -> None:
        """Pack the weights again, elsewhere in memory, for every call that follows, and give plain
        generations a new scratch cache, made now at the old one's capacity so that no timed call
        pays for it (runner.decoding.fast_packing: why). Not while another thread calls this decoder."""
        model = self._model()
        if model is None:
            raise RuntimeError("repack: the model this decoder packed is gone")
        self._packings.repack(model)
        self._retired_scratch.append(self._scratch)
        previous: KVCache | None = getattr(self._scratch, "cache", None)
        self._scratch = threading.local()
        if previous is not None:
            self._scratch.cache = KVCache(self._config, capacity=previous.capacity)
        del self._retired_scratch[: -self._packings.keep]

    def forget_retired(self) -> None:
        """Free the packings and scratch caches earlier repacks held (the current ones stay): what a
        timing does once its pairs are done."""
        self._packings.forget_retired()
        self._retired_scratch.clear()

    def _cache_pointers(self, cache: KVCache) -> tuple[int, int, int]:
        """The cache's K and V addresses and capacity, after checking that the C++ may write there
        (once per pair of tensors: a speculative loop hands the same cache over every pass)."""
        checked = self._checked_cache
        if checked is not None and checked[0] is cache.keys and checked[1] is cache.values:
            return checked[2]
        for tensor in (cache.keys, cache.values):
            if tensor.device.type != "cpu" or tensor.dtype != torch.float32 or not tensor.is_contiguous():
                raise RuntimeError("keys/values: contiguous float32 CPU tensors")
            layers, batch, heads, _, head_dim = tensor.shape
            if batch != 1:
                raise RuntimeError("keys/values: (layers, 1, heads, capacity, head_dim), batch 1")
            if (layers, batch, heads, head_dim) != self._layout:
                raise RuntimeError(f"the cache's shape {tuple(tensor.shape)} does not match the model's")
        if cache.keys.shape != cache.values.shape:
            raise RuntimeError("keys and values differ in shape")
        pointers = (cache.keys.data_ptr(), cache.values.data_ptr(), cache.keys.shape[3])
        # The tensors are kept, so their ids cannot be reused by others while the entry stands.
        self._checked_cache = (cache.keys, cache.values, pointers)
        return pointers

    def _tokens(self, tokens: list[int]) -> array.array[int]:
        if not tokens:
            raise RuntimeError("nothing to feed")
        if min(tokens) < 0 or max(tokens) >= self.vocab_size:
            raise RuntimeError(f"token outside the vocabulary (0..{self.vocab_size - 1})")
        return array.array("q", tokens)

    def _positions_fit(self, start: int, count: int, capacity: int) -> None:
        if start < 0 or start + count > min(capacity, self.context_length):
            raise RuntimeError(
                f"positions {start}..{start + count - 1} are past the cache ({capacity}) or the model context "
                f"({self.context_length})"
            )

    def forward(self, tokens: list[int], cache: KVCache) -> torch.Tensor:
        """Logits (len(tokens) × vocab) after feeding ``tokens`` from position ``cache.length``, in
        one pass over the weights."""
        keys, values, capacity = self._cache_pointers(cache)
        fed = self._tokens(tokens)
        self._positions_fit(cache.length, len(fed), capacity)
        logits = torch.empty(len(fed), self.vocab_size)
        status = self._library.dl_forward(
            self._handle, fed.buffer_info()[0], len(fed), cache.length, keys, values, capacity, logits.data_ptr()
        )
        assert status == 0, "the checks above admit only what the library accepts"
        cache.length += len(fed)
        return logits

    def step(self, token: int, cache: KVCache) -> torch.Tensor:
        """Logits (vocab) after feeding ``token`` at position ``cache.length``."""
        return self.forward([token], cache)[0]

    def verify(
        self,
        tokens: list[int],
        cache: KVCache,
        q: torch.Tensor,
        temperature: float,
        randoms: torch.Tensor,
        variant: int = 0,
    ) -> tuple[int, list[int], list[float]]:
        """A speculative verification in one call: ``tokens`` (the last committed token, then the k
        proposals) fed from ``cache.length`` and the accept rule against the draft's distributions ``q``
        (k × vocab) with 2k + 1 ``randoms``, as runner.decoding.speculative.verify does in Python. Returns the
        proposals kept, the emitted tokens and TV(p, q) of each decided position. The cache keeps all
        k + 1 new positions (the caller rolls it back). ``variant`` (an index into
        runner.decoding.accept_rule.RULE_VARIANTS) runs a deliberately broken rule; for ``bonus_from_draft`` ``q``
        holds k + 1 rows."""
        # Few calls into torch here: this runs once a pass of a Python speculative loop, right after a
        # pass that streamed the weights through the caches, so the interpreter's code and data come
        # back cold (docs/performance.md: 14.6 µs outside the pass a call on the 2-core Xeon VM, 11.8
        # once the conversions that have nothing to do were skipped).
        keys, values, capacity = self._cache_pointers(cache)
        fed = self._tokens(tokens)
        k = len(fed) - 1
        if q.dtype != torch.float32 or not q.is_contiguous():
            q = q.float().contiguous()
        rows = k + 1 if variant == BONUS_FROM_DRAFT else k
        if q.shape != (rows, self.vocab_size) or not q.is_cpu:
            raise RuntimeError(f"q must be a {rows} × {self.vocab_size} CPU tensor")
        if randoms.dtype != torch.float64 or not randoms.is_cpu or randoms.numel() < 2 * k + 1:
            raise RuntimeError(f"need {2 * k + 1} float64 CPU uniforms")
        if not randoms.is_contiguous():
            randoms = randoms.contiguous()
        self._positions_fit(cache.length, len(fed), capacity)
        emitted = array.array("q", bytes(8 * (k + 1)))
        variations = array.array("f", bytes(4 * max(k, 1)))
        accepted = self._library.dl_verify(
            self._handle,
            fed.buffer_info()[0],
            k,
            cache.length,
            keys,
            values,
            capacity,
            q.data_ptr(),
            temperature,
            randoms.data_ptr(),
            emitted.buffer_info()[0],
            variations.buffer_info()[0],
            variant,
        )
        assert accepted >= 0, "the checks above admit only what the library accepts"
        cache.length += len(fed)
        decided = min(accepted + 1, k)
        return accepted, emitted[: accepted + 1].tolist(), variations[:decided].tolist()

    def _sample(
        self,
        feed: list[int],
        start: int,
        new_tokens: int,
        temperature: float,
        uniforms: torch.Tensor,
        cache: KVCache,
        no_cache: bool,
        keep_distributions: bool,
        p_min: float = 0.0,
    ) -> tuple[list[int], torch.Tensor | None]:
        keys, values, capacity = self._cache_pointers(cache)
        fed = self._tokens(feed)
        if uniforms.dtype != torch.float64 or not uniforms.is_cpu or uniforms.numel() < new_tokens:
            raise RuntimeError(f"need {new_tokens} contiguous float64 CPU uniforms")
        if not uniforms.is_contiguous():  # as in verify: a draft's turn in a Python loop runs cold
            uniforms = uniforms.contiguous()
        if new_tokens < 0:
            raise RuntimeError("new_tokens must be non-negative")
        self._positions_fit(start, len(fed) + max(new_tokens - 1, 0), capacity)
        tokens = torch.empty(new_tokens, dtype=torch.int64)
        distributions = torch.empty(new_tokens, self.vocab_size) if keep_distributions else None
        chosen = self._library.dl_sample(
            self._handle,
            fed.buffer_info()[0],
            len(fed),
            start,
            new_tokens,
            temperature,
            uniforms.data_ptr(),
            keys,
            values,
            capacity,
            int(no_cache),
            tokens.data_ptr(),
            address(distributions),
            p_min,
        )
        assert chosen >= 0, "the checks above admit only what the library accepts"
        return tokens[:chosen].tolist(), None if distributions is None else distributions[:chosen]

    def sample(
        self,
        feed: list[int],
        new_tokens: int,
        temperature: float,
        uniforms: torch.Tensor,
        cache: KVCache,
        p_min: float = 0.0,
    ) -> tuple[list[int], torch.Tensor]:
        """Feed ``feed``, then choose ``new_tokens`` tokens in C++ (no Python between steps), the i-th
        by inverse CDF at ``uniforms[i]`` (argmax at temperature 0), feeding every one but the last.
        Returns the tokens and the distributions they were drawn from (new_tokens × vocab). With
        ``p_min`` it stops before a token whose distribution's top probability is below it (never
        before the first), having fed every token it returns."""
        tokens, distributions = self._sample(
            feed, cache.length, new_tokens, temperature, uniforms, cache, False, True, p_min
        )
        cache.length += len(feed) + len(tokens) - (1 if len(tokens) == new_tokens else 0)
        assert distributions is not None
        return tokens, distributions

    def generate(self, prompt: list[int], new_tokens: int, temperature: float, uniforms: torch.Tensor) -> list[int]:
        """``sample`` from position 0 into this thread's scratch cache, keeping only the tokens (a plain
        generation)."""
        cache = self._scratch_cache(len(prompt) + max(new_tokens - 1, 0))
        return self._sample(prompt, 0, new_tokens, temperature, uniforms, cache, False, False)[0]

    def _scratch_cache(self, capacity: int) -> KVCache:
        """This thread's cache for plain generations, emptied, at least ``capacity`` positions: grown when
        asked for more, never zeroed again. A generation from position 0 writes every position before
        it reads it, so what an earlier one left is never seen; a fresh cache per call cost more than
        40 us (zeroing and faulting in its pages, the L2 it evicts), a sixth of a microsecond on every
        token of a 256-token generation."""
        cache: KVCache | None = getattr(self._scratch, "cache", None)
        if cache is None or cache.capacity < capacity:
            cache = KVCache(self._config, capacity=capacity)
            self._scratch.cache = cache
        cache.length = 0
        return cache

    def sample_no_cache(
        self, prompt: list[int], new_tokens: int, temperature: float, uniforms: torch.Tensor
    ) -> list[int]:
        """``sample`` without a cache: every step pushes the whole sequence so far through the
        model from position 0 (the scratch buffer holds only the current pass's K/V)."""
        scratch = KVCache(self._config, capacity=len(prompt) + max(new_tokens - 1, 0))
        return self._sample(prompt, 0, new_tokens, temperature, uniforms, scratch, True, False)[0]


def new_placements(*models: CharGPT) -> None:
    """Repack (FastDecoder.repack) the current decoder of each of ``models`` that has one: what a
    timing calls between its pairs so that they sample where the weights land instead of timing one
    placement (release_placements after them). A model packed into more than RETIRED_BYTES is left
    as it is: its weights stream from memory whatever their place, and a second copy of a
    checkpoint's would cost more than it tells."""
    for decoder in _current_decoders(models):
        if decoder.packed_bytes <= RETIRED_BYTES:
            decoder.repack()


def release_placements(*models: CharGPT) -> None:
    """Free what new_placements held of ``models`` (FastDecoder.forget_retired)."""
    for decoder in _current_decoders(models):
        decoder.forget_retired()


def _current_decoders(models: tuple[CharGPT, ...]) -> list[FastDecoder]:
    """The cached decoders of ``models`` still up to date with their weights (decoder_for)."""
    current = []
    for model in models:
        cached = _DECODERS.get(model)
        if cached is not None and cached[0] == _state_versions(model):
            current.append(cached[1])
    return current


_DECODERS: weakref.WeakKeyDictionary[CharGPT, tuple[tuple[Any, ...], FastDecoder]] = weakref.WeakKeyDictionary()


def _state_versions(model: CharGPT) -> tuple[Any, ...]:
    """Every parameter and buffer's identity and version: a tensor replaced or changed in place
    changes the key. Tensors made under inference mode (a model quantized there) keep no version
    counter: their storage stands in (an in-place change under inference mode goes unnoticed).
    Walks the modules' own dictionaries: ``parameters()`` and ``buffers()`` took 60 us a call,
    a quarter of a microsecond on every token of a 256-token generation."""
    key: list[int] = []
    pending: list[nn.Module] = [model]
    while pending:
        module = pending.pop()
        for tensor in (*module._parameters.values(), *module._buffers.values()):
            if tensor is not None:
                key += (id(tensor), tensor.data_ptr() if tensor.is_inference() else tensor._version)
        pending += (child for child in module._modules.values() if child is not None)
    return tuple(key)


def decoder_for(model: CharGPT) -> FastDecoder:
    """The model's decoder, packing its weights again only when a parameter or buffer changed (a
    generation should not copy the whole model before its first token)."""
    versions = _state_versions(model)
    cached = _DECODERS.get(model)
    if cached is None or cached[0] != versions:
        cached = (versions, FastDecoder(model))
        _DECODERS[model] = cached
    return cached[1]


def logits_through_fast_path(model: CharGPT, inputs: torch.Tensor) -> torch.Tensor:
    """Logits (batch × time × vocab) of every position of ``inputs`` (batch × time), each row fed from
    position 0 in one fast pass: what the fast kernels compute, for a loss measured through them."""
    decoder = decoder_for(model)
    rows = [decoder.forward(row, model.new_cache(capacity=len(row))) for row in inputs.tolist()]
    return torch.stack(rows)
