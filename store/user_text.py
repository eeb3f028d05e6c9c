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
# What a note may keep of the controls: its line breaks and tabs.
_NOTE_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Characters XML 1.0 cannot hold (C0 controls but tab and line breaks, U+FFFE/U+FFFF, lone
# surrogates): vl-convert measures every chart label by parsing it inside an SVG, and a failed
# parse there is a Rust panic that cannot unwind, so it aborts the whole process (a Streamlit
# server included) instead of raising.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def flatten_lines(text: object) -> str:
    """``text`` on one line: line breaks become spaces, other control characters go."""
    return _CONTROL.sub("", re.sub(r"[\r\n\u2028\u2029\x0b\x0c\x85]+", " ", str(text)))


def clean_label(text: str) -> str:
    """A label as stored (a name, a status, a parameter's value): one line, no control character.
    Applied once where text enters the store (an import, the machine's name), so that every
    chart, report and terminal after it gets text it can show."""
    return flatten_lines(text)


def clean_note(text: str) -> str:
    """A note as stored: its line breaks and tabs kept, every other control character removed."""
    return _NOTE_CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (a line break, an escape, NUL, a bidi override)."""
    return _CONTROL.search(text) is not None


def xml_safe(value: Any) -> Any:
    """``value`` (a chart's JSON: dicts, lists, text, numbers) with every character XML cannot
    hold removed from its text, keys included."""
    if isinstance(value, str):
        return _NOT_XML.sub("", value)
    if isinstance(value, dict):
        return {xml_safe(key): xml_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [xml_safe(item) for item in value]
    return value


def for_terminal(text: object) -> str:
    """Safe to print: one line, no escape code can reach the terminal."""
    return flatten_lines(text)


def markdown_text(text: object) -> str:
    """User text inside Markdown (a report, a Streamlit caption): one line, every markup
    character escaped."""
    return _MARKDOWN.sub(r"\\\1", flatten_lines(text))


def markdown_cell(value: object) -> str:
    """A Markdown table cell: one line, its ``|`` and the characters of links, images and HTML
    escaped, so that no cell adds a row, a column or an element."""
    return re.sub(r"([\\|\[\]<>`])", r"\\\1", flatten_lines(value))


def markdown_plain(text: str) -> str:
    """Markdown written by this package (user text escaped by markdown_text) as plain text: the
    escapes taken out again, for a sink that escapes for itself (HTML)."""
    return re.sub(r"\\([\\`*_\[\]<>!|~$])", r"\1", text)


def csv_cell(value: Any) -> Any:
    """A text cell on one line (a bare CR or LF would start a row in a spreadsheet that splits on
    either), and a leading ``'`` where a spreadsheet would read it as a formula, leading spaces
    aside (numbers stay numbers)."""
    if not isinstance(value, str):
        return value
    value = flatten_lines(value)
    if value.lstrip(" ").startswith(_FORMULA_START):
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
