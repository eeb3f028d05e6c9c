"""Reading torch's pickled checkpoints so that damaged bytes are one short reason, never a
warning and a page of torch's advice."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import IO, Any

import torch


class UnreadableCheckpoint(Exception):
    """The bytes are not a checkpoint; ``reason`` is torch's first sentence about why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def load_weights_only(source: Path | IO[bytes], mmap: bool = False) -> Any:
    """``torch.load(source, weights_only=True)`` on the CPU. Checkpoints that torch wrote load
    without warnings, so any warning (an unusual pickle protocol, say) comes from damaged bytes,
    whose error is the whole story: warnings are dropped and errors become one short reason.
    ``mmap`` maps a zip-format file instead of reading it (its shapes without its tensors' bytes)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(source, weights_only=True, map_location="cpu", mmap=mmap)
    except Exception as error:  # torch raises many types for bad bytes: pickle, zip, key, size errors
        raise UnreadableCheckpoint(first_sentence(error)) from None


def first_sentence(error: BaseException) -> str:
    """Torch's messages run on with advice about torch itself: the first sentence is the reason."""
    text = str(error).strip()
    return text.splitlines()[0].split(". ")[0][:120] if text else type(error).__name__
