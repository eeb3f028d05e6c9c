"""Context-length cost, counted rather than timed (docs/experiments.md, context cost): the
context-cost lab's counting contract, a library module (the experiment that records it is
runner/experiments/context_cost.py).

Inside one layer two kinds of work mix: attention scores and mixing scan the whole context
for every position (they grow with n²); the q/k/v/o projections and the feed-forward run
once per position (they grow with n). A counter routes every multiplication, so every number
here is an exact integer that any machine reproduces.

The module keeps the lab's contract (names and semantics) so it can be imported and probed
directly. It imports the standard library and runner.cost.counts (itself standard library only,
where decodelab's closed forms and its one counter live): never torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from runner.cost import counts

# "Attention Is All You Need", base configuration: the contract's assumed shape.
D_MODEL = 512
D_FF = 2048
N_HEADS = 8

Matrix = Sequence[Sequence[float]]
Vector = Sequence[float]


# The contract's name for decodelab's one counter: ``mults`` counted, ``calls`` the writes
# (``add(k)`` once per dot product here).
MulCount = counts.Counter


def dot(a: Vector, b: Vector, ctr: MulCount) -> float:
    """The dot product; one multiplication per element pair."""
    if len(a) != len(b):
        raise ValueError(f"dot of lengths {len(a)} and {len(b)}")
    ctr.add(len(a))
    return sum(x * y for x, y in zip(a, b, strict=True))


def attn_scores(Q: Matrix, K: Matrix, ctr: MulCount) -> list[list[float]]:
    """Q·Kᵀ: rows(Q) × rows(K) scores, each a dot over the width (n·n·d for n×d inputs)."""
    return [[dot(q, k, ctr) for k in K] for q in Q]


def attn_mix(A: Matrix, V: Matrix, ctr: MulCount) -> list[list[float]]:
    """A·V for A n×n and V n×d: an n×d result that still costs n·n·d multiplications."""
    columns = [list(column) for column in zip(*V, strict=True)]
    return [[dot(row, column, ctr) for column in columns] for row in A]


def quad_mults(n: int, d_model: int) -> int:
    """Scores plus mixing over all heads: 2·n²·d_model (h heads of width d/h sum to d)."""
    return counts.attention_mults(n, d_model)


def matvec(M: Matrix, x: Vector, ctr: MulCount) -> list[float]:
    """M·x: one dot per row of M."""
    return [dot(row, x, ctr) for row in M]


def per_position_mults(d_model: int, d_ff: int, ctr: MulCount) -> int:
    """Run the six per-position maps through the counter; return what they added.

    q, k, v and the output projection are d_model×d_model; the feed-forward is d_ff×d_model
    then d_model×d_ff.
    """
    before = ctr.mults
    x = [1.0] * d_model
    square = [[0.0] * d_model for _ in range(d_model)]
    for _ in ("query", "key", "value", "output"):
        matvec(square, x, ctr)
    hidden = matvec([[0.0] * d_model for _ in range(d_ff)], x, ctr)
    matvec([[0.0] * d_ff for _ in range(d_model)], hidden, ctr)
    return ctr.mults - before


def linear_mults(n: int, d_model: int, d_ff: int) -> int:
    """The per-position maps for n positions (closed form, no counter): n·(4·d² + 2·d·d_ff)."""
    return counts.projection_mults(n, d_model, d_ff)


def cost_table(ns: Sequence[int], d_model: int, d_ff: int) -> list[tuple[int, int, int, int]]:
    """Rows (n, quadratic, linear, total) in the order of ``ns``."""
    rows = []
    for n in ns:
        quad, linear = quad_mults(n, d_model), linear_mults(n, d_model, d_ff)
        rows.append((n, quad, linear, quad + linear))
    return rows


def crossover_n(d_model: int, d_ff: int) -> int:
    """The first n where the quadratic part reaches the linear part (inclusive).

    2·n²·d ≥ n·(4d² + 2·d·d_ff)  ⇔  n ≥ (4d² + 2·d·d_ff) / (2d) = 2d + d_ff, for n ≥ 1.
    """
    per_position = 4 * d_model * d_model + 2 * d_model * d_ff
    n = max(1, -(-per_position // (2 * d_model)))
    while n > 1 and quad_mults(n - 1, d_model) >= linear_mults(n - 1, d_model, d_ff):
        n -= 1
    while quad_mults(n, d_model) < linear_mults(n, d_model, d_ff):
        n += 1
    return n


def causal_pairs(n: int) -> int:
    """Scores the causal mask keeps: row i uses i + 1 positions."""
    return n * (n + 1) // 2


def wasted_pairs(n: int) -> int:
    """Cells of the full n×n score matrix the mask throws away."""
    return n * n - causal_pairs(n)


def score_bytes(n: int, n_heads: int, itemsize: int) -> int:
    """Bytes of a materialised score matrix: one n×n per head."""
    return n * n * n_heads * itemsize


def max_context_for_bytes(budget_bytes: int, n_heads: int, itemsize: int) -> int:
    """The largest n whose score matrices fit the budget; integers only, exact for any size."""
    per_cell = n_heads * itemsize
    if per_cell <= 0:
        raise ValueError("n_heads and itemsize must be positive")
    return math.isqrt(budget_bytes // per_cell) if budget_bytes > 0 else 0


def append_pairs(n: int) -> int:
    """New scores when one token joins a context of n: one row of n + 1."""
    return n + 1


def generate_pairs(n: int, g: int) -> int:
    """Scores for generating g tokens after a context of n: rows n+1 .. n+g."""
    return causal_pairs(n + g) - causal_pairs(n)
