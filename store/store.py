"""The Store: one experiment store (a SQLite file or a PostgreSQL database). It owns the engine
and its transactions and is made of parts, each with one job:

- ``store.results`` (store/results.py): what the runner writes and reads back as plain records;
- ``store.jobs`` (store/jobs.py): the job queue;
- ``store.frames`` (a module of functions of a Store): the dashboard's pandas reads.

Only the store package speaks SQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from store.engine import check_and_upgrade, create_store_engine, mask_url, resolve_url
from store.errors import StoreError
from store.jobs import JobQueue
from store.results import Results


class Store:
    def __init__(self, url: str | None = None, *, auto_upgrade: bool = True) -> None:
        self.url = resolve_url(url)
        self.masked_url = mask_url(self.url)
        self.engine = create_store_engine(self.url)
        self.backend = self.engine.dialect.name
        check_and_upgrade(self.engine, self.url, auto_upgrade=auto_upgrade)
        self._reader = sessionmaker(self.engine, expire_on_commit=False)
        # Writers on SQLite take the write lock at BEGIN (see store.engine); PostgreSQL ignores it.
        self._writer = sessionmaker(self.engine.execution_options(sqlite_immediate=True), expire_on_commit=False)
        self.results = Results(self)
        self.jobs = JobQueue(self)

    def close(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Store({self.masked_url!r})"

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._reader() as session, session.begin():
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A transaction that commits everything or nothing."""
        try:
            with self._writer() as session, session.begin():
                yield session
        except OperationalError as error:
            message = str(error.orig).splitlines()[0] if error.orig else str(error)
            raise StoreError(f"store {self.masked_url} refused a write: {message}") from None
