"""CUDA: the spec refuses CPU-only choices on cuda; the whole tiny sweep runs on a GPU where
there is one (skipped elsewhere, with the reason)."""

from __future__ import annotations

import pytest
import torch

from runner.decoding.decode import choose_token, inverse_cdf_on_device
from runner.errors import InputError
from runner.spec.sweeps import for_device, load_spec_file, validate
from store import frames
from tests.conftest import TINY_SPEC


def test_cpu_only_choices_are_refused_on_cuda() -> None:
    raw = load_spec_file(TINY_SPEC).raw
    with pytest.raises(InputError, match="experiments.kv_cache.impls: 'fast' runs on the CPU only"):
        validate({**raw, "device": "cuda"})
    moved = validate(for_device(raw, "cuda")).raw
    assert "fast" not in moved["experiments"]["kv_cache"]["impls"]
    assert "dynamic_int8" not in moved["experiments"]["quantization"]["kernels"]
    assert moved["experiments"]["speculative"]["impls"] == ["static"]
    assert moved["device"] == "cuda"
    fast_kernels = {**raw, "experiments": {**raw["experiments"]}}
    fast_kernels["experiments"]["quantization"] = {"precisions": ["int8", "bf16"], "kernels": ["fake", "fast_int8"]}
    fast_kernels["experiments"]["speculative"] = {**raw["experiments"]["speculative"], "impls": ["static"]}
    fast_kernels["experiments"]["speculative"]["drafts"] = ["bigram", "fast_int8"]
    with pytest.raises(InputError, match="experiments.quantization.kernels: 'fast_int8' runs on the CPU only"):
        validate(
            {
                **fast_kernels,
                "device": "cuda",
                "experiments": {"quantization": fast_kernels["experiments"]["quantization"]},
            }
        )
    moved = validate(for_device(fast_kernels, "cuda")).raw["experiments"]
    assert moved["quantization"]["kernels"] == ["fake"] and moved["speculative"]["drafts"] == ["bigram"]


def test_the_device_side_token_choice_matches_the_cpu_one() -> None:
    # A GPU chooses sampled tokens in tensor ops (no sync per token); run those ops here on the
    # CPU against the Python path every impl uses on the CPU.
    generator = torch.Generator().manual_seed(3)
    for _ in range(200):
        logits = torch.randn(1, 103, generator=generator) * 3
        uniform = float(torch.rand(1, generator=generator))
        distribution = torch.softmax(logits, dim=-1)
        assert int(inverse_cdf_on_device(distribution, uniform)) == int(choose_token(logits, 1.0, uniform))
    assert int(inverse_cdf_on_device(distribution, 0.999999999)) < 103


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_the_tiny_sweep_runs_on_cuda(sqlite_url: str) -> None:
    from runner.execution.execute import execute
    from store.store import Store

    spec = validate(for_device(load_spec_file(TINY_SPEC).raw, "cuda"))
    store = Store(sqlite_url)
    outcome = execute(store, spec, show_progress=False, log=lambda _: None)
    assert outcome.cases_recorded == spec.cases_total()
    machine = frames.runs(store).iloc[0]
    assert machine["status"] == "done"
    measured = frames.measurements(store, outcome.run_id, "kv_cache")
    assert measured.loc[measured["metric"] == "strings_identical", "value"].iloc[0] == 1.0
