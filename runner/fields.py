"""Declarative fields for sweep specs: type, range, default; one error line per bad value."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from runner.errors import InputError
from store.user_text import has_control

LIST_KINDS = {"int_list": "int", "float_list": "float", "str_list": "str"}  # and the kind of an item


@dataclass(frozen=True)
class Field:
    """One spec key. ``kind`` is int, float, str, bool, int_list, float_list or str_list.

    ``maximum`` may name a model field (e.g. ``"context_length"``) for bounds that depend on
    the model the spec trains.
    """

    kind: str
    default: Any
    minimum: float | None = None
    maximum: float | str | None = None
    choices: tuple[str, ...] | None = None
    max_items: int = 16
    # Text starting with this prefix is allowed beside ``choices`` (e.g. ``hf:DIR`` drafts).
    choice_prefix: str | None = None
    help: str = ""
    # Text that may hold line breaks and tabs (a description); no text may hold any other control
    # character (an escape code, NUL, BEL): it would reach terminals, charts and paths.
    multiline: bool = False

    def allowed(self, model: dict[str, Any]) -> str:
        if self.choices is not None:
            named = ", ".join(self.choices)
            return f"one of {named}" + (f", or {self.choice_prefix}…" if self.choice_prefix else "")
        if self.kind == "str":
            return "text of at most 1000 characters, no control character" + (
                " but line breaks and tabs" if self.multiline else ""
            )
        maximum = self.resolved_maximum(model)
        low = "" if self.minimum is None else _number(self.minimum)
        high = "" if maximum is None else _number(maximum)
        if self.kind == "bool":
            return "true or false"
        if self.kind in LIST_KINDS:
            return f"a list of 1..{self.max_items} values, each {low}..{high}".replace(" each ..", "")
        return f"{low}..{high}"

    def resolved_maximum(self, model: dict[str, Any]) -> float | None:
        if isinstance(self.maximum, str):
            return float(model[self.maximum])
        return self.maximum

    def check(self, path: str, value: Any, model: dict[str, Any]) -> Any:
        """The value, converted where lossless; an InputError naming ``path`` otherwise."""

        def refuse(problem: str) -> InputError:
            return InputError(f"{path}: {problem} (allowed {self.allowed(model)})")

        if self.kind == "bool":
            if not isinstance(value, bool):
                raise refuse(f"expected true or false, got {value!r}")
            return value
        if self.kind == "str":
            if not isinstance(value, str):
                raise refuse(f"expected text, got {value!r}")
            prefixed = self.choice_prefix is not None and value.startswith(self.choice_prefix)
            if self.choices is not None and value not in self.choices and not prefixed:
                raise refuse(f"{value!r} is not a known value")
            if len(value) > 1000:
                raise refuse("text longer than 1000 characters")
            if has_control(value.replace("\n", "").replace("\t", "") if self.multiline else value):
                raise refuse("text with a control character (a line break, an escape code, NUL)")
            return value
        if self.kind in LIST_KINDS:
            if not isinstance(value, list):
                raise refuse(f"expected a list, got {value!r}")
            if not 1 <= len(value) <= self.max_items:
                raise refuse(f"{len(value)} values")
            item = Field(
                LIST_KINDS[self.kind],
                None,
                self.minimum,
                self.maximum,
                self.choices,
                choice_prefix=self.choice_prefix,
            )
            checked = [item.check(f"{path}[{index}]", element, model) for index, element in enumerate(value)]
            if len(set(checked)) != len(checked):
                raise refuse("repeated values")
            return checked
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise refuse(f"expected a number, got {value!r}")
        if self.kind == "int":
            if isinstance(value, float):
                if not value.is_integer():
                    raise refuse(f"expected a whole number, got {value!r}")
                value = int(value)
        else:
            value = float(value)
            if not math.isfinite(value):
                raise refuse(f"{value!r} is not a finite number")
        maximum = self.resolved_maximum(model)
        if self.minimum is not None and value < self.minimum:
            raise refuse(f"{_number(value)} is below the minimum")
        if maximum is not None and value > maximum:
            beyond = " (the model context)" if isinstance(self.maximum, str) else ""
            raise refuse(f"{_number(value)} is above the maximum{beyond}")
        return value


IDENTIFIER = re.compile(r"[A-Za-z_][\w-]*")


def field_path(parent: str, key: object) -> str:
    """``parent.key`` for ordinary keys; ``parent['odd key']`` for anything else, so a message
    always starts with a readable one-line path."""
    if isinstance(key, str) and IDENTIFIER.fullmatch(key):  # fullmatch: "$" would pass a trailing newline
        return f"{parent}.{key}" if parent else key
    return f"{parent or 'spec'}[{key!r}]"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def check_section(path: str, raw: Any, fields: dict[str, Field], model: dict[str, Any]) -> dict[str, Any]:
    """Every key known, every value in range; missing keys take their defaults."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a table of settings, got {raw!r}")
    unknown = sorted(set(raw) - set(fields), key=str)
    if unknown:
        raise InputError(
            f"{field_path(path, unknown[0])}: unknown key (allowed keys: {', '.join(sorted(fields)) or 'none'})"
        )
    return {
        name: field.check(f"{path}.{name}", raw[name], model) if name in raw else field.default
        for name, field in fields.items()
    }


MACHINE_NAME_LIMIT = 200


def check_machine(machine: str, field: str = "machine") -> str | None:
    """A machine name to pin a job to, stripped; None for empty (any machine)."""
    name = machine.strip()
    if not name:
        return None
    if len(name) > MACHINE_NAME_LIMIT or not name.isprintable():
        raise InputError(f"{field}: a printable name of at most {MACHINE_NAME_LIMIT} characters (or empty for any)")
    return name
