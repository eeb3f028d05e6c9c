"""Experiments plug in one way: a name, the fields of their spec section, a plan of cases,
and a function that measures one case. They never touch SQL or Streamlit."""

from __future__ import annotations

from runner.experiments.base import AA_PART as AA_PART
from runner.experiments.base import Experiment as Experiment
from runner.experiments.base import ExperimentContext as ExperimentContext
from runner.experiments.base import aa_measurements as aa_measurements


def registry() -> dict[str, Experiment]:
    """Every experiment, by the name its spec section uses."""
    from runner.experiments import context_cost, kv_cache, overhead, quantization, speculative, training_summary

    experiments: list[Experiment] = [
        training_summary.EXPERIMENT,
        kv_cache.EXPERIMENT,
        overhead.EXPERIMENT,
        quantization.EXPERIMENT,
        speculative.EXPERIMENT,
        context_cost.EXPERIMENT,
    ]
    return {experiment.name: experiment for experiment in experiments}
