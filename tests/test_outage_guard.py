"""The outage guard's log, with the threads' interleaving scripted (no server needed)."""

from __future__ import annotations

from collections.abc import Callable

from store.errors import StoreUnavailable
from store.outage import OutageGuard


def failing_then(result: str, failures: int, during: Callable[[], object] = lambda: None) -> Callable[[], str]:
    """An operation that fails ``failures`` times (running ``during`` inside the first attempt),
    then returns ``result``."""
    calls = [0]

    def operation() -> str:
        calls[0] += 1
        if calls[0] == 1:
            during()
        if calls[0] <= failures:
            raise StoreUnavailable("store unreachable: connection refused")
        return result

    return operation


def test_a_failure_that_began_before_the_store_came_back_opens_no_second_outage() -> None:
    """The main thread's attempt is under way while the heartbeat thread meets the outage and
    then finds the store back; the main attempt fails after that. One outage, logged once."""
    lines: list[str] = []
    guard = OutageGuard("postgresql://host/db")
    guard.enable(limit_seconds=30, log=lines.append)
    heartbeat = failing_then("beat", failures=1)
    main = failing_then("case", failures=1, during=lambda: guard.run(heartbeat))
    assert guard.run(main) == "case"
    assert [line.split(";")[0].split(" after")[0] for line in lines] == [
        "store unreachable: connection refused",
        "store postgresql://host/db reachable again",
    ]


def test_an_outage_after_the_store_came_back_is_logged_again() -> None:
    lines: list[str] = []
    guard = OutageGuard("postgresql://host/db")
    guard.enable(limit_seconds=30, log=lines.append)
    assert guard.run(failing_then("first", failures=1)) == "first"
    assert guard.run(failing_then("second", failures=1)) == "second"
    assert sum("unreachable" in line for line in lines) == 2
    assert sum("reachable again" in line for line in lines) == 2
