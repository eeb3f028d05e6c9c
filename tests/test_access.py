"""The dashboard's login fails closed and keeps to its allow-list; an exposed launch form needs
a login (or an authenticating proxy in front). No identity provider can be reached here: the
allow-list and what a visitor sees are tested as plain functions, the fail-closed start through
the real command, and the fail-closed page through Streamlit's AppTest."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from runner.access import AccessError, AuthSettings, is_allowed, load_auth, verdict
from store.store import Store
from tests.conftest import ROOT, run_decodelab

COMPLETE = """
[auth]
redirect_uri = "https://decodelab.example.org/oauth2callback"
cookie_secret = "a long random string"
client_id = "decodelab"
client_secret = "shh"
server_metadata_url = "https://id.example.org/.well-known/openid-configuration"
allowed = ["Ann@Example.org", "team.example.org"]
"""


def secrets(folder: Path, text: str) -> Path:
    path = folder / ".streamlit" / "secrets.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_allow_list_takes_exact_addresses_and_exact_domains() -> None:
    allowed = ("ann@example.org", "team.example.org")
    assert is_allowed("ann@example.org", allowed) and is_allowed("ANN@Example.ORG", allowed)
    assert is_allowed("bob@team.example.org", allowed)
    assert not is_allowed("bob@example.org", allowed)  # the address is listed, not its domain
    assert not is_allowed("eve@evil-team.example.org", allowed)
    assert not is_allowed("eve@sub.team.example.org", allowed)
    assert not is_allowed("team.example.org", allowed) and not is_allowed(None, allowed) and not is_allowed("", allowed)
    assert is_allowed("anyone@anywhere.net", ())  # no list: any account the provider accepts


def test_what_a_visitor_sees() -> None:
    listed = AuthSettings(True, ("ann@example.org",))
    assert verdict(AuthSettings(False), False, None) == "open"
    assert verdict(listed, False, None) == "log in"
    assert verdict(listed, True, "eve@example.org") == "not allowed"
    assert verdict(listed, True, None) == "not allowed"
    assert verdict(listed, True, "ann@example.org") == "in"


def test_the_secrets_are_read_and_checked(tmp_path: Path) -> None:
    path = secrets(tmp_path, COMPLETE)
    assert load_auth([path]) == AuthSettings(True, ("ann@example.org", "team.example.org"))
    assert load_auth([tmp_path / "none.toml"]) == AuthSettings(False)
    assert load_auth([secrets(tmp_path / "other", "[connections]\nx = 1\n")]) == AuthSettings(False)
    for text, fragment in (
        ('[auth]\nredirect_uri = "https://x/oauth2callback\n', "does not parse"),
        (COMPLETE.replace('cookie_secret = "a long random string"', ""), "[auth] lacks cookie_secret"),
        (COMPLETE.replace('client_secret = "shh"', ""), "[auth] names no complete provider"),
        (COMPLETE.replace('"team.example.org"', '"not a domain"'), "[auth].allowed must be a list"),
    ):
        secrets(tmp_path, text)
        with pytest.raises(AccessError) as refused:
            load_auth([path])
        assert fragment in str(refused.value) and str(path) in str(refused.value)
        assert "\n" not in str(refused.value)


def test_a_named_provider_table_is_a_complete_login(tmp_path: Path) -> None:
    provider = COMPLETE.split("client_id")[0].replace("[auth]", "[auth]") + (
        '\n[auth.company]\nclient_id = "d"\nclient_secret = "s"\nserver_metadata_url = "https://id/x"\n'
    )
    assert load_auth([secrets(tmp_path, provider)]).login_configured


def test_the_dashboard_refuses_to_start_on_a_broken_secrets_file(tmp_path: Path) -> None:
    """Through the real command: one line naming the file, exit 2, no server."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).close()
    path = secrets(tmp_path, '[auth]\nredirect_uri = "https://x/oauth2callback\n')
    result = run_decodelab("dashboard", "--db", url, cwd=tmp_path, timeout=60, HOME=str(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: secrets file '{path}' does not parse"), lines
    secrets(tmp_path, COMPLETE.replace('client_id = "decodelab"', ""))
    result = run_decodelab("dashboard", "--db", url, cwd=tmp_path, timeout=60, HOME=str(tmp_path))
    assert result.returncode == 2 and "names no complete provider" in result.stderr, result.stderr


def test_an_exposed_launch_form_needs_a_login_or_a_proxy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).close()
    result = run_decodelab(
        "dashboard", "--db", url, "--host", "0.0.0.0", "--allow-remote-launch", cwd=tmp_path, HOME=str(tmp_path)
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no login is configured" in lines[0] and "--behind-proxy" in lines[0], lines


def test_a_broken_secrets_file_shows_nothing_but_the_problem(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails closed on the page too (the file broken after the dashboard started)."""
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    Store(sqlite_url).close()
    secrets(tmp_path, '[auth]\nredirect_uri = "https://x/oauth2callback\n')
    app = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
    app.run()
    assert not app.exception
    assert any("login is misconfigured" in error.value for error in app.error)
    assert not app.sidebar.button and not app.radio  # no launch form, no page


@pytest.mark.parametrize(
    ("user", "seen"),
    [
        ({"is_logged_in": False}, "log in"),
        ({"is_logged_in": True, "email": "eve@evil.example.net"}, "not allowed"),
        ({"is_logged_in": True, "email": "eve@sub.team.example.org"}, "not allowed"),
        ({"is_logged_in": True}, "not allowed"),
        ({"is_logged_in": True, "email": "ann@example.org"}, "in"),
        ({"is_logged_in": True, "email": "bob@team.example.org"}, "in"),
    ],
)
def test_the_page_keeps_to_the_allow_list(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch, user: dict[str, object], seen: str
) -> None:
    """The whole app under Streamlit's AppTest, the identity provider's answer given as st.user."""
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    Store(sqlite_url).close()
    secrets(tmp_path, COMPLETE)
    app = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
    app.user = user
    app.run()
    assert not app.exception, [exception.value for exception in app.exception]
    buttons = [button.label for button in app.button]
    shown = " ".join(str(element.value) for element in app.markdown)
    if seen == "log in":
        assert buttons == ["Log in"] and "not allowed" not in shown
    elif seen == "not allowed":
        assert buttons == ["Log out"] and "not allowed" in shown
    if seen == "in":
        assert app.radio(key="launch_source") is not None and "Log out" not in buttons
    else:
        assert not app.radio and not app.sidebar.button  # no launch form, no page
