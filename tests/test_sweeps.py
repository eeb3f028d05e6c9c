"""The one validator: every bad field refused before anything is written, named, with its range."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from runner.errors import InputError
from runner.spec.sweeps import PRESETS, load_preset, parse_toml, validate
from tests.conftest import TINY_SPEC


def tiny() -> dict[str, Any]:
    import tomllib

    return tomllib.loads(TINY_SPEC.read_text())


def with_change(path: str, value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(tiny())
    *parents, last = path.split(".")
    node = spec
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return spec


@pytest.mark.parametrize("name", PRESETS)
def test_presets_are_valid(name: str) -> None:
    spec = load_preset(name)
    assert spec.name == name
    assert spec.cases_total() > 0


def test_defaults_are_filled_in() -> None:
    spec = validate({"experiments": {"training_summary": {}}})
    assert spec.raw["model"]["d_model"] == 128
    assert spec.raw["experiments"]["training_summary"]["repeats"] == 3


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("colour", "blue", "colour: unknown key"),
        ("device", "tpu", "spec.device: 'tpu' is not a known value (allowed one of cpu, cuda)"),
        ("model.d_model", "big", "model.d_model: expected a number, got 'big' (allowed 8..2048)"),
        ("model.d_model", 4096, "model.d_model: 4096 is above the maximum (allowed 8..2048)"),
        ("model.n_head", 3, "model.n_head: 3 does not divide d_model 32"),
        ("model.n_layer", 2.5, "model.n_layer: expected a whole number"),
        ("model.depth", 2, "model.depth: unknown key"),
        ("train.sequence_length", 65, "train.sequence_length: 65 is above the maximum (the model context)"),
        ("train.learning_rate", float("nan"), "train.learning_rate: nan is not a finite number"),
        ("train.steps", True, "train.steps: expected a number, got True"),
        (
            "experiments.training_summary.repeats",
            51,
            "experiments.training_summary.repeats: 51 is above the maximum (allowed 1..50)",
        ),
        (
            "experiments.training_summary.new_tokens",
            65,
            "experiments.training_summary.new_tokens: 65 is above the maximum (the model context) (allowed 1..64)",
        ),
        (
            "experiments.training_summary.new_tokens",
            0,
            "experiments.training_summary.new_tokens: 0 is below the minimum (allowed 1..64)",
        ),
        ("experiments.context_cost.lengths", [], "experiments.context_cost.lengths: 0 values"),
        ("experiments.context_cost.lengths", [16, "x"], "experiments.context_cost.lengths[1]: expected a number"),
        ("experiments.context_cost.lengths", [16, 16], "repeated values"),
        ("experiments.warp_drive", {}, "experiments.warp_drive: unknown experiment"),
        ("experiments", {}, "experiments: the spec names no experiment"),
        ("experiments.context_cost", 3, "experiments.context_cost: expected a table of settings"),
    ],
)
def test_each_bad_field_is_refused_with_its_name(path: str, value: Any, message: str) -> None:
    with pytest.raises(InputError) as caught:
        validate(with_change(path, value))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_bad_toml_is_refused() -> None:
    with pytest.raises(InputError, match="not valid TOML"):
        parse_toml("name = ")


def test_an_unknown_preset_is_refused() -> None:
    with pytest.raises(InputError, match="--preset: 'fast' is not a preset"):
        load_preset("fast")


def test_the_launch_form_lists_every_preset_and_experiment_the_runner_knows() -> None:
    """The dashboard's launch form reads the preset files (no torch import); it must not drift
    from the runner's registry, as it once did when the form lacked `overhead`."""
    from runner.experiments import registry
    from runner.spec import preset_files

    assert preset_files.preset_names() == PRESETS
    offered = {name for preset in preset_files.preset_names() for name in preset_files.preset_experiments(preset)}
    assert offered == set(registry())
    for name in PRESETS:
        assert preset_files.preset_experiments(name) == tuple(load_preset(name).raw["experiments"])


def test_a_launch_plans_its_cases_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation, the limits, the launch estimate, the job's case count and the run's own plan
    all read one plan: each experiment's plan() runs once per launch, not once per reader."""
    from runner.experiments import registry
    from runner.spec.calibrated_estimate import estimate_here
    from store.store import Store

    calls: dict[str, int] = {}
    for experiment in registry().values():
        planned = type(experiment).plan

        def counted(self: Any, params: dict[str, Any], model: dict[str, Any], _plan: Any = planned) -> Any:
            calls[self.name] = calls.get(self.name, 0) + 1
            return _plan(self, params, model)

        monkeypatch.setattr(type(experiment), "plan", counted)
    spec = validate(tiny())
    store = Store(f"sqlite:///{tmp_path / 'plan.db'}", upgrade=True)
    try:
        estimate_here(store, spec, "this-machine")
    finally:
        store.close()
    cases = spec.plan()
    assert spec.cases_total() == len(cases) > 0
    assert calls == {name: 1 for name in tiny()["experiments"]}


@pytest.mark.parametrize("preset", ["quick", "seed"])
def test_the_prediction_benchmarks_spec_times_what_its_preset_times(preset: str) -> None:
    """benchmarks/specs/<preset>-speculative.toml is the preset's speculative section alone: the
    same model, seed and threads and the same timed cases; only the distribution check, which
    times nothing, is cut."""
    from runner.spec.sweeps import load_spec_file

    benchmark = load_spec_file(Path(__file__).parent.parent / "benchmarks" / "specs" / f"{preset}-speculative.toml")
    full = load_preset(preset).raw
    assert list(benchmark.raw["experiments"]) == ["speculative"]
    for key in set(full) - {"name", "description", "experiments"}:
        assert benchmark.raw[key] == full[key], key
    cut = {"distribution_samples", "distribution_drafts", "distribution_temperatures"}
    timed = full["experiments"]["speculative"]
    assert {key: value for key, value in benchmark.raw["experiments"]["speculative"].items() if key not in cut} == {
        key: value for key, value in timed.items() if key not in cut
    }


def test_the_held_out_spec_times_the_quick_cases_on_another_seed_corpus_and_model_shape() -> None:
    """benchmarks/specs/held-out-speculative.toml (issue 45, deliverable 7): the quick preset's
    speculative cases on another seed, model shape and corpus; its corpus is the file whose
    hash the spec pins, so the held-out figures stay comparable over time."""
    import hashlib
    import re

    from runner.spec.sweeps import load_spec_file

    specs = Path(__file__).parent.parent / "benchmarks" / "specs"
    held_out = load_spec_file(specs / "held-out-speculative.toml")
    tuning = load_spec_file(specs / "quick-speculative.toml")
    assert held_out.raw["experiments"] == tuning.raw["experiments"]
    assert held_out.raw["seed"] != tuning.raw["seed"]
    assert held_out.raw["train"]["seed"] != tuning.raw["train"]["seed"]
    shape = ("d_model", "n_layer")
    assert [held_out.raw["model"][key] for key in shape] != [tuning.raw["model"][key] for key in shape]
    corpus = Path(__file__).parent.parent / held_out.raw["model"]["corpus"]
    pinned = re.search(r"sha256 ([0-9a-f]{64})", (specs / "held-out-speculative.toml").read_text())
    assert pinned and hashlib.sha256(corpus.read_bytes()).hexdigest() == pinned.group(1)
