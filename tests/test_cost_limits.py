"""Sizes bounded together, in the one validator every entry point uses: a spec whose estimated
peak memory exceeds the machine's available memory, or whose estimated wall time exceeds its
max_hours, is refused in one line naming the estimate, by `decodelab enqueue`, `decodelab run`
and the launch form, before anything is written."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from runner.cost.cost_model import check_limits, parameter_count, peak_memory_bytes
from runner.errors import InputError
from runner.model.gpt import CharGPT, ModelConfig
from runner.spec.sweeps import validate
from store import frames
from store.store import Store
from tests.conftest import run_decodelab
from tests.shared_parts import counting_job

CONTEXT_COST = {"lengths": [8, 100], "d_model": 8, "d_ff": 16, "n_heads": 2, "reference_length": 16}


def spec_text(*, model: str, train: str, top: str = "") -> str:
    experiment = "\n".join(f"{key} = {value!r}".replace("'", '"') for key, value in CONTEXT_COST.items())
    return f'name = "big"\n{top}\n[model]\n{model}\n[train]\n{train}\n[experiments.context_cost]\n{experiment}\n'


# 2.4e9 parameters trained on batches of 1024×8192 positions: terabytes.
HUGE = spec_text(
    model="d_model = 2048\nn_layer = 48\nn_head = 16\ncontext_length = 8192",
    train="steps = 1000\nbatch_size = 1024\nsequence_length = 8192",
)
# A small model trained for a million steps: months of CPU time.
LONG = spec_text(
    model="d_model = 256\nn_layer = 4\nn_head = 4\ncontext_length = 256",
    train="steps = 1000000\nbatch_size = 64\nsequence_length = 256",
)


def test_the_parameter_estimate_is_the_models_own_count() -> None:
    for d_model, n_layer, n_head, context_length, vocabulary in ((32, 1, 2, 64, 80), (128, 3, 4, 1024, 100)):
        model = {"d_model": d_model, "n_layer": n_layer, "n_head": n_head, "context_length": context_length}
        config = ModelConfig(
            vocab_size=vocabulary, d_model=d_model, n_layer=n_layer, n_head=n_head, context_length=context_length
        )
        built = CharGPT(config)
        assert parameter_count(model, vocabulary) == sum(parameter.numel() for parameter in built.parameters())


def test_the_memory_cap_is_the_available_memory() -> None:
    spec = validate(counting_job("small", 0))
    peak = peak_memory_bytes(spec)
    check_limits(spec, available_bytes=peak)
    with pytest.raises(InputError, match=r"^spec: estimated peak memory .* above this machine's available memory"):
        check_limits(spec, available_bytes=peak - 1)


def test_the_time_cap_is_max_hours() -> None:
    raw: dict[str, Any] = copy.deepcopy(counting_job("small", 0))
    assert raw["max_hours"] == 24.0, "the default"
    raw["train"]["steps"] = 1_000_000
    raw["max_hours"] = 0.01
    with pytest.raises(InputError, match=r"^max_hours: estimated wall time [\d.,]+ hours .* above max_hours 0.01"):
        validate(raw)
    raw["max_hours"] = 8760
    validate(raw)


@pytest.mark.parametrize(
    ("text", "expected"),
    [(HUGE, "spec: estimated peak memory"), (LONG, "max_hours: estimated wall time")],
    ids=["memory", "time"],
)
@pytest.mark.slow
def test_enqueue_and_run_refuse_a_spec_too_big_together(tmp_path: Path, text: str, expected: str) -> None:
    spec = tmp_path / "big.toml"
    spec.write_text(text)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).close()
    for command in ("enqueue", "run"):
        result = run_decodelab(command, "--spec", str(spec), "--db", url, cwd=tmp_path, timeout=120)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, f"{command}: {result.stderr}"
        assert lines[0].startswith(f"error: {expected}"), lines[0]
    store = Store(url)
    assert frames.jobs(store).empty and frames.runs(store).empty, "nothing is written"
    store.close()


def test_a_spec_allowed_more_hours_is_enqueued(tmp_path: Path) -> None:
    spec = tmp_path / "long.toml"
    spec.write_text(LONG.replace('name = "big"\n', 'name = "big"\nmax_hours = 8760\n'))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    result = run_decodelab("enqueue", "--spec", str(spec), "--db", url, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    store = Store(url)
    queued = frames.jobs(store)
    store.close()
    assert queued["status"].tolist() == ["queued"]
    assert queued["spec"].iloc[0]["max_hours"] == 8760, "the job keeps the hours it was allowed"


def test_the_launch_form_refuses_a_spec_too_big_together(tmp_path: Path) -> None:
    from dashboard.launch import LaunchRequest, launch

    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    request = LaunchRequest(source="spec", preset="", experiments=[], spec_text=HUGE, machine="", confirmed=True)
    with pytest.raises(InputError, match="^spec: estimated peak memory"):
        launch(store, request)
    assert frames.jobs(store).empty
    store.close()
