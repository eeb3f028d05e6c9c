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


def fit_line_relative(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b·x on the relative errors (each point weighed by 1 / y²), as
    ``fit_line`` returns. Where x spans two or three orders of magnitude (the overhead fit: a
    d_model of 8 to 256), plain least squares is the largest points' line: on Xeons its
    intercept came out negative (−2.8 to −8.0 µs a step for the fast impl, against its 3–5 µs
    smallest step) and missed its small points by 137–310%; weighed so, 2.1–4.0 µs and 42–70%."""
    weights = [1.0 / y for y in ys]  # the square root of each point's weight 1 / y²
    # Normal equations of min Σ w²(a + b·x − y)², two unknowns.
    s0 = sum(w * w for w in weights)
    s1 = sum(w * w * x for w, x in zip(weights, xs, strict=True))
    s2 = sum(w * w * x * x for w, x in zip(weights, xs, strict=True))
    t0 = sum(w * w * y for w, y in zip(weights, ys, strict=True))
    t1 = sum(w * w * x * y for w, x, y in zip(weights, xs, ys, strict=True))
    determinant = s0 * s2 - s1 * s1
    slope = (s0 * t1 - s1 * t0) / determinant if determinant else 0.0
    intercept = (t0 - slope * s1) / s0
    error = max(abs(intercept + slope * x - y) / y for x, y in zip(xs, ys, strict=True))
    return intercept, slope, error


def fit_power_law(lengths: list[int], seconds: list[float]) -> tuple[float, float, float]:
    """Least squares of log t = log a + b·log n; returns (b, a, max relative error of t)."""
    log_scale, slope, _ = fit_line([math.log(n) for n in lengths], [math.log(t) for t in seconds])
    scale = math.exp(log_scale)
    error = max(abs(scale * n**slope - t) / t for n, t in zip(lengths, seconds, strict=True))
    return slope, scale, error
