"""Text that people typed (notes, tags, machine names, an imported run's fields) is data: it
is shown as written and never read as markup, as a terminal's escape code or as a spreadsheet
formula. One function per kind of sink."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# C0 and C1 controls, DEL, and the bidirectional overrides that make text read other than it is.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# What makes Markdown more than text: links and images ([ ] !), raw HTML (< >), code (`),
# emphasis (* _ ~), table cells (|), math ($, on GitHub and in Streamlit) and the escape
# itself; Streamlit's colour directives need the escaped '['. Any ASCII punctuation may be
# backslash-escaped in CommonMark, so the escaped text renders exactly as typed. ':' stays as it
# is (a worker's name is host:pid): a bare https:// address may show as a link, undisguised.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>!|~$])")
# A spreadsheet reads a cell starting with one of these as a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def one_line(text: object) -> str:
    """``text`` on one line: line breaks become spaces, other control characters go."""
    return _CONTROL.sub("", re.sub(r"[\r\n\u2028\u2029\x0b\x0c\x85]+", " ", str(text)))


def for_terminal(text: object) -> str:
    """Safe to print: one line, no escape code can reach the terminal."""
    return one_line(text)


def markdown_text(text: object) -> str:
    """User text inside Markdown (a report, a Streamlit caption): one line, every markup
    character escaped."""
    return _MARKDOWN.sub(r"\\\1", one_line(text))


def markdown_cell(value: object) -> str:
    """A Markdown table cell: one line, its ``|`` and the characters of links, images and HTML
    escaped, so that no cell adds a row, a column or an element."""
    return re.sub(r"([\\|\[\]<>`])", r"\\\1", one_line(value))


def csv_cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula gets a leading ``'`` (numbers stay numbers)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell passed through csv_cell (a copy; numeric columns untouched)."""
    import pandas as pd  # here, not at the top: the CLI prints user text without loading pandas

    text_columns = [
        column
        for column in frame.columns
        if frame[column].dtype == object or pd.api.types.is_string_dtype(frame[column].dtype)
    ]
    if not text_columns:
        return frame
    safe = frame.copy()
    for column in text_columns:
        safe[column] = safe[column].map(csv_cell)
    return safe
