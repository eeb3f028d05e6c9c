"""The README stays short enough for a newcomer to finish (issue 43, D4), and every relative link in
it and in docs/*.md leads somewhere: an existing file, and where the link names a heading
(`file.md#anchor`, `#anchor`), a heading of that file under GitHub's anchor rules."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

README_MAX_LINES = 250

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target); the target up to a space (a title) or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = ("http://", "https://", "mailto:")


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
