"""The speculative experiment's drafts and calibration text, built once per target and reused by
every case that asks for the same ones (an n-gram table takes half a second to count; a draft's
state is reset by start() at each use)."""

from __future__ import annotations

import dataclasses
from typing import Any

from runner.cost.speculative_prediction import Calibration, calibrate, draft_rollouts
from runner.decoding.choices import MAX_DRAFT_LENGTH
from runner.decoding.decode import generate
from runner.decoding.drafts import BigramDraft, ModelDraft, NGramDraft, target_windows
from runner.decoding.speculative import Draft
from runner.experiments.base import ExperimentContext
from runner.experiments.parts.speculative_costs import held_out_windows
from runner.experiments.speculative import DRAFTS, TABLE_DRAFTS
from runner.model.data_folder import DRAFT_PREFIX
from runner.model.gpt import ModelConfig
from runner.model.hf_checkpoint import load_model, read_checkpoint
from runner.model.quantize import quantize_model
from runner.model.train import TrainConfig

DRAFT_FIELDS = ("draft", "ngram_order", "small_draft_d_model", "small_draft_steps", "small_draft_distilled")
CALIBRATION_WINDOWS = 4  # plain generations from the run's prompt: the calibration text (greedy: one)
CALIBRATION_SEED_OFFSET = 10_000  # above every timed generation's seed (seed, seed + 1, ...)

_DRAFTS: dict[tuple[Any, ...], Draft] = {}
_CALIBRATIONS: dict[tuple[Any, ...], Calibration] = {}
_TEXTS: dict[tuple[Any, ...], list[list[int]]] = {}


def target_key(context: ExperimentContext) -> tuple[Any, ...]:
    return (id(context.model), context.model_record.weights_hash)


def draft_key(case: dict[str, Any], context: ExperimentContext) -> tuple[Any, ...]:
    return (*target_key(context), *(case.get(field) for field in DRAFT_FIELDS))


def _forget_other_targets(context: ExperimentContext) -> None:
    """One target at a time: do not keep drafts and calibrations of earlier runs alive."""
    current = target_key(context)
    for cache in (_DRAFTS, _CALIBRATIONS, _TEXTS):
        if any(key[:2] != current for key in cache):
            cache.clear()


def make_draft(case: dict[str, Any], context: ExperimentContext) -> Draft:
    key = draft_key(case, context)
    if key not in _DRAFTS:
        _forget_other_targets(context)
        _DRAFTS[key] = build_draft(case, context)
    return _DRAFTS[key]


def calibration_text(context: ExperimentContext, temperature: float, new_tokens: int) -> list[list[int]]:
    """The target's plain generations at ``temperature`` from the run's prompt, as long as the
    loop's text and a longest draft: texts like those the loop emits, from generations that are not
    the loop's (seeds no timed generation takes). Greedy, that is one text, which the loop's equals
    (greedy speculative decoding keeps the target's greedy text): the prediction knows the text,
    not the timings. From held-out prompts instead (another context than the workload's), the
    predicted draft lengths ran 10-50% long."""
    prompt, model = context.prompt(), context.model
    length = min(len(prompt) + new_tokens + MAX_DRAFT_LENGTH, model.config.context_length)
    key = (*target_key(context), temperature, context.seed, tuple(prompt), length)
    if key not in _TEXTS:
        _forget_other_targets(context)
        impl = "fast" if model.device.type == "cpu" and model.config.is_gpt2 else "static"
        seeds = [context.seed + CALIBRATION_SEED_OFFSET + index for index in range(CALIBRATION_WINDOWS)]
        _TEXTS[key] = [
            prompt + generate(model, prompt, length - len(prompt), temperature=temperature, seed=seed, impl=impl).tokens
            for seed in (seeds if temperature else seeds[:1])
        ]
    return _TEXTS[key]


def calibration_for(
    case: dict[str, Any], context: ExperimentContext, draft: Draft, rollout_length: int = 0
) -> Calibration:
    """Per-position acceptance and draft confidence along the calibration text, per (draft,
    temperature); with ``rollout_length``, the draft's own proposals' confidence too (the
    confidence schedule's stops)."""
    key = (*draft_key(case, context), case["temperature"], context.seed, case["new_tokens"])
    text = calibration_text(context, case["temperature"], case["new_tokens"])
    if key not in _CALIBRATIONS:
        _CALIBRATIONS[key] = calibrate(context.model, draft, text, case["temperature"])
    if not rollout_length:
        return _CALIBRATIONS[key]
    rollout_key = (*key, "rollout", rollout_length)
    if rollout_key not in _CALIBRATIONS:
        rollouts = draft_rollouts(draft, text, case["temperature"], rollout_length, context.seed, context.model.device)
        _CALIBRATIONS[rollout_key] = dataclasses.replace(_CALIBRATIONS[key], rollout_tops=rollouts)
    return _CALIBRATIONS[rollout_key]


def held_out_alpha(case: dict[str, Any], context: ExperimentContext, draft: Draft) -> float:
    """The write-ups' α on held-out corpus text (kept beside the calibration's for comparison)."""
    key = (*draft_key(case, context), case["temperature"], "held_out")
    if key not in _CALIBRATIONS:
        _, held_out = context.corpus.split()
        windows = held_out_windows(held_out, context.model.config.context_length)
        _CALIBRATIONS[key] = calibrate(context.model, draft, windows, case["temperature"])
    return _CALIBRATIONS[key].alpha


def build_draft(case: dict[str, Any], context: ExperimentContext) -> Draft:
    name = case["draft"]
    config = context.model.config
    if name in TABLE_DRAFTS:
        train_tokens, _ = context.corpus.split()
        if name == "bigram":
            return BigramDraft(train_tokens, config.vocab_size)
        ngram = NGramDraft(train_tokens, config.vocab_size, order=case["ngram_order"], name=name)
        if name == "distilled_ngram":
            ngram.distill(target_windows(context.model, train_tokens))
        return ngram
    if name in ("int8", "int4"):
        return ModelDraft(quantize_model(context.model, name, group_size=32, kernel="fake"), name)
    if name == "fast_int8":
        return ModelDraft(quantize_model(context.model, "int8", kernel="fast_int8"), name, fast=True)
    if name.startswith(DRAFT_PREFIX):
        drafted = load_model(read_checkpoint(name[len(DRAFT_PREFIX) :], "experiments.speculative.drafts"))
        drafted = drafted.to(context.device).eval()
        return ModelDraft(drafted, name, fast=drafted.device.type == "cpu")
    if name == "small":
        if context.train_model is None:
            raise RuntimeError("the small draft needs a way to train a model (run it through decodelab run)")
        heads = 4 if case["small_draft_d_model"] % 4 == 0 else 1
        small = context.train_model(
            ModelConfig(
                vocab_size=config.vocab_size,
                d_model=case["small_draft_d_model"],
                n_layer=1,
                n_head=heads,
                context_length=config.context_length,
            ),
            TrainConfig(steps=case["small_draft_steps"], sequence_length=min(128, config.context_length // 2)),
            context.model if case["small_draft_distilled"] else None,
            name="the small draft (speculative decoding)",
        )
        return ModelDraft(small, "small", fast=small.device.type == "cpu")
    raise ValueError(f"unknown draft {name!r} (known: {', '.join(DRAFTS)})")
