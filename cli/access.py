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
# Streamlit signs its login cookie with cookie_secret: a short or published one lets anyone sign
# a cookie of their own and walk in without the identity provider.
COOKIE_SECRET_MIN_BYTES = 32
COOKIE_SECRET_MIN_DISTINCT = 10
# The examples docs/deploy.md has shown: usable by anyone who read them.
EXAMPLE_COOKIE_SECRETS = frozenset(
    {"a long random string", "<64 hex digits: python3 -c 'import secrets; print(secrets.token_hex(32))'>"}
)
# Streamlit's main script's folder: Streamlit reads .streamlit/ there too (after ~ and the cwd).
DASHBOARD_FOLDER = Path(__file__).resolve().parent.parent / "dashboard"


class AccessError(InputError):
    """A secrets file that does not parse, or a login configured incompletely."""


@dataclass(frozen=True)
class AuthSettings:
    login_configured: bool
    allowed: tuple[str, ...] = ()  # lower-case addresses ("ann@example.org") and domains ("example.org")


def secrets_paths(working_directory: Path | None = None) -> list[Path]:
    """Every file Streamlit reads secrets from, in its order (a later file wins): its
    ``secrets.files`` option as $STREAMLIT_SECRETS_FILES or the last config.toml that sets it,
    else its defaults (~, the working directory's and the dashboard's .streamlit/secrets.toml).
    ``decodelab dashboard`` hands Streamlit this very list, so no ``[auth]`` goes unchecked."""
    home = Path(os.environ.get("HOME") or Path.home())
    folders = [home / ".streamlit", (working_directory or Path.cwd()) / ".streamlit", DASHBOARD_FOLDER / ".streamlit"]
    configured: list[str] | None = None
    if os.environ.get("STREAMLIT_SECRETS_FILES", "").strip():
        configured = os.environ["STREAMLIT_SECRETS_FILES"].split()
    else:
        for config in (folder / "config.toml" for folder in folders):
            files = _read(config, "config file").get("secrets", {}).get("files") if config.is_file() else None
            if files is not None:
                if not isinstance(files, list) or not all(isinstance(entry, str) for entry in files):
                    raise AccessError(f"config file {str(config)!r}: [secrets] files must be a list of paths")
                configured = files
    paths = [Path(entry) for entry in configured] if configured is not None else [f / "secrets.toml" for f in folders]
    for path in paths:
        if path.is_dir():
            raise AccessError(
                f"secrets path {str(path)!r} is a folder, which decodelab does not read (allowed: TOML files)"
            )
    return paths


def _read(path: Path, what: str = "secrets file") -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise AccessError(
            f"{what} {str(path)!r} does not parse ({reason}): the dashboard would show no login"
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
    _check_cookie_secret(auth["cookie_secret"], where)
    allowed = auth.get(ALLOW_KEY, [])
    if ALLOW_KEY in auth and allowed == []:
        raise AccessError(
            f"{where}.{ALLOW_KEY} is empty, which would let every account in (allowed: at least one address "
            "or domain, like 'ann@example.org', 'example.org')"
        )
    if not isinstance(allowed, list) or not all(isinstance(entry, str) and _well_formed(entry) for entry in allowed):
        raise AccessError(
            f"{where}.{ALLOW_KEY} must be a list of e-mail addresses and domains (like 'ann@example.org', "
            "'example.org')"
        )
    return AuthSettings(True, tuple(entry.strip().lower() for entry in allowed))


def _check_cookie_secret(secret: Any, where: str) -> None:
    """Refused unless it is at least 32 bytes, not one of the docs' examples, and not a few
    characters repeated: it is the key to forging a login cookie."""
    text = secret if isinstance(secret, str) else ""
    if (
        len(text.encode("utf-8")) < COOKIE_SECRET_MIN_BYTES
        or text in EXAMPLE_COOKIE_SECRETS
        or len(set(text)) < COOKIE_SECRET_MIN_DISTINCT
    ):
        raise AccessError(
            f"{where}.cookie_secret is too short or an example, so anyone could sign a login cookie (allowed: "
            f"{COOKIE_SECRET_MIN_BYTES}+ random bytes, e.g. python3 -c 'import secrets; print(secrets.token_hex(32))')"
        )


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


def verdict(settings: AuthSettings, logged_in: bool, email: str | None, email_verified: object = None) -> str:
    """What a visitor sees: "open" (no login configured), "log in", "not allowed" or "in". An
    account whose provider says its address is unverified (``email_verified`` present and not
    true) is not allowed: anyone may claim an address there."""
    if not settings.login_configured:
        return "open"
    if not logged_in:
        return "log in"
    if email_verified is not None and email_verified is not True:
        return "not allowed"
    return "in" if is_allowed(email, settings.allowed) else "not allowed"
