"""Short readable labels for cases: built from the parameters that vary among the cases shown
(``static · n=256``), never a case's JSON. The names that say what a case is (its part, impl,
draft, kernel, precision, dtype) stand bare; every other value carries its key, since ``256``
alone does not say what it counts. A flag or an unset value reads as words (``no cache``,
``ungrouped``), not as Python's ``cache=False`` or ``group_size=None``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from store.records import case_key

# Parameters read first in a label, in this order, their names (strings) bare; the rest follow
# by name, as key=value.
LEADING = ("part", "impl", "draft", "kernel", "precision", "dtype", "rounding", "cache")

# The words for a flag's or an unset parameter's value where the generic ones (``key`` for True,
# ``no key`` for False, ``key=none`` for None) read worse. Each key's phrases differ, so two cases
# that differ in the key still label apart.
PHRASES: dict[tuple[str, bool | None], str] = {
    ("embeddings_quantized", True): "embeddings quantized",
    ("embeddings_quantized", False): "embeddings float32",
    ("group_size", None): "ungrouped",  # int8's one scale per row, and fp32 or bf16, which have none
}


def ordered_keys(keys: Iterable[str]) -> list[str]:
    return sorted(keys, key=lambda key: (LEADING.index(key) if key in LEADING else len(LEADING), key))


def value_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(value_text(item) for item in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def piece(key: str, value: Any) -> str:
    """One parameter in a label: ``static``, ``n=256``, ``no cache``, ``ungrouped``."""
    if (isinstance(value, bool) or value is None) and (key, value) in PHRASES:
        return PHRASES[(key, value)]
    if isinstance(value, bool):
        return key if value else f"no {key}"
    if value is None:
        return f"{key}=none"
    if key in LEADING and isinstance(value, str):
        return value
    return f"{key}={value_text(value)}"


def short_label(params: Mapping[str, Any], keys: Sequence[str] | None = None) -> str:
    """``params`` in a line, only ``keys`` where given: ``static · n=256``; ``all`` when none is left."""
    chosen = ordered_keys(params if keys is None else [key for key in keys if key in params])
    return " · ".join(piece(key, params[key]) for key in chosen) or "all"


def varying_keys(cases: Iterable[Mapping[str, Any]]) -> list[str]:
    """The parameters that do not hold one same value in every case given (a parameter missing
    from some cases varies)."""
    listed = list(cases)
    seen: dict[str, set[str]] = {}
    holding: dict[str, int] = {}
    for params in listed:
        for key, value in params.items():
            seen.setdefault(key, set()).add(json.dumps(value, sort_keys=True))
            holding[key] = holding.get(key, 0) + 1
    return ordered_keys(key for key, values in seen.items() if len(values) > 1 or holding[key] < len(listed))


def case_labels(cases: Sequence[Mapping[str, Any]]) -> list[str]:
    """One label per case, from the parameters that vary among them: two different cases always
    differ in one of those, so their labels differ too."""
    keys = varying_keys(cases)
    return [short_label(params, keys) for params in cases]


def variant_label(precision: str, kernel: str) -> str:
    """A quantization case by what it runs, each word once: ``int8 · fake``, but ``fast_bf16``
    (its kernel names its precision) and ``fp32`` (the float32 baseline)."""
    if kernel == "float32" or precision in kernel:
        return precision if kernel == "float32" else kernel
    return f"{precision} · {kernel}"


def progress_label(experiment: str, label: str) -> str:
    """``experiment · label``, each word once: a part named as its experiment (speculative's
    ``speculative`` part) is not said twice."""
    words = label.split(" · ") if label != "all" else []
    if words and words[0] == experiment:
        words = words[1:]
    return " · ".join([experiment, *words])


def part_labels(cases: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[tuple[str, str], str]:
    """(experiment, case key) → the case's part and the parameters that vary within its
    experiment's part over every case given (``timing · static · n=256``; a part alone where
    nothing varies; ``all`` for a lone case without one). Cases of several runs or machines
    label alike where their parameters agree, and apart where any differs."""
    groups: dict[tuple[str, Any], dict[str, Mapping[str, Any]]] = {}
    for experiment, params in cases:
        groups.setdefault((experiment, params.get("part")), {})[case_key(dict(params))] = params
    found: dict[tuple[str, str], str] = {}
    for (experiment, part), by_key in groups.items():
        keys = [key for key in varying_keys(by_key.values()) if key != "part"]
        for key, params in by_key.items():
            words = [str(part)] if part else []
            rest = short_label(params, keys)
            found[(experiment, key)] = " · ".join(words + ([rest] if rest != "all" or not words else []))
    return found
