"""Corpus loading and refusal, seeded training, checkpoints shared through the store."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import runner.model.corpus
from runner.errors import InputError
from runner.model.corpus import DEFAULT_CORPUS_SHA256, load_corpus
from runner.model.gpt import ModelConfig
from runner.model.train import TrainConfig, evaluate_loss, train, train_or_reuse
from store.store import Store


def test_the_default_corpus_is_the_same_everywhere() -> None:
    corpus = load_corpus()
    # The shipped file with its pinned hash, whatever Python version runs.
    assert corpus.content_hash == DEFAULT_CORPUS_SHA256
    assert len(corpus.text) == 465_047
    assert corpus.decode(corpus.encode("the cache")) == "the cache"
    train_tokens, validation_tokens = corpus.split()
    assert len(train_tokens) + len(validation_tokens) == len(corpus.text)
    assert 2.0 < corpus.unigram_entropy_nats() < 4.5


def test_a_changed_default_corpus_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edited = tmp_path / "default_corpus.txt"
    edited.write_text(runner.model.corpus.DEFAULT_CORPUS_PATH.read_text(encoding="utf-8") + "!", encoding="utf-8")
    monkeypatch.setattr(runner.model.corpus, "DEFAULT_CORPUS_PATH", edited)
    with pytest.raises(InputError, match="not the pinned") as refused:
        load_corpus()
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "looks binary"),
        (b"caf\xe9 au lait " * 20, "is not UTF-8 text"),
        (b"short text", "fewer than two model contexts"),
    ],
)
def test_unusable_corpus_files_are_refused(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "corpus.txt"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message) as caught:
        load_corpus(str(path), min_length=64)
    assert "\n" not in str(caught.value)


def test_a_missing_corpus_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not a file"):
        load_corpus(str(tmp_path / "absent.txt"))


def test_any_utf8_file_trains(tmp_path: Path) -> None:
    path = tmp_path / "poem.txt"
    path.write_text("über die Brücke, o café! " * 40, encoding="utf-8")
    corpus = load_corpus(str(path), min_length=64)
    assert "ü" in corpus.vocabulary


@pytest.mark.slow
def test_a_few_training_steps_lower_the_loss() -> None:
    corpus = load_corpus()
    config = ModelConfig(vocab_size=len(corpus.vocabulary), d_model=32, n_layer=1, n_head=2, context_length=64)
    torch.manual_seed(5)
    from runner.model.gpt import CharGPT

    untrained = CharGPT(config)
    _, validation = corpus.split()
    before = evaluate_loss(untrained.eval(), validation, 32)
    model, train_loss, val_loss = train(
        config, TrainConfig(steps=60, batch_size=8, sequence_length=32, seed=5), corpus, show_progress=False
    )
    assert val_loss < before - 0.5
    assert train_loss < before - 0.5


def test_training_is_seeded() -> None:
    corpus = load_corpus()
    config = ModelConfig(vocab_size=len(corpus.vocabulary), d_model=16, n_layer=1, n_head=2, context_length=32)
    recipe = TrainConfig(steps=5, batch_size=4, sequence_length=16)
    first, _, _ = train(config, recipe, corpus, show_progress=False)
    second, _, _ = train(config, recipe, corpus, show_progress=False)
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_a_checkpoint_is_reused_from_the_store_with_identical_logits(sqlite_url: str) -> None:
    corpus = load_corpus()
    config = ModelConfig(vocab_size=len(corpus.vocabulary), d_model=16, n_layer=1, n_head=2, context_length=32)
    recipe = TrainConfig(steps=5, batch_size=4, sequence_length=16)
    messages: list[str] = []
    store = Store(sqlite_url)
    first = train_or_reuse(store.results, config, recipe, corpus, show_progress=False, log=messages.append)
    assert not first.reused
    assert "unigram entropy" in messages[-1]
    # Another process (another machine sharing the store) opens it and gets the same weights.
    elsewhere = Store(sqlite_url)
    second = train_or_reuse(elsewhere.results, config, recipe, corpus, show_progress=False, log=messages.append)
    assert second.reused and second.record.weights_hash == first.record.weights_hash
    tokens = torch.tensor([corpus.encode(corpus.text[:20])])
    assert torch.equal(second.model(tokens), first.model(tokens))
    changed = train_or_reuse(
        store.results,
        config,
        TrainConfig(steps=6, batch_size=4, sequence_length=16),
        corpus,
        show_progress=False,
        log=messages.append,
    )
    assert not changed.reused, "a different recipe trains a new model"


@pytest.mark.slow
def test_distillation_pulls_the_student_towards_the_teacher() -> None:
    from runner.model.gpt import CharGPT
    from runner.model.train import recipe_hash, weights_hash

    corpus = load_corpus()
    torch.manual_seed(0)
    teacher_config = ModelConfig(vocab_size=len(corpus.vocabulary), d_model=32, n_layer=1, n_head=2, context_length=64)
    teacher, _, _ = train(
        teacher_config, TrainConfig(steps=40, batch_size=8, sequence_length=32), corpus, show_progress=False
    )
    student_config = ModelConfig(vocab_size=len(corpus.vocabulary), d_model=16, n_layer=1, n_head=2, context_length=64)
    recipe = TrainConfig(steps=40, batch_size=8, sequence_length=32, seed=3)
    plain, _, _ = train(student_config, recipe, corpus, show_progress=False)
    distilled, _, _ = train(student_config, recipe, corpus, show_progress=False, teacher=teacher)
    tokens = torch.tensor([corpus.encode(corpus.text[5000:5064])])

    def divergence(student: CharGPT) -> float:
        with torch.inference_mode():
            target = torch.softmax(teacher(tokens), dim=-1)
            return float((target * (target.log() - torch.log_softmax(student(tokens), dim=-1))).sum(-1).mean())

    assert divergence(distilled) < divergence(plain)
    assert recipe_hash(student_config, recipe, corpus.content_hash, weights_hash(teacher)) != recipe_hash(
        student_config, recipe, corpus.content_hash
    )
