"""One declaration per experiment, in the experiment's own module (runner.declarations): a toy
experiment declared in this file alone is planned, priced, validated, offered by the launch form,
listed in the navigation and found in the metric catalogue, and forgotten once its ``with``
block ends; every shipped declaration agrees with its experiment and the catalogue, and names
parts that exist; reading the declarations and the experiments they name imports no torch."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dashboard.launch import form_fields
from dashboard.metrics import opening_metric
from dashboard.pages import pages
from runner import declarations, metrics_doc
from runner.cost.cost_model import FLAT_CASE_SECONDS, _step_seconds, case_seconds, estimate_seconds, training_seconds
from runner.declarations import Declaration, StepSeconds
from runner.errors import InputError
from runner.experiments import registry
from runner.experiments.base import PartAt
from runner.fields import Field
from runner.metric_entry import Metric
from runner.metrics import catalogue, headlines, lookup
from runner.spec.sweeps import cpu_only, for_device, validate
from store.records import MeasurementRecord
from tests.conftest import FIXTURES, ROOT

TOY = "toy_echo"


class ToyEcho:
    """An experiment of one part: one case per length, each recording a ratio and a time."""

    name = TOY
    title = "Toy echo"
    fields = {
        "lengths": Field("int_list", [4], 1, 64),
        "pairs": Field("int", 3, 1, 100),
        "impls": Field("str_list", ["static"], choices=("static", "fast")),
    }

    def plan(self, params: dict[str, Any], model: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"part": "echo", "n": n, "pairs": params["pairs"], "impl": impl}
            for impl in params["impls"]
            for n in params["lengths"]
        ]

    def run_case(self, case: dict[str, Any], context: Any) -> tuple[MeasurementRecord, ...]:
        return (MeasurementRecord("toy_echo_ratio", 1.0, "ratio"),)


# The registry imports ``module`` and takes its EXPERIMENT: this very file.
EXPERIMENT = ToyEcho()


def toy_case_seconds(case: dict[str, Any], model: dict[str, Any], step: StepSeconds) -> float:
    return (case["pairs"] + 1) * case["n"] * step(model["d_model"], model["n_layer"])


DECLARATION = Declaration(
    name=TOY,
    order=65,  # after context_cost (60), before bench (70)
    module=__name__,
    headlines=("toy_echo_ratio",),
    opening=("toy_echo_seconds", "toy_echo_ratio"),
    metrics=(
        Metric("toy_echo_ratio", "ratio", "exact", help="always one"),
        Metric("toy_echo_seconds", "seconds", "timed", "lower"),
    ),
    cpu_only={"impls": ("fast",)},
    launch_fields=("lengths", "pairs"),
    case_seconds=toy_case_seconds,
    pages=(("toy_echo", "Toy echo"),),
)


@pytest.fixture
def toy() -> Iterator[Declaration]:
    with declarations.declared(DECLARATION) as declared:
        yield declared


def tiny_with_toy(**toy_fields: Any) -> dict[str, Any]:
    raw = tomllib.loads((FIXTURES / "tiny.toml").read_text())
    raw["experiments"] = {"context_cost": raw["experiments"]["context_cost"], TOY: toy_fields}
    return raw


def test_a_toy_declared_here_is_planned_priced_validated_offered_and_catalogued(toy: Declaration) -> None:
    assert registry()[TOY] is EXPERIMENT
    spec = validate(tiny_with_toy(lengths=[4, 8], pairs=2))
    planned = [case for experiment, case in spec.plan() if experiment.name == TOY]
    assert planned == [
        {"part": "echo", "n": 4, "pairs": 2, "impl": "static"},
        {"part": "echo", "n": 8, "pairs": 2, "impl": "static"},
    ]
    # The estimate prices the toy's cases by its declaration, not at the flat price.
    model = spec.raw["model"]
    step = _step_seconds(model["d_model"], model["n_layer"])
    assert [case_seconds(TOY, case, model) for case in planned] == [3 * 4 * step, 3 * 8 * step]
    assert case_seconds(TOY, planned[0], model) != FLAT_CASE_SECONDS
    others = [(experiment.name, case) for experiment, case in spec.plan() if experiment.name != TOY]
    other = sum(case_seconds(name, case, model) for name, case in others)
    assert estimate_seconds(spec) == pytest.approx(training_seconds(spec) + other + 3 * 12 * step)
    # The validator holds the toy's fields to their ranges, and its CPU-only values off cuda.
    with pytest.raises(InputError, match=r"^experiments\.toy_echo\.pairs: .*1\.\.100"):
        validate(tiny_with_toy(pairs=0))
    with pytest.raises(InputError, match=r"^experiments\.toy_echo\.colour: unknown key"):
        validate(tiny_with_toy(colour="red"))
    assert cpu_only()[(TOY, "impls")] == ("fast",)
    on_cuda = {**tiny_with_toy(impls=["static", "fast"]), "device": "cuda"}
    cuda_refused = r"^experiments\.toy_echo\.impls: 'fast' runs on the CPU only \(allowed with device cuda: static\)"
    with pytest.raises(InputError, match=cuda_refused):
        validate(on_cuda)
    assert for_device(on_cuda, "cuda")["experiments"][TOY]["impls"] == ["static"]
    # The launch form shows the overrides the toy declares, and only those.
    assert form_fields([TOY]) == {"lengths", "pairs"}
    assert form_fields([TOY, "speculative"]) == {"lengths", "ks", "pairs"}
    # The catalogue: its metrics, its headline in its order, the metric its page opens on.
    assert lookup("toy_echo_ratio") == DECLARATION.metrics[0]
    assert DECLARATION.metrics[1] in catalogue()
    order = [experiment for experiment, _ in headlines()]
    assert (TOY, DECLARATION.metrics[0]) in headlines()
    assert order.index(TOY) > order.index("context_cost") and order.index(TOY) < order.index("bench")
    assert opening_metric(TOY, ["toy_echo_ratio", "toy_echo_seconds"]) == "toy_echo_seconds"
    # The navigation lists its page after context_cost's and before the pages of no experiment.
    names = [page.name for page in pages()]
    assert names.index("context_cost") < names.index("toy_echo") < names.index("scale")
    assert pages()[names.index("toy_echo")].title == "Toy echo"
    # The docs' generated table lists its metrics (python -m runner.metrics_doc).
    assert "| `toy_echo_ratio` | ratio | exact |" in metrics_doc.markdown_table()


def test_the_toy_is_forgotten_after_its_block_and_cannot_be_declared_twice(toy: Declaration) -> None:
    with pytest.raises(ValueError, match="toy_echo: declared already"), declarations.declared(DECLARATION):
        pass
    assert declarations.find(TOY) is DECLARATION  # the refused second declaration left the first
    with declarations.declared(Declaration(name="toy_other", order=66)):
        assert declarations.find("toy_other") is not None
    assert declarations.find("toy_other") is None


def test_nothing_of_the_toy_stays_once_undeclared() -> None:
    with declarations.declared(DECLARATION):
        assert TOY in registry()
    assert TOY not in registry() and declarations.find(TOY) is None
    assert lookup("toy_echo_ratio") is None and TOY not in {experiment for experiment, _ in headlines()}
    assert form_fields([TOY]) == set() and (TOY, "impls") not in cpu_only()
    assert "toy_echo" not in [page.name for page in pages()]
    assert "toy_echo_ratio" not in metrics_doc.markdown_table()
    assert case_seconds(TOY, {"part": "echo", "n": 4, "pairs": 2}, {"d_model": 32, "n_layer": 1}) == FLAT_CASE_SECONDS
    with pytest.raises(InputError, match=r"^experiments\.toy_echo: unknown experiment"):
        validate(tiny_with_toy(lengths=[4]))


def test_an_experiment_module_without_a_declaration_or_a_name_declared_twice_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A package of experiment modules of its own, listed as runner/experiments/ is.
    package = tmp_path / "toy_experiments"
    package.mkdir()
    (package / "__init__.py").write_text("")
    declare = "from runner.declarations import Declaration\nDECLARATION = Declaration(name='toy_same', order=1)\n"
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(declarations, "EXPERIMENTS_PACKAGE", "toy_experiments")
    monkeypatch.setattr(declarations, "EXPERIMENTS_FOLDER", package)
    monkeypatch.setattr(declarations, "_declared", {})
    monkeypatch.setattr(declarations, "_ordered", ())
    (package / "first.py").write_text(declare)
    (package / "second.py").write_text(declare)
    with pytest.raises(ValueError, match=r"experiment toy_same: declared twice"):
        declarations.ordered()
    # Each step's modules under new names: an imported module stays in sys.modules.
    (package / "second.py").unlink()
    (package / "third.py").write_text("EXPERIMENT = object()\n")
    importlib.invalidate_caches()
    monkeypatch.setattr(declarations, "_declared", {})
    with pytest.raises(ValueError, match=r"toy_experiments\.third: an EXPERIMENT without a DECLARATION"):
        declarations.ordered()
    (package / "third.py").unlink()
    (package / "fourth.py").write_text("HELPER = 1\n")  # neither: not an experiment, skipped
    importlib.invalidate_caches()
    monkeypatch.setattr(declarations, "_declared", {})
    assert [declaration.name for declaration in declarations.ordered()] == ["toy_same"]
    for name in ("", ".first", ".second", ".third", ".fourth"):
        sys.modules.pop(f"toy_experiments{name}", None)


def test_a_launch_field_the_form_lacks_or_a_metric_named_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="launch field 'widths' is not one of lengths, ks, pairs"):
        Declaration(name="toy_bad", order=1, launch_fields=("widths",))
    twice = Declaration(name="toy_twice", order=1, metrics=(Metric("val_loss", "nats", "timed"),))
    with declarations.declared(twice), pytest.raises(ValueError, match="metric val_loss: in the catalogue twice"):
        lookup("val_loss")
    assert lookup("val_loss") is not None and lookup("val_loss").kind == "numerical"  # type: ignore[union-attr]


def test_every_shipped_declaration_agrees_with_its_experiment_and_the_catalogue() -> None:
    shipped = declarations.ordered()
    # These, in this order; a new experiment may come anywhere among them without editing this file.
    names = [declaration.name for declaration in shipped]
    known = ["training_summary", "kv_cache", "overhead", "quantization", "speculative", "context_cost", "bench"]
    assert [name for name in names if name in known] == known
    experiments = registry()
    assert list(experiments) == [declaration.name for declaration in shipped if declaration.module is not None]
    assert len({metric.name for metric in catalogue()}) == len(catalogue())
    for declaration in shipped:
        for metric in (*declaration.headlines, *declaration.opening):
            assert lookup(metric) is not None, (declaration.name, metric)
        if declaration.module is None:
            continue
        experiment = experiments[declaration.name]
        # Its CPU-only values and launch fields name fields the experiment has, values it offers.
        for field, values in declaration.cpu_only.items():
            choices = experiment.fields[field].choices
            assert choices is not None and set(values) <= set(choices), (declaration.name, field)
        assert set(declaration.launch_fields) <= set(experiment.fields), declaration.name
        # Each part named by path is a function of its module (resolved here, as a case would).
        for part in experiment.parts.values():  # type: ignore[attr-defined]
            assert not isinstance(part, PartAt) or callable(part.resolve()), (declaration.name, part)


def test_a_part_named_by_a_missing_function_fails_at_its_case_naming_both() -> None:
    missing = PartAt("runner.experiments.parts.kv_timing", "no_such_part")
    with pytest.raises(AttributeError, match="no_such_part"):
        missing({}, None)  # type: ignore[arg-type]


def test_reading_the_declarations_and_the_catalogue_imports_no_torch_dashboard_or_analysis() -> None:
    # The experiments' modules are read (the declarations are theirs), each with its EXPERIMENT:
    # torch comes with the parts (runner/experiments/parts/), when a case runs.
    probe = (
        "import sys\n"
        "from runner import declarations, metrics\n"
        "from runner.experiments import registry\n"
        "assert declarations.ordered() and metrics.headlines() and registry()\n"
        "loaded = sorted(name for name in sys.modules if name.split('.')[0] in ('torch', 'dashboard', 'analysis'))\n"
        "print(loaded)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
