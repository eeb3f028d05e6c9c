"""The database server's clock, for every time that workers on different machines compare
(heartbeats, staleness, claims, last seen): one clock, whatever each machine's says."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import DateTime, Float, func, literal, type_coerce
from sqlalchemy.sql.elements import ColumnElement


def server_now(backend: str, offset_seconds: float | ColumnElement[float] = 0.0) -> ColumnElement[datetime]:
    """The server's time now, plus ``offset_seconds`` (negative: that long ago).

    PostgreSQL: ``clock_timestamp()`` (the time the statement runs, not the transaction's start:
    a claim that waited for a lock is stamped after the wait). SQLite: the text form SQLAlchemy
    itself writes (``YYYY-MM-DD HH:MM:SS.ffffff``, UTC), so computed and stored times compare as
    text, to the millisecond.
    """
    offset = offset_seconds if isinstance(offset_seconds, ColumnElement) else literal(float(offset_seconds), Float)
    if backend == "postgresql":
        now = func.clock_timestamp()
        if not isinstance(offset_seconds, ColumnElement) and float(offset_seconds) == 0.0:
            return type_coerce(now, DateTime(timezone=True))
        return type_coerce(now + func.make_interval(0, 0, 0, 0, 0, 0, offset), DateTime(timezone=True))
    text = func.strftime("%Y-%m-%d %H:%M:%f", "now", func.printf("%+.3f seconds", offset)).op("||")("000")
    return type_coerce(text, DateTime(timezone=True))


def as_utc(moment: datetime) -> datetime:
    """``moment`` with its zone, UTC where it has none: decodelab stores UTC everywhere, and
    SQLite hands it back without a zone."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
