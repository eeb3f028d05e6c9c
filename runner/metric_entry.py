"""One entry of the metric catalogue (runner.metrics): a metric's name, unit, kind, better
direction, band and old names, and the helpers that write the usual shapes of entries. Kept apart
from the catalogue so that an experiment's declaration (runner.declarations) can name its own
entries while the catalogue reads the declarations. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("exact", "numerical", "sampled", "timed", "predicted", "fitted")
# Kinds that reproduce on one machine for one model, seed and code (the rest carry noise).
DETERMINISTIC_KINDS = frozenset({"exact", "numerical", "sampled"})
# The one suffix pair of a band: METRIC_low and METRIC_high (timing.Paired writes them).
BAND_SUFFIXES = ("_low", "_high")


@dataclass(frozen=True)
class Metric:
    """One metric. ``name`` may hold one ``{placeholder}`` (e.g. ``accepted_length_{length}``)
    for a family of names; ``band`` the (low, high) metrics recorded around it; ``old_names``
    what older runs called it. Which experiments show it first is their declarations' say
    (``Declaration.headlines``)."""

    name: str
    unit: str
    kind: str
    better: str | None = None
    band: tuple[str, str] | None = None
    old_names: tuple[str, ...] = ()
    help: str = ""
    # Pair i of every run times the same seeded workload (pair i's own text), so two runs' pairs
    # compare index by index (analysis.review's matched test) and the texts' spread cancels.
    seeded_pairs: bool = False

    @property
    def deterministic(self) -> bool:
        return self.kind in DETERMINISTIC_KINDS


def paired(name: str, help: str, *, band: tuple[str, str] | None = None, seeded_pairs: bool = False) -> list[Metric]:
    """A paired speedup (timing.Paired): the median ratio, higher is better, and its band."""
    low, high = band or (name + BAND_SUFFIXES[0], name + BAND_SUFFIXES[1])
    return [
        Metric(name, "ratio", "timed", "higher", (low, high), help=help, seeded_pairs=seeded_pairs),
        Metric(low, "ratio", "timed", help=f"the smallest pair's ratio of {name}"),
        Metric(high, "ratio", "timed", help=f"the largest pair's ratio of {name}"),
    ]


def exact(unit: str, *names: str) -> list[Metric]:
    return [Metric(name, unit, "exact") for name in names]


def timed(unit: str, *names: str, better: str = "lower") -> list[Metric]:
    return [Metric(name, unit, "timed", better) for name in names]
