"""The dashboard's login fails closed and keeps to its allow-list; an exposed launch form needs
a login (or an authenticating proxy in front). No identity provider can be reached here: the
allow-list and what a visitor sees are tested as plain functions, the fail-closed start through
the real command, and the fail-closed page through Streamlit's AppTest."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cli.access import AccessError, AuthSettings, is_allowed, load_auth, verdict
from store.store import Store
from tests.browser_helpers import free_port
from tests.conftest import ROOT, run_decodelab

STRONG_SECRET = "9f2c4e7a1b8d3f6051e2a9c7d4b8f1e3a6c0d5b9e2f7a4c1d8b3e6f0a9c2d5e7"
COMPLETE = """
[auth]
redirect_uri = "https://decodelab.example.org/oauth2callback"
cookie_secret = "9f2c4e7a1b8d3f6051e2a9c7d4b8f1e3a6c0d5b9e2f7a4c1d8b3e6f0a9c2d5e7"
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
        (COMPLETE.replace(f'cookie_secret = "{STRONG_SECRET}"', ""), "[auth] lacks cookie_secret"),
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


def docs_example() -> str:
    """The [auth] block docs/deploy.md shows, as a reader would paste it."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    block = text.split("```toml\n[auth]\n", 1)[1].split("```", 1)[0]
    return "[auth]\n" + block


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (COMPLETE.replace(STRONG_SECRET, "x"), "[auth].cookie_secret is too short or an example"),
        (COMPLETE.replace(STRONG_SECRET, "a long random string"), "[auth].cookie_secret is too short or an example"),
        (COMPLETE.replace(STRONG_SECRET, "ab" * 32), "[auth].cookie_secret is too short or an example"),
        (docs_example(), "[auth].cookie_secret is too short or an example"),
        (COMPLETE.replace('["Ann@Example.org", "team.example.org"]', "[]"), "[auth].allowed is empty"),
    ],
)
def test_a_login_anyone_could_forge_refuses_to_start(tmp_path: Path, text: str, fragment: str) -> None:
    """Through the real command: a forgeable cookie secret (short, repeated, the docs' example)
    or an empty allow-list stops `decodelab dashboard` with one line, exit 2, no server."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).close()
    path = secrets(tmp_path, text)
    result = run_decodelab("dashboard", "--db", url, cwd=tmp_path, timeout=60, HOME=str(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: secrets file '{path}': {fragment}"), lines


@pytest.mark.parametrize("through", ["config.toml", "environment"])
def test_an_auth_in_any_file_streamlit_reads_is_checked(tmp_path: Path, through: str) -> None:
    """Streamlit's secrets.files (set in .streamlit/config.toml or $STREAMLIT_SECRETS_FILES) may
    point anywhere: decodelab reads the [auth] there, and refuses to start on a forgeable one."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).close()
    elsewhere = tmp_path / "etc" / "team-secrets.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(COMPLETE.replace(STRONG_SECRET, "x"))
    environment = {"HOME": str(tmp_path)}
    if through == "config.toml":
        (tmp_path / ".streamlit").mkdir()
        (tmp_path / ".streamlit" / "config.toml").write_text(f'[secrets]\nfiles = ["{elsewhere}"]\n')
    else:
        environment["STREAMLIT_SECRETS_FILES"] = str(elsewhere)
    result = run_decodelab(
        "dashboard", "--db", url, "--read-only", "--port", str(free_port()), cwd=tmp_path, timeout=60, **environment
    )
    assert result.returncode == 2, result.stderr
    assert f"secrets file '{elsewhere}': [auth].cookie_secret is too short" in result.stderr
    (tmp_path / "etc" / "folder").mkdir()
    environment["STREAMLIT_SECRETS_FILES"] = str(tmp_path / "etc" / "folder")
    result = run_decodelab("dashboard", "--db", url, "--read-only", cwd=tmp_path, timeout=60, **environment)
    assert result.returncode == 2 and "is a folder, which decodelab does not read" in result.stderr, result.stderr


def test_an_unverified_address_is_not_let_in(tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider says the address is unverified: anyone may have typed it there."""
    monkeypatch.setenv("DECODELAB_DB", sqlite_url)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    Store(sqlite_url).close()
    secrets(tmp_path, COMPLETE)
    for verified, seen in ((False, "not allowed"), (True, "in")):
        app = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
        app.user = {"is_logged_in": True, "email": "ann@example.org", "email_verified": verified}
        app.run()
        assert not app.exception, [exception.value for exception in app.exception]
        shown = " ".join(str(element.value) for element in app.markdown)
        assert ("not allowed" in shown) == (seen == "not allowed"), (verified, shown)
    assert verdict(AuthSettings(True, ()), True, "ann@example.org", "false") == "not allowed"


@pytest.mark.browser
@pytest.mark.slow
def test_a_login_configured_through_secrets_files_guards_every_page(tmp_path: Path) -> None:
    """A real server in Chromium, its [auth] only in a file that Streamlit's secrets.files names:
    the page asks to log in and shows nothing else (on the old code it opened to anyone)."""
    from playwright.sync_api import expect

    from tests.browser_helpers import chromium, open_page, require_browser, serve_dashboard

    require_browser()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).close()
    elsewhere = tmp_path / "team-secrets.toml"
    elsewhere.write_text(COMPLETE)
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "config.toml").write_text(f'[secrets]\nfiles = ["{elsewhere}"]\n')
    with serve_dashboard(url, tmp_path, "--read-only") as address, chromium() as browser:
        page = browser.new_page()
        for path in ("", "history", "compare"):
            open_page(page, address, path)
            expect(page.get_by_role("button", name="Log in")).to_be_visible()
            assert "Store:" not in page.content()  # no sidebar, no page: only the login
