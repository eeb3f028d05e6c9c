"""The parent's side of the line-based protocol with one A/B worker (runner/ab/worker_main.py
describes the requests and replies): start the worker on its revision's worktree, pinned to the
session's CPUs, ask, read one reply line, and turn any failure into one line naming the side."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from runner.ab.revisions import Revision
from runner.errors import InputError

WORKER_SCRIPT = Path(__file__).with_name("worker_main.py")
# How long a worker asked to quit may take before it is killed.
QUIT_SECONDS = 10.0
# The most of a worker's error a one-line refusal quotes.
ERROR_CHARACTERS = 300


def session_cpus(threads: int) -> set[int]:
    """The CPUs both workers are pinned to (the same set: they never time at once): the last
    ``threads`` of this process's allowed CPUs (away from CPU 0, where interrupts land), all of
    them for threads 0 (torch's default count)."""
    allowed = sorted(os.sched_getaffinity(0))
    return set(allowed[-threads:]) if 0 < threads < len(allowed) else set(allowed)


class SideWorker:
    """One revision's worker process, started again for every round of the session
    (``restart``); its log collects every process's stderr."""

    def __init__(self, revision: Revision, worktree: Path, cpus: set[int], log_folder: Path) -> None:
        self.revision = revision
        self.worktree = worktree
        self.cpus = cpus
        self.log_path = log_folder / f"{revision.side}.log"
        self._log: IO[str] = open(self.log_path, "w+", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.process = self._start()

    def _start(self) -> subprocess.Popen[str]:
        # The revision's code alone on the path: not the parent's (PYTHONPATH replaced), not the
        # script's folder (-P), so every import in the worker is the revision's own.
        environment = {**os.environ, "PYTHONPATH": str(self.worktree), "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(
            [sys.executable, "-P", str(WORKER_SCRIPT)],
            cwd=self.worktree,
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            encoding="utf-8",
        )
        try:
            os.sched_setaffinity(process.pid, self.cpus)
        except OSError:
            process.kill()
            process.wait()
            raise
        return process

    def stop(self) -> None:
        """Ends the process; ``start`` begins a fresh one on the same worktree (the caller builds
        and prepares it again)."""
        self._quit()

    def start(self) -> None:
        self.process = self._start()

    def failure(self, doing: str, cause: str) -> InputError:
        if len(cause) > ERROR_CHARACTERS:  # its start and its end (a compiler's error comes last)
            cause = f"{cause[: ERROR_CHARACTERS // 2]} … {cause[-ERROR_CHARACTERS // 2 :]}"
        return InputError(f"{self.revision.option} ({self.revision.short}): {doing} failed: {cause}")

    def last_log_line(self) -> str:
        self._log.flush()
        lines = [line.strip() for line in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()]
        return next((line for line in reversed(lines) if line), "no output")

    def ask(self, request: dict[str, Any], doing: str) -> dict[str, Any]:
        """Send one request and read its reply; InputError naming the side on any failure."""
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            code = self.process.wait()
            raise self.failure(doing, f"the worker ended (exit {code}): {self.last_log_line()}")
        try:
            reply: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            raise self.failure(doing, f"the worker replied {line.strip()[:80]!r}, not a JSON line") from None
        if not reply.get("ok"):
            raise self.failure(doing, str(reply.get("error") or "no reason given"))
        return reply

    def close(self) -> None:
        self._quit()
        self._log.close()

    def _quit(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.close()
                self.process.wait(timeout=QUIT_SECONDS)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                with contextlib.suppress(OSError):  # a pipe whose reader is gone: nothing to flush to
                    stream.close()
