"""Who may use the dashboard: Streamlit's OIDC login (an ``[auth]`` section of the secrets file)
and decodelab's allow-list in it, read and checked here so that ``decodelab dashboard`` can
refuse a broken configuration at start and the dashboard can fail closed on every page load.

No Streamlit import: the command line uses this too (and never imports the dashboard)."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import InputError

# The keys Streamlit's login needs (streamlit.auth_util.validate_auth_credentials): these two in
# [auth], and a provider's three either in [auth] itself or in a table [auth.NAME].
AUTH_KEYS = ("redirect_uri", "cookie_secret")
PROVIDER_KEYS = ("client_id", "client_secret", "server_metadata_url")
# decodelab's own key in [auth]: e-mail addresses and domains allowed in (absent: any account).
ALLOW_KEY = "allowed"


class AccessError(InputError):
    """A secrets file that does not parse, or a login configured incompletely."""


@dataclass(frozen=True)
class AuthSettings:
    login_configured: bool
    allowed: tuple[str, ...] = ()  # lower-case addresses ("ann@example.org") and domains ("example.org")


def secrets_paths(working_directory: Path | None = None) -> list[Path]:
    """Where Streamlit reads secrets by default, in its order (a later file wins)."""
    home = Path(os.environ.get("HOME") or Path.home())
    return [home / ".streamlit" / "secrets.toml", (working_directory or Path.cwd()) / ".streamlit" / "secrets.toml"]


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise AccessError(
            f"secrets file {str(path)!r} does not parse ({reason}): the dashboard would show no login"
        ) from None


def _check_auth(auth: Any, path: Path) -> AuthSettings:
    where = f"secrets file {str(path)!r}: [auth]"
    if not isinstance(auth, dict):
        raise AccessError(f"{where} is not a table")
    missing = [key for key in AUTH_KEYS if not auth.get(key)]
    if missing:
        raise AccessError(f"{where} lacks {missing[0]} (allowed: a complete login, or no [auth] section)")
    providers = [auth] + [value for value in auth.values() if isinstance(value, dict)]
    if not any(all(provider.get(key) for key in PROVIDER_KEYS) for provider in providers):
        raise AccessError(
            f"{where} names no complete provider (needed: {', '.join(PROVIDER_KEYS)} in [auth] or in [auth.NAME])"
        )
    allowed = auth.get(ALLOW_KEY, [])
    if not isinstance(allowed, list) or not all(isinstance(entry, str) and _well_formed(entry) for entry in allowed):
        raise AccessError(
            f"{where}.{ALLOW_KEY} must be a list of e-mail addresses and domains (like 'ann@example.org', "
            "'example.org')"
        )
    return AuthSettings(True, tuple(entry.strip().lower() for entry in allowed))


def _well_formed(entry: str) -> bool:
    local, _, domain = entry.strip().rpartition("@")
    return "." in domain and " " not in entry.strip() and (not entry.count("@") or (local != "" and "@" not in local))


def load_auth(paths: list[Path] | None = None) -> AuthSettings:
    """The login configuration of the secrets files that exist; AccessError, one line naming the
    file and the problem, when one does not parse or its [auth] is incomplete."""
    auth: Any = None
    auth_path: Path | None = None
    for path in paths if paths is not None else secrets_paths():
        if not path.exists():
            continue
        secrets = _read(path)
        if "auth" in secrets:
            auth, auth_path = secrets["auth"], path
    if auth_path is None:
        return AuthSettings(False)
    return _check_auth(auth, auth_path)


def is_allowed(email: str | None, allowed: tuple[str, ...]) -> bool:
    """Whether a logged-in account may in: any, without an allow-list; else its exact address
    or its exact domain must be listed (a subdomain is not its parent's)."""
    if not allowed:
        return True
    if not email or "@" not in email:
        return False
    address = email.strip().lower()
    return address in allowed or address.rpartition("@")[2] in allowed


def verdict(settings: AuthSettings, logged_in: bool, email: str | None) -> str:
    """What a visitor sees: "open" (no login configured), "log in", "not allowed" or "in"."""
    if not settings.login_configured:
        return "open"
    if not logged_in:
        return "log in"
    return "in" if is_allowed(email, settings.allowed) else "not allowed"
