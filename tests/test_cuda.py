"""CUDA: the spec refuses CPU-only choices on cuda; the whole tiny sweep runs on a GPU where
there is one (skipped elsewhere, with the reason)."""

from __future__ import annotations

import pytest
import torch

from runner.errors import InputError
from runner.sweeps import for_device, load_spec_file, validate
from tests.conftest import TINY_SPEC


def test_cpu_only_choices_are_refused_on_cuda() -> None:
    raw = load_spec_file(TINY_SPEC).raw
    with pytest.raises(InputError, match="experiments.kv_cache.impls: 'fast' runs on the CPU only"):
        validate({**raw, "device": "cuda"})
    moved = validate(for_device(raw, "cuda")).raw
    assert "fast" not in moved["experiments"]["kv_cache"]["impls"]
    assert "dynamic_int8" not in moved["experiments"]["quantization"]["kernels"]
    assert moved["device"] == "cuda"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_the_tiny_sweep_runs_on_cuda(sqlite_url: str) -> None:
    from runner.execute import execute
    from store.store import Store

    spec = validate(for_device(load_spec_file(TINY_SPEC).raw, "cuda"))
    store = Store(sqlite_url)
    outcome = execute(store, spec, show_progress=False, log=lambda _: None)
    assert outcome.cases_recorded == spec.cases_total()
    machine = store.runs().iloc[0]
    assert machine["status"] == "done"
    measured = store.measurements(outcome.run_id, "kv_cache")
    assert measured.loc[measured["metric"] == "strings_identical", "value"].iloc[0] == 1.0
