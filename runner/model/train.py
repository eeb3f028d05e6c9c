"""Seeded AdamW training with a progress bar, and checkpoints shared through the store.

A checkpoint is stored once by the hash of its weights; its recipe hash (model config,
training config, corpus hash) lets ``decodelab train`` find it again instead of retraining,
on this machine or any other that shares the store.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

import torch
from torch.nn import functional as F
from tqdm import tqdm

from runner.model.corpus import Corpus
from runner.model.gpt import CharGPT, ModelConfig
from runner.model.progress import Ticker
from runner.model.torch_files import UnreadableCheckpoint, first_sentence, load_weights_only
from store.errors import StoreError
from store.records import ModelRecord

EVALUATION_WINDOWS = 64


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1200
    batch_size: int = 32
    sequence_length: int = 128
    learning_rate: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.1
    seed: int = 1337


@dataclass(frozen=True)
class TrainedModel:
    model: CharGPT
    record: ModelRecord
    reused: bool


def recipe_hash(
    model_config: ModelConfig, train_config: TrainConfig, corpus_hash: str, teacher_hash: str | None = None
) -> str:
    recipe = {"model": model_config.to_dict(), "train": asdict(train_config), "corpus": corpus_hash}
    if teacher_hash is not None:  # a distilled model depends on its teacher's exact weights
        recipe["teacher"] = teacher_hash
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def weights_hash(model: CharGPT) -> str:
    digest = hashlib.sha256(json.dumps(model.config.to_dict(), sort_keys=True).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def serialize(model: CharGPT) -> bytes:
    buffer = io.BytesIO()
    torch.save({"config": model.config.to_dict(), "state_dict": model.state_dict()}, buffer)
    return buffer.getvalue()


def deserialize(weights: bytes) -> CharGPT:
    checkpoint = load_weights_only(io.BytesIO(weights))
    model = CharGPT(ModelConfig(**checkpoint["config"]))
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval()


def load_stored(record: ModelRecord) -> CharGPT:
    """The stored checkpoint as a model; a damaged one (bytes that do not load, or weights that
    no longer hash to the recorded hash) is one line naming the model, never a traceback."""
    damaged = f"model {record.weights_hash[:12]}: the stored checkpoint is damaged"
    try:
        model = deserialize(record.weights)
    except UnreadableCheckpoint as error:
        raise StoreError(f"{damaged} ({error.reason}); delete that model row to train it again") from None
    except Exception as error:  # bytes that unpickle but are not our checkpoint: key, type, size errors
        raise StoreError(f"{damaged} ({first_sentence(error)}); delete that model row to train it again") from None
    if weights_hash(model) != record.weights_hash:
        raise StoreError(f"{damaged} (its weights no longer match their hash); delete that model row to train it again")
    return model


def _learning_rate(step: int, config: TrainConfig) -> float:
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.inference_mode()
def evaluate_loss(
    model: CharGPT,
    tokens: torch.Tensor,
    sequence_length: int,
    logits_through: Callable[[CharGPT, torch.Tensor], torch.Tensor] | None = None,
) -> float:
    """Mean next-character loss over fixed, non-overlapping windows (deterministic); the logits from
    the model's forward, or from ``logits_through(model, inputs)`` (another path through it)."""
    windows = min(EVALUATION_WINDOWS, (len(tokens) - 1) // sequence_length)
    if windows < 1:
        raise ValueError("evaluation text is shorter than one window")
    starts = torch.arange(windows) * sequence_length
    device = model.device
    inputs = torch.stack([tokens[start : start + sequence_length] for start in starts]).to(device)
    targets = torch.stack([tokens[start + 1 : start + 1 + sequence_length] for start in starts]).to(device)
    logits = model(inputs) if logits_through is None else logits_through(model, inputs)
    return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)))


def train(
    model_config: ModelConfig,
    train_config: TrainConfig,
    corpus: Corpus,
    *,
    show_progress: bool = True,
    teacher: CharGPT | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[CharGPT, float, float]:
    """Train from a seeded initialisation; returns the model, train loss and validation loss.

    With a ``teacher`` the model learns the teacher's next-character distributions (soft
    targets) instead of the text's characters: distillation, which makes a small model agree
    with a big one far more often than training on the text alone (what a speculative draft
    needs). The reported losses are still against the text. ``log`` gets a progress line every
    LOG_EVERY_SECONDS where no bar is drawn on a terminal (a CI log sees training advance).
    """
    ticker = Ticker()
    # The bar redraws one line in place: a log that is not a terminal gets whole lines instead.
    lines = log if log is not None and not (show_progress and sys.stderr.isatty()) else None
    torch.manual_seed(train_config.seed)
    model = CharGPT(model_config)
    train_tokens, validation_tokens = corpus.split()
    length = train_config.sequence_length
    generator = torch.Generator().manual_seed(train_config.seed)
    decay = [p for name, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for name, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": train_config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=train_config.learning_rate,
        betas=(0.9, 0.99),
    )
    model.train()
    progress = tqdm(range(train_config.steps), desc="training", unit="step", disable=not show_progress, file=sys.stderr)
    running_loss = float("nan")
    for step in progress:
        starts = torch.randint(0, len(train_tokens) - length - 1, (train_config.batch_size,), generator=generator)
        inputs = torch.stack([train_tokens[start : start + length] for start in starts])
        targets = torch.stack([train_tokens[start + 1 : start + 1 + length] for start in starts])
        # A random position offset trains every row of the position table, so the model
        # decodes sensibly out to its full context although it trains on short windows.
        offset = int(torch.randint(0, model_config.context_length - length + 1, (1,), generator=generator))
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(step, train_config)
        logits = model(inputs, position_offset=offset)
        if teacher is None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        else:
            with torch.no_grad():
                soft_targets = torch.softmax(teacher(inputs, position_offset=offset), dim=-1)
            loss = -(soft_targets * torch.log_softmax(logits, dim=-1)).sum(dim=-1).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        running_loss = loss.item() if step == 0 else 0.95 * running_loss + 0.05 * loss.item()
        if step % 10 == 0 or step == train_config.steps - 1:
            progress.set_postfix(loss=f"{running_loss:.3f}")
        if lines is not None and ticker.due():
            lines(f"training step {step + 1:,}/{train_config.steps:,}, loss {running_loss:.3f}")
    model.eval()
    return (
        model,
        evaluate_loss(model, train_tokens, length),
        evaluate_loss(model, validation_tokens, length),
    )


def make_record(
    model: CharGPT,
    train_config: TrainConfig,
    corpus: Corpus,
    train_loss: float,
    val_loss: float,
    teacher_hash: str | None = None,
) -> ModelRecord:
    return ModelRecord(
        weights_hash=weights_hash(model),
        recipe_hash=recipe_hash(model.config, train_config, corpus.content_hash, teacher_hash),
        config={"model": model.config.to_dict(), "train": asdict(train_config), "corpus_source": corpus.source},
        corpus_hash=corpus.content_hash,
        train_loss=train_loss,
        val_loss=val_loss,
        parameter_count=model.parameter_count(),
        weight_bytes=model.weight_bytes(),
        weights=serialize(model),
    )


class ModelStore(Protocol):
    """What training needs of a store: find a checkpoint by recipe, save one."""

    def find_model(self, *, recipe_hash: str | None = None, weights_hash: str | None = None) -> ModelRecord | None: ...

    def save_model(self, model: ModelRecord) -> int: ...


def train_or_reuse(
    store: ModelStore,
    model_config: ModelConfig,
    train_config: TrainConfig,
    corpus: Corpus,
    *,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
    teacher: CharGPT | None = None,
) -> TrainedModel:
    """Load the stored checkpoint for this recipe, or train (or distil from ``teacher``) one and
    store it."""
    teacher_hash = weights_hash(teacher) if teacher is not None else None
    wanted = recipe_hash(model_config, train_config, corpus.content_hash, teacher_hash)
    found = store.find_model(recipe_hash=wanted)
    if found is not None:
        model = load_stored(found)
        log(f"reusing stored model {found.weights_hash[:12]} (val loss {found.val_loss:.4f}); no training needed")
        return TrainedModel(model=model, record=found, reused=True)
    log(
        f"training d_model={model_config.d_model} n_layer={model_config.n_layer} n_head={model_config.n_head} "
        f"for {train_config.steps} steps on {len(corpus.text):,} characters ({corpus.source})"
    )
    model, train_loss, val_loss = train(
        model_config, train_config, corpus, show_progress=show_progress, teacher=teacher, log=log
    )
    record = make_record(model, train_config, corpus, train_loss, val_loss, teacher_hash)
    model_id = store.save_model(record)
    log(
        f"validation loss {val_loss:.4f} nats/char vs unigram entropy {corpus.unigram_entropy_nats():.4f}; "
        f"stored as {record.weights_hash[:12]}"
    )
    return TrainedModel(model=model, record=ModelRecord(**{**record.__dict__, "id": model_id}), reused=False)
