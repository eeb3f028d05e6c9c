"""An hf run's model: the checkpoint loaded, its text tokenized, and its model record (the
directory's content hash as the model hash; config, parameter count and vocabulary recorded).

The weights stay in the directory: the store keeps the record, not a copy of the weights.
Held-out losses are measured once per (checkpoint, text) and found again by that recipe.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from runner.errors import InputError
from runner.model.corpus import VALIDATION_FRACTION, load_corpus
from runner.model.gpt import CharGPT
from runner.model.hf_checkpoint import (
    TokenCorpus,
    content_hash,
    load_model,
    load_tokenizer,
    read_checkpoint,
    token_corpus,
)
from runner.model.train import ModelStore, evaluate_loss
from runner.spec.hf import EVALUATION_SEQUENCE_LENGTH
from runner.spec.sweeps import SweepSpec
from store.records import ModelRecord


@dataclass(frozen=True)
class HFTarget:
    model: CharGPT
    record: ModelRecord
    corpus: TokenCorpus


def hf_recipe_hash(model_hash: str, corpus_hash: str) -> str:
    return hashlib.sha256(json.dumps({"hf": model_hash, "corpus": corpus_hash}, sort_keys=True).encode()).hexdigest()


def evaluation_length(context_length: int) -> int:
    return min(EVALUATION_SEQUENCE_LENGTH, context_length - 1)


def load_target(store: ModelStore, spec: SweepSpec, log: Callable[[str], None]) -> HFTarget:
    """The spec's checkpoint as a CharGPT on the CPU, its tokenized text and its stored record."""
    model_spec = spec.raw["model"]
    checkpoint = read_checkpoint(model_spec["path"])
    tokenizer = load_tokenizer(checkpoint)
    corpus = token_corpus(load_corpus(spec.corpus), tokenizer, checkpoint.shape["vocab_size"])
    length = evaluation_length(checkpoint.shape["context_length"])
    # The held-out tenth must hold one evaluation window, the prompts the largest context asked.
    needed = int((length + 2) / VALIDATION_FRACTION) + 1
    tokens = len(corpus.tokens())
    if tokens < needed:
        raise InputError(
            f"model.corpus: {spec.corpus!r} is {tokens} tokens through the model's tokenizer "
            f"(allowed: at least {needed}, so that a tenth holds one {length}-token window)"
        )
    model_hash = content_hash(checkpoint.path)
    model = load_model(checkpoint)
    recipe = hf_recipe_hash(model_hash, corpus.content_hash)
    found = store.find_model(recipe_hash=recipe)
    if found is not None:
        log(f"loaded {checkpoint.name} ({model_hash[:12]}); losses on this text already stored")
        return HFTarget(model, found, corpus)
    log(f"loaded {checkpoint.name} ({model_hash[:12]}, {model.parameter_count():,} parameters); measuring its loss")
    train_tokens, validation_tokens = corpus.split()
    record = ModelRecord(
        weights_hash=model_hash,
        recipe_hash=recipe,
        config={
            "model": model.config.to_dict(),
            "source": "hf",
            "name": checkpoint.name,
            "path": str(checkpoint.path),
            "hf_config": checkpoint.config,
            "tokenizer_vocab_size": tokenizer.get_vocab_size(),
            # Not trained here: the losses are measured on the spec's text in these windows.
            "evaluation": {"sequence_length": length},
            "corpus_source": corpus.source,
        },
        corpus_hash=corpus.content_hash,
        train_loss=evaluate_loss(model, train_tokens, length),
        val_loss=evaluate_loss(model, validation_tokens, length),
        parameter_count=model.parameter_count(),
        weight_bytes=model.weight_bytes(),
        weights=b"",
    )
    model_id = store.save_model(record)
    return HFTarget(model, ModelRecord(**{**record.__dict__, "id": model_id}), corpus)
