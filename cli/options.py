"""What every ``decodelab`` command shares: the --db option and opening the store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from store.errors import SchemaBehind, StoreError

if TYPE_CHECKING:
    from store.store import Store

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Store URL (else $DECODELAB_DB, else sqlite:///decodelab.db).", show_default=False),
]


def open_store(
    db: str | None,
    command: str,
    *,
    upgrade: bool | None = None,
    read_only: bool = False,
    creates: bool = True,
) -> Store:
    """The store for ``decodelab COMMAND``. An older SQLite store is upgraded on open (the old
    file copied aside first); an older PostgreSQL store is refused, naming the command: on a
    shared store only ``decodelab db upgrade`` migrates. A reading command (``read_only``)
    opens it read-only: it never creates, upgrades or writes a store. A command that changes
    what a store holds (``creates=False``: a tag, a note, a cancelled job) refuses a SQLite file
    that is not there, so a mistyped path reads as a typo, not as an empty store."""
    from store.engine import mask_url, resolve_url, sqlite_path
    from store.store import Store  # imported here to keep --help fast

    if not creates:
        url = resolve_url(db)
        path = sqlite_path(url)
        if path is not None and not path.exists():
            raise StoreError(
                f"store {mask_url(url)}: no such file {str(path)!r} (`decodelab {command}` changes an existing "
                "store and creates none)"
            )

    try:
        store = Store(db, upgrade=upgrade, read_only=read_only)
    except SchemaBehind as behind:
        reason = "only reads" if read_only else "does not migrate a shared store"
        raise StoreError(f"`decodelab {command}` {reason}: {behind}") from None
    if store.backup_path is not None:
        typer.echo(f"upgraded the store's schema; the old file is kept as {store.backup_path}", err=True)
    return store
