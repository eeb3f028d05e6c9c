"""The char GPT: shapes, cached vs full forward, and parity with transformers' GPT-2."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from runner.model.corpus import load_corpus
from runner.model.gpt import CharGPT, ModelConfig, to_gpt2_state_dict
from runner.model.train import TrainConfig, deserialize, serialize, train


def tiny_config(**overrides: Any) -> ModelConfig:
    return dataclasses.replace(
        ModelConfig(vocab_size=11, d_model=16, n_layer=2, n_head=2, context_length=32), **overrides
    )


def test_forward_shapes_and_sizes() -> None:
    torch.manual_seed(0)
    model = CharGPT(tiny_config())
    logits = model(torch.randint(0, 11, (3, 7)))
    assert logits.shape == (3, 7, 11)
    d, layers, vocab, context = 16, 2, 11, 32
    expected = vocab * d + context * d + layers * (12 * d * d + 13 * d) + 2 * d
    assert model.parameter_count() == expected
    assert model.weight_bytes() == 4 * expected


def test_an_untied_lm_head_with_a_bias_is_the_write_ups_shape() -> None:
    config = ModelConfig(vocab_size=100, d_model=128, n_layer=3, n_head=4, context_length=128)
    untied = dataclasses.replace(config, tie_lm_head=False, lm_head_bias=True)
    tied_count = CharGPT(config).parameter_count()
    assert CharGPT(untied).parameter_count() == tied_count + 100 * 128 + 100 == 637_156
    # The GPT-2 defaults stay out of the config's dict, so stored checkpoints keep their hashes.
    assert "tie_lm_head" not in config.to_dict() and "lm_head_bias" not in config.to_dict()
    assert untied.to_dict()["tie_lm_head"] is False and untied.to_dict()["lm_head_bias"] is True
    assert ModelConfig(**untied.to_dict()) == untied
    with pytest.raises(ValueError, match="GPT-2 shaped"):
        to_gpt2_state_dict(CharGPT(untied))


def test_cached_forward_matches_full_forward_in_chunks() -> None:
    torch.manual_seed(1)
    model = CharGPT(tiny_config()).eval()
    tokens = torch.randint(0, 11, (1, 20))
    with torch.inference_mode():
        full = model(tokens)
        cache = model.new_cache()
        pieces = [model.forward_cached(tokens[:, :5], cache)]
        pieces += [model.forward_cached(tokens[:, t : t + 1], cache) for t in range(5, 12)]
        pieces.append(model.forward_cached(tokens[:, 12:], cache))
    assert cache.length == 20
    assert torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-5)


def test_rolling_back_the_cache_recomputes_the_same_logits() -> None:
    torch.manual_seed(2)
    model = CharGPT(tiny_config()).eval()
    tokens = torch.randint(0, 11, (1, 10))
    with torch.inference_mode():
        cache = model.new_cache()
        model.forward_cached(tokens[:, :6], cache)
        first = model.forward_cached(tokens[:, 6:9], cache)
        cache.length = 6  # reject the three speculative positions
        again = model.forward_cached(tokens[:, 6:9], cache)
    assert torch.equal(first, again)


def test_positions_past_the_context_are_refused() -> None:
    model = CharGPT(tiny_config())
    with pytest.raises(ValueError, match="past the model context"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_serialize_round_trip_gives_identical_logits() -> None:
    torch.manual_seed(3)
    model = CharGPT(tiny_config()).eval()
    tokens = torch.randint(0, 11, (2, 9))
    assert torch.equal(deserialize(serialize(model))(tokens), model(tokens))


@pytest.mark.slow
def test_a_trained_checkpoint_loads_into_transformers_gpt2() -> None:
    pytest.importorskip("transformers", reason="the bench extra (transformers) is not installed")
    from runner.model.gpt import to_transformers

    corpus = load_corpus()
    config = ModelConfig(vocab_size=len(corpus.vocabulary), d_model=32, n_layer=2, n_head=4, context_length=256)
    trained, _, _ = train(config, TrainConfig(steps=20, batch_size=4, sequence_length=64), corpus, show_progress=False)
    model = deserialize(serialize(trained))
    gpt2 = to_transformers(model)
    tokens = torch.tensor([corpus.encode(corpus.text[1000:1256])])
    with torch.inference_mode():
        ours = model(tokens)
        theirs = gpt2(tokens).logits
    assert tokens.shape == (1, 256)
    assert (ours - theirs).abs().max().item() <= 1e-5
