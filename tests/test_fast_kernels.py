"""The fast path's kernels: every instruction set they are built for computes the same logits, the
int8 and bfloat16 formats compute what their eager modules compute, a multi-position pass equals
the same positions fed one by one, the build cache tells CPUs apart, and the compiled impl draws
the same tokens as the others."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest
import torch

from runner.decoding.decode import generate
from runner.decoding.fast import FastDecoder, decoder_for, logits_through_fast_path
from runner.model.gpt import Block, CharGPT, KVCache, ModelConfig
from runner.model.quantize import Int8DynamicLinear, quantization_of, quantize_model, weight_bytes

# Widths off the vector length (24: head_dim 8 and a partial vector everywhere) and on it.
SHAPES = [
    ModelConfig(vocab_size=37, d_model=24, n_layer=2, n_head=3, context_length=96),
    ModelConfig(vocab_size=50, d_model=64, n_layer=1, n_head=2, context_length=96),
]


def trained_looking(config: ModelConfig, seed: int = 0) -> CharGPT:
    torch.manual_seed(seed)
    model = CharGPT(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)  # off GPT-2's zero biases and unit norms
    return model


def tokens_for(config: ModelConfig, count: int, seed: int = 1) -> list[int]:
    return torch.randint(0, config.vocab_size, (count,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("config", SHAPES)
def test_a_pass_of_many_positions_equals_them_fed_one_by_one(config: ModelConfig) -> None:
    model = trained_looking(config)
    decoder = FastDecoder(model)
    tokens = tokens_for(config, 70)
    whole = decoder.forward(tokens, model.new_cache())
    cache = model.new_cache()
    steps = torch.stack([decoder.step(token, cache) for token in tokens])
    split_cache = model.new_cache()
    decoder.forward(tokens[:40], split_cache)
    verification = decoder.forward(tokens[40:45], split_cache)
    # Each output row is summed in column order whatever the pass: bit for bit the same.
    assert torch.equal(whole, steps)
    assert torch.equal(verification, steps[40:45])
    with torch.inference_mode():
        eager = model(torch.tensor([tokens]))[0]
    assert (whole - eager).abs().max().item() < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("march", ["haswell", "x86-64"])
def test_every_instruction_set_computes_the_same_logits(march: str) -> None:
    # haswell: the AVX2 kernels; x86-64: the plain loops. The native build is AVX-512 where the CPU has it.
    config = SHAPES[0]
    tokens = tokens_for(config, 50)
    for model in (trained_looking(config), quantize_model(trained_looking(config), "bf16", kernel="fast_bf16")):
        native = FastDecoder(model).forward(tokens, model.new_cache())
        other = FastDecoder(model, march=march).forward(tokens, model.new_cache())
        assert (native - other).abs().max().item() < 1e-4
    # int8: vpdpbusd (VNNI), vpmaddubsw (AVX2) and widened floats all sum the same integers exactly; only an
    # activation that float rounding moves across an int8 grid boundary may change a logit.
    config = SHAPES[1]
    tokens = tokens_for(config, 50)
    reference = trained_looking(config)
    model = quantize_model(reference, "int8", kernel="fast_int8")
    with torch.inference_mode():
        rounding = (model(torch.tensor([tokens]))[0] - reference(torch.tensor([tokens]))[0]).abs().max().item()
    native = FastDecoder(model).forward(tokens, model.new_cache())
    other = FastDecoder(model, march=march).forward(tokens, model.new_cache())
    assert ((native - other).abs() < 1e-4).float().mean().item() > 0.97
    assert (native - other).abs().max().item() < 0.5 * rounding


@pytest.mark.parametrize(("precision", "kernel"), [("int8", "fast_int8"), ("bf16", "fast_bf16")])
def test_the_low_precision_kernels_compute_what_their_modules_compute(precision: str, kernel: str) -> None:
    config = SHAPES[0]
    reference = trained_looking(config)
    model = quantize_model(reference, precision, kernel=kernel)
    assert (quantization_of(model).precision, quantization_of(model).kernel) == (precision, kernel)
    tokens = tokens_for(config, 60)
    fast = FastDecoder(model).forward(tokens, model.new_cache())
    with torch.inference_mode():
        eager = model(torch.tensor([tokens]))[0]
        full_precision = reference(torch.tensor([tokens]))[0]
    # Float rounding may move an activation across a rounding boundary of the int8 or bfloat16 grid,
    # which changes that position's logits by a grid step: nearly every logit agrees to float
    # rounding, and every one far closer than the quantization moves them from float32.
    close = (fast - eager).abs() < 1e-4
    assert close.float().mean().item() > 0.98
    assert (fast - eager).abs().max() < 0.5 * (eager - full_precision).abs().max()
    assert (eager - full_precision).abs().max() > 1e-3, "the kernel does round"
    assert generate(model, [1, 2], 30, temperature=0.0, impl="fast").tokens == (
        generate(model, [1, 2], 30, temperature=0.0, impl="static").tokens
    )
    inputs = torch.tensor([tokens[:30], tokens[30:]])
    assert torch.allclose(logits_through_fast_path(model, inputs)[0], fast[:30])
    assert weight_bytes(model) < weight_bytes(reference)


def test_models_the_fast_path_does_not_run_are_refused() -> None:
    model = trained_looking(SHAPES[0])
    for other in (quantize_model(model, "int8", kernel="fake"), quantize_model(model, "int8", kernel="dynamic_int8")):
        with pytest.raises(ValueError, match="the fast path runs"):
            FastDecoder(other)
    with pytest.raises(ValueError, match="fast_bf16 kernel runs bf16 only"):
        quantize_model(model, "int8", kernel="fast_bf16")
    with pytest.raises(ValueError, match="fake kernel runs int8 or int4 only"):
        quantize_model(model, "bf16", kernel="fake")
    # A weight of -128 (a loaded or hand-made buffer: quantization never makes one) is refused, not summed wrong.
    tampered = quantize_model(model, "int8", kernel="fast_int8")
    attention = cast(Int8DynamicLinear, cast(Block, tampered.blocks[0]).attn.c_attn)
    with torch.no_grad():
        attention.weight_int8[0, 0] = -128
    with pytest.raises(ValueError, match=r"fast_int8 weights: -128 is below .*allowed -127\.\.127"):
        FastDecoder(tampered)


def test_the_build_cache_is_keyed_by_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.decoding import native_build

    here = native_build.build_key("fast_decode.cpp", "native", "c++")
    assert native_build.build_key("fast_decode.cpp", "haswell", "c++") != here
    monkeypatch.setattr(native_build, "cpu_flags_key", lambda: "another-cpu")
    assert native_build.build_key("fast_decode.cpp", "native", "c++") != here


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_compiled_impl_draws_the_same_tokens(temperature: float) -> None:
    model = trained_looking(SHAPES[1])
    compiled = generate(model, [1, 2, 3], 40, temperature=temperature, seed=4, impl="compiled").tokens
    assert compiled == generate(model, [1, 2, 3], 40, temperature=temperature, seed=4, impl="static").tokens
    with pytest.raises(ValueError, match="exact cache only"):
        generate(model, [1], 4, use_cache=False, impl="compiled")


def test_generations_reusing_the_scratch_cache_draw_what_a_fresh_cache_draws() -> None:
    model = trained_looking(SHAPES[1])
    fresh = FastDecoder(model)

    def from_a_fresh_cache(prompt: list[int], count: int, seed: int) -> list[int]:
        draws = torch.rand(count, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        tokens, _ = fresh.sample(prompt, count, 1.0, draws, model.new_cache(capacity=len(prompt) + count))
        return tokens

    # Long, then short (the cache holds what the long one left past the short one's end), then
    # longer still (the cache grows): each as from a cache of its own.
    for prompt, count, seed in (([1, 2, 3], 60, 5), ([4], 12, 6), ([1, 2, 3], 60, 5), ([7, 8], 90, 7)):
        draws = torch.rand(count, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        decoder = decoder_for(model)
        assert decoder.generate(prompt, count, 1.0, draws) == from_a_fresh_cache(prompt, count, seed)
    assert decoder_for(model) is decoder  # nothing changed: the same decoder, the same scratch cache


def test_a_replaced_parameter_repacks_the_weights() -> None:
    model = trained_looking(SHAPES[1])
    before = decoder_for(model)
    layer = cast(Block, model.blocks[0]).mlp.c_fc
    with torch.no_grad():
        replacement = torch.nn.Parameter(layer.weight * 2)
        while replacement._version < layer.weight._version:
            replacement.mul_(1.0)
    layer.weight = replacement  # a new tensor at the old one's version
    after = decoder_for(model)
    assert after is not before
    tokens = tokens_for(SHAPES[1], 12)
    with torch.inference_mode():
        eager = model(torch.tensor([tokens]))[0]
    assert (after.forward(tokens, model.new_cache()) - eager).abs().max().item() < 1e-4


@pytest.mark.parametrize("kernel", ["float32", "fast_int8"])
def test_a_repacked_decoder_computes_the_same_at_another_place(kernel: str) -> None:
    """FastDecoder.repack packs the weights anew, elsewhere (the earlier packings held, at most
    RETIRED_PACKINGS of them, until release_placements): every output stays bit for bit what the
    first packing gave, the compiled speculative loop's included, whose target and draft hold the
    decoder objects that repack changes in place."""
    from runner.decoding import fast, fast_packing
    from runner.decoding.drafts import ModelDraft
    from runner.decoding.speculative import speculative_decode

    model = trained_looking(SHAPES[1])
    if kernel != "float32":
        model = quantize_model(model, "int8", kernel=kernel)
    draft_model = quantize_model(trained_looking(SHAPES[1], seed=2), "int8", kernel="fast_int8")
    draft = ModelDraft(draft_model, "draft", fast=True)
    decoder = decoder_for(model)
    tokens = tokens_for(SHAPES[1], 12)
    draws = torch.rand(40, generator=torch.Generator().manual_seed(3), dtype=torch.float64)

    def outputs() -> tuple[torch.Tensor, list[int], list[int]]:
        speculated = speculative_decode(model, draft, 4, tokens[:3], 40, temperature=1.0, seed=5, impl="fast")
        logits = decoder.forward(tokens, model.new_cache())
        return logits, decoder.generate(tokens[:3], 40, 1.0, draws), speculated.tokens

    logits, generated, speculated = outputs()
    handles = []
    for _ in range(fast_packing.RETIRED_PACKINGS + 3):
        handles.append(decoder._handle)
        fast.new_placements(model, draft_model, trained_looking(SHAPES[0]))  # one without a decoder: left alone
        assert decoder_for(model) is decoder, "the same decoder, packed again"
        again = outputs()
        assert torch.equal(again[0], logits) and again[1:] == (generated, speculated)
    # Each packing made while the earlier ones are held is a new one (a freed one's place may come back).
    assert len(set(handles[: fast_packing.RETIRED_PACKINGS + 1])) == fast_packing.RETIRED_PACKINGS + 1
    assert len(decoder._packings) == fast_packing.RETIRED_PACKINGS + 1
    assert len(decoder._retired_scratch) == fast_packing.RETIRED_PACKINGS
    fast.release_placements(model, draft_model)
    assert len(decoder._packings) == 1 and not decoder._retired_scratch
    assert decoder.generate(tokens[:3], 40, 1.0, draws) == generated


def test_a_cached_decoder_lets_its_model_go() -> None:
    """decoder_for keeps a decoder per model while the model lives: the decoder must not hold the
    model, or neither would ever be freed (a sweep builds a model a case)."""
    import gc
    import weakref

    model = trained_looking(SHAPES[1])
    decoder = decoder_for(model)
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None
    assert decoder.forward([1, 2, 3], KVCache(SHAPES[1], capacity=8)).shape == (3, SHAPES[1].vocab_size)
    with pytest.raises(RuntimeError, match="repack: the model this decoder packed is gone"):
        decoder.repack()


def test_a_model_too_large_to_hold_twice_keeps_its_one_packing(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.decoding import fast

    model = trained_looking(SHAPES[1])
    decoder = decoder_for(model)
    first = decoder._handle
    monkeypatch.setattr(fast, "RETIRED_BYTES", decoder.packed_bytes - 1)
    fast.new_placements(model)
    assert decoder._handle == first and len(decoder._packings) == 1


def test_helper_threads_change_nothing_but_the_time() -> None:
    from runner.decoding.fast_library import set_threads, threads

    model = trained_looking(SHAPES[1])
    tokens = tokens_for(SHAPES[1], 60)
    alone = FastDecoder(model).forward(tokens, model.new_cache())
    sampled_alone = generate(model, [1, 2], 50, temperature=1.0, seed=3, impl="fast").tokens
    set_threads(2)
    try:
        assert threads() == 2
        # Each chunk of rows and each head is computed whole by one thread: the same sums in the same order.
        assert torch.equal(FastDecoder(model).forward(tokens, model.new_cache()), alone)
        assert generate(model, [1, 2], 50, temperature=1.0, seed=3, impl="fast").tokens == sampled_alone
    finally:
        set_threads(1)
    assert threads() == 1


def test_inductor_code_is_cached_apart_per_cpu_capability(tmp_path: Path) -> None:
    """Inductor's cache key leaves out ATEN_CPU_CAPABILITY: code it generated under AVX-512 and reloaded
    under avx2 drew token 0 at every step. Each capability gets its own folder inside the user's."""
    capabilities, folders = ("avx2", "default"), []
    for capability in capabilities:
        completed = subprocess.run(
            [sys.executable, "-c", "from runner.decoding.compiled import separate_inductor_cache as s; print(s())"],
            env={**os.environ, "ATEN_CPU_CAPABILITY": capability, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)},
            capture_output=True,
            text=True,
            check=True,
        )
        folders.append(Path(completed.stdout.strip()))
    assert folders[0] != folders[1]
    for folder, capability in zip(folders, capabilities, strict=True):
        assert folder.parent == tmp_path and folder.name.endswith(f"-{capability}")


def test_the_fast_path_is_built_for_the_instruction_set_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.decoding.fast_library import default_march, instruction_set
    from runner.errors import InputError

    monkeypatch.setenv("DECODELAB_FAST_MARCH", "x86-64")
    assert default_march() == "x86-64" and instruction_set() == "scalar"
    monkeypatch.setenv("DECODELAB_FAST_MARCH", "native; rm -rf /")
    with pytest.raises(InputError, match="DECODELAB_FAST_MARCH: .* is not a -march name"):
        default_march()
