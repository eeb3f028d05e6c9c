"""The seed's contract for context-cost counting, probed with random sizes."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from runner.cost import context_cost as cost
from tests.conftest import run_decodelab

RANDOM = random.Random(20261129)


def test_the_contract_module_imports_no_torch() -> None:
    """The contract promises a module of the standard library: importing it must not pull in torch
    (checked in a fresh interpreter, where nothing else has imported it)."""
    import subprocess
    import sys

    probe = (
        "import sys; import runner.cost.context_cost; "
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('torch', 'numpy', 'pandas')))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def test_constants() -> None:
    assert (cost.D_MODEL, cost.D_FF, cost.N_HEADS) == (512, 2048, 8)


def test_the_contracts_counter_is_decodelabs_one_counter() -> None:
    from runner.cost import counts

    assert cost.MulCount is counts.Counter
    counter = cost.MulCount()
    counts.dot([1.0, 2.0], [3.0, 4.0], counter)
    cost.dot([1.0, 2.0], [3.0, 4.0], counter)
    assert (counter.mults, counter.calls) == (4, 3)  # two mul() writes, one add(2)


def test_counter_starts_at_zero_and_counts_multiplications_not_calls() -> None:
    counter = cost.MulCount()
    assert (counter.mults, counter.calls) == (0, 0)
    for _ in range(5):
        length = RANDOM.randint(1, 40)
        a = [RANDOM.uniform(-1, 1) for _ in range(length)]
        b = [RANDOM.uniform(-1, 1) for _ in range(length)]
        before = counter.mults
        assert math.isclose(cost.dot(a, b, counter), sum(x * y for x, y in zip(a, b, strict=True)))
        assert counter.mults - before == length
    assert counter.calls == 5


@pytest.mark.parametrize("trial", range(5))
def test_attention_counts_n_n_d_for_scores_and_again_for_mixing(trial: int) -> None:
    n, d = RANDOM.randint(1, 12), RANDOM.randint(1, 10)
    Q = [[RANDOM.random() for _ in range(d)] for _ in range(n)]
    K = [[RANDOM.random() for _ in range(d)] for _ in range(n)]
    V = [[RANDOM.random() for _ in range(d)] for _ in range(n)]
    counter = cost.MulCount()
    scores = cost.attn_scores(Q, K, counter)
    assert (len(scores), len(scores[0])) == (n, n)
    assert counter.mults == n * n * d
    assert math.isclose(scores[n - 1][0], sum(q * k for q, k in zip(Q[n - 1], K[0], strict=True)))
    mixed = cost.attn_mix(scores, V, counter)
    assert (len(mixed), len(mixed[0])) == (n, d)
    assert counter.mults == 2 * n * n * d == cost.quad_mults(n, d)
    rows = RANDOM.randint(1, n)
    assert len(cost.attn_scores(Q[:rows], K, cost.MulCount())) == rows


@pytest.mark.parametrize("trial", range(4))
def test_per_position_runs_six_maps_through_the_counter(trial: int) -> None:
    d_model, d_ff = RANDOM.randint(1, 48), RANDOM.randint(1, 96)
    counter = cost.MulCount()
    counter.add(7)  # earlier work must not be returned
    added = cost.per_position_mults(d_model, d_ff, counter)
    assert added == 4 * d_model * d_model + 2 * d_model * d_ff
    assert counter.mults == added + 7
    assert counter.calls - 1 >= 6
    n = RANDOM.randint(1, 5000)
    assert cost.linear_mults(n, d_model, d_ff) == n * added
    M = [[RANDOM.random() for _ in range(d_model)] for _ in range(3)]
    assert len(cost.matvec(M, [1.0] * d_model, cost.MulCount())) == 3


def test_cost_table_and_crossover() -> None:
    for _ in range(20):
        d_model, d_ff = RANDOM.randint(1, 300), RANDOM.randint(1, 1200)
        ns = RANDOM.sample(range(1, 5000), 5)
        table = cost.cost_table(ns, d_model, d_ff)
        assert [row[0] for row in table] == ns
        for n, quad, linear, total in table:
            # Independent closed forms: scores and mixing over all heads; q, k, v, o and the two
            # feed-forward maps once per position.
            assert quad == 2 * n * n * d_model
            assert linear == n * (4 * d_model * d_model + 2 * d_model * d_ff)
            assert total == quad + linear
        # 2·n²·d ≥ n·(4d² + 2·d·d_ff)  ⇔  n ≥ 2d + d_ff
        assert cost.crossover_n(d_model, d_ff) == 2 * d_model + d_ff
    assert cost.crossover_n(512, 2048) == 3072


def test_pairs_and_bytes() -> None:
    assert (cost.causal_pairs(0), cost.causal_pairs(1)) == (0, 1)
    for _ in range(50):
        n, g = RANDOM.randint(0, 10_000), RANDOM.randint(0, 1000)
        assert cost.causal_pairs(n) == sum(row + 1 for row in range(n))
        assert cost.wasted_pairs(n) == n * n - cost.causal_pairs(n)
        assert cost.append_pairs(n) == n + 1
        assert cost.generate_pairs(n, g) == sum(range(n + 1, n + g + 1))
        assert cost.generate_pairs(0, n) == cost.causal_pairs(n)
        heads, itemsize = RANDOM.randint(1, 64), RANDOM.choice([1, 2, 4, 8])
        assert cost.score_bytes(n, heads, itemsize) == n * n * heads * itemsize


def test_max_context_is_exact_even_for_huge_budgets() -> None:
    for _ in range(200):
        heads, itemsize = RANDOM.randint(1, 128), RANDOM.choice([1, 2, 4])
        budget = RANDOM.randint(0, 10**40)
        n = cost.max_context_for_bytes(budget, heads, itemsize)
        assert isinstance(n, int)
        assert cost.score_bytes(n, heads, itemsize) <= budget < cost.score_bytes(n + 1, heads, itemsize)
    exact = (10**18) ** 2 * 8 * 2
    assert cost.max_context_for_bytes(exact, 8, 2) == 10**18
    assert cost.max_context_for_bytes(exact - 1, 8, 2) == 10**18 - 1


def test_report_command_writes_the_seed_fields(tmp_path: Path) -> None:
    result = run_decodelab("report", "context-cost", "--out", str(tmp_path), cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "cost_report.json").read_text())
    assert (report["D_MODEL"], report["D_FF"], report["N_HEADS"], report["ITEMSIZE"]) == (512, 2048, 8, 2)
    assert report["budget_bytes"] == 1073741824
    assert report["table_lengths"] == [128, 256, 512, 1024, 2048, 4096]
    assert (report["reference_length"], report["generated_tokens"]) == (2048, 256)
    # The figures themselves, not the functions that compute them: n(n+1)/2 at 2048; the largest n
    # with n²·8 heads·2 bytes within 1 GiB is √(2³⁰/16) = 8192; rows 2049..2304 sum to 557,184.
    assert report["causal_pairs"] == 2_098_176
    assert report["max_context_for_bytes"] == 8192
    assert report["generate_pairs"] == 557_184
    assert isinstance(report["quad_ratio"], float) and report["quad_ratio"] == pytest.approx(4.0)
    assert isinstance(report["linear_ratio"], float) and report["linear_ratio"] == pytest.approx(2.0)
    assert "| 4096 |" in (tmp_path / "cost_report.md").read_text()
