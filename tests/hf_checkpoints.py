"""Real Hugging Face checkpoint directories built locally for the hf tests: a byte-level BPE
tokenizer trained with ``tokenizers`` on the default corpus, tiny GPT-2 models made with
transformers (random weights, or trained a few steps so that a draft's acceptance is neither
0 nor 1), all saved with ``save_pretrained``. Nothing is downloaded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from runner.model.corpus import default_text

VOCAB_SIZE = 320  # 256 byte tokens and 64 merges
CONTEXT_LENGTH = 96


@dataclass(frozen=True)
class Checkpoints:
    target: Path  # 2 blocks, d 32, trained a few steps
    draft: Path  # 1 block, d 16, trained fewer steps: a draft that agrees sometimes
    random: Path  # the target's shape, random weights (varied greedy text)
    other_tokenizer: Path  # the draft's shape under a tokenizer with other merges


def train_tokenizer(text: str, vocab_size: int = VOCAB_SIZE) -> Any:
    from tokenizers.implementations import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(iter([text]), vocab_size=vocab_size, min_frequency=2, show_progress=False)
    return tokenizer


def gpt2(d_model: int, n_layer: int, seed: int, initializer_range: float = 0.02) -> Any:
    import transformers

    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=CONTEXT_LENGTH,
        n_embd=d_model,
        n_layer=n_layer,
        n_head=2,
        initializer_range=initializer_range,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,  # GPT-2's 50256 is outside this vocabulary
        eos_token_id=None,
    )
    return transformers.GPT2LMHeadModel(config).eval()


def train_steps(model: Any, tokens: torch.Tensor, steps: int, seed: int) -> Any:
    """A few AdamW steps on windows of the text: enough to make the distributions peaked."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    length = 32
    for _ in range(steps):
        starts = torch.randint(0, len(tokens) - length - 1, (8,), generator=generator)
        batch = torch.stack([tokens[start : start + length] for start in starts])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def save(model: Any, tokenizer: Any, directory: Path, name: str) -> Path:
    import transformers

    directory.mkdir(parents=True)
    model.config._name_or_path = name
    model.save_pretrained(directory)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer._tokenizer).save_pretrained(directory)
    return directory


def build(root: Path) -> Checkpoints:
    text = default_text()
    tokenizer = train_tokenizer(text)
    tokens = torch.tensor(tokenizer.encode(text[:60_000]).ids)
    target = train_steps(gpt2(32, 2, seed=1), tokens, steps=15, seed=2)
    draft = train_steps(gpt2(16, 1, seed=3), tokens, steps=8, seed=4)
    other = train_tokenizer(text[::-1])  # the same size, other merges
    return Checkpoints(
        target=save(target, tokenizer, root / "tiny-target", "tiny-target"),
        draft=save(draft, tokenizer, root / "tiny-draft", "tiny-draft"),
        # Wider initial weights than GPT-2's 0.02: greedy text that does not repeat one token.
        random=save(gpt2(32, 2, seed=5, initializer_range=0.3), tokenizer, root / "tiny-random", "tiny-random"),
        other_tokenizer=save(gpt2(16, 1, seed=6), other, root / "other-tokenizer", "other-tokenizer"),
    )


def copy_with(source: Path, destination: Path, **config_changes: Any) -> Path:
    """A copy of a checkpoint directory, with config.json keys changed."""
    destination.mkdir(parents=True)
    for file in source.iterdir():
        (destination / file.name).write_bytes(file.read_bytes())
    config = json.loads((source / "config.json").read_text())
    (destination / "config.json").write_text(json.dumps({**config, **config_changes}))
    return destination
