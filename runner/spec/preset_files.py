"""What can be launched, read without importing torch: the presets shipped in runner/presets and
the experiments they name. The dashboard's launch form lists these; runner.spec.sweeps validates."""

from __future__ import annotations

import tomllib
from pathlib import Path

PRESET_DIRECTORY = Path(__file__).parent.parent / "presets"
# The order people meet them in: the demo's preset first, the largest last.
PRESET_ORDER = ("quick", "seed", "full")


def preset_names() -> tuple[str, ...]:
    """Every preset shipped, the known ones in PRESET_ORDER, any other after them by name."""
    shipped = {path.stem for path in PRESET_DIRECTORY.glob("*.toml")}
    return tuple(name for name in PRESET_ORDER if name in shipped) + tuple(sorted(shipped - set(PRESET_ORDER)))


def preset_experiments(name: str) -> tuple[str, ...]:
    """The experiments a preset runs, in its file's order."""
    raw = tomllib.loads((PRESET_DIRECTORY / f"{name}.toml").read_text(encoding="utf-8"))
    return tuple(raw.get("experiments", {}))
