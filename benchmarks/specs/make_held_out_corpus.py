"""Writes benchmarks/specs/held_out_corpus.txt: a second English corpus for the held-out spec,
the docstrings (module, class and function) of CPython 3.11.7's top-level standard-library
modules, in sorted module order, each docstring's lines stripped and paragraphs kept. Prose of
another kind than the default corpus (pydoc's topics): API descriptions rather than the
language reference. Same licence as the default corpus (runner/data/DEFAULT_CORPUS_LICENSE.txt).

It is a file with a pinned hash (the sha256 in benchmarks/specs/held-out-speculative.toml's
comment) because the standard library changes with every release; this script only says how it
was made, and refuses another Python.

    python benchmarks/specs/make_held_out_corpus.py
"""

from __future__ import annotations

import ast
import hashlib
import sys
import sysconfig
from pathlib import Path

PYTHON = (3, 11, 7)
TARGET = Path(__file__).with_name("held_out_corpus.txt")
# About as long as the default corpus (465,047 characters).
MAX_CHARACTERS = 460_000


def docstrings(source: str) -> list[str]:
    tree = ast.parse(source)
    nodes = [tree, *(node for node in ast.walk(tree) if isinstance(node, ast.ClassDef | ast.FunctionDef))]
    found = []
    for node in nodes:
        text = ast.get_docstring(node)
        if text and len(text) >= 80:
            found.append("\n".join(line.strip() for line in text.splitlines()).strip())
    return found


def main() -> int:
    if sys.version_info[:3] != PYTHON:
        print(f"python: {sys.version.split()[0]} (allowed: {'.'.join(map(str, PYTHON))}, whose library made the file)")
        return 2
    library = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    total = 0
    for path in sorted(library.glob("*.py")):
        for text in docstrings(path.read_text(encoding="utf-8", errors="replace")):
            if not text.isascii():
                continue
            parts.append(text)
            total += len(text) + 2
        if total >= MAX_CHARACTERS:
            break
    corpus = "\n\n".join(parts)[:MAX_CHARACTERS]
    TARGET.write_text(corpus, encoding="utf-8")
    print(f"wrote {TARGET}: {len(corpus):,} characters, sha256 {hashlib.sha256(corpus.encode()).hexdigest()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
