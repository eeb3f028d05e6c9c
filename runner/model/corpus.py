"""The training text: the default shipped with decodelab, or any UTF-8 file.

The default (runner/data/default_corpus.txt, 465,047 characters) is the English prose of
CPython 3.11.7's ``pydoc_data.topics``, joined in sorted key order, under the Python Software
Foundation License (runner/data/DEFAULT_CORPUS_LICENSE.txt). It is a file with a pinned hash
rather than read from the running Python because that module changes with every CPython
release: machines on different Pythons would train on different text and get different
models and n-gram drafts.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from runner.errors import InputError

DEFAULT_CORPUS = "default"
DEFAULT_CORPUS_PATH = Path(__file__).parent.parent / "data" / "default_corpus.txt"
DEFAULT_CORPUS_SHA256 = "d9dc35bce5ab1a24ed7f4c3c9b7c22450410e9d68279e3426db458c6be371621"
VALIDATION_FRACTION = 0.1


@dataclass(frozen=True)
class Corpus:
    text: str
    source: str

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def vocabulary(self) -> list[str]:
        return sorted(set(self.text))

    def encode(self, text: str) -> list[int]:
        index = {char: position for position, char in enumerate(self.vocabulary)}
        try:
            return [index[char] for char in text]
        except KeyError as error:
            raise InputError(f"character {error.args[0]!r} is not in the corpus vocabulary") from None

    def prompt(self, count: int) -> list[int]:
        """The text's first ``count`` characters, encoded: what a generation starts from."""
        return self.encode(self.text[:count])

    def decode(self, tokens: list[int]) -> str:
        vocabulary = self.vocabulary
        return "".join(vocabulary[token] for token in tokens)

    def tokens(self) -> torch.Tensor:
        lookup = {char: position for position, char in enumerate(self.vocabulary)}
        return torch.tensor([lookup[char] for char in self.text], dtype=torch.long)

    def split(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The first 90% for training, the last 10% held out for validation."""
        tokens = self.tokens()
        boundary = int(len(tokens) * (1 - VALIDATION_FRACTION))
        return tokens[:boundary], tokens[boundary:]

    def unigram_entropy_nats(self) -> float:
        """Entropy of the character frequencies: the loss of a model that ignores context."""
        counts = Counter(self.text)
        total = len(self.text)
        return -sum(count / total * math.log(count / total) for count in counts.values())


def default_text() -> str:
    """The shipped default corpus, refused unless its hash is the pinned one."""
    try:
        text = DEFAULT_CORPUS_PATH.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"corpus: cannot read the default corpus {str(DEFAULT_CORPUS_PATH)!r} ({error})") from None
    found = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if found != DEFAULT_CORPUS_SHA256:
        raise InputError(
            f"corpus: the default corpus {str(DEFAULT_CORPUS_PATH)!r} has sha256 {found[:12]}…, not the pinned "
            f"{DEFAULT_CORPUS_SHA256[:12]}… (allowed: the file as shipped; restore it, or give your own file as "
            "model.corpus)"
        )
    return text


def load_corpus(source: str = DEFAULT_CORPUS, min_length: int = 0) -> Corpus:
    """Load the default corpus or a UTF-8 file; refuse one that cannot train a model.

    ``min_length`` is two model contexts: shorter text cannot fill a training and a
    validation window.
    """
    if source == DEFAULT_CORPUS:
        text = default_text()
    else:
        path = Path(source)
        if not path.is_file():
            raise InputError(f"corpus: {source!r} is not a file")
        raw = path.read_bytes()
        if not raw:
            raise InputError(f"corpus: {source!r} is empty")
        if b"\x00" in raw:
            raise InputError(f"corpus: {source!r} looks binary (it contains NUL bytes): give a UTF-8 text file")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InputError(f"corpus: {source!r} is not UTF-8 text (invalid byte at offset {error.start})") from None
    if len(text) < max(min_length, 2):
        raise InputError(f"corpus: {source!r} has {len(text)} characters, fewer than two model contexts ({min_length})")
    if len(set(text)) < 2:
        raise InputError(f"corpus: {source!r} uses fewer than two distinct characters")
    return Corpus(text=text, source=source)
