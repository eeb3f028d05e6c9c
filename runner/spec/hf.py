"""What a spec with ``[model] source = "hf"`` may say, and what such a sweep would cost.

The model section names a directory (runner.model.hf_checkpoint); the shape (d_model, n_layer, n_head,
context_length, vocab_size) and the name are read from its config.json and written into the
validated spec, so that the experiments plan against the checkpoint's real shape. Nothing is
trained: a ``[train]`` section and the small trained draft are refused; a draft is another
checkpoint, ``hf:DIR``, sharing the target's tokenizer.

``estimate`` is the cost model a launch is checked against (seconds on a 2-core machine and
peak memory); ``check_affordable`` refuses what would not finish in a working day or would not
fit in this machine's memory (e.g. gpt2 under the seed preset's sizes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

from runner.cost import counts
from runner.cost.cpu_speed import FLOPS_PER_SECOND, STEP_OVERHEAD_SECONDS  # one rough cost model
from runner.decoding.choices import longest_draft
from runner.errors import InputError
from runner.fields import Field, check_section, field_path
from runner.model.data_folder import DRAFT_PREFIX
from runner.model.hf_checkpoint import (
    HF_SOURCE,
    Checkpoint,
    check_same_vocabulary,
    check_weights,
    load_tokenizer,
    read_checkpoint,
)

SHAPE_KEYS = ("d_model", "n_layer", "n_head", "context_length", "vocab_size")
HF_MODEL_FIELDS = {
    "source": Field("str", HF_SOURCE, choices=(HF_SOURCE,)),
    "path": Field("str", "", help="a local Hugging Face model directory (config.json, weights, tokenizer)"),
    "corpus": Field("str", "default", help="'default' or a UTF-8 text file: prompts, n-gram counts, held-out loss"),
}
# Drafts that train a model: refused, an hf sweep trains nothing.
TRAINED_DRAFTS = ("small", "distilled_ngram")  # the second runs the target over its corpus
# What the speculative experiment proposes from when an hf spec names no drafts.
HF_DEFAULT_DRAFTS = ["ngram", "int8", "fast_int8"]
# Evaluation windows for held-out loss (runner.model.train.evaluate_loss) on an hf model.
EVALUATION_SEQUENCE_LENGTH = 128


def is_hf(raw_model: Any) -> bool:
    return isinstance(raw_model, dict) and "source" in raw_model


def check_model(raw_model: dict[str, Any]) -> tuple[dict[str, Any], Checkpoint]:
    """The model section with the checkpoint's shape and name filled in. Shape keys the spec
    gives itself (a stored spec validated again) must be the checkpoint's."""
    given = {key: value for key, value in raw_model.items() if key not in (*SHAPE_KEYS, "name")}
    if raw_model.get("source") != HF_SOURCE:
        raise InputError(
            f"model.source: {raw_model.get('source')!r} is not a known value "
            f"(allowed: {HF_SOURCE!r}, or no source for decodelab's own character model)"
        )
    model = check_section("model", given, HF_MODEL_FIELDS, {})
    if not model["path"]:
        raise InputError("model.path: an hf model needs the directory of its checkpoint (allowed: a directory)")
    checkpoint = read_checkpoint(model["path"])
    check_weights(checkpoint)
    load_tokenizer(checkpoint)
    derived: dict[str, Any] = {**checkpoint.shape, "name": checkpoint.name}
    for key, value in derived.items():
        if key in raw_model and raw_model[key] != value:
            raise InputError(
                f"model.{key}: {raw_model[key]!r} differs from the checkpoint's {value!r} "
                "(allowed: leave it out; an hf model's shape comes from its config.json)"
            )
    return {**model, **derived}, checkpoint


def refuse_training(raw: dict[str, Any]) -> None:
    if raw.get("train"):
        key = sorted(raw["train"], key=str)[0] if isinstance(raw["train"], dict) else "train"
        raise InputError(f"{field_path('train', key)}: an hf model is not trained here (allowed: no [train] section)")


def prepare_experiments(experiments: Any) -> Any:
    """The speculative section with hf defaults where it names no drafts (the default list has
    the small trained draft)."""
    if isinstance(experiments, dict) and isinstance(experiments.get("speculative"), dict):
        speculative = experiments["speculative"]
        if "drafts" not in speculative:
            return {**experiments, "speculative": {**speculative, "drafts": list(HF_DEFAULT_DRAFTS)}}
    return experiments


def check_experiments(experiments: dict[str, Any], checkpoint: Checkpoint | None) -> None:
    """Drafts an hf target can use; ``hf:`` drafts only with an hf target."""
    speculative = experiments.get("speculative")
    if not speculative:
        return
    for index, draft in enumerate(speculative["drafts"]):
        path = f"experiments.speculative.drafts[{index}]"
        if checkpoint is None:
            if draft.startswith(DRAFT_PREFIX):
                raise InputError(f"{path}: an {DRAFT_PREFIX} draft needs an hf target (allowed: model.source = 'hf')")
            continue
        if draft in TRAINED_DRAFTS:
            raise InputError(
                f"{path}: {draft!r} trains a draft, and an hf sweep trains nothing "
                f"(allowed: {DRAFT_PREFIX}DIR, ngram, bigram, int8, int4, fast_int8)"
            )
        if draft.startswith(DRAFT_PREFIX):
            drafted = read_checkpoint(draft[len(DRAFT_PREFIX) :], path)
            check_weights(drafted, path)
            check_same_vocabulary(checkpoint, drafted, path)
            needed = 1 + speculative["new_tokens"] + longest_draft(speculative)
            if drafted.shape["context_length"] < needed:
                raise InputError(
                    f"{path}: its context {drafted.shape['context_length']} is shorter than the {needed} positions "
                    "the speculative cases need (allowed: a draft with at least that context)"
                )


# ---- the cost model --------------------------------------------------------------------------

# Tokens the default corpus holds through GPT-2's tokenizer is about a quarter of its
# characters; the n-gram tables' rows are bounded by those tokens.
CHARACTERS_PER_TOKEN = 4
DEFAULT_CORPUS_CHARACTERS = 465_047
MAX_SECONDS = 8 * 3600.0
MEMORY_FRACTION = 0.75


class PlannedSpec(Protocol):
    @property
    def raw(self) -> dict[str, Any]: ...

    def plan(self) -> list[tuple[Any, dict[str, Any]]]: ...


@dataclass(frozen=True)
class Estimate:
    seconds: float
    peak_bytes: int


def _generation_seconds(n: int, d: int, layers: int, vocab: int, cache: bool) -> float:
    """n tokens with or without the cache; without it every step pushes every position through
    the blocks and the lm head (the eager forward computes logits for all of them)."""
    mults = counts.generation_mults(n, d, layers, cache, vocab)
    return n * STEP_OVERHEAD_SECONDS + 2 * mults / FLOPS_PER_SECOND


def _loss_seconds(d: int, layers: int, vocab: int, context: int) -> float:
    """One held-out loss: 64 windows through the forward, as runner.model.train.evaluate_loss."""
    length = min(EVALUATION_SEQUENCE_LENGTH, context)
    positions = 64 * length
    mults = layers * counts.block_step_mults(length, d, cache=False) * 64 + vocab * d * positions
    return 2 * mults / FLOPS_PER_SECOND


def _table_bytes(vocab: int, order: int, corpus_tokens: int) -> int:
    """A dense n-gram draft: one float32 row of the vocabulary per seen context (at most one per
    token of the text, per context length), and a float64 count matrix while it is built."""
    contexts = min(corpus_tokens, vocab ** (order - 1))
    return contexts * vocab * (4 + 8)


def estimate(spec: PlannedSpec, corpus_characters: int = DEFAULT_CORPUS_CHARACTERS) -> Estimate:
    """Seconds on a 2-core machine and peak bytes, rough, for an hf sweep (cost model, not a
    measurement): the generations each case times, losses, and the largest table or model copy."""
    model = spec.raw["model"]
    d, layers, vocab, context = model["d_model"], model["n_layer"], model["vocab_size"], model["context_length"]
    weight_bytes = 4 * (vocab * d + context * d + layers * counts.projection_mults(1, d))
    corpus_tokens = corpus_characters // CHARACTERS_PER_TOKEN
    seconds = 2 * _loss_seconds(d, layers, vocab, context)  # the held-out losses of the model record
    largest = 2 * weight_bytes  # the model and transformers' copy of it
    for experiment, case in spec.plan():
        part = case.get("part")
        if experiment.name == "kv_cache" and part in ("timing", "width"):
            width, rounds = case["d_model"], case["pairs"] + 2  # the pairs, a warm-up and the token check
            uncached = _generation_seconds(case["n"], width, layers, vocab, False)
            cached = _generation_seconds(case["n"], width, layers, vocab, True)
            # no cache twice (its impl and the eager path), the cache and transformers' cache
            seconds += rounds * (2 * uncached + 2 * cached)
        elif experiment.name == "kv_cache" and part in ("equivalence", "no_mask", "rounded_cache"):
            seconds += 3 * _generation_seconds(case["n"], d, layers, vocab, False)
        elif experiment.name == "quantization":
            tokens = 2 * (case["pairs"] + 1) * case["timing_tokens"] + 4 * case["divergence_tokens"]
            seconds += _generation_seconds(tokens, d, layers, vocab, True)
            seconds += 2 * _loss_seconds(d, layers, vocab, context)
            largest = max(largest, 3 * weight_bytes)
        elif experiment.name == "speculative" and part in ("speculative", "aa"):
            generation = _generation_seconds(case["new_tokens"], d, layers, vocab, True)
            seconds += 3 * (case["pairs"] + 1) * (1 + case["k"]) * generation
        elif experiment.name == "speculative" and part == "distribution":
            seconds += 2 * case["samples"] * STEP_OVERHEAD_SECONDS
            if case["draft"] in ("bigram", "ngram"):
                order = 2 if case["draft"] == "bigram" else case["ngram_order"]
                largest = max(largest, weight_bytes + _table_bytes(vocab, order, corpus_tokens))
        else:
            seconds += 0.5
    return Estimate(seconds=seconds, peak_bytes=largest)


def machine_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_affordable(spec: PlannedSpec, memory_bytes: int | None = None) -> Estimate:
    """Refuse, in one line, an hf sweep that would run past MAX_SECONDS or need more than
    MEMORY_FRACTION of this machine's memory by the estimate."""
    found = estimate(spec)
    memory = machine_memory_bytes() if memory_bytes is None else memory_bytes
    name = spec.raw["model"].get("name", "the model")
    if found.peak_bytes > MEMORY_FRACTION * memory:
        raise InputError(
            f"experiments: {name} with these experiments needs about {found.peak_bytes / 2**30:.1f} GiB by estimate "
            f"(allowed: at most {MEMORY_FRACTION * memory / 2**30:.1f} GiB here; a dense bigram or n-gram draft over "
            "a large vocabulary is the usual cause: use ngram with a small corpus, int8 or an hf: draft)"
        )
    if found.seconds > MAX_SECONDS:
        raise InputError(
            f"experiments: {name} with these experiments takes about {found.seconds / 3600:.0f} h by estimate "
            f"(allowed: at most {MAX_SECONDS / 3600:.0f} h; fewer lengths, pairs and tokens, "
            "as in examples/gpt2-distilgpt2.toml)"
        )
    return found
