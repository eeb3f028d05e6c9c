"""Experiments plug in one way: a name, the fields of their spec section, a plan of cases,
and a function that measures one case. They never touch SQL or Streamlit. What the rest of the
tool knows of one (and that it exists at all) is its module's declaration, read torch-free
(runner.declarations); the code that measures its parts is in runner/experiments/parts/."""

from __future__ import annotations

import importlib

from runner import declarations
from runner.experiments.base import AA_PART as AA_PART
from runner.experiments.base import Experiment as Experiment
from runner.experiments.base import ExperimentContext as ExperimentContext
from runner.experiments.base import aa_measurements as aa_measurements


def registry() -> dict[str, Experiment]:
    """Every declared experiment that a spec plans (runner.declarations: ``module``), by the name
    its spec section uses, in the declarations' order: each module's ``EXPERIMENT``."""
    experiments: list[Experiment] = [
        importlib.import_module(declaration.module).EXPERIMENT
        for declaration in declarations.ordered()
        if declaration.module is not None
    ]
    return {experiment.name: experiment for experiment in experiments}
