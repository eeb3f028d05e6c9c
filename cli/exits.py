"""The ``decodelab`` exit codes, and the one line on stderr for each error that can end a command
(a bug's traceback kept in a file instead). ``cli.main.main`` catches the error; this module says
what it means."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from runner.errors import InputError
from store.errors import StoreDown, StoreError
from store.masking import mask_secrets
from store.user_text import for_terminal

# Exit codes: 2 bad input or usage (one line), 1 this process lost its job, 75 the store stayed
# unreachable past the outage limit (EX_TEMPFAIL: a supervisor may start it again), 130 stopped.
EXIT_USAGE, EXIT_CLAIM_LOST, EXIT_STORE_DOWN, EXIT_INTERRUPTED = 2, 1, 75, 130
EXIT_BUG = 70  # sysexits' EX_SOFTWARE: an internal error, reported in one line with its log file


def terminal_line(message: str) -> str:
    """The message as one line, any password in it masked (an error may quote a store URL), and
    no control character left (an error may quote a machine name or preset a store holds)."""
    return for_terminal(mask_secrets("; ".join(line.strip() for line in message.splitlines() if line.strip())))


def usage_message(error: typer.TyperException) -> str:
    """A usage error or bad option value (typer's vendored click) as one line."""
    context = getattr(error, "ctx", None)
    command = getattr(context, "command", None)
    # typer exports no name for "no command given" (its vendored click's NoArgsIsHelpError,
    # whose construction already printed the help page to stdout); stderr gets one line.
    if type(error).__name__ == "NoArgsIsHelpError" and context is not None and command is not None:
        names = command.list_commands(context) if hasattr(command, "list_commands") else []
        return f"{context.command_path}: a command is missing (allowed: {', '.join(names)})"
    return terminal_line(error.format_message())


def exit_for(error: Exception) -> tuple[int, str]:
    """The exit code and the one line for an error that ended a command. One that no person could
    have caused is a bug: the line says so and names the file its traceback was written to."""
    from runner.execution.lifecycle import stop_was_requested

    if stop_was_requested():
        # The stop ended the process, whatever error it left behind: SIGTERM landing inside a
        # PostgreSQL query leaves psycopg's cleanup raising its own error in the stop's place
        # ("can't change 'autocommit' now: connection in transaction status ACTIVE").
        return EXIT_INTERRUPTED, f"interrupted (as it stopped: {driver_message(error)})"
    if isinstance(error, typer.TyperException):
        return EXIT_USAGE, f"error: {usage_message(error)}"
    if isinstance(error, StoreDown):
        return EXIT_STORE_DOWN, (
            f"error: {terminal_line(str(error))}; stopping (the run is marked interrupted once the store is back)"
        )
    if isinstance(error, InputError | StoreError):
        return EXIT_USAGE, f"error: {terminal_line(str(error))}"
    if isinstance(error, OSError):
        # A file the command was pointed at that cannot be read or written: its name and why.
        where = f" {str(error.filename)!r}" if error.filename else ""
        return EXIT_USAGE, f"error: cannot use{where}: {terminal_line(error.strerror or str(error))}"
    # A damaged store (truncated, corrupted, read-only, full disk) surfaces as a database error
    # wherever it is first touched: one line, no SQL, no URL, non-zero exit.
    from sqlalchemy.exc import DBAPIError

    if not isinstance(error, DBAPIError):
        # No person could have caused it: a bug. One line says so; the traceback goes to a file.
        log_path = crash_log(error)
        kept = f"its traceback is in {log_path}" if log_path else "its traceback could not be written to a file"
        named = f"{type(error).__name__}: {driver_message(error)}"
        return EXIT_BUG, f"error: a bug in decodelab: {named} ({kept}; please report it)"
    return EXIT_USAGE, f"error: the store failed: {driver_message(error)}"


def crash_log(error: BaseException) -> Path | None:
    """Write ``error``'s traceback (secrets masked) to a new file of this user's only, in
    $DECODELAB_LOG_DIR or ~/.cache/decodelab/logs, and return its path (None where it cannot be written)."""
    import datetime
    import os
    import tempfile
    import traceback

    configured = os.environ.get("DECODELAB_LOG_DIR")
    directory = Path(configured) if configured else Path.home() / ".cache" / "decodelab" / "logs"
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    text = "".join(traceback.format_exception(error))
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        # mkstemp: a new name each time (O_EXCL), readable by this user only.
        descriptor, name = tempfile.mkstemp(prefix=f"crash-{stamp}-", suffix=".log", dir=directory)
        path = Path(name)
        with os.fdopen(descriptor, "w") as log:
            log.write(f"decodelab {' '.join(sys.argv[1:])}\n{mask_secrets(text)}")
    except OSError:
        return None
    return path


def driver_message(error: Exception) -> str:
    """An error's first line, a database error's without its SQL (the driver's own message)."""
    from sqlalchemy.exc import DBAPIError

    if isinstance(error, DBAPIError):
        text = str(error.orig).strip() if error.orig is not None else ""
    else:
        text = str(error).strip()
    return mask_secrets(text.splitlines()[0] if text else type(error).__name__)
