"""What reviewers add to runs (``store.annotations``): tags and a note. Besides launching a
sweep, these are the only writes the dashboard makes; `decodelab tag` and `decodelab note` make
them from a terminal.

Tags are short names: ``baseline`` pins a run as the baseline of later runs of its preset on its
machine, ``suspect`` leaves a run out of baselines and change detection, ``reviewed`` says
someone looked; any other name is free.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from store.errors import StoreError
from store.outage import survives_outages
from store.results import Sessions, insert_or_skip
from store.schema import Run, RunTag, utc_now
from store.user_text import clean_note

KNOWN_TAGS = ("baseline", "reviewed", "suspect")
# ":" for the tags `decodelab ab` writes: rev:<commit> and ab:<baseline run>-<candidate run>.
TAG_PATTERN = re.compile(r"[a-z0-9][a-z0-9._:-]{0,39}")
NOTE_LIMIT = 10_000


def check_tag(name: str) -> str:
    """The tag as stored, or StoreError naming the rule."""
    if not TAG_PATTERN.fullmatch(name):
        raise StoreError(
            f"tag: {name!r} is not a tag name (allowed: 1 to 40 of a-z 0-9 . _ : -, starting with a letter "
            f"or digit; known: {', '.join(KNOWN_TAGS)})"
        )
    return name


# The prefixes of the tags `decodelab ab` writes: by hand, an ab: tag takes a run out of the
# baselines and pairs it with another, and a rev: tag names a commit it may not have run.
RESERVED_PREFIXES = ("ab:", "rev:")


def check_new_tag(name: str) -> str:
    """``check_tag`` for a tag a person adds: also refused where it starts like the tags that
    `decodelab ab` writes."""
    check_tag(name)
    reserved = next((prefix for prefix in RESERVED_PREFIXES if name.startswith(prefix)), None)
    if reserved is not None:
        raise StoreError(
            f"tag: {name!r} starts with {reserved}, which only `decodelab ab` writes (allowed: a name not starting "
            f"with {' or '.join(RESERVED_PREFIXES)}; known: {', '.join(KNOWN_TAGS)})"
        )
    return name


def check_note(text: str) -> str:
    """The note as stored: control characters but line breaks and tabs removed (store.user_text),
    or StoreError over the limit."""
    if len(text) > NOTE_LIMIT:
        raise StoreError(f"note: {len(text):,} characters is above the limit (allowed: at most {NOTE_LIMIT:,})")
    return clean_note(text)


class Annotations:
    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

    @staticmethod
    def _check_run(session: Session, run_id: int) -> None:
        if session.get(Run, run_id) is None:
            raise StoreError(f"run: no run {run_id} in this store")

    @survives_outages
    def add_tag(self, run_id: int, name: str) -> bool:
        """Tag a run; False when it already had that tag."""
        check_tag(name)
        with self._sessions.write() as session:
            self._check_run(session, run_id)
            added = session.scalar(
                insert_or_skip(self._sessions.backend, RunTag, ["run_id", "name"])
                .values(run_id=run_id, name=name, created_at=utc_now())
                .returning(RunTag.id)
            )
            return added is not None

    @survives_outages
    def remove_tag(self, run_id: int, name: str) -> bool:
        """Untag a run; False when it did not have that tag."""
        with self._sessions.write() as session:
            self._check_run(session, run_id)
            removed = session.execute(delete(RunTag).where(RunTag.run_id == run_id, RunTag.name == name))
            return bool(removed.rowcount)  # type: ignore[attr-defined]

    @survives_outages
    def set_note(self, run_id: int, text: str) -> None:
        """Replace a run's note; an empty text removes it."""
        text = check_note(text)
        with self._sessions.write() as session:
            self._check_run(session, run_id)
            session.execute(update(Run).where(Run.id == run_id).values(note=text.strip() or None))

    @survives_outages
    def tags(self, run_ids: Iterable[int] | None = None) -> dict[int, list[str]]:
        """Each run's tags, sorted; runs without a tag are absent."""
        query = select(RunTag.run_id, RunTag.name).order_by(RunTag.run_id, RunTag.name)
        if run_ids is not None:
            query = query.where(RunTag.run_id.in_(list(run_ids)))
        found: dict[int, list[str]] = defaultdict(list)
        with self._sessions.read() as session:
            for run_id, name in session.execute(query):
                found[run_id].append(name)
        return dict(found)

    @survives_outages
    def note(self, run_id: int) -> str | None:
        with self._sessions.read() as session:
            return session.scalar(select(Run.note).where(Run.id == run_id))
