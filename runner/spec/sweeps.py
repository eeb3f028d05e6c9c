"""Sweep specs: TOML files (presets ship in ``runner/presets``) and the one validator that
the CLI, the worker and the dashboard form all use.

A spec names the model to train (or reuse), the device, and one table per experiment:

    name = "quick"
    device = "cpu"
    [model]        d_model, n_layer, n_head, context_length, corpus
                   (or source = "hf", path = "DIR", corpus: a local Hugging Face GPT-2-family
                   checkpoint, runner.spec.hf; then no [train] section)
    [train]        steps, batch_size, sequence_length, learning_rate, seed
    [experiments.kv_cache]   that experiment's fields

Validation happens before anything is written; the validated spec (defaults filled in) is
what runs and what the store keeps.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from runner import declarations
from runner.cost.cost_model import check_limits
from runner.errors import InputError
from runner.experiments import Experiment, registry
from runner.fields import Field, check_section, field_path
from runner.model.gpt import ModelConfig
from runner.model.train import TrainConfig
from runner.spec import hf as hf_spec
from runner.spec.preset_files import PRESET_DIRECTORY, preset_names

PRESETS = preset_names()

TOP_FIELDS = {
    "name": Field("str", "custom"),
    "description": Field("str", "", multiline=True),
    "device": Field("str", "cpu", choices=("cpu", "cuda")),
    "seed": Field("int", 1234, 0, 2**31 - 1),
    "threads": Field(
        "int", 0, 0, 1024, help="threads of torch and of the fast path while the experiments run (0: their defaults)"
    ),
    "max_hours": Field(
        "float",
        24.0,
        0.01,
        8760,
        help="refuse the sweep when its estimated wall time (training and cases) exceeds this",
    ),
}
MODEL_FIELDS = {
    "d_model": Field("int", 128, 8, 2048),
    "n_layer": Field("int", 3, 1, 48),
    "n_head": Field("int", 4, 1, 64),
    "context_length": Field("int", 1024, 16, 8192),
    "corpus": Field("str", "default", help="'default' or the path of a UTF-8 text file"),
}
TRAIN_FIELDS = {
    "steps": Field("int", 1000, 1, 1_000_000),
    "batch_size": Field("int", 32, 1, 1024),
    "sequence_length": Field("int", 128, 2, "context_length"),
    "learning_rate": Field("float", 3e-3, 1e-6, 1.0),
    "seed": Field("int", 1337, 0, 2**31 - 1),
}


@dataclass(frozen=True)
class SweepSpec:
    """A validated spec: every key known, every value in range, defaults filled in."""

    raw: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.raw["name"])

    @property
    def device(self) -> str:
        return str(self.raw["device"])

    @property
    def seed(self) -> int:
        return int(self.raw["seed"])

    @property
    def corpus(self) -> str:
        return str(self.raw["model"]["corpus"])

    @property
    def is_hf(self) -> bool:
        """The model is a local Hugging Face checkpoint (runner.model.hf_checkpoint), not trained here."""
        return hf_spec.is_hf(self.raw["model"])

    def model_config(self, vocab_size: int) -> ModelConfig:
        if self.is_hf:
            raise ValueError("an hf model's config is its checkpoint's (hf_checkpoint.Checkpoint.model_config)")
        model = {key: value for key, value in self.raw["model"].items() if key != "corpus"}
        return ModelConfig(vocab_size=vocab_size, **model)

    def train_config(self) -> TrainConfig:
        if self.is_hf:
            raise ValueError("an hf model is not trained here: its spec has no [train] section")
        return TrainConfig(**self.raw["train"])

    def experiments(self) -> list[tuple[Experiment, dict[str, Any]]]:
        """The spec's experiments in the order they run: the spec's, except that those declared
        ``run_first`` (the training summary, then the overhead fit that later roofline
        placements add) come first, in their declarations' order."""
        known = registry()
        run_first = [declaration.name for declaration in declarations.ordered() if declaration.run_first]
        sections = list(self.raw["experiments"].items())
        ordered = sorted(
            sections, key=lambda section: run_first.index(section[0]) if section[0] in run_first else len(run_first)
        )
        return [(known[name], params) for name, params in ordered]

    def cases_total(self) -> int:
        return len(self.cases)

    def plan(self) -> list[tuple[Experiment, dict[str, Any]]]:
        """Every case of every experiment, in the order they run (a new list over the same cases)."""
        return list(self.cases)

    @cached_property
    def cases(self) -> tuple[tuple[Experiment, dict[str, Any]], ...]:
        """The plan, computed once per spec: validation, the limits, the estimate, the job's case
        count and the run itself all read this one (the spec's fields never change after it)."""
        model = self.raw["model"]
        return tuple(
            (experiment, case) for experiment, params in self.experiments() for case in experiment.plan(params, model)
        )


def validate(raw: Any) -> SweepSpec:
    """Check a parsed spec; raise InputError naming the first bad field and its allowed range."""
    if not isinstance(raw, dict):
        raise InputError(f"spec: expected a table of settings, got {type(raw).__name__}")
    sections = {"model", "train", "experiments"}
    unknown = sorted(set(raw) - set(TOP_FIELDS) - sections, key=str)
    if unknown:
        allowed = ", ".join(sorted(set(TOP_FIELDS) | sections))
        raise InputError(f"{field_path('', unknown[0])}: unknown key (allowed keys: {allowed})")
    top = {name: raw.get(name) for name in TOP_FIELDS if name in raw}
    checked: dict[str, Any] = check_section("spec", top, TOP_FIELDS, {})
    checkpoint = None
    experiments = raw.get("experiments")
    if hf_spec.is_hf(raw.get("model")):
        # A local Hugging Face checkpoint: its shape from config.json, nothing to train.
        model, checkpoint = hf_spec.check_model(raw["model"])
        hf_spec.refuse_training(raw)
        experiments = hf_spec.prepare_experiments(experiments)
        checked["model"] = model
    else:
        model = check_section("model", raw.get("model"), MODEL_FIELDS, {})
        if model["d_model"] % model["n_head"]:
            raise InputError(
                f"model.n_head: {model['n_head']} does not divide d_model {model['d_model']} "
                "(allowed: a divisor of d_model)"
            )
        checked["model"] = model
        checked["train"] = check_section("train", raw.get("train"), TRAIN_FIELDS, model)
    if not isinstance(experiments, dict) or not experiments:
        known = ", ".join(sorted(registry()))
        raise InputError(f"experiments: the spec names no experiment (allowed: {known})")
    known_experiments = registry()
    checked["experiments"] = {}
    for name, params in experiments.items():
        if name not in known_experiments:
            raise InputError(
                f"{field_path('experiments', name)}: unknown experiment "
                f"(allowed: {', '.join(sorted(known_experiments))})"
            )
        checked["experiments"][name] = check_section(
            f"experiments.{name}", params, known_experiments[name].fields, model
        )
    hf_spec.check_experiments(checked["experiments"], checkpoint)
    if checked["device"] == "cuda":
        _check_cuda_fields(checked["experiments"])
    spec = SweepSpec(checked)
    spec.plan()  # experiments refuse combinations of fields here, before anything runs
    # Fields are bounded one at a time above; together they must still fit the machine and the
    # time the spec allows itself (a local checkpoint by its own estimate: it trains nothing).
    if checkpoint is not None:
        hf_spec.check_affordable(spec)
    else:
        check_limits(spec)
    return spec


def cpu_only() -> dict[tuple[str, str], tuple[str, ...]]:
    """(experiment, field) → the values that run on the CPU only (the compiled fast path, PyTorch's
    dynamic int8 kernel), from each experiment's declaration."""
    return {
        (declaration.name, field): values
        for declaration in declarations.ordered()
        for field, values in declaration.cpu_only.items()
    }


def _check_cuda_fields(experiments: dict[str, Any]) -> None:
    for (experiment, field), values in cpu_only().items():
        chosen = experiments.get(experiment, {}).get(field, [])
        for value in values:
            if value in chosen:
                allowed = [item for item in chosen if item not in values]
                raise InputError(
                    f"experiments.{experiment}.{field}: {value!r} runs on the CPU only "
                    f"(allowed with device cuda: {', '.join(allowed) or 'the others'})"
                )


def for_device(raw: dict[str, Any], device: str) -> dict[str, Any]:
    """A spec moved to ``device``: on cuda, the CPU-only choices are dropped from their lists."""
    moved = {
        **raw,
        "device": device,
        "experiments": {name: dict(params) for name, params in raw.get("experiments", {}).items()},
    }
    if device == "cuda":
        for (experiment, field), values in cpu_only().items():
            params = moved["experiments"].get(experiment)
            if params and field in params:
                params[field] = [item for item in params[field] if item not in values]
    return moved


def parse_toml(text: str, source: str = "spec") -> SweepSpec:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"{source}: not valid TOML ({error})") from None
    return validate(raw)


def load_spec_file(path: str | Path) -> SweepSpec:
    file = Path(path)
    try:
        if not file.is_file():
            raise InputError(f"--spec: {str(path)!r} is not a file")
        text = file.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as error:
        raise InputError(f"--spec: cannot read {str(path)!r} as UTF-8 text ({error})") from None
    return parse_toml(text, source=str(path))


def preset_text(name: str) -> str:
    if name not in PRESETS:
        raise InputError(f"--preset: {name!r} is not a preset (allowed: {', '.join(PRESETS)})")
    return (PRESET_DIRECTORY / f"{name}.toml").read_text(encoding="utf-8")


def load_preset(name: str) -> SweepSpec:
    return parse_toml(preset_text(name), source=f"preset {name}")
