"""Each experiment's declaration: what the rest of the tool reads about an experiment, declared
in the experiment's own module (runner/experiments/NAME.py, a module-level ``DECLARATION``). The
modules are found by listing runner/experiments/, so adding an experiment adds its module and
edits no shared list. Who reads what:

- the registry (runner.experiments.registry): ``module``, whose ``EXPERIMENT`` plans and measures;
- the planner (runner.spec.sweeps.SweepSpec.experiments): ``run_first``;
- the validator (runner.spec.sweeps.validate): the registry, and ``cpu_only`` on cuda;
- the estimate (runner.cost.cost_model.case_seconds): ``case_seconds``;
- the metric catalogue (runner.metrics): ``order``, ``headlines`` and ``metrics``;
- the pages (dashboard.metrics.opening_metric): ``opening``;
- the navigation (dashboard.pages.pages): ``pages``;
- the launch form (dashboard.launch.form_fields): ``launch_fields``.

This is the one place the vocabulary reads the domain, by module name at run time, as a plugin
is loaded: so an experiment's module imports nothing at its top that loads torch (its parts are
named by path, runner.experiments.base.parts_in), and the catalogue, the store's read path and
the dashboard read declarations without torch (tests/test_declarations.py checks both)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.metric_entry import Metric

# One decode step's seconds on the estimate's rough machine: (d_model, n_layer, t=1, cache=True).
StepSeconds = Callable[..., float]
# A case's estimated wall time from its params, the spec's model section and the step time; None:
# the flat price of a case the cost model does not model (runner.cost.cost_model.FLAT_CASE_SECONDS).
CaseSeconds = Callable[[dict[str, Any], dict[str, Any], StepSeconds], "float | None"]
# The launch form's overrides (dashboard.launch.LaunchRequest): each shows once a chosen
# experiment declares it, and replaces the preset's field of that name.
LAUNCH_FIELDS = ("lengths", "ks", "pairs")
# Where the experiments' modules are: a package of the domain, listed here by path so that this
# module imports none of it until the declarations are first read.
EXPERIMENTS_PACKAGE = "runner.experiments"
EXPERIMENTS_FOLDER = Path(__file__).parent / "experiments"


@dataclass(frozen=True, eq=False)
class Declaration:
    """What the tool knows of one experiment before importing it.

    ``name``: its spec section's name; ``order``: where it comes in reviews, the machines matrix
    and the pages' lists (lower first); ``module``: the module whose ``EXPERIMENT`` plans and
    measures it (None: another command records it, as ``decodelab bench`` does);
    ``run_first``: it runs before the others whatever the spec's order; ``headlines``: the
    metrics a review shows first, in order; ``opening``: the metric a page opens on, the first
    of these present; ``metrics``: catalogue entries of its own; ``cpu_only``: field → the
    values that run on the CPU only; ``launch_fields``: which of LAUNCH_FIELDS apply to it;
    ``case_seconds``: one case's estimated wall time (None: every case at the flat price);
    ``pages``: its dashboard pages as (file under dashboard/views/ without .py, title), in the
    order the navigation lists them; ``placed_on_roof``: its timed cases are placed on the
    machine's roof (runner.experiments.parts.roofline_placement), so the roofline page and
    report read them."""

    name: str
    order: int
    module: str | None = None
    run_first: bool = False
    headlines: tuple[str, ...] = ()
    opening: tuple[str, ...] = ()
    metrics: tuple[Metric, ...] = ()
    cpu_only: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    launch_fields: tuple[str, ...] = ()
    case_seconds: CaseSeconds | None = None
    pages: tuple[tuple[str, str], ...] = ()
    placed_on_roof: bool = False

    def __post_init__(self) -> None:
        unknown = [name for name in self.launch_fields if name not in LAUNCH_FIELDS]
        if unknown:
            raise ValueError(
                f"experiment {self.name}: launch field {unknown[0]!r} is not one of {', '.join(LAUNCH_FIELDS)}"
            )


_declared: dict[str, Declaration] = {}
_ordered: tuple[Declaration, ...] = ()


def _in_order(known: dict[str, Declaration]) -> tuple[Declaration, ...]:
    return tuple(sorted(known.values(), key=lambda declaration: (declaration.order, declaration.name)))


def _discover() -> None:
    """Every module of runner/experiments/ that declares an experiment (``base`` declares none,
    and the ``parts`` package is not listed). A module with an ``EXPERIMENT`` and no
    ``DECLARATION``, or a name declared twice, is an error: either would leave an experiment out
    without a word."""
    global _ordered
    for module in pkgutil.iter_modules([str(EXPERIMENTS_FOLDER)]):
        if module.ispkg:
            continue
        path = f"{EXPERIMENTS_PACKAGE}.{module.name}"
        loaded = importlib.import_module(path)
        declaration: Declaration | None = getattr(loaded, "DECLARATION", None)
        if declaration is None:
            if hasattr(loaded, "EXPERIMENT"):
                raise ValueError(f"{path}: an EXPERIMENT without a DECLARATION (runner.declarations.Declaration)")
            continue
        if declaration.name in _declared:
            raise ValueError(
                f"experiment {declaration.name}: declared twice ({_declared[declaration.name].module}, {path})"
            )
        _declared[declaration.name] = declaration
    _ordered = _in_order(_declared)


def ordered() -> tuple[Declaration, ...]:
    """Every declared experiment, in ``order``."""
    if not _declared:
        _discover()
    return _ordered


def find(name: str) -> Declaration | None:
    """The declaration of the experiment ``name``, None for an undeclared one."""
    return next((declaration for declaration in ordered() if declaration.name == name), None)


@contextmanager
def declared(declaration: Declaration) -> Iterator[Declaration]:
    """``declaration`` known to every reader for the ``with`` block, forgotten after it: how a
    test declares an experiment of its own without a module in runner/experiments/."""
    global _ordered
    before = ordered()
    if declaration.name in _declared:
        raise ValueError(f"experiment {declaration.name}: declared already")
    _declared[declaration.name] = declaration
    _ordered = _in_order(_declared)
    try:
        yield declaration
    finally:
        del _declared[declaration.name]
        _ordered = before
