"""Small parts several test modules build the same way: a peaked untrained target model for the
speculative tests, and a quick counting job for the queue tests."""

from __future__ import annotations

from typing import Any

import torch

from runner.model.gpt import CharGPT, ModelConfig
from runner.spec.sweeps import validate

# The speculative tests' vocabulary: small enough for exact distributions.
VOCAB = 12


def peaked_target() -> CharGPT:
    """A seeded 2-block model whose weights are scaled up: peaked, trained-looking distributions."""
    torch.manual_seed(0)
    model = CharGPT(ModelConfig(vocab_size=VOCAB, d_model=32, n_layer=2, n_head=4, context_length=128))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(4.0)
    return model.eval()


def counting_job(name: str, index: int) -> dict[str, Any]:
    """A job of three quick cases (a counting sweep on a model trained for three steps); ``index``
    makes each job's cases its own."""
    return validate(
        {
            "name": f"{name}-{index}",
            "threads": 1,  # as tests/fixtures/slow.toml says: two threads crawl on a busy machine
            "model": {"d_model": 16, "n_layer": 1, "n_head": 2, "context_length": 32},
            "train": {"steps": 3, "batch_size": 4, "sequence_length": 16},
            "experiments": {
                "context_cost": {
                    "lengths": [8 + index, 100 + index],
                    "d_model": 8,
                    "d_ff": 16,
                    "n_heads": 2,
                    "reference_length": 16,
                }
            },
        }
    ).raw
