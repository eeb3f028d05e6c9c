"""The README stays short enough for a newcomer to finish (issue 43, D4) and says what the code
does: its CLI table lists every `decodelab` command and no other, and what it shows `make demo`
printing is what the Makefile prints. Every relative link in it and in docs/*.md leads somewhere:
an existing file, and where the link names a heading (`file.md#anchor`, `#anchor`), a heading of
that file under GitHub's anchor rules."""

from __future__ import annotations

import importlib
import itertools
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import typer

from tests.conftest import ROOT

README_MAX_LINES = 250

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target); the target up to a space (a title) or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = ("http://", "https://", "mailto:")
COMMAND_WORD = re.compile(r"[a-z][a-z-]*")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1: a link or heading inside a code
    block is an example, not part of the document."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (link targets and code marks dropped) lower-cased,
    everything but letters, digits, spaces, hyphens and underscores removed, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, a repeated heading's as GitHub numbers it (-1, -2)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        matched = HEADING.match(line)
        if not matched:
            continue
        base = slug(matched.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path) -> list[str]:
    """Each relative link of ``path`` that leads nowhere, as `file:line: target (why)`."""
    broken = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if target.startswith(EXTERNAL):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.name}:{number}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{where} (no heading with that anchor in {linked.name})")
    return broken


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_is_at_most_250_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; details belong in docs/"


def test_every_relative_link_in_the_readme_and_docs_leads_to_a_file_and_heading() -> None:
    checked = documents()
    assert len(checked) > 5 and all(path.exists() for path in checked)
    broken = [problem for path in checked for problem in broken_links(path)]
    assert not broken, "\n".join(broken)
    # The README's own links are many and reach docs/: the check read them rather than nothing.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(LINK.findall(readme)) >= 10 and "docs/performance.md" in readme


def test_the_check_finds_a_missing_file_a_missing_heading_and_passes_good_links(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text(
        "# Other\n\n## On each machine's roof\n\n## Two revisions: `decodelab ab`\n\n## Notes\n\n## Notes\n\n"
        "```\n# not a heading\n```\n",
        encoding="utf-8",
    )
    (tmp_path / "page.md").write_text(
        "# Page\n\n"
        "[fine](other.md#on-each-machines-roof) [code](other.md#two-revisions-decodelab-ab) "
        "[second](other.md#notes-1) [self](#page) [web](https://example.org/x.md)\n"
        "`[in code](missing.md)`\n"
        "```\n[in a block](missing.md)\n```\n"
        "[gone](missing.md) [no heading](other.md#not-a-heading) [nor this](#nowhere) [third](other.md#notes-2)\n",
        encoding="utf-8",
    )
    assert broken_links(tmp_path / "other.md") == []
    assert broken_links(tmp_path / "page.md") == [
        "page.md:8: missing.md (no such file)",
        "page.md:8: other.md#not-a-heading (no heading with that anchor in other.md)",
        "page.md:8: #nowhere (no heading with that anchor in page.md)",
        "page.md:8: other.md#notes-2 (no heading with that anchor in other.md)",
    ]


def cli_commands() -> set[str]:
    """Every runnable `decodelab …` command path, read from the command line the package installs
    (pyproject's script entry point: its module's typer app)."""
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["decodelab"]
    app = importlib.import_module(target.split(":")[0]).app

    def walk(command: Any, path: str) -> set[str]:
        # A group has sub-commands (typer's own click types: a group is told by them, not its class).
        subcommands = getattr(command, "commands", None)
        if subcommands:
            return {leaf for name, sub in subcommands.items() for leaf in walk(sub, f"{path} {name}")}
        return {path}

    return walk(typer.main.get_command(app), "decodelab")


def test_every_commands_summary_is_one_sentence_on_one_line() -> None:
    """``decodelab --help`` lists each command by its docstring's first paragraph with that
    paragraph's line breaks kept: a summary that ran on to a second line broke mid-sentence
    there ("a running one stops at its" / "next heartbeat")."""
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["decodelab"]
    app = importlib.import_module(target.split(":")[0]).app

    def summaries(command: Any, path: str) -> dict[str, str]:
        found = {path: (command.help or "").strip().split("\n\n")[0]}
        for name, sub in (getattr(command, "commands", None) or {}).items():
            found |= summaries(sub, f"{path} {name}")
        return found

    broken = {
        path: summary
        for path, summary in summaries(typer.main.get_command(app), "decodelab").items()
        if "\n" in summary
    }
    assert not broken, broken


def test_every_word_of_a_commands_help_reaches_its_help_screen() -> None:
    """The help is rendered as Markdown (paragraphs reflowed to the terminal): a word Markdown
    would swallow (``rev:<commit>`` read as an HTML tag) goes in backticks."""
    from typer.testing import CliRunner

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["decodelab"]
    app = importlib.import_module(target.split(":")[0]).app

    def leaves(command: Any, path: list[str]) -> list[tuple[list[str], Any]]:
        subcommands = getattr(command, "commands", None) or {}
        if not subcommands:
            return [(path, command)]
        return [leaf for name, sub in subcommands.items() for leaf in leaves(sub, [*path, name])]

    missing = {}
    for path, command in leaves(typer.main.get_command(app), []):
        shown = CliRunner().invoke(app, [*path, "--help"], terminal_width=200).output
        flat = re.sub(r"[│╭╮╰╯─\s]+", " ", shown)
        texts = [command.help or "", *(getattr(param, "help", None) or "" for param in command.params)]
        words = {word.strip(".,;:()") for text in texts for word in text.replace("`", "").split()}
        lost = sorted(word for word in words if word and word not in flat)
        if lost:
            missing[" ".join(path)] = lost
    assert not missing, missing


def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readmes_cli_table_lists_every_command_and_no_other() -> None:
    rows = [line for line in readme_section("The command line").splitlines() if line.startswith("| `decodelab ")]
    listed = set()
    for row in rows:
        # The command path: "decodelab" and its words up to the first option or argument.
        words = row.split("`")[1].split()
        path = list(itertools.takewhile(COMMAND_WORD.fullmatch, words))
        listed.add(" ".join(path))
    assert len(listed) == len(rows), "a command listed twice"
    assert listed == cli_commands()


def test_what_the_readme_shows_make_demo_printing_is_what_the_makefile_prints(tmp_path: Path) -> None:
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    said = [
        line.split("@echo ", 1)[1]
        .strip()
        .strip('"')
        .replace("$(VENV)", ".venv")
        .replace("$(DB)", "sqlite:///decodelab.db")
        for line in recipe.splitlines()
        if "@echo " in line
    ]
    shown = readme_section("What `make demo` prints").split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    echoed = [line for line in shown if line.startswith("== ")]
    assert echoed and all(any(made.startswith(line.rstrip(" …")) for made in said) for line in echoed), echoed
    # The first line is the estimate the recipe's first command prints, the quick sweep's real size.
    first_command = recipe.splitlines()[1].strip()
    assert first_command.startswith("@$(VENV)/bin/python -m runner.spec.calibrated_estimate --preset quick")
    estimate = subprocess.run(
        [sys.executable, "-m", "runner.spec.calibrated_estimate", "--preset", "quick"]
        + ["--db", f"sqlite:///{tmp_path / 'new.db'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown[0].split(", about ")[0] == estimate.split(", about ")[0], (shown[0], estimate)
