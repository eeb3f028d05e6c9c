"""Passwords out of text: the one filter every error passes before it is printed, logged or
stored. An error may quote a store URL anywhere (a driver's message, a command line a timeout
repeats), so the text itself is filtered, not just the URLs decodelab formats.

A URL carries a secret in its user-info (``user:PASSWORD@``, encoded or not: a password with a
bare ``@`` or ``/`` runs to the last ``@``) or in a query key (``?password=``, libpq's
``sslpassword``, ``passfile``, ``sslkey`` and any key naming a pass, secret, token or key)."""

from __future__ import annotations

import re

# scheme://user:PASSWORD@host: greedy, so a password with unencoded '@', '/' or ':' is masked
# to the last '@' of the URL (masking a little more than the password is the safe error).
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@'\"]*:)[^\s'\"]*@")
# key=value, as a URL's query or libpq's conninfo has it: password=, sslpassword=, passfile=,
# sslkey=, client_secret=, token= (quoted or not; a query's value ends at '&').
SECRET_KEY = r"[A-Za-z_]*(?:pass|secret|token|key)[A-Za-z_]*"
_KEYWORD_SECRET = re.compile(rf"(?<![A-Za-z0-9_])({SECRET_KEY})(\s*=\s*)('[^']*'|\"[^\"]*\"|[^\s&'\"]+)", re.IGNORECASE)
_SECRET_KEY_NAME = re.compile(rf"^{SECRET_KEY}$", re.IGNORECASE)


def is_secret_key(name: str) -> bool:
    """Whether a URL query key or conninfo keyword may hold a secret (or where one is kept)."""
    return bool(_SECRET_KEY_NAME.match(name))


def mask_secrets(text: str) -> str:
    """``text`` with every URL password and secret ``key=value`` value replaced by ``***``."""
    return _KEYWORD_SECRET.sub(r"\1\2***", _URL_PASSWORD.sub(r"\1***@", text))
