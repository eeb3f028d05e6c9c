"""The Store: one experiment store (a SQLite file or a PostgreSQL database). It owns the engine
and its transactions and is made of parts, each with one job:

- ``store.results`` (store/results.py): what the runner writes and reads back as plain records;
- ``store.jobs`` (store/jobs.py): the job queue;
- ``store.workers`` (store/workers.py): the processes that claim jobs;
- ``store.annotations`` (store/annotations.py): reviewers' tags and notes on runs;
- ``store.profiles`` (store/profiles.py): machines' measured roofs;
- ``store.drift`` (store/drift.py): machines' drift figures, kept as their runs finish;
- ``store.frames`` (a module of functions of a Store): the dashboard's pandas reads.

Only the store package speaks SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from store.annotations import Annotations
from store.drift import Drift
from store.engine import check_and_upgrade, create_store_engine, mask_known, mask_url, resolve_url
from store.errors import StoreError, StoreUnavailable
from store.jobs import JobQueue
from store.outage import OutageGuard
from store.profiles import Profiles
from store.results import Results
from store.workers import Workers


class Store:
    """``upgrade``: None (the default) upgrades an older SQLite store on open, after copying
    the file aside, and refuses an older PostgreSQL store (a shared store migrates only through
    ``decodelab db upgrade``); True upgrades either; False upgrades neither.

    ``read_only``: opened so that nothing can be written (SQLite ``mode=ro``, PostgreSQL
    ``default_transaction_read_only``), never created, never upgraded: for the reading
    commands and the read-only dashboard."""

    def __init__(self, url: str | None = None, *, upgrade: bool | None = None, read_only: bool = False) -> None:
        self.url = resolve_url(url)
        self.masked_url = mask_url(self.url)
        self.read_only = read_only
        self.engine = create_store_engine(self.url, read_only=read_only)
        self.backend = self.engine.dialect.name
        self.backup_path: Path | None = check_and_upgrade(
            self.engine, self.url, allow_upgrade=False if read_only else upgrade
        )
        self._reader = sessionmaker(self.engine, expire_on_commit=False)
        # Writers on SQLite take the write lock at BEGIN (see store.engine); PostgreSQL ignores it.
        self._writer = sessionmaker(self.engine.execution_options(sqlite_immediate=True), expire_on_commit=False)
        self.outages = OutageGuard(self.masked_url)
        self.results = Results(self)
        self.jobs = JobQueue(self)
        self.workers = Workers(self)
        self.annotations = Annotations(self)
        self.profiles = Profiles(self)
        self.drift = Drift(self)

    def close(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Store({self.masked_url!r})"

    def survive_outages(self, limit_seconds: float, log: Callable[[str], None]) -> None:
        """From now on, a PostgreSQL operation that cannot reach the server is retried with
        backoff for up to ``limit_seconds`` (then StoreDown). SQLite is a local file: nothing
        to wait for."""
        if self.backend == "postgresql":
            self.outages.enable(limit_seconds, log)

    @contextmanager
    def read(self) -> Iterator[Session]:
        try:
            with self._reader() as session, session.begin():
                yield session
        except (OperationalError, InterfaceError) as error:
            raise self._unavailable(error) from None

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A transaction that commits everything or nothing."""
        try:
            with self._writer() as session, session.begin():
                yield session
        except (OperationalError, InterfaceError) as error:
            unavailable = self._unavailable(error)
            if isinstance(unavailable, StoreUnavailable):
                raise unavailable from None
            message = str(error.orig).splitlines()[0] if error.orig else str(error)
            raise StoreError(f"store {self.masked_url} refused a write: {mask_known(message, self.url)}") from None

    def _unavailable(self, error: DBAPIError) -> StoreError | DBAPIError:
        """A PostgreSQL operational error (server unreachable, restarting, connection dropped)
        as StoreUnavailable, which an outage-surviving caller retries; anything else as it is."""
        if self.backend != "postgresql":
            return error
        first_line = str(error.orig).strip().splitlines()[0] if error.orig is not None else type(error).__name__
        return StoreUnavailable(f"store {self.masked_url} unreachable: {mask_known(first_line, self.url)}")
