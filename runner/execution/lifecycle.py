"""How a run ends, in one place, for `decodelab run`, the worker and `decodelab bench`: done when
its body returns, interrupted on Ctrl-C or SIGTERM, failed on an error; and how a job ends
when it stops before its run began (job_ends_before_its_run).

Under a job's claim every end is written through the claim (store.jobs: a worker that lost its
job writes nothing), otherwise on the run itself (store.results). Two ends are not written at
all: a lost claim (ClaimLost, a BaseException, passes through untouched: the job is another
worker's now) and a store that is down (StoreDown: the run is marked interrupted once it is back).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from runner.errors import InputError
from store.errors import StoreDown, StoreError
from store.masking import mask_secrets
from store.records import Claim
from store.store import Store

INTERRUPTED = "interrupted (Ctrl-C or SIGTERM)"
# What a failed run's row says when the store had no room for the error itself.
STORE_FULL = "the store is full"
_stop_requested = False


class StopRequested(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, raised wherever the main thread is. A subclass, not KeyboardInterrupt
    itself: CPython 3.11 marks a KeyboardInterrupt that leaves code run by exec() of a string
    (SQLAlchemy builds its visitors so, at a statement's first compile) as unhandled even once it
    is caught, and a process started as ``python -m`` then ends by SIGINT (-2) instead of with
    its exit code; the mark is set for the exact type only. Seen: a worker stopped by SIGTERM
    ending -2 instead of 130 when the signal landed in such a compile."""


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    global _stop_requested
    _stop_requested = True
    raise StopRequested


def stop_on_signals() -> None:
    """SIGTERM (a scheduler stopping the process) and Ctrl-C raise StopRequested, and are
    remembered: an exception raised while a finalizer runs (tqdm's ``__del__``, for one) is
    swallowed by Python, so loops call ``check_stop`` at their safe points as well."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)


def stop_was_requested() -> bool:
    """Whether Ctrl-C or SIGTERM arrived in this process (whatever became of its raise)."""
    return _stop_requested


def check_stop() -> None:
    """Raise StopRequested if a stop was asked for, even one whose first raise was lost."""
    if _stop_requested:
        raise StopRequested


def stored_error(error: BaseException) -> str:
    """The first line of the error's message, after its type unless it is a refusal of the
    spec's own (an InputError already names its field and range), any password masked: it is
    stored with the run and the job, where History and exports show it."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    return mask_secrets(first if isinstance(error, InputError) else f"{type(error).__name__}: {first}")


@contextmanager
def job_ends_before_its_run(store: Store, claim: Claim | None, *, requeue_on_interrupt: bool = False) -> Iterator[None]:
    """Under a job's claim, before its run has begun (corpus loading, training, starting the
    run): a stop requeues the job (``requeue_on_interrupt``: a worker) or marks it interrupted
    (a terminal ``decodelab run``), an error marks it failed with one line, and what ended it
    is re-raised. Without this, the job stayed ``running`` with no heartbeat behind it."""
    try:
        yield
    except KeyboardInterrupt:
        if claim is not None:
            if requeue_on_interrupt:
                store.jobs.requeue(claim, error=f"{INTERRUPTED}; requeued")
            else:
                store.jobs.finish(claim, "interrupted", error=INTERRUPTED)
        raise
    except StoreDown:
        raise
    except Exception as error:
        if claim is not None:
            store.jobs.finish(claim, "failed", error=stored_error(error))
        raise


@contextmanager
def run_lifecycle(
    store: Store,
    run_id: int,
    claim: Claim | None = None,
    *,
    started: float | None = None,
    requeue_on_interrupt: bool = False,
) -> Iterator[None]:
    """Marks ``run_id`` (or the claimed job and its run) done, interrupted or failed as the body
    ends, with its wall time since ``started`` (a perf_counter reading; default: now), and
    re-raises what ended it. ``requeue_on_interrupt`` gives an interrupted job back to the queue
    for the next worker (a scheduler's SIGTERM says nothing about the job)."""
    began = time.perf_counter() if started is None else started

    def wall() -> float:
        return time.perf_counter() - began

    try:
        yield
    except KeyboardInterrupt:
        if claim is None:
            store.results.finish_run(run_id, "interrupted", error=INTERRUPTED, wall_seconds=wall())
        elif requeue_on_interrupt:
            store.jobs.requeue(claim, error=f"{INTERRUPTED}; requeued", wall_seconds=wall())
        else:
            store.jobs.finish(claim, "interrupted", error=INTERRUPTED, wall_seconds=wall())
        raise
    except StoreDown:
        raise
    except Exception as error:
        _finish_failed(store, run_id, claim, stored_error(error), wall())
        raise
    if claim is None:
        store.results.finish_run(run_id, "done", wall_seconds=wall())
    else:
        store.jobs.finish(claim, "done", wall_seconds=wall())


def _finish_failed(store: Store, run_id: int, claim: Claim | None, error: str, wall_seconds: float) -> None:
    """Mark the run (and its job) failed with its error. A full store may refuse the longer row
    that the error's text makes: then mark it failed with a short reason instead, so the run never
    stays ``running`` for want of a few bytes (seen with SQLite pages filled to the last byte)."""

    def finish(reason: str) -> None:
        if claim is None:
            store.results.finish_run(run_id, "failed", error=reason, wall_seconds=wall_seconds)
        else:
            store.jobs.finish(claim, "failed", error=reason, wall_seconds=wall_seconds)

    try:
        finish(error)
    except StoreError as refused:
        if "full" not in str(refused):
            raise
        finish(STORE_FULL)
