"""The per-step overhead fit, seconds per token = a + b · multiplications per token: the one type
the overhead experiment fits and records and the dashboard predicts KV timings with.

``a`` (``overhead_seconds_per_token``) is what a step costs whatever its arithmetic (dispatch,
Python, memory latency); ``b`` (``seconds_per_mult``) the price of one multiplication on the
machine that was fitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.errors import Unmeasured
from runner.measure.fitting import fit_line_relative
from store.records import MeasurementRecord


@dataclass(frozen=True)
class OverheadFit:
    overhead_seconds_per_token: float
    seconds_per_mult: float
    max_fit_error: float = 0.0
    widths_fitted: int = 0

    @classmethod
    def fit(cls, mults_per_token: Sequence[float], seconds_per_token: Sequence[float]) -> OverheadFit:
        """Least squares of the relative errors over one point per width (``fit_line_relative``:
        the fit is judged by its largest relative error, and plain least squares is the widest
        points' line); two widths at least."""
        if len(mults_per_token) < 2:
            raise Unmeasured(f"the overhead fit needs two widths, this run measured {len(mults_per_token)}")
        if not all(math.isfinite(seconds) and seconds > 0 for seconds in seconds_per_token):
            # Weighed by 1 / time², a time of zero or none has no weight to give.
            raise Unmeasured(f"the overhead fit needs a positive time at every width, got {list(seconds_per_token)}")
        intercept, slope, error = fit_line_relative(list(mults_per_token), list(seconds_per_token))
        return cls(intercept, slope, error, len(mults_per_token))

    @classmethod
    def of(cls, recorded: Mapping[Any, Any]) -> OverheadFit:
        """A stored fit (a row of the overhead experiment's fit case, metrics by name)."""
        return cls(float(recorded["overhead_seconds_per_token"]), float(recorded["seconds_per_mult"]))

    def seconds(self, tokens: int, mults: float) -> float:
        """The predicted time of ``tokens`` steps that do ``mults`` multiplications in all."""
        return self.overhead_seconds_per_token * tokens + self.seconds_per_mult * mults

    def measurements(self) -> tuple[MeasurementRecord, ...]:
        return (
            MeasurementRecord("overhead_seconds_per_token", self.overhead_seconds_per_token, "seconds"),
            MeasurementRecord("seconds_per_mult", self.seconds_per_mult, "seconds"),
            MeasurementRecord("max_fit_error", self.max_fit_error, "ratio"),
            MeasurementRecord("widths_fitted", self.widths_fitted, "count"),
        )
