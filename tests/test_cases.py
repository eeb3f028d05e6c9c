"""Typed cases: a Case carries its key and label, and every experiment measures its parts
through one dispatcher that names an unknown part."""

from __future__ import annotations

from typing import Any

import pytest

from runner.experiments import registry
from runner.experiments.base import WHOLE, Case, PartsExperiment, UnknownPart, run_part
from runner.labels import case_labels
from runner.spec.sweeps import load_spec_file
from store.records import case_key
from tests.conftest import TINY_SPEC


def test_a_case_carries_the_store_key_and_the_progress_label() -> None:
    params = {"part": "timing", "n": 256, "impl": "static", "pairs": 5}
    case = Case("kv_cache", params)
    assert case.part == "timing"
    assert case.key == case_key(params)
    assert case.label(["part", "impl", "n"]) == "kv_cache · timing · static · n=256"
    assert Case("training_summary", {"new_tokens": 8}).part == WHOLE
    # The varying keys of a plan give two different cases two different labels.
    plan = [{"part": "timing", "n": n} for n in (128, 256)]
    assert case_labels(plan) == ["n=128", "n=256"]


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_experiment_dispatches_through_its_parts_and_names_an_unknown_one(name: str) -> None:
    experiment = registry()[name]
    assert isinstance(experiment, PartsExperiment), f"{name} measures its cases through one dispatcher"
    planned = {str(params.get("part", WHOLE)) for params in _any_plan(name)}
    assert planned <= set(experiment.parts), f"{name} plans parts it cannot measure: {planned - set(experiment.parts)}"
    with pytest.raises(UnknownPart, match=rf"^{name}: unknown part 'no_such_part' \(known parts: "):
        experiment.run_case({"part": "no_such_part"}, context=None)  # type: ignore[arg-type]


def test_the_dispatcher_calls_the_part_with_the_case_params() -> None:
    seen: list[dict[str, Any]] = []

    def table(params: dict[str, Any], context: Any) -> list[Any]:
        seen.append(params)
        return []

    assert run_part(Case("context_cost", {"part": "table", "n": 4}), {"table": table}, None) == ()  # type: ignore[arg-type]
    assert seen == [{"part": "table", "n": 4}]


def _any_plan(name: str) -> list[dict[str, Any]]:
    """The experiment's cases in the tiny test spec (every part the runner plans)."""
    spec = load_spec_file(TINY_SPEC)
    return [case for experiment, case in spec.plan() if experiment.name == name]
