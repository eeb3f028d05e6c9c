"""A GPT-2 shaped character model, readable top to bottom.

Exactly GPT-2's architecture (learned positions, pre-LayerNorm with eps 1e-5, fused q/k/v,
tanh-approximated GELU, tied lm head), so its weights load into
``transformers.GPT2LMHeadModel`` unchanged (see ``to_gpt2_state_dict``).

Two ways through the same weights:
- ``forward(idx)``: the whole sequence at once, causal mask, no cache.
- ``forward_cached(idx, cache)``: only the new positions; each block reads earlier K/V from a
  preallocated cache and writes the new ones in place. One new token is a decode step;
  k+1 tokens is a speculative verification pass. Rolling back is setting ``cache.length``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, cast

import torch
import torch.nn as nn
from torch.nn import functional as F

from runner.model.choices import CACHE_ROUNDINGS


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    d_model: int = 128
    n_layer: int = 3
    n_head: int = 4
    context_length: int = 1024
    # GPT-2 ties the lm head to the token embedding and gives it no bias; the write-ups' model
    # had its own lm head with a bias (docs/experiments.md, memory).
    tie_lm_head: bool = True
    lm_head_bias: bool = False

    def __post_init__(self) -> None:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def is_gpt2(self) -> bool:
        return self.tie_lm_head and not self.lm_head_bias

    def to_dict(self) -> dict[str, Any]:
        """The fields, the lm-head options only where they differ from GPT-2's: a checkpoint's
        recipe and weights hashes stay what they were before those options existed."""
        fields = asdict(self)
        if self.tie_lm_head:
            del fields["tie_lm_head"]
        if not self.lm_head_bias:
            del fields["lm_head_bias"]
        return fields


def round_for_cache(x: torch.Tensor, rounding: str) -> torch.Tensor:
    """K or V as a lossy cache would hold it: cast to half precision, or int8 with one
    symmetric scale per position and head (over head_dim), then back to float."""
    if rounding in ("bfloat16", "float16"):
        return x.to(getattr(torch, rounding)).to(x.dtype)
    if rounding == "int8":
        scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 127.0
        return (x / scale).round().clamp(-127, 127) * scale
    raise ValueError(f"rounding must be one of {CACHE_ROUNDINGS}, got {rounding!r}")


class KVCache:
    """Per-block K and V for up to ``capacity`` positions, written in place.

    ``rounding`` makes it lossy on purpose (docs/experiments.md, KV cache: rounded_cache): K/V are rounded before they
    are written, so the cached path no longer equals the uncached one.
    """

    def __init__(
        self,
        config: ModelConfig,
        batch_size: int = 1,
        capacity: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        rounding: str | None = None,
    ) -> None:
        self.rounding = rounding
        self.capacity = capacity or config.context_length
        shape = (config.n_layer, batch_size, config.n_head, self.capacity, config.head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0

    def cache_bytes(self) -> int:
        """Bytes actually holding K and V for the positions written so far."""
        per_position = self.keys[:, :, :, :1].numel() * self.keys.element_size()
        return 2 * per_position * self.length


_CAUSAL_MASKS: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def causal_mask(start: int, end: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask, (end − start) × end: new position start + i sees positions 0..start + i.
    A view into one square kept per device and dtype: building a mask on every multi-position
    step (a verification pass) cost more than the masked attention itself."""
    square = _CAUSAL_MASKS.get((device, dtype))
    if square is None or square.shape[0] < end:
        size = max(end, 1024)
        square = torch.full((size, size), float("-inf"), device=device, dtype=dtype).triu(diagonal=1)
        _CAUSAL_MASKS[(device, dtype)] = square
    return square[start:end, :end]


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model)
        self.c_proj = nn.Linear(config.d_model, config.d_model)

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, time, width = x.shape
        q, k, v = self.c_attn(x).split(width, dim=2)
        shape = (batch, time, self.n_head, self.head_dim)
        return (
            q.view(shape).transpose(1, 2),
            k.view(shape).transpose(1, 2),
            v.view(shape).transpose(1, 2),
        )

    def _merge(self, y: torch.Tensor) -> torch.Tensor:
        batch, _, time, _ = y.shape
        return self.c_proj(y.transpose(1, 2).reshape(batch, time, self.n_head * self.head_dim))

    def forward(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        q, k, v = self._heads(x)
        return self._merge(F.scaled_dot_product_attention(q, k, v, is_causal=causal))

    def forward_cached(self, x: torch.Tensor, layer: int, cache: KVCache) -> torch.Tensor:
        q, k, v = self._heads(x)
        start, new = cache.length, x.shape[1]
        end = start + new
        if cache.rounding is not None:
            k, v = round_for_cache(k, cache.rounding), round_for_cache(v, cache.rounding)
        cache.keys[layer, :, :, start:end] = k
        cache.values[layer, :, :, start:end] = v
        keys, values = cache.keys[layer, :, :, :end], cache.values[layer, :, :, :end]
        if new == 1:
            # One query sees every cached position: no mask needed.
            y = F.scaled_dot_product_attention(q, keys, values)
        else:
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=causal_mask(start, end, q.device, q.dtype))
        return self._merge(y)

    def forward_naive(
        self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The write-ups' cache: K and V grow by ``torch.cat`` every step (new tensors each time)."""
        q, k, v = self._heads(x)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        # Without past every position is new (causal); with past only one new token is fed.
        return self._merge(F.scaled_dot_product_attention(q, k, v, is_causal=past is None)), (k, v)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.d_model, 4 * config.d_model)
        self.c_proj = nn.Linear(4 * config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model, eps=1e-5)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model, eps=1e-5)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), causal)
        return x + self.mlp(self.ln_2(x))

    def forward_cached(self, x: torch.Tensor, layer: int, cache: KVCache) -> torch.Tensor:
        x = x + self.attn.forward_cached(self.ln_1(x), layer, cache)
        return x + self.mlp(self.ln_2(x))


class CharGPT(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.context_length, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.d_model, eps=1e-5)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=config.lm_head_bias)
        if config.tie_lm_head:
            self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections.
        for name, parameter in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(parameter, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def parameter_count(self) -> int:
        """Distinct parameters (the tied lm head counted once)."""
        return sum(parameter.numel() for parameter in self.parameters())

    def weight_bytes(self) -> int:
        return sum(parameter.numel() * parameter.element_size() for parameter in self.parameters())

    def _embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        end = start + idx.shape[1]
        if end > self.config.context_length:
            raise ValueError(f"position {end - 1} is past the model context ({self.config.context_length})")
        return self.wte(idx) + self.wpe(torch.arange(start, end, device=idx.device))

    def forward(self, idx: torch.Tensor, position_offset: int = 0, causal: bool = True) -> torch.Tensor:
        """Logits for every position of ``idx`` (batch, time), no cache. ``causal=False`` removes
        the mask (every position sees every other): what breaks the cache's exactness."""
        x = self._embed(idx, position_offset)
        for block in self.blocks:
            x = block(x, causal)
        return self.lm_head(self.ln_f(x))

    def forward_cached(self, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits for the new positions ``idx`` continuing what ``cache`` holds."""
        if cache.length + idx.shape[1] > cache.capacity:
            raise ValueError(f"cache holds at most {cache.capacity} positions")
        x = self._embed(idx, cache.length)
        for layer, block in enumerate(cast(list[Block], self.blocks)):
            x = block.forward_cached(x, layer, cache)
        cache.length += idx.shape[1]
        return self.lm_head(self.ln_f(x))

    @property
    def device(self) -> torch.device:
        # LayerNorm weights stay float in every variant (quantized ones included).
        return self.ln_f.weight.device

    def forward_naive(
        self, idx: torch.Tensor, past: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Logits for ``idx`` continuing ``past`` (the grown-by-concatenation cache), and the new past."""
        if past is not None and idx.shape[1] != 1:
            raise ValueError("the naive cache takes one new token at a time")
        start = 0 if past is None else past[0][0].shape[2]
        x = self._embed(idx, start)
        new_past = []
        for layer, block in enumerate(cast(list[Block], self.blocks)):
            attended, layer_past = block.attn.forward_naive(block.ln_1(x), None if past is None else past[layer])
            x = x + attended
            x = x + block.mlp(block.ln_2(x))
            new_past.append(layer_past)
        return self.lm_head(self.ln_f(x)), new_past

    def new_cache(self, batch_size: int = 1, capacity: int | None = None, rounding: str | None = None) -> KVCache:
        weight = self.ln_f.weight
        return KVCache(self.config, batch_size, capacity, device=weight.device, dtype=weight.dtype, rounding=rounding)


def to_gpt2_state_dict(model: CharGPT) -> dict[str, torch.Tensor]:
    """The same weights under ``transformers.GPT2LMHeadModel``'s names (Conv1D is (in, out))."""
    if not model.config.is_gpt2:
        raise ValueError("only a GPT-2 shaped model (tied lm head, no head bias) maps onto GPT2LMHeadModel")
    state: dict[str, torch.Tensor] = {
        "transformer.wte.weight": model.wte.weight.detach(),
        "transformer.wpe.weight": model.wpe.weight.detach(),
        "transformer.ln_f.weight": model.ln_f.weight.detach(),
        "transformer.ln_f.bias": model.ln_f.bias.detach(),
        "lm_head.weight": model.wte.weight.detach(),
    }
    for index, block in enumerate(model.blocks):
        prefix = f"transformer.h.{index}."
        assert isinstance(block, Block)
        for ours, theirs in (("ln_1", "ln_1"), ("ln_2", "ln_2")):
            layer_norm = getattr(block, ours)
            state[prefix + theirs + ".weight"] = layer_norm.weight.detach()
            state[prefix + theirs + ".bias"] = layer_norm.bias.detach()
        for name, linear in (
            ("attn.c_attn", block.attn.c_attn),
            ("attn.c_proj", block.attn.c_proj),
            ("mlp.c_fc", block.mlp.c_fc),
            ("mlp.c_proj", block.mlp.c_proj),
        ):
            state[prefix + name + ".weight"] = linear.weight.detach().t().contiguous()
            state[prefix + name + ".bias"] = linear.bias.detach()
    return state


def to_transformers(model: CharGPT) -> Any:
    """The same model as a ``transformers.GPT2LMHeadModel`` (needs the bench extra)."""
    import transformers

    config = model.config
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=config.vocab_size,
            n_positions=config.context_length,
            n_embd=config.d_model,
            n_layer=config.n_layer,
            n_head=config.n_head,
            activation_function="gelu_new",  # GPT-2's tanh approximation
            layer_norm_epsilon=1e-5,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            tie_word_embeddings=True,
            eos_token_id=None,  # a character vocabulary has no end-of-text token
            bos_token_id=None,
        )
    ).eval()
    missing, unexpected = gpt2.load_state_dict(to_gpt2_state_dict(model), strict=False)
    # Only transformers' own attention-mask buffers may be absent from our weights.
    if unexpected or any(not name.endswith((".attn.bias", "masked_bias")) for name in missing):
        raise ValueError(f"weights do not map onto GPT-2: missing {missing}, unexpected {unexpected}")
    return gpt2
