"""Riding out a PostgreSQL outage (a restart, a failover, a dropped connection): each store
operation is one transaction, so an operation that could not reach the server is simply run
again, with bounded backoff, until the server answers or the outage outlasts a limit.

Only operations that are safe to run twice are retried, and every store operation is: an
enqueue or a claim carries a request id, so a retry finds the job its first try added or
claimed (store.jobs); a case that was committed before the connection dropped is found on the
second try (the insert does nothing), finishing a finished job changes nothing, and starting a
job's run reuses the run that the first try attached to the job.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from store.errors import StoreDown, StoreUnavailable

Result = TypeVar("Result")
Arguments = ParamSpec("Arguments")
FIRST_DELAY_SECONDS = 0.1
MAX_DELAY_SECONDS = 5.0


class OutageGuard:
    """Retries operations through an outage; off (each operation runs once) until enabled."""

    def __init__(self, masked_url: str) -> None:
        self._masked_url = masked_url
        self.limit_seconds: float | None = None
        self._log: Callable[[str], None] = lambda _message: None
        self._lock = threading.Lock()
        self._outage_started: float | None = None
        self._reachable_since = float("-inf")  # when the last outage ended

    def enable(self, limit_seconds: float, log: Callable[[str], None]) -> None:
        self.limit_seconds, self._log = limit_seconds, log

    def give_up(self) -> None:
        """After StoreDown: the last writes on the way out (marking a worker stopped) try once
        instead of waiting out the limit again."""
        self.limit_seconds = None

    def run(self, operation: Callable[[], Result]) -> Result:
        if self.limit_seconds is None:
            return operation()
        delay = FIRST_DELAY_SECONDS
        while True:
            attempt_started = time.monotonic()
            try:
                result = operation()
            except StoreUnavailable as error:
                started = self._outage_begins(error, attempt_started)
                if started is None:
                    continue  # it began before another thread found the store back: not a new outage
                waited = time.monotonic() - started
                if waited >= self.limit_seconds:
                    raise StoreDown(
                        f"store {self._masked_url} unreachable for {waited:.0f} s "
                        f"(limit {self.limit_seconds:g} s): {str(error).split(': ', 1)[-1]}"
                    ) from None
                time.sleep(min(delay, self.limit_seconds - waited + 0.01))
                delay = min(delay * 2, MAX_DELAY_SECONDS)
                continue
            self._outage_ends()
            return result

    def _outage_begins(self, error: StoreUnavailable, attempt_started: float) -> float | None:
        """When the outage began, logging it once however many threads (main, heartbeat) run
        into it; None for an attempt that began before the last outage ended (the other thread
        saw the store answer while this one's attempt was still failing), to be tried again."""
        with self._lock:
            if self._outage_started is None:
                if attempt_started < self._reachable_since:
                    return None
                self._outage_started = time.monotonic()
                self._log(f"{error}; retrying for up to {self.limit_seconds:g} s")
            return self._outage_started

    def _outage_ends(self) -> None:
        if self._outage_started is None:
            return
        with self._lock:
            if self._outage_started is not None:
                seconds = time.monotonic() - self._outage_started
                self._log(f"store {self._masked_url} reachable again after {seconds:.1f} s")
                self._outage_started = None
                self._reachable_since = time.monotonic()


def survives_outages(
    method: Callable[Concatenate[Any, Arguments], Result],
) -> Callable[Concatenate[Any, Arguments], Result]:
    """Run a store part's method (one transaction) through its store's OutageGuard."""

    @functools.wraps(method)
    def guarded(self: Any, *args: Arguments.args, **kwargs: Arguments.kwargs) -> Result:
        guard: OutageGuard = self._sessions.outages
        return guard.run(lambda: method(self, *args, **kwargs))

    return guarded
