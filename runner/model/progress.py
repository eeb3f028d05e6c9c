"""When a progress line is due where no bar is drawn on a terminal (a CI log, a file): training
and a sweep's cases both say how far they are every LOG_EVERY_SECONDS. Standard library only."""

from __future__ import annotations

import time
from collections.abc import Callable

# How often a progress line reaches a log that is not a terminal (a CI log, a file).
LOG_EVERY_SECONDS = 30.0


class Ticker:
    """True every ``every_seconds`` (the first time after that long): when a progress line is due."""

    def __init__(self, every_seconds: float = LOG_EVERY_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_seconds, self.clock = every_seconds, clock
        self.last = clock()

    def due(self) -> bool:
        now = self.clock()
        if now - self.last < self.every_seconds:
            return False
        self.last = now
        return True
