"""No command ends in a traceback: an exception no person could have caused (a bug) ends in one
line that says so and names the file its traceback was written to, exit 70."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.exits import EXIT_BUG
from cli.main import click_command, main
from tests.conftest import ROOT

FORCED = (RuntimeError("forced"), KeyError("forced"), AssertionError("forced"), ZeroDivisionError("forced"))


def leaf_commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command with no subcommands, by its words (typer's own click: no click types here)."""
    children = getattr(command, "commands", None)
    if children:
        for name, child in children.items():
            yield from leaf_commands(child, (*path, name))
    else:
        yield path, command


COMMANDS = sorted(leaf_commands(click_command()), key=lambda item: item[0])


def test_the_walk_finds_every_command() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"run", "worker", "dashboard", "report run", "db upgrade", "import", "export"} <= names
    assert len(names) >= 20


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=" ".join)
def test_every_command_turns_an_unexpected_exception_into_one_line(
    path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The command's own code raises (its arguments are not even parsed, so required ones need not
    be given): each kind of exception a bug raises ends in one line and exit 70, never a traceback."""
    command = dict(COMMANDS)[path]
    monkeypatch.setenv("DECODELAB_LOG_DIR", str(tmp_path))
    for forced in FORCED:

        def broken(*args: Any, error: BaseException = forced, **kwargs: Any) -> None:
            raise error

        monkeypatch.setattr(command, "parse_args", lambda context, args: [])
        monkeypatch.setattr(command, "callback", broken)
        with pytest.raises(SystemExit) as ended:
            main(list(path))
        printed = capsys.readouterr()
        lines = printed.err.strip().splitlines()
        assert ended.value.code == EXIT_BUG, printed.err
        assert len(lines) == 1 and "Traceback" not in printed.out + printed.err, printed.err
        assert lines[0].startswith(f"error: a bug in decodelab: {type(forced).__name__}: ")
        log = Path(lines[0].split("its traceback is in ", 1)[1].split(";", 1)[0])
        assert log.parent == tmp_path and "raise error" in log.read_text()
        assert log.stat().st_mode & 0o077 == 0, "the log may hold anything: this user's only"


def test_the_installed_entry_point_says_bug_in_one_line(tmp_path: Path) -> None:
    """Through a real process: a bug inside a command (its spec loader made to raise by a
    sitecustomize the test writes) is one line on stderr, exit 70."""
    (tmp_path / "sitecustomize.py").write_text(
        "import cli.main as m\n"
        "def broken(*args, **kwargs):\n    raise LookupError('forced in a real process')\n"
        "m.load_spec = broken\n"
    )
    completed = subprocess.run(
        [sys.executable, "-m", "cli", "run", "--preset", "quick", "--db", f"sqlite:///{tmp_path / 'x.db'}"],
        cwd=ROOT,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "DECODELAB_LOG_DIR": str(tmp_path / "logs"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = completed.stderr.strip().splitlines()
    assert completed.returncode == EXIT_BUG, completed.stderr
    assert len(lines) == 1 and "LookupError: forced in a real process" in lines[0], completed.stderr
    assert list((tmp_path / "logs").iterdir()), "the traceback was kept in a file"
