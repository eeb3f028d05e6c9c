"""Where the time goes: time per cached token against multiplications per token, over widths
down to d=8, fitted per impl as  seconds_per_token = a + b · mults_per_token.

``a`` is what a step costs whatever its arithmetic (dispatch, Python, memory latency); ``b`` is
the price of one multiplication on this machine: why 134.5x of arithmetic became a few x on the
clock. ``a`` is also the per-pass overhead runner.experiments.parts.roofline_placement adds to
its predictions; each point is placed on the machine's roof. Untrained weights: timing needs no
training (the case params say so).
"""

from __future__ import annotations

from typing import Any

from runner.declarations import Declaration
from runner.decoding.choices import IMPLS
from runner.experiments.base import AA_PART, Part, PartsExperiment, parts_in
from runner.fields import Field

NAME = "overhead"

DECLARATION = Declaration(
    name=NAME,
    order=30,
    module=__name__,
    # Before the experiments whose roofline placements add its fitted per-pass overhead (a
    # kv_cache case placed before it would take the machine's stored overhead, or none on a
    # first run, and miss the measured time by ×10).
    run_first=True,
    headlines=("seconds_per_token",),
    opening=("overhead_seconds_per_token", "seconds_per_mult"),
    placed_on_roof=True,
    cpu_only={"impls": ("fast",)},  # the compiled fast path
)

FIELDS = {
    "widths": Field("int_list", [8, 16, 32, 64, 128, 256], 8, 2048),
    "tokens": Field("int", 64, 2, "context_length", help="cached decode steps timed per width"),
    "impls": Field("str_list", list(IMPLS), choices=IMPLS),
    "repeats": Field("int", 3, 1, 50),
}

# Measured in runner/experiments/parts/overhead.py, imported when a case first runs.
PARTS: dict[str, Part] = parts_in("runner.experiments.parts.overhead", "point", "fit", AA_PART)


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
