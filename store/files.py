"""Files written whole or not at all: a reader never finds half a report or export, and a
failure leaves no ``.partial`` file behind.

The temporary file is created with ``O_EXCL`` under an unpredictable name in the target's own
folder (``tempfile.mkstemp``), never at a fixed ``OUT.partial`` another user could plant a
symlink at; it then replaces the target by rename, which replaces a symlink there rather than
writing through it. What decodelab writes may quote anything a run holds, so it is written
0640 (reports, exports) or 0600 (stores, their backups, worker logs), whatever the umask."""

from __future__ import annotations

import contextlib
import os
import tempfile
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


# Reports and exports: the owner writes, the owner's group may read. Stores and logs: the owner only.
SHARED_MODE = 0o640
PRIVATE_MODE = 0o600


def create_private(path: Path, mode: int = PRIVATE_MODE) -> bool:
    """Create ``path`` empty with ``mode`` unless it exists (``O_EXCL``: never through a link
    planted there); whether it was created."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        return False
    os.fchmod(descriptor, mode)  # the umask may have taken bits away; never added any
    os.close(descriptor)
    return True


def write_whole(path: Path, write: Callable[[Path], object], mode: int = SHARED_MODE) -> None:
    """``write`` fills a temporary file beside ``path`` (created ``O_EXCL``, ``mode``), which
    then replaces ``path`` in one step; if anything fails the temporary file is removed and the
    error raised."""
    check_output_file(path)
    try:
        descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    except OSError as error:
        raise StoreError(f"--out: cannot write {str(path)!r} ({error.strerror or error})") from None
    temporary = Path(name)
    try:
        os.fchmod(descriptor, mode)
        os.close(descriptor)
        write(temporary)  # it opens the file mkstemp made (truncating it), keeping its mode
        temporary.replace(path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if isinstance(error, OSError):  # no permission, a full disk, a read-only file system
            raise StoreError(f"--out: cannot write {str(path)!r} ({error.strerror or error})") from None
        raise


def write_text_whole(path: Path, text: str) -> None:
    """``text`` written whole or not at all (write_whole): a reader never finds half a report."""
    write_whole(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))
