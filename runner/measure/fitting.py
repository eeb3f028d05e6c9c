"""Least-squares fits the experiments share."""

from __future__ import annotations

import math


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b·x; returns (a, b, max relative error of the fitted y)."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0
    intercept = mean_y - slope * mean_x
    error = max(abs(intercept + slope * x - y) / y for x, y in zip(xs, ys, strict=True))
    return intercept, slope, error


def fit_power_law(lengths: list[int], seconds: list[float]) -> tuple[float, float, float]:
    """Least squares of log t = log a + b·log n; returns (b, a, max relative error of t)."""
    log_scale, slope, _ = fit_line([math.log(n) for n in lengths], [math.log(t) for t in seconds])
    scale = math.exp(log_scale)
    error = max(abs(scale * n**slope - t) / t for n, t in zip(lengths, seconds, strict=True))
    return slope, scale, error
