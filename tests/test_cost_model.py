"""runner.cost.roofline_model: the counts against values worked out by hand for two shapes, the regime rule
on synthetic points, and the roofline arithmetic (no timing here)."""

from __future__ import annotations

import pytest

from runner.cost import roofline_model
from runner.cost import speculative as speculative_cost
from runner.cost.roofline_model import Cost, Shape, pass_cost, place, regime

# The quick preset's shape with the default corpus' vocabulary size, and a second, smaller one.
QUICK = Shape(vocab=65, d_model=128, layers=3, heads=4)
SMALL = Shape(vocab=100, d_model=64, layers=2, heads=2)


def test_fast_fp32_step_counted_by_hand() -> None:
    cost = pass_cost(QUICK, "fast", "fp32", positions=1, start=9)
    # Multiply-adds: linears 12·128²·3 = 589,824; attention 2·128·10 seen·3 = 7,680; head 65·128 = 8,320.
    assert cost.flops == {"fp32": 2 * (589_824 + 7_680 + 8_320)}
    # Packed float32 linears (rows padded to 16, 4 bytes a weight) plus biases, per block:
    # c_attn 128·384·4 + 384·4 = 198,144; c_proj 128·128·4 + 512 = 66,048; c_fc 128·512·4 + 2,048
    # = 264,192; mlp c_proj 512·128·4 + 512 = 262,656; two LayerNorms 2,048: 793,088. Three blocks
    # 2,379,264; head: 65 rows padded to 80: 128·80·4 + 65·4 = 41,220; final LayerNorm 1,024.
    parameters = 2_379_264 + 41_220 + 1_024
    assert roofline_model.parameter_bytes(QUICK, "fast", "fp32") == parameters == 2_421_508
    # + embedding rows 2·128·4; K/V of 10 positions read 2·3·10·128·4; one position written 2·3·128·4.
    assert cost.bytes_moved == parameters + 1_024 + 30_720 + 3_072 == 2_456_324
    assert cost.working_set_bytes == parameters + 30_720


def test_fast_int8_parameters_counted_by_hand() -> None:
    # Four int8 columns a word; bias, scale and offset 4 bytes a row each:
    # c_attn 32·384·4 + 3·384·4 = 53,760; c_proj 32·128·4 + 1,536 = 17,920; c_fc 32·512·4 + 6,144 =
    # 71,680; mlp c_proj 128·128·4 + 1,536 = 67,072; LayerNorms 2,048: 212,480 a block. The head
    # stays float32 (41,220), the final LayerNorm 1,024.
    assert roofline_model.parameter_bytes(QUICK, "fast", "int8") == 3 * 212_480 + 41_220 + 1_024 == 679_684
    cost = pass_cost(QUICK, "fast", "int8", positions=1, start=0)
    assert cost.flops == {"int8": 2 * 589_824, "fp32": 2 * (2 * 128 * 1 * 3 + 8_320)}


def test_eager_verification_pass_counted_by_hand() -> None:
    cost = pass_cost(SMALL, "static", "fp32", positions=5, start=3)
    # Linears 5·12·64²·2 = 491,520; attention over the masked 5 × 8 rectangle 2·64·40·2 = 10,240;
    # head 5·100·64 = 32,000.
    assert cost.flops == {"fp32": 2 * (491_520 + 10_240 + 32_000)}
    # Parameters: weights 12·64²·4 = 196,608, biases (192 + 64 + 256 + 64)·4 = 2,304, LayerNorms 1,024
    # per block, two blocks 399,872; the tied head 100·64·4 = 25,600; final LayerNorm 512.
    assert roofline_model.parameter_bytes(SMALL, "static", "fp32") == 425_984
    # + five embedding rows 2·5·64·4; K/V of 8 positions read 2·2·8·64·4; 5 written 2·2·5·64·4.
    assert cost.bytes_moved == 425_984 + 2_560 + 8_192 + 5_120 == 441_856
    # torch.cat copies the whole cache every pass: the 3 old positions read, all 8 written.
    naive = pass_cost(SMALL, "naive", "fp32", positions=5, start=3)
    assert naive.bytes_moved == 441_856 + 3_072 + 8_192


def test_fast_verification_pass_counts_the_causal_triangle() -> None:
    cost = pass_cost(SMALL, "fast", "fp32", positions=5, start=3)
    # Positions 3..7 see 4, 5, 6, 7, 8 positions: 30 (eager's masked rectangle: 5 × 8 = 40).
    # Attention 2·64·30·2 = 7,680 multiply-adds; linears 491,520 and the head 32,000 as eager.
    assert cost.flops == {"fp32": 2 * (491_520 + 7_680 + 32_000)}


def test_generation_is_its_passes() -> None:
    cached = roofline_model.generation_cost(SMALL, "fast", "fp32", prompt_tokens=1, new_tokens=4, cached=True)
    assert [(c.working_set_bytes - roofline_model.parameter_bytes(SMALL, "fast", "fp32")) for c in cached] == [
        roofline_model.cache_bytes(SMALL, positions) for positions in (1, 2, 3, 4)
    ]
    uncached = roofline_model.generation_cost(SMALL, "fast", "fp32", prompt_tokens=1, new_tokens=4, cached=False)
    assert [c.total_flops for c in uncached] == [
        pass_cost(SMALL, "fast", "fp32", positions, 0).total_flops for positions in (1, 2, 3, 4)
    ]


def roof(bandwidth: float = 1e10, peak: float = 1e11) -> dict:
    return {
        "caches": {"L1": 32_768, "L2": 1_048_576, "L3": 33_554_432},
        "peak_operations_per_second": {p: {"high": peak} for p in ("fp32", "bf16", "int8")},
        "sweep": [{"working_set_bytes": 1_000, "bytes_per_second": bandwidth}],
        "bandwidth": {},
    }


def test_regime_rule_on_synthetic_points() -> None:
    assert regime(memory_seconds=2.0, compute_seconds=1.0, overhead_seconds=0.5) == "memory-bound"
    assert regime(memory_seconds=1.0, compute_seconds=2.0, overhead_seconds=0.5) == "compute-bound"
    assert regime(memory_seconds=1.0, compute_seconds=2.0, overhead_seconds=3.0) == "overhead-bound"
    # The overhead must exceed the slower side, not just one of them.
    assert regime(memory_seconds=1.0, compute_seconds=3.0, overhead_seconds=2.0) == "compute-bound"
    memory = place([Cost(1_000_000, {"fp32": 10_000}, 2_000_000)], roof())
    assert (memory.regime, memory.level) == ("memory-bound", "L3")
    assert memory.roofline_seconds == pytest.approx(1e-4)
    compute = place([Cost(1_000, {"fp32": 10**8}, 10_000)], roof())
    assert (compute.regime, compute.level) == ("compute-bound", "L1")
    assert compute.roofline_seconds == pytest.approx(1e-3)
    slow_calls = place([Cost(1_000, {"fp32": 10**8}, 10_000)] * 2, roof(), overhead_seconds_per_pass=0.01)
    assert slow_calls.regime == "overhead-bound"
    # The prediction adds the overhead, the memory time (1,000 bytes at 1e10 B/s) and the compute time.
    assert slow_calls.predicted_seconds == pytest.approx(2 * (0.01 + 1e-7 + 1e-3))


def test_bandwidth_interpolates_the_sweep_on_log_axes() -> None:
    sweep = [
        {"working_set_bytes": 1_000, "bytes_per_second": 100.0},
        {"working_set_bytes": 4_000, "bytes_per_second": 25.0},
    ]
    assert roofline_model.bandwidth_at(2_000, sweep) == pytest.approx(50.0)
    assert roofline_model.bandwidth_at(10, sweep) == 100.0
    assert roofline_model.bandwidth_at(10**9, sweep) == 25.0


def test_speculative_arithmetic() -> None:
    assert speculative_cost.expected_chars_per_pass(0.5, 2) == pytest.approx(1.75)
    assert speculative_cost.expected_chars_per_pass(1.0, 4) == 5
    # A free draft and a verification that costs a step: α = 0 breaks even, any α > 0 wins.
    assert speculative_cost.speculative_speedup(0.0, 4, 1.0, 0.0, 1.0) == pytest.approx(1.0)
    # Drafts costing half a step with k = 4 and a verification of 1.5 steps: 3.5 steps a round;
    # break-even where (1 − α⁵)/(1 − α) = 3.5.
    break_even = speculative_cost.break_even_acceptance(4, 1.0, 0.5, 1.5)
    assert break_even is not None
    assert speculative_cost.expected_chars_per_pass(break_even, 4) == pytest.approx(3.5, rel=1e-6)
    assert speculative_cost.break_even_acceptance(4, 1.0, 2.0, 1.0) is None  # 9 steps a round never pay


def test_eager_steps_are_priced_by_their_overhead_fit_or_withheld() -> None:
    """An eager impl is overhead-bound at these widths: its one-position steps cost the fit's
    a + b · mults, not a + the roof's times (a few percent of them); with no fit, a fit that misses
    its own points by more than 25%, or a pass of several positions, there is no prediction."""
    steps = [pass_cost(QUICK, "static", "fp32", 1, start) for start in range(8)]
    mults = sum(cost.total_flops for cost in steps) / 2
    fitted = place(steps, roof(), 300e-6, impl="static", seconds_per_mult=5e-10, fit_error=0.1)
    assert fitted.regime == "overhead-bound" and fitted.withheld is None
    assert fitted.predicted_seconds == pytest.approx(8 * 300e-6 + 5e-10 * mults)
    # The same passes on the roof alone: the overhead plus memory and compute, far less.
    roof_only = place(steps, roof(), 300e-6)
    assert roof_only.predicted_seconds < fitted.predicted_seconds
    assert roof_only.predicted_seconds == pytest.approx(
        8 * 300e-6 + roof_only.memory_seconds + roof_only.compute_seconds
    )
    for withheld, reason in (
        (place(steps, roof(), 0.0, impl="static", seconds_per_mult=None), roofline_model.NO_OVERHEAD_FIT),
        (place(steps, roof(), 300e-6, impl="naive", seconds_per_mult=5e-10, fit_error=0.44), roofline_model.FIT_MISSES),
        (
            place([pass_cost(QUICK, "static", "fp32", 5, 8)], roof(), 300e-6, impl="static", seconds_per_mult=5e-10),
            roofline_model.EAGER_MULTI_POSITION,
        ),
    ):
        assert withheld.withheld == reason and withheld.predicted_seconds != withheld.predicted_seconds  # NaN
        assert withheld.roofline_seconds > 0  # the roof and the regime are still placed
    # The fast impl is the roof's: a verification of five positions is predicted, fit or none.
    fast = place([pass_cost(QUICK, "fast", "fp32", 5, 8)], roof(), 5e-6, impl="fast")
    assert fast.withheld is None and fast.predicted_seconds == pytest.approx(
        5e-6 + fast.memory_seconds + fast.compute_seconds
    )


def test_the_decodes_working_sets_are_its_passes() -> None:
    sizes = roofline_model.decode_working_sets({"quick": QUICK}, positions=(0, 128))
    assert sizes == {
        f"quick_{precision}_at_{position}": pass_cost(QUICK, "fast", precision, 1, position).working_set_bytes
        for precision in ("fp32", "bf16", "int8")
        for position in (0, 128)
    }
    # float32 weights (2.42 MB for this vocabulary) and the cache of 129 positions (0.40 MB).
    assert sizes["quick_fp32_at_128"] == 2_421_508 + 2 * 3 * 129 * 128 * 4
