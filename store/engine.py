"""Where the store lives and how to open it: URL resolution, engines, schema revisions."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, OperationalError

from store.errors import SchemaBehind, StoreError
from store.files import create_private
from store.masking import is_secret_key, mask_secrets

DEFAULT_URL = "sqlite:///decodelab.db"
MIGRATIONS_DIRECTORY = Path(__file__).parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 30_000
# A worker frozen inside a transaction (SIGSTOP, a VM pause, a partition with its TCP session
# alive) holds its job's row lock until the server ends its session after this long idle; the
# store's transactions are a few statements with no work between them, so 10 s is ample. A frozen
# worker therefore loses its job within its stale limit plus RECLAIM_LOCK_WAIT_MS (store.jobs).
IDLE_IN_TRANSACTION_MS = 10_000


def resolve_url(explicit: str | None = None) -> str:
    """``--db URL``, else ``DECODELAB_DB``, else a SQLite file in the working directory."""
    return explicit or os.environ.get("DECODELAB_DB") or DEFAULT_URL


# scheme://user:PASSWORD@rest, the password running to the last '@' (none in the rest): a
# password typed with a bare '@', '/' or ':' is read whole, where SQLAlchemy's parser would take
# its first part for the password and the remainder for the host and database.
_USER_INFO = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<user>[^:/@]*):(?P<password>.*)@(?P<rest>[^@]*)$", re.S
)


def read_url(url: str) -> URL:
    """``url`` parsed, its user-info password read to the last '@'; ArgumentError if malformed."""
    found = _USER_INFO.match(url)
    if found is None:
        return make_url(url)
    without_password = make_url(f"{found['scheme']}://{found['user']}@{found['rest']}")
    return without_password.set(password=unquote(found["password"]))


def secret_values(url: str | URL) -> list[str]:
    """The URL's password and its secret query values (``?password=``, ``sslpassword``,
    ``passfile``…): the texts no message may repeat."""
    try:
        parsed = read_url(url) if isinstance(url, str) else url
    except ArgumentError:
        return []
    values = [parsed.password] if parsed.password else []
    for key, value in parsed.query.items():
        if is_secret_key(key):
            values += [value] if isinstance(value, str) else list(value)
    return [str(value) for value in values if str(value)]


def mask_url(url: str | URL) -> str:
    """The URL with its password and every secret query value replaced by ``***``: the only
    form that may be printed."""
    try:
        parsed = read_url(url) if isinstance(url, str) else url
    except ArgumentError:
        return "<unparseable store URL>"
    masked = parsed.set(password="***" if parsed.password else None)
    secrets = {key: "***" for key in parsed.query if is_secret_key(key)}
    text = masked.update_query_dict(secrets).render_as_string(hide_password=False)
    return mask_secrets(text.replace("%2A%2A%2A", "***"))


def mask_known(text: str, url: str | URL) -> str:
    """``text`` with the URL's own secrets removed wherever they appear (a driver may quote a
    passfile's path or a host it could not resolve), then every other URL password masked."""
    for value in sorted(secret_values(url), key=len, reverse=True):
        text = text.replace(value, "***")
    return mask_secrets(text)


def parse_url(url: str) -> URL:
    try:
        parsed = read_url(url)
    except ArgumentError:
        raise StoreError(
            f"store URL {mask_url(url)!r} is malformed: expected sqlite:///PATH or "
            "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB"
        ) from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(f"store URL backend {parsed.get_backend_name()!r} is not supported: use sqlite or postgresql")
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        # Plain postgresql:// would pick psycopg2, which decodelab does not install.
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _configure_sqlite(engine: Engine, read_only: bool = False) -> None:
    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's begin event issue BEGIN itself, so writers can take the lock up front.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys = ON")
        # A reader leaves the journal mode as it found it (changing it is a write).
        if not read_only:
            mode = cursor.execute("PRAGMA journal_mode").fetchone()[0]
            if mode != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection: Any) -> None:
        # A write transaction takes the write lock at BEGIN, waiting up to the busy timeout,
        # instead of failing with "database is locked" when a read later upgrades to a write.
        immediate = connection.get_execution_options().get("sqlite_immediate", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store's URL; None for another backend or an in-memory store."""
    parsed = parse_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    return Path(database)


def read_only_sqlite_url(path: Path) -> URL:
    """A URI that opens the file read-only (``mode=ro``: never creates it, never writes), and
    as ``immutable`` when the file or its folder is not writable: a WAL store then needs no
    side files (-wal, -shm) that it could not create, so a copy handed out read-only opens."""
    resolved = path.resolve()
    writable = os.access(resolved, os.W_OK) and os.access(resolved.parent, os.W_OK)
    query = {"mode": "ro", "uri": "true", **({} if writable else {"immutable": "1"})}
    return URL.create("sqlite", database=f"file:{quote(str(resolved))}", query=query)


def create_store_engine(url: str, *, read_only: bool = False) -> Engine:
    """The store's engine. ``read_only``: SQLite opens the file with ``mode=ro`` (a missing
    file is refused, never created); PostgreSQL sessions start with
    ``default_transaction_read_only=on``, so the server refuses any write."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        path = sqlite_path(url)
        if path is not None:
            if path.parent and not path.parent.exists():
                raise StoreError(f"store directory {str(path.parent)!r} does not exist")
            if path.is_dir():
                raise StoreError(f"store {database!r} is a folder (allowed: a SQLite file, or a path for a new one)")
            if read_only and not path.is_file():
                raise StoreError(f"store {mask_url(url)}: no such file {str(path)!r} (a reading command creates none)")
            if not read_only and not path.exists():
                # A new store is its owner's alone (SQLite gives its -wal and -shm the same mode).
                create_private(path)
            if path.exists() and path.stat().st_size > 0:
                with open(path, "rb") as handle:
                    if handle.read(16) != b"SQLite format 3\x00":
                        raise StoreError(f"{database!r} is not a SQLite database")
        target = read_only_sqlite_url(path) if read_only and path is not None else parsed
        engine = create_engine(target, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        _configure_sqlite(engine, read_only=read_only)
        return engine
    # A session idle inside a transaction (its worker suspended mid-heartbeat) would hold the
    # job's row lock and block the reclaim for ever; the server ends such a session instead.
    settings = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
    if read_only:
        settings += " -c default_transaction_read_only=on"
    given = parsed.query.get("options")
    options = f"{given} {settings}" if given else settings
    connect_args = {
        "connect_timeout": 10,
        "options": options,
        # Who is connected, for a DBA (and for the tests that wait on one process's sessions).
        "application_name": str(parsed.query.get("application_name") or f"decodelab:{os.getpid()}"),
    }
    return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIRECTORY))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    config = alembic_config()
    with engine.connect() as connection:
        sqlite = engine.dialect.name == "sqlite"
        if sqlite:
            # A migration that rebuilds a table drops the old one; with foreign keys on, that
            # drop would cascade into the rows of every table that references it. The pragma
            # only takes effect outside a transaction, hence the raw connection.
            connection.connection.driver_connection.execute("PRAGMA foreign_keys = OFF")  # type: ignore[union-attr]
        try:
            with connection.begin():
                config.attributes["connection"] = connection
                command.upgrade(config, revision)
        finally:
            if sqlite:
                connection.connection.driver_connection.execute("PRAGMA foreign_keys = ON")  # type: ignore[union-attr]


def describe_connection_error(url: str, error: Exception) -> str:
    first_line = str(getattr(error, "orig", error)).strip().splitlines()[0] if str(error) else ""
    safe = mask_known(first_line, url)
    return f"cannot open store {mask_url(url)}: {safe}"


def check_and_upgrade(engine: Engine, url: str, allow_upgrade: bool | None = None) -> Path | None:
    """Refuse a newer schema; bring an older one to head where ``allow_upgrade`` allows it (None: only
    SQLite, after copying the file aside). Returns the path of that copy, if one was made."""
    try:
        revision = current_revision(engine)
        has_tables = bool(inspect(engine).get_table_names())
    except (OperationalError, DatabaseError) as error:
        raise StoreError(describe_connection_error(url, error)) from None
    head = head_revision()
    if revision == head:
        return None
    known = {script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if revision is not None and revision not in known:
        raise StoreError(
            f"store {mask_url(url)} has schema revision {revision}, newer than this decodelab "
            f"understands (head {head}): upgrade decodelab"
        )
    if revision is None and has_tables:
        raise StoreError(f"store {mask_url(url)} holds tables that decodelab did not create")
    sqlite = engine.dialect.name == "sqlite"
    if allow_upgrade is False or (allow_upgrade is None and not sqlite):
        state = "has no decodelab tables yet" if revision is None else f"is at schema revision {revision}"
        raise SchemaBehind(
            f"store {mask_url(url)} {state}, this decodelab needs {head}: "
            f"run `decodelab db upgrade --db {mask_url(url)}`"
        )
    backup = backup_sqlite(engine) if sqlite and revision is not None else None
    upgrade(engine)
    return backup


def backup_sqlite(engine: Engine) -> Path | None:
    """A consistent copy of a SQLite store (WAL included) beside it, before a migration."""
    database = engine.url.database
    if not database or database == ":memory:":
        return None
    revision = current_revision(engine)
    source = Path(database)
    target = source.with_name(f"{source.name}.{revision}.bak")
    number = 1
    while target.exists():
        number += 1
        target = source.with_name(f"{source.name}.{revision}.{number}.bak")
    create_private(target)
    with sqlite3.connect(source) as reader, sqlite3.connect(target) as writer:
        reader.backup(writer)
    reader.close()
    writer.close()
    return target
