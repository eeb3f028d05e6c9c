"""What a spec may choose of the decoding, torch-free: the impls, the speculative schedules and
their bounds. The experiments' modules build their fields from these without importing torch
(runner.declarations reads them); the decoding modules import them from here."""

from __future__ import annotations

from typing import Any

IMPLS = ("naive", "static", "fast")  # each with a cache and without one
# torch.compile of the static-cache step (runner.decoding.compiled): cached decoding only, and
# outside the presets (it compiles for tens of seconds first).
COMPILED = "compiled"

SPECULATIVE_IMPLS = ("static", "fast")
SCHEDULES = ("fixed", "heuristic", "confidence")
MAX_DRAFT_LENGTH = 16
MAX_NGRAM_ORDER = 5  # rows for every seen context up front: 5 is ~40k contexts of the default corpus


def longest_draft(section: dict[str, Any]) -> int:
    """The most proposals one pass of a checked speculative section can draft: its largest fixed
    k, or k_max where it runs an adaptive schedule."""
    adaptive = set(section["schedules"]) - {"fixed"}
    return max([*section["ks"], section["k_max"] if adaptive else 1])
