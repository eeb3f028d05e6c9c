"""Quantization: bounded rounding error, exact bytes, close logits, the same decode API."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.decoding.decode import generate
from runner.model.gpt import CharGPT, ModelConfig
from runner.model.quantize import QuantizedTensor, quantization_of, quantize_model, weight_bytes

CONFIG = ModelConfig(vocab_size=10, d_model=16, n_layer=2, n_head=2, context_length=32)


@pytest.fixture(scope="module")
def model() -> CharGPT:
    torch.manual_seed(0)
    return CharGPT(CONFIG).eval()


@settings(max_examples=60, deadline=None)
@given(
    precision=st.sampled_from(["int8", "int4"]),
    rows=st.integers(1, 8),
    groups=st.integers(1, 4),
    group_size=st.sampled_from([2, 4, 8, 32]),
    seed=st.integers(0, 10_000),
    magnitude=st.floats(1e-3, 1e3),
)
def test_dequantized_values_are_within_half_a_step(
    precision: str, rows: int, groups: int, group_size: int, seed: int, magnitude: float
) -> None:
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, groups * group_size, generator=generator) * magnitude
    quantized = QuantizedTensor(weight, precision, group_size)
    step = quantized.scales.repeat_interleave(group_size, dim=1)
    error = (quantized.dequantize() - weight).abs()
    assert bool((error <= step / 2 * (1 + 1e-5) + 1e-12).all())
    rows_back = quantized.dequantize_rows(torch.tensor([rows - 1, 0]))
    assert torch.equal(rows_back, quantized.dequantize()[[rows - 1, 0]])
    # Into a buffer (what a layer does while decoding): the very same numbers, in a longer buffer too.
    buffer = torch.full((rows * groups * group_size + 3,), float("nan"))
    into = quantized.dequantize_into(buffer[: rows * groups * group_size])
    assert torch.equal(into, quantized.dequantize())


def test_byte_counts_are_exact_for_a_known_shape(model: CharGPT) -> None:
    d, layers, vocab, context = 16, 2, 10, 32
    linear_weights = layers * 12 * d * d
    biases = layers * (3 * d + d + 4 * d + d)
    norms = layers * 4 * d + 2 * d
    assert weight_bytes(model) == 4 * (linear_weights + biases + norms + vocab * d + context * d)

    int8 = quantize_model(model, "int8", embeddings=False)
    # one byte per weight; one float32 scale per output row of each linear
    rows = layers * (3 * d + d + 4 * d + d)
    assert weight_bytes(int8) == linear_weights + 4 * rows + 4 * (biases + norms + vocab * d + context * d)

    int4 = quantize_model(model, "int4", group_size=8, embeddings=True)
    table_values = (vocab + context) * d
    assert weight_bytes(int4) == (
        (linear_weights + table_values) // 2  # two values per byte
        + 4 * (linear_weights + table_values) // 8  # one float32 scale per group of 8
        + 4 * (biases + norms)
    )


def test_the_dynamic_int8_kernel_counts_its_packed_weights_exactly(model: CharGPT) -> None:
    d, layers, vocab, context = 16, 2, 10, 32
    rows = layers * (3 * d + d + 4 * d + d)
    linear_weights = layers * 12 * d * d
    # int8 values, a float64 scale and an int64 zero point per output row, float32 biases; the
    # embeddings and norms stay float32 parameters.
    expected = linear_weights + 16 * rows + 4 * rows + 4 * (layers * 4 * d + 2 * d + vocab * d + context * d)
    counts = {weight_bytes(quantize_model(model, "int8", kernel="dynamic_int8")) for _ in range(5)}
    assert counts == {expected}


def test_an_untied_lm_head_is_quantized_on_its_own(model: CharGPT) -> None:
    import dataclasses

    torch.manual_seed(1)
    untied = CharGPT(dataclasses.replace(CONFIG, tie_lm_head=False, lm_head_bias=True)).eval()
    with torch.no_grad():
        untied.lm_head.bias.uniform_(-1, 1)
    quantized = quantize_model(untied, "int8")
    tokens = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        assert (quantized(tokens) - untied(tokens)).abs().max() < 0.05


def test_int8_logits_are_close_to_float32(model: CharGPT) -> None:
    tokens = torch.randint(0, 10, (1, 20), generator=torch.Generator().manual_seed(1))
    reference = model(tokens)
    int8 = quantize_model(model, "int8")(tokens)
    int4 = quantize_model(model, "int4", group_size=8)(tokens)
    spread = reference.abs().max().item()
    assert (int8 - reference).abs().max().item() < 0.02 * spread
    assert (int8 - reference).abs().max() < (int4 - reference).abs().max(), "4-bit is coarser than 8-bit"


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_decoding_dequantizes_into_one_buffer_with_the_same_logits(model: CharGPT, precision: str) -> None:
    """In inference mode every fake-quantized layer dequantizes into one reused buffer a thread
    (runner.model.quantize.dequantize_buffer); the logits are bit for bit those of a fresh weight
    per layer, as computed outside inference mode, from any thread."""
    quantized = quantize_model(model, precision, group_size=8)
    tokens = torch.randint(0, 10, (1, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        fresh = quantized(tokens)

    def reused() -> torch.Tensor:
        with torch.inference_mode():
            return quantized(tokens).clone()

    assert torch.equal(reused(), fresh)
    with ThreadPoolExecutor(2) as pool:
        assert all(torch.equal(logits, fresh) for logits in pool.map(lambda _: reused(), range(4)))


@pytest.mark.parametrize(("precision", "kernel"), [("int8", "fake"), ("int4", "fake"), ("int8", "dynamic_int8")])
def test_the_quantized_model_keeps_the_decode_api(model: CharGPT, precision: str, kernel: str) -> None:
    quantized = quantize_model(model, precision, group_size=8, kernel=kernel)
    assert isinstance(quantized, CharGPT)
    info = quantization_of(quantized)
    assert (info.precision, info.kernel) == (precision, kernel)
    assert quantization_of(model).precision == "fp32", "the original is untouched"
    tokens = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.inference_mode():
        cache = quantized.new_cache()
        cached = torch.cat(
            [quantized.forward_cached(tokens[:, :3], cache), quantized.forward_cached(tokens[:, 3:], cache)], dim=1
        )
        # The dynamic kernel picks activation scales per call, so chunking moves it slightly.
        tolerance = 2e-3 if kernel == "dynamic_int8" else 1e-4
        assert torch.allclose(cached, quantized(tokens), atol=tolerance)
    greedy = generate(quantized, [1, 2], 10, temperature=0.0)
    assert len(greedy.tokens) == 10
    assert greedy.tokens == generate(quantized, [1, 2], 10, use_cache=False, temperature=0.0).tokens


def test_bad_quantization_requests_are_refused(model: CharGPT) -> None:
    with pytest.raises(ValueError, match="precision"):
        quantize_model(model, "int3")
    with pytest.raises(ValueError, match="group_size 5 must divide d_model 16"):
        quantize_model(model, "int4", group_size=5)
    with pytest.raises(ValueError, match="int8 only"):
        quantize_model(model, "int4", kernel="dynamic_int8")


def test_a_group_size_that_does_not_divide_the_width_is_refused_by_the_validator() -> None:
    from runner.errors import InputError
    from runner.spec.sweeps import validate

    with pytest.raises(InputError, match="experiments.quantization.group_size: 48 does not divide d_model 128"):
        validate({"experiments": {"quantization": {"group_size": 48}}})


def test_the_fast_kernels_are_measured_through_the_fast_path(filled_store_url: str) -> None:
    from store import frames
    from store.store import Store

    store = Store(filled_store_url)
    rows = frames.measurements(store, int(frames.runs(store)["run_id"].min()), "quantization")
    rows["kernel"] = rows["params"].map(lambda params: params["kernel"])
    assert set(rows["kernel"]) == {"float32", "fake", "dynamic_int8", "fast_int8", "fast_bf16"}
    for kernel, precision in (("fast_int8", "int8"), ("fast_bf16", "bf16")):
        case = rows[rows["kernel"] == kernel]
        assert {(params["impl"], params["precision"]) for params in case["params"]} == {("fast", precision)}
        values = case.set_index("metric")["value"]
        assert values["speedup_vs_fp32"] > 0 and values["seconds_per_token_fp32"] > 0
        assert 0 <= values["divergence_position_greedy"] <= 20
        assert abs(values["loss_increase"]) < 0.5
        assert values["bytes_ratio_vs_fp32"] < 1
    assert "impl" not in rows.loc[rows["kernel"] == "fake", "params"].iloc[0], "the eager kernels' cases are as before"
