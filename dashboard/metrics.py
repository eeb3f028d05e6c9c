"""What kind of number a metric is: a lookup in the metric catalogue (runner/metrics.py), kept
under this name for the pages that ask here."""

from __future__ import annotations

from runner.metrics import RENAMED_METRICS, is_deterministic, kind_of, lookup

__all__ = ["RENAMED_METRICS", "is_deterministic", "kind_of", "lookup"]
