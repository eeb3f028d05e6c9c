"""Retries that are safe to repeat: the connection to PostgreSQL drops right after the server
committed an enqueue or a claim (its reply lost), the store retries, and the retry finds its own
earlier effect by the call's request id: one job, one claim."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from store import frames
from store.store import Store

pytestmark = pytest.mark.postgres


def lose_the_next_commit_reply(store: Store) -> Callable[[], bool]:
    """Arm a drill: the next transaction the store commits is committed on the server, then its
    connection is terminated from a second session before the client reads the reply, so the
    client's COMMIT fails as after a real network drop. Returns "has it fired?"."""
    admin = sa.create_engine(os.environ["DECODELAB_TEST_PG_URL"])
    fired: list[int] = []

    @event.listens_for(store.engine, "commit")
    def commit_then_drop(connection: sa.Connection) -> None:
        if fired:
            return
        dbapi_connection = connection.connection.dbapi_connection
        assert dbapi_connection is not None
        backend_pid = dbapi_connection.info.backend_pid
        fired.append(backend_pid)
        dbapi_connection.commit()  # the server has the transaction now
        dbapi_connection.cursor().execute("SELECT 1")  # so the client's own COMMIT goes to the wire
        with admin.begin() as second_session:
            second_session.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": backend_pid})
            deadline = time.monotonic() + 30
            while second_session.execute(
                sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": backend_pid}
            ).scalar():
                assert time.monotonic() < deadline, "the terminated backend did not go away"
                second_session.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
                time.sleep(0.02)
        admin.dispose()

    return lambda: bool(fired)


@pytest.fixture
def outage_store(postgres_url: str) -> Store:
    store = Store(postgres_url)
    messages: list[str] = []
    store.survive_outages(30, messages.append)
    store.messages = messages  # type: ignore[attr-defined]
    return store


def test_an_enqueue_whose_reply_was_lost_adds_one_job(outage_store: Store) -> None:
    fired = lose_the_next_commit_reply(outage_store)
    job_id = outage_store.jobs.enqueue({"sweep": 1}, cases_total=3)
    assert fired(), "the drill did not drop the connection"
    assert any("unreachable" in message for message in outage_store.messages)  # type: ignore[attr-defined]
    jobs = frames.jobs(outage_store)
    assert jobs["job_id"].tolist() == [job_id], "the retry added a second job"
    outage_store.close()


def test_a_claim_whose_reply_was_lost_is_one_claim_of_one_job(outage_store: Store) -> None:
    first = outage_store.jobs.enqueue({"sweep": 1})
    second = outage_store.jobs.enqueue({"sweep": 2})
    worker = outage_store.workers.register(
        name="w:1", kind="worker", machine_name="m", host="h", pid=1, stale_after_seconds=60
    )
    fired = lose_the_next_commit_reply(outage_store)
    claimed = outage_store.jobs.claim(worker)
    assert fired(), "the drill did not drop the connection"
    assert claimed is not None and claimed.id == first and claimed.attempts == 1
    jobs = frames.jobs(outage_store).set_index("job_id")
    assert jobs.loc[first, "status"] == "running" and jobs.loc[first, "attempts"] == 1
    assert jobs.loc[second, "status"] == "queued" and jobs.loc[second, "attempts"] == 0
    # The claim holds: the worker can finish the job it was given.
    outage_store.jobs.finish(claimed.claim, "done")
    assert frames.jobs(outage_store).set_index("job_id").loc[first, "status"] == "done"
    outage_store.close()


def test_a_terminal_runs_claim_whose_reply_was_lost_is_one_job(outage_store: Store) -> None:
    worker = outage_store.workers.register(
        name="r:1", kind="run", machine_name="m", host="h", pid=1, stale_after_seconds=60
    )
    fired = lose_the_next_commit_reply(outage_store)
    claimed = outage_store.jobs.claim_new({"sweep": 1}, worker, cases_total=2)
    assert fired(), "the drill did not drop the connection"
    assert claimed is not None and claimed.attempts == 1
    jobs = frames.jobs(outage_store)
    assert jobs["job_id"].tolist() == [claimed.id] and jobs["status"].tolist() == ["running"]
    outage_store.close()
