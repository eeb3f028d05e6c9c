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


def open_store(db: str | None, command: str, *, upgrade: bool | None = None, read_only: bool = False) -> Store:
    """The store for ``decodelab COMMAND``. An older SQLite store is upgraded on open (the old
    file copied aside first); an older PostgreSQL store is refused, naming the command: on a
    shared store only ``decodelab db upgrade`` migrates. A reading command (``read_only``)
    opens it read-only: it never creates, upgrades or writes a store."""
    from store.store import Store  # imported here to keep --help fast

    try:
        store = Store(db, upgrade=upgrade, read_only=read_only)
    except SchemaBehind as behind:
        reason = "only reads" if read_only else "does not migrate a shared store"
        raise StoreError(f"`decodelab {command}` {reason}: {behind}") from None
    if store.backup_path is not None:
        typer.echo(f"upgraded the store's schema; the old file is kept as {store.backup_path}", err=True)
    return store
