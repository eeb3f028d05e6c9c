"""The overhead experiment's parts (runner.experiments.overhead): one width's time and
multiplications per cached token on untrained weights, the fit over the widths, and the A/A
case at the narrowest width."""

from __future__ import annotations

from typing import Any

import torch

from runner.cost import counts
from runner.cost.overhead_fit import OverheadFit
from runner.cost.roofline_model import Shape
from runner.decoding.decode import generate
from runner.experiments.base import ExperimentContext, aa_measurements, placements_between_pairs
from runner.experiments.overhead import NAME
from runner.experiments.parts import roofline_placement as roofline
from runner.model.gpt import CharGPT, ModelConfig
from store.records import MeasurementRecord


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
    """One width's min-of-N time a token. On the fast impl each sample packs the weights anew
    (placements_between_pairs): a small model's fast time hangs on where its packing lands, for
    the process's life (on the Zen 5 EPYC at d_model 64: 4.7-5.5 us a token by process with one
    packing, 4.6-4.9 as the best of three; docs/review-measurements.md, thirteenth session)."""
    model, prompt, n = untrained(case, context), [0], case["n"]
    with placements_between_pairs(case["impl"], model) as between:
        timing = context.harness.min_of(
            lambda: generate(model, prompt, n, temperature=0.0, impl=case["impl"]),
            repeats=case["repeats"],
            steady=True,
            between=between,
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
    """The A/A case, each pair on its own placement of the fast weights as the points' samples."""
    model, prompt, n = untrained(case, context), [0], case["n"]
    return aa_measurements(
        context.harness,
        lambda: generate(model, prompt, n, temperature=0.0, impl=case["impl"]),
        case["pairs"],
        case["impl"],
        model,
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
