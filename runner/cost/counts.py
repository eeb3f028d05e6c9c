"""Exact counts, the one home of decodelab's multiplication counting: count multiplications, do
not guess them (docs/experiments.md, KV cache: counter_check).

A pure-Python reference path of attention and of a full transformer block in which every
multiplication of the matrix products goes through ``mul`` and a counter, so counts are
exact integers; closed forms beside it must agree with the counter for any size.

What is counted: the products of projections, attention scores, value mixing and the MLP.
LayerNorm, softmax, GELU and the 1/√d scale are not matrix products and are left out, as in
the write-ups. Without a cache the whole context is pushed through every step; two counts of
its attention stand side by side:

- dense (the write-ups' count): the full t×t score matrix is formed and masked afterwards, as a
  plain batched matmul does, hence 2·t²·d per block and step;
- causal: only the t(t+1)/2 visible (query, key) pairs are formed, as a causal attention kernel
  that skips the blocks above the diagonal does (PyTorch's CPU SDPA with ``is_causal=True``),
  hence d·t·(t+1) per block and step.

With the cache every new query sees every cached key: both counts are 2·t·d.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

Vector = list[float]
Matrix = list[list[float]]


class Counter:
    """The one multiplication counter: ``mults`` counted, ``calls`` the writes that counted them
    (one per ``mul``, one per ``add`` of a whole dot product: the context-cost contract's
    MulCount is this class), ``kv_computations`` the positions whose K and V a block computed
    (the counting lab's 1 + 2 + … + n against n)."""

    def __init__(self) -> None:
        self.mults = 0
        self.calls = 0
        self.kv_computations = 0

    def add(self, k: int) -> None:
        self.mults += k
        self.calls += 1


def mul(a: float, b: float, counter: Counter) -> float:
    counter.mults += 1
    counter.calls += 1
    return a * b


def dot(a: Vector, b: Vector, counter: Counter) -> float:
    return sum(mul(x, y, counter) for x, y in zip(a, b, strict=True))


def matvec(matrix: Matrix, x: Vector, counter: Counter) -> Vector:
    """``matrix`` is out × in; one dot per output."""
    return [dot(row, x, counter) for row in matrix]


def attend(query: Vector, keys: Matrix, values: Matrix, counter: Counter, visible: int | None = None) -> Vector:
    """One query over ``len(keys)`` positions: scores (n·d) then mixing (n·d).

    With ``visible`` the positions from ``visible`` on are masked after their scores are
    formed, as a dense causal matmul does: they cost their multiplications and weigh zero.
    """
    scale = 1.0 / math.sqrt(len(query))
    scores = [dot(query, key, counter) * scale for key in keys]
    if visible is not None:
        scores = [score if position < visible else -math.inf for position, score in enumerate(scores)]
    top = max(scores)
    weights = [math.exp(score - top) for score in scores]
    total = sum(weights)
    weights = [weight / total for weight in weights]
    mixed = [0.0] * len(values[0])
    for weight, value in zip(weights, values, strict=True):
        for index, element in enumerate(value):
            mixed[index] += mul(weight, element, counter)
    return mixed


def random_matrix(rows: int, columns: int, generator: random.Random) -> Matrix:
    return [[generator.gauss(0.0, 1.0 / math.sqrt(columns)) for _ in range(columns)] for _ in range(rows)]


# ---- one layer, one head: the counting lab's per-token view --------------------------------


@dataclass
class HeadWeights:
    query: Matrix
    key: Matrix
    value: Matrix

    @classmethod
    def random(cls, d: int, seed: int) -> HeadWeights:
        generator = random.Random(seed)
        return cls(*(random_matrix(d, d, generator) for _ in range(3)))


def head_token_no_cache(inputs: Matrix, weights: HeadWeights, counter: Counter) -> Vector:
    """The output at the last position, recomputing q/k/v for every position: 3·n·d² + 2·n·d."""
    queries = [matvec(weights.query, x, counter) for x in inputs]
    keys = [matvec(weights.key, x, counter) for x in inputs]
    values = [matvec(weights.value, x, counter) for x in inputs]
    return attend(queries[-1], keys, values, counter)


def head_token_cache(new_input: Vector, cache: tuple[Matrix, Matrix], weights: HeadWeights, counter: Counter) -> Vector:
    """The same output projecting only the new position: 3·d² + 2·n·d (n after appending)."""
    keys, values = cache
    query = matvec(weights.query, new_input, counter)
    keys.append(matvec(weights.key, new_input, counter))
    values.append(matvec(weights.value, new_input, counter))
    return attend(query, keys, values, counter)


def head_mults(n: int, d: int, cache: bool) -> int:
    """One layer, one head, the n-th token: q/k/v for every position (or only the new one with
    the cache), then one query over n keys."""
    return (3 * d * d if cache else 3 * n * d * d) + 2 * n * d


# ---- a full block: projections, scores, mixing, output projection, MLP ---------------------


@dataclass
class BlockWeights:
    heads: int
    qkv: Matrix  # 3d × d
    output: Matrix  # d × d
    up: Matrix  # 4d × d
    down: Matrix  # d × 4d

    @classmethod
    def random(cls, d: int, heads: int, seed: int) -> BlockWeights:
        if d % heads:
            raise ValueError("heads must divide d")
        generator = random.Random(seed)
        return cls(
            heads,
            random_matrix(3 * d, d, generator),
            random_matrix(d, d, generator),
            random_matrix(4 * d, d, generator),
            random_matrix(d, 4 * d, generator),
        )


def _layer_norm(x: Vector) -> Vector:
    mean = sum(x) / len(x)
    variance = sum((element - mean) ** 2 for element in x) / len(x)
    return [(element - mean) / math.sqrt(variance + 1e-5) for element in x]


def _gelu(x: float) -> float:
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _qkv(x: Vector, weights: BlockWeights, counter: Counter) -> tuple[Vector, Vector, Vector]:
    d = len(x)
    counter.kv_computations += 1
    projected = matvec(weights.qkv, _layer_norm(x), counter)
    return projected[:d], projected[d : 2 * d], projected[2 * d :]


def _block_position(
    x: Vector, query: Vector, keys: Matrix, values: Matrix, visible: int, weights: BlockWeights, counter: Counter
) -> Vector:
    """The block's output at one position: attention per head, output projection, MLP."""
    width = len(x) // weights.heads
    mixed: Vector = []
    for head in range(weights.heads):
        columns = slice(head * width, (head + 1) * width)
        mixed += attend(
            query[columns], [key[columns] for key in keys], [value[columns] for value in values], counter, visible
        )
    hidden = [a + b for a, b in zip(x, matvec(weights.output, mixed, counter), strict=True)]
    up = [_gelu(element) for element in matvec(weights.up, _layer_norm(hidden), counter)]
    return [a + b for a, b in zip(hidden, matvec(weights.down, up, counter), strict=True)]


def block_step_no_cache(inputs: Matrix, weights: BlockWeights, counter: Counter, causal: bool = False) -> Matrix:
    """Push every position through the block. Dense: every query meets every key (the full t×t
    score matrix, masked afterwards), so attention costs 2·t²·d. Causal: each query meets only
    the keys up to its own position, d·t·(t+1). The outputs are the same."""
    projected = [_qkv(x, weights, counter) for x in inputs]
    keys = [key for _, key, _ in projected]
    values = [value for _, _, value in projected]
    return [
        _block_position(
            x,
            query,
            keys[: position + 1] if causal else keys,
            values[: position + 1] if causal else values,
            position + 1,
            weights,
            counter,
        )
        for position, (x, (query, _, _)) in enumerate(zip(inputs, projected, strict=True))
    ]


def block_step_cache(
    new_input: Vector, cache: tuple[Matrix, Matrix], weights: BlockWeights, counter: Counter
) -> Vector:
    """Push only the new position through; its key and value join the cache."""
    keys, values = cache
    query, key, value = _qkv(new_input, weights, counter)
    keys.append(key)
    values.append(value)
    return _block_position(new_input, query, keys, values, len(keys), weights, counter)


# ---- closed forms: the one home of decodelab's cost model -----------------------------------
# Every count elsewhere (the KV-cache and overhead experiments, sweep estimates, benchmark
# floors, the context-cost contract, the real-scale calculator) calls these.


def attention_mults(t: int, d: int, causal: bool = False) -> int:
    """Scores and mixing of t positions over each other in one layer (all heads: widths d/h sum
    to d): dense 2·t²·d, the full t×t score matrix; causal d·t·(t+1), the visible pairs only."""
    return d * t * (t + 1) if causal else 2 * t * t * d


def projection_mults(positions: int, d: int, d_ff: int | None = None) -> int:
    """q, k, v and the output projection (d×d each) and the feed-forward (d_ff×d, then d×d_ff)
    for ``positions`` positions in one layer: positions·(4·d² + 2·d·d_ff), 12·d² a position at
    GPT-2's d_ff = 4·d (one multiplication per weight of the block's linear layers)."""
    return positions * (4 * d * d + 2 * d * (4 * d if d_ff is None else d_ff))


def block_step_mults(t: int, d: int, cache: bool, causal: bool = False) -> int:
    """Per block at a step with t positions: 12·t·d² + 2·t²·d without cache (12·t·d² + d·t·(t+1)
    causal), 12·d² + 2·t·d with (one new query over t cached keys)."""
    if cache:
        return projection_mults(1, d) + 2 * t * d
    return projection_mults(t, d) + attention_mults(t, d, causal)


def mean_cached_step_mults(tokens: int, d: int, layers: int, vocab_size: int) -> float:
    """The average cached step of a generation over contexts 1..tokens."""
    return generation_mults(tokens, d, layers, cache=True, vocab_size=vocab_size) / tokens


def cache_elements(layers: int, kv_heads: int, tokens: int, head_dim: int) -> int:
    """K and V of every layer and kv head: 2 × layers × kv_heads × tokens × head_dim. The dtype
    is only the last factor of the bytes."""
    return 2 * layers * kv_heads * tokens * head_dim


def cache_bytes(layers: int, kv_heads: int, tokens: int, head_dim: int, bytes_per_element: int) -> int:
    return cache_elements(layers, kv_heads, tokens, head_dim) * bytes_per_element


def kv_computations(n: int, layers: int, cache: bool) -> int:
    """How many times some position's K and V are computed over n generated tokens: every
    position again at every step without the cache (1 + 2 + … + n per layer), only the new
    one with it (n per layer)."""
    return layers * (n if cache else n * (n + 1) // 2)


def generation_mults(n: int, d: int, layers: int, cache: bool, vocab_size: int = 0, causal: bool = False) -> int:
    """All n steps (contexts 1..n) of all blocks, in closed form; ``causal`` counts only the
    visible score pairs of the no-cache path (the cached path is the same either way).

    ``vocab_size`` adds the lm head (V·d per position pushed through): the write-ups' table
    (32.9 … 579.9) matches the blocks plus a head of about 100 characters, while their
    headline 134.59 at n=256 counts the blocks alone.
    """
    triangle = n * (n + 1) // 2  # positions pushed through without a cache: Σ_t t
    if cache:  # Σ_t 2·t·d = 2·d·T(n)
        return layers * (projection_mults(n, d) + 2 * d * triangle) + vocab_size * d * n
    if causal:  # Σ_t d·t·(t+1) = d·n(n+1)(n+2)/3
        attention = d * n * (n + 1) * (n + 2) // 3
    else:  # Σ_t 2·t²·d
        attention = 2 * d * (n * (n + 1) * (2 * n + 1) // 6)
    return layers * (projection_mults(triangle, d) + attention) + vocab_size * d * triangle


def arithmetic_ratio(n: int, d: int, layers: int, vocab_size: int = 0, causal: bool = False) -> float:
    """How many times fewer multiplications the cache needs over a whole generation (against
    the dense or the causal count of the no-cache path)."""
    return generation_mults(n, d, layers, False, vocab_size, causal) / generation_mults(n, d, layers, True, vocab_size)
