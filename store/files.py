"""Files written whole or not at all: a reader never finds half a report or export, and a
failure leaves no ``.partial`` file behind."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from store.errors import StoreError


def check_output_file(path: Path, option: str = "--out") -> None:
    """Refuse, before any work, an output path that cannot become a file."""
    if path.is_dir():
        raise StoreError(f"{option}: {str(path)!r} is a folder (allowed: a file path in an existing folder)")
    if not path.parent.exists():
        raise StoreError(f"{option}: directory {str(path.parent)!r} does not exist")
    if not path.parent.is_dir():
        raise StoreError(f"{option}: {str(path.parent)!r} is not a folder (allowed: a file path in an existing folder)")


def write_whole(path: Path, write: Callable[[Path], object]) -> None:
    """``write`` fills a temporary file beside ``path``, which then replaces ``path`` in one
    step; if anything fails the temporary file is removed and the error raised."""
    check_output_file(path)
    temporary = path.with_name(path.name + ".partial")
    try:
        write(temporary)
        temporary.replace(path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if isinstance(error, OSError):  # no permission, a full disk, a read-only file system
            raise StoreError(f"--out: cannot write {str(path)!r} ({error.strerror or error})") from None
        raise
