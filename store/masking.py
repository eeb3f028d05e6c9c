"""Passwords out of text: the one filter every error passes before it is printed, logged or
stored. An error may quote a store URL anywhere (a driver's message, a command line a timeout
repeats), so the text itself is filtered, not just the URLs decodelab formats."""

from __future__ import annotations

import re

# scheme://user:PASSWORD@host — the password runs to the last '@' before the host part.
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@'\"]*:)[^\s/'\"]*@")
# libpq's key=value form: password=SECRET (quoted or not).
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\"[^\"]*\"|\S+)", re.IGNORECASE)


def mask_secrets(text: str) -> str:
    """``text`` with every URL password and ``password=`` value replaced by ``***``."""
    return _KEYWORD_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", text))
