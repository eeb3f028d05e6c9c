"""The scale calculator against the explainer's figures and brute-force sums."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.cost import context_cost as cost
from runner.cost import scale


def test_the_explainers_reference_figures() -> None:
    assert scale.attention_work_without_cache(6, 10, 96) == 113_760
    without = scale.attention_work_without_cache(400, 100, 96)
    with_cache = scale.attention_work_with_cache(400, 100, 96)
    assert without == 1_947_681_600  # "about 1.9 billion"
    assert with_cache == 19_675_200  # "about 19.67 million"


@given(st.integers(0, 300), st.integers(0, 300), st.integers(1, 128))
def test_work_matches_a_step_by_step_count(prompt: int, new: int, layers: int) -> None:
    steps = [prompt + step for step in range(new)]
    assert scale.attention_work_without_cache(prompt, new, layers) == layers * sum(t * t for t in steps)
    assert scale.attention_work_with_cache(prompt, new, layers) == layers * (prompt * prompt + sum(steps))


def test_which_shapes_the_write_ups_memory_claims_hold_for() -> None:
    four_gib = {check.shape.name for check in scale.check_claim(8192, 4.0 * scale.GIB) if check.holds}
    assert four_gib == {"Llama 2 7B", "write-ups' d=4096, 32 blocks"}
    per_user = {check.shape.name for check in scale.check_claim(8000, 1.2 * scale.GB) if check.holds}
    assert per_user == {"Qwen3 8B"}


def named_shape(name: str) -> scale.ModelShape:
    return next(shape for shape in scale.NAMED_SHAPES if shape.name == name)


def test_kv_bytes_and_users() -> None:
    shape = named_shape("Llama 3 8B")
    assert scale.kv_bytes_per_token(shape) == 2 * 32 * 8 * 128 * 2
    assert scale.kv_bytes_for_users(shape, 1000, 3) == 3 * 1000 * 131_072
    budget = 80 * scale.GIB
    users = scale.max_users_for_budget(shape, 8000, budget)
    assert scale.kv_bytes_for_users(shape, 8000, users) <= budget < scale.kv_bytes_for_users(shape, 8000, users + 1)
    mha = named_shape("Llama 2 7B")
    assert scale.kv_bytes_per_token(mha) == 4 * scale.kv_bytes_per_token(shape), "8 of 32 kv heads: a quarter"


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="kv_heads"):
        scale.ModelShape("odd", 2, 64, 8, 3, 8)


@given(st.integers(1, 64), st.sampled_from([1, 2, 4]), st.integers(0, 10**6), st.integers(-2, 2))
def test_max_context_around_perfect_squares(heads: int, itemsize: int, root: int, nudge: int) -> None:
    budget = max(0, root * root * heads * itemsize + nudge)
    n = cost.max_context_for_bytes(budget, heads, itemsize)
    assert cost.score_bytes(n, heads, itemsize) <= budget < cost.score_bytes(n + 1, heads, itemsize)


@given(st.integers(0, 200), st.integers(0, 200))
def test_pairs_against_brute_force(n: int, g: int) -> None:
    full = [(row, column) for row in range(n) for column in range(n)]
    kept = [(row, column) for row, column in full if column <= row]
    assert cost.causal_pairs(n) == len(kept)
    assert cost.wasted_pairs(n) == len(full) - len(kept)
    assert cost.generate_pairs(n, g) == sum(length for length in range(n + 1, n + g + 1))


def test_the_scale_report_names_its_units_in_the_budgets_unit() -> None:
    """`report scale` printed "work" without a unit and GB per user beside a budget in GiB."""
    from cli.lab_reports import scale_table

    table = scale_table(400, 100, 8000, 80.0).splitlines()
    assert "attention work in score pairs" in table[0] and "GiB of cache" in table[0]
    assert table[1].split()[-2:] == ["GiB/user", "users"] and "pairs no cache" in table[1]
    llama = next(line for line in table if line.startswith("Llama 2 7B"))
    per_user = scale.kv_bytes_per_request(next(s for s in scale.NAMED_SHAPES if s.name == "Llama 2 7B"), 8000)
    assert llama.split()[-2] == f"{per_user / scale.GIB:.2f}" == "3.91"
