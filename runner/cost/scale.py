"""The cache at real scale (docs/experiments.md, real scale): attention work with and
without a cache for a prompt of P tokens and G new ones, and KV-cache bytes per token, per
request and for N concurrent users.

Attention work follows the explainer's counting, one t² per layer for a step that attends
over t tokens: without a cache the step with t tokens in context costs t² (everything is
recomputed); with a cache the prompt costs P² once and each step costs t. For GPT-3's 96
layers that gives 113,760 for 6 → 15 tokens, and ≈1.95 billion vs ≈19.68 million for a
400-token prompt plus 100 new tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.cost import counts

GIB = 1 << 30
GB = 10**9


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("layers", "d_model", "heads", "kv_heads", "head_dim", "dtype_bytes"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be at least 1")
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads})")

    @property
    def attention(self) -> str:
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else f"GQA ({self.heads // self.kv_heads} query heads per kv head)"


# Public configurations (from each model's paper or released config).
NAMED_SHAPES: tuple[ModelShape, ...] = (
    ModelShape("GPT-3 175B", 96, 12288, 96, 96, 128, source="Brown et al. 2020, table 2.1"),
    ModelShape("Llama 2 7B", 32, 4096, 32, 32, 128, source="released config: no grouped-query attention"),
    ModelShape("Mistral 7B", 32, 4096, 32, 8, 128, source="released config: 8 kv heads"),
    ModelShape("Llama 3 8B", 32, 4096, 32, 8, 128, source="released config: 8 kv heads"),
    ModelShape("Qwen3 8B", 36, 4096, 32, 8, 128, source="released config: 36 layers, 8 kv heads"),
    ModelShape("write-ups' d=4096, 32 blocks", 32, 4096, 32, 32, 128, source="the write-ups' example, full heads"),
)


def attention_work_without_cache(prompt_tokens: int, new_tokens: int, layers: int) -> int:
    """Σ t² over the steps' context lengths t = P .. P+G−1, per layer."""
    return layers * sum(t * t for t in range(prompt_tokens, prompt_tokens + new_tokens))


def attention_work_with_cache(prompt_tokens: int, new_tokens: int, layers: int) -> int:
    """The prompt once (P²), then one row of t per step, per layer."""
    return layers * (prompt_tokens * prompt_tokens + sum(range(prompt_tokens, prompt_tokens + new_tokens)))


def kv_bytes_per_token(shape: ModelShape) -> int:
    """K and V for every layer and kv head: 2 × layers × kv_heads × head_dim × bytes."""
    return counts.cache_bytes(shape.layers, shape.kv_heads, 1, shape.head_dim, shape.dtype_bytes)


def kv_bytes_per_request(shape: ModelShape, tokens: int) -> int:
    return kv_bytes_per_token(shape) * tokens


def kv_bytes_for_users(shape: ModelShape, tokens: int, users: int) -> int:
    return kv_bytes_per_request(shape, tokens) * users


def max_users_for_budget(shape: ModelShape, tokens: int, budget_bytes: int) -> int:
    """How many concurrent requests of ``tokens`` fit in the budget (cache only, no weights)."""
    per_request = kv_bytes_per_request(shape, tokens)
    return budget_bytes // per_request if per_request else 0


@dataclass(frozen=True)
class ClaimCheck:
    shape: ModelShape
    bytes: int
    holds: bool


def check_claim(tokens: int, claimed_bytes: float, tolerance: float = 0.1) -> list[ClaimCheck]:
    """For each named shape, the bytes of one request of ``tokens`` and whether the claim
    (in bytes) holds within the relative tolerance."""
    checks = []
    for shape in NAMED_SHAPES:
        actual = kv_bytes_per_request(shape, tokens)
        checks.append(ClaimCheck(shape, actual, abs(actual - claimed_bytes) <= tolerance * claimed_bytes))
    return checks
