"""Where the time goes: time per cached token against multiplications per token, over widths
down to d=8, fitted per impl as  seconds_per_token = a + b · mults_per_token.

``a`` is what a step costs whatever its arithmetic (dispatch, Python, memory latency); ``b`` is
the price of one multiplication on this machine: why 134.5x of arithmetic became a few x on the
clock. ``a`` is also the per-pass overhead runner.experiments.roofline_placement adds to its predictions; each point
is placed on the machine's roof. Untrained weights: timing needs no training (the case params
say so).
"""

from __future__ import annotations

from typing import Any

import torch

from runner.cost import counts
from runner.cost.overhead_fit import OverheadFit
from runner.cost.roofline_model import Shape
from runner.decoding.decode import IMPLS, generate
from runner.experiments import roofline_placement as roofline
from runner.experiments.base import AA_PART, ExperimentContext, Part, PartsExperiment, aa_measurements
from runner.fields import Field
from runner.model.gpt import CharGPT, ModelConfig
from store.records import MeasurementRecord

FIELDS = {
    "widths": Field("int_list", [8, 16, 32, 64, 128, 256], 8, 2048),
    "tokens": Field("int", 64, 2, "context_length", help="cached decode steps timed per width"),
    "impls": Field("str_list", list(IMPLS), choices=IMPLS),
    "repeats": Field("int", 3, 1, 50),
}


NAME = "overhead"


def untrained(case: dict[str, Any], context: ExperimentContext) -> CharGPT:
    base = context.model.config
    torch.manual_seed(context.seed)
    model = CharGPT(
        ModelConfig(
            vocab_size=base.vocab_size,
            d_model=case["d_model"],
            n_layer=case["n_layer"],
            n_head=case["n_head"],
            context_length=base.context_length,
        )
    ).to(context.device)
    model.eval()
    return model


def point(case: dict[str, Any], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
    model, prompt, n = untrained(case, context), [0], case["n"]
    timing = context.harness.min_of(
        lambda: generate(model, prompt, n, temperature=0.0, impl=case["impl"]), repeats=case["repeats"], steady=True
    )
    return (
        timing.measurement("seconds_per_token", scale=1.0 / n),
        MeasurementRecord(
            "mults_per_token",
            counts.mean_cached_step_mults(n, case["d_model"], case["n_layer"], model.config.vocab_size),
            "multiplications",
        ),
        *roofline.timed_generation(
            context, Shape.of(model.config), case["impl"], "fp32", len(prompt), n, {"": (True, timing.minimum / n)}
        ),
    )


def aa(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    model, prompt, n = untrained(case, context), [0], case["n"]
    return aa_measurements(
        context.harness,
        lambda: generate(model, prompt, n, temperature=0.0, impl=case["impl"]),
        case["pairs"],
        steady=True,
    )


def fit(case: dict[str, Any], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
    points: dict[int, dict[str, float]] = {}
    for row in context.earlier(NAME):
        params = row.params
        if params.get("part") == "point" and params.get("impl") == case["impl"]:
            points.setdefault(params["d_model"], {})[row.metric] = row.value
    usable = [point for point in points.values() if {"seconds_per_token", "mults_per_token"} <= set(point)]
    fitted = OverheadFit.fit([p["mults_per_token"] for p in usable], [p["seconds_per_token"] for p in usable])
    return fitted.measurements()


PARTS: dict[str, Part] = {"point": point, "fit": fit, AA_PART: aa}


class OverheadExperiment(PartsExperiment):
    name = NAME
    parts = PARTS
    title = "Overhead"
    fields = FIELDS

    def plan(self, params: dict[str, Any], model: dict[str, Any]) -> list[dict[str, Any]]:
        shape = {"n_layer": model["n_layer"], "n_head": model["n_head"]}
        cases: list[dict[str, Any]] = []
        for impl in params["impls"]:
            cases += [
                {
                    "part": "point",
                    "impl": impl,
                    "d_model": d,
                    "n": params["tokens"],
                    "weights": "untrained",
                    "repeats": params["repeats"],
                    **shape,
                }
                for d in params["widths"]
                if d % model["n_head"] == 0
            ]
            cases.append({"part": "fit", "impl": impl, "widths": params["widths"], "n": params["tokens"], **shape})
        # The A/A case per impl, at the narrowest width (the cheapest decode): the floor of the
        # min-of-N seconds above, measured as they are, the same decode against itself.
        usable = [d for d in params["widths"] if d % model["n_head"] == 0]
        if usable:
            cases += [
                {
                    "part": AA_PART,
                    "impl": impl,
                    "d_model": min(usable),
                    "n": params["tokens"],
                    "weights": "untrained",
                    "pairs": max(3, params["repeats"]),
                    **shape,
                }
                for impl in params["impls"]
            ]
        return cases


EXPERIMENT = OverheadExperiment()
