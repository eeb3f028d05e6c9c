"""Imports run downward only: the torch-free vocabulary at the bottom, then the store, the domain
(runner/), analysis/, and the command line and the dashboard on top; inside runner/ its
sub-packages in one order, so none of them forms a loop with another.

Read from the source as tests/test_import_cycles.py reads it (function-level imports count; one
under ``if TYPE_CHECKING:`` never runs and does not). docs/architecture.md states the layers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_import_cycles import import_graph

# The bottom: plain, torch-free and SQL-free words every layer may read: the metric catalogue
# and the declarations, labels, a spec's field kinds, input errors (runner/), and the records
# that cross into the store with their case keys, and how typed text is cleaned (store/).
VOCABULARY = (
    "store.records",
    "store.user_text",
    "runner.errors",
    "runner.fields",
    "runner.labels",
    "runner.metric_entry",
    "runner.declarations",
    "runner.metrics",
    "runner.metrics_doc",
)
# runner/'s sub-packages from the bottom up: each imports only those before it (and the vocabulary).
RUNNER_ORDER = ("model", "decoding", "measure", "cost", "experiments", "spec", "execution", "ab")
# The layers from the bottom up; the command line and the dashboard share the top.
LAYERS = {"vocabulary": 0, "store": 1, "runner": 2, "analysis": 3, "cli": 4, "dashboard": 4}


def layer_of(module: str) -> str | None:
    if any(module == name or module.startswith(name + ".") for name in VOCABULARY):
        return "vocabulary"
    top = module.split(".")[0]
    return top if top in LAYERS else None


def runner_part(module: str) -> str | None:
    """A runner module's sub-package (``runner.cost.counts`` → ``cost``); None for the vocabulary
    and for runner/'s own top-level modules."""
    parts = module.split(".")
    if layer_of(module) != "runner" or len(parts) < 3:
        return None
    return parts[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import that runs from a lower layer to a higher one, or inside runner/ from a
    sub-package to one above it in RUNNER_ORDER."""
    found = []
    for module, targets in sorted(graph.items()):
        layer = layer_of(module)
        if layer is None:
            continue
        for target in sorted(targets):
            target_layer = layer_of(target)
            if target_layer is None or target_layer == layer:
                pass
            elif LAYERS[target_layer] > LAYERS[layer] or (layer, target_layer) == ("cli", "dashboard"):
                # The command line never imports the dashboard (the dashboard may read cli.access).
                found.append(f"{module} ({layer}) imports {target} ({target_layer})")
                continue
            part, target_part = runner_part(module), runner_part(target)
            if part and target_part and RUNNER_ORDER.index(target_part) > RUNNER_ORDER.index(part):
                found.append(f"{module} (runner/{part}) imports {target} (runner/{target_part}, above it)")
    return found


def test_imports_run_downward_only() -> None:
    graph = import_graph(ROOT)
    assert all(layer_of(module) is not None for module in graph if module.split(".")[0] in ("runner", "store")), (
        "every module of runner/ and store/ has a layer"
    )
    parts = {part for module in graph if (part := runner_part(module)) is not None}
    assert parts == set(RUNNER_ORDER), f"runner/'s sub-packages are {sorted(parts)}: place each in RUNNER_ORDER"
    assert upward_imports(graph) == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("store/compatibility.py", "from analysis.runs import tag_set\n", "store.compatibility (store) imports"),
        ("runner/cost/x.py", "def f():\n    from runner.spec.sweeps import validate\n", "(runner/spec, above it)"),
        ("runner/execution/x.py", "from analysis import review\n", "(runner) imports analysis.review"),
        ("cli/x.py", "import dashboard.app\n", "cli.x (cli) imports dashboard.app (dashboard)"),
        ("runner/fields.py", "from runner.spec import sweeps\n", "runner.fields (vocabulary) imports"),
    ],
)
def test_the_check_finds_an_upward_import(tmp_path: Path, module: str, source: str, expected: str) -> None:
    """The check is not vacuous: one planted import of each kind is found."""
    for package in ("analysis", "cli", "dashboard", "runner/cost", "runner/spec", "runner/execution", "store"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    for name in ("analysis/runs.py", "analysis/review.py", "dashboard/app.py", "runner/spec/sweeps.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "runner" / "fields.py").write_text("")
    (tmp_path / module).write_text(source)
    found = upward_imports(import_graph(tmp_path))
    assert len(found) == 1 and expected in found[0], found
