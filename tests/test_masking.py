"""A store URL's secrets never shown, in every form a SQLAlchemy URL takes: the password in the
user-info (with unencoded '@', '/' and ':' in it), as ``?password=``, and libpq's ``sslpassword``
and ``passfile`` keys. Fed to the real commands against a real PostgreSQL server (their output,
errors included, and every stored row read back) and to a real dashboard read in Chromium (every
page's HTML and the server's start line)."""

from __future__ import annotations

import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from store.engine import mask_url
from store.masking import mask_secrets
from store.store import Store
from tests.browser_helpers import SERVERS, chromium, open_page, require_browser, serve_dashboard
from tests.conftest import QUICK_SPEC, _postgres_url_or_skip, run_decodelab
from tests.shared_parts import store_model_of
from tests.test_browser_pages import PAGES
from tests.test_secrets import store_text

pytestmark = pytest.mark.postgres

# Secrets no output may repeat: a user-info password typed unencoded (SQLAlchemy's own parser
# took "Plain1" for the password and the rest for the host and database), an SSL key's password
# and a password file's path. Each piece is distinctive, so a fragment shown is caught too.
UNENCODED = "Plain1@Piece2/Piece3:Piece4"
UNENCODED_PIECES = ("Plain1", "Piece2", "Piece3", "Piece4")
SSL_PASSWORD = "SslSecret9"
PASS_FILE = "/nonexistent/PassFileSecret7"


def forms(base: str) -> dict[str, str]:
    """The test server's URL (its schema in ``options``) written in each form, and all at once
    (the user-info password then only a decoy: libpq takes the query's)."""
    url = sa.engine.make_url(base)
    where = f"{url.host}:{url.port}/{url.database}"
    options = f"options={quote(str(url.query['options']))}"
    user, real = url.username, url.password
    return {
        "user-info": f"postgresql+psycopg://{user}:{real}@{where}?{options}",
        "query password": f"postgresql+psycopg://{user}@{where}?password={real}&{options}",
        "libpq keys": f"postgresql+psycopg://{user}:{real}@{where}?sslpassword={SSL_PASSWORD}&passfile={PASS_FILE}&{options}",
        "unencoded": f"postgresql+psycopg://{user}:{UNENCODED}@{where}?password={real}&{options}",
        "all": f"postgresql+psycopg://{user}:{UNENCODED}@{where}?password={real}&sslpassword={SSL_PASSWORD}"
        f"&passfile={PASS_FILE}&{options}",
    }


def secrets_in(text: str, base: str) -> list[str]:
    real = sa.engine.make_url(base).password
    assert real
    return [secret for secret in (real, *UNENCODED_PIECES, SSL_PASSWORD, "PassFileSecret7") if secret in text]


@pytest.fixture(scope="module")
def schema_url() -> Iterator[str]:
    """A schema of the test server for this module (the browser's dashboard serves it throughout)."""
    base = _postgres_url_or_skip()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    url = sa.engine.make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    yield url.render_as_string(hide_password=False)
    with admin.begin() as connection:
        connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


def test_each_form_is_masked_as_text_and_as_a_url() -> None:
    for text, masked in (
        ("postgresql+psycopg://me:Plain1@Piece2/Piece3:Piece4@db:5432/x", "postgresql+psycopg://me:***@db:5432/x"),
        ("postgresql+psycopg://me@db/x?password=hunter2&application_name=a", "?password=***&application_name=a"),
        ("postgresql+psycopg://me@db/x?sslpassword=s3&passfile=/home/me/.pgpass", "?sslpassword=***&passfile=***"),
        ("host=db password='a b' sslkey=/k user=me", "host=db password=*** sslkey=*** user=me"),
    ):
        assert masked in mask_secrets(text), text
    for url in forms("postgresql+psycopg://me:hunter2@db:5432/x?options=-csearch_path%3Ds").values():
        shown = mask_url(url)
        assert not [
            secret for secret in ("hunter2", *UNENCODED_PIECES, SSL_PASSWORD, "PassFileSecret7") if secret in shown
        ]
        assert "***" in shown and "@db:5432/x" in shown, shown


def test_every_command_and_every_stored_row_keep_each_form_masked(schema_url: str, tmp_path: Path) -> None:
    """Each form through the commands that name the store (their errors included); the run, its
    export and import, and the queued jobs on the form that carries them all."""
    spec = tmp_path / "quick.toml"
    spec.write_text(QUICK_SPEC)
    outputs: list[str] = []

    def decodelab(*args: str, url: str, code: int = 0) -> str:
        result = run_decodelab(*args, cwd=tmp_path, DECODELAB_DB=url)
        assert result.returncode == code, (args, result.stdout, result.stderr)
        outputs.append(result.stdout + result.stderr)
        return result.stdout + result.stderr

    for name, url in forms(schema_url).items():
        assert "***" in decodelab("db", "upgrade", url=url), name
        assert "***" in decodelab("db", "current", url=url), name
        decodelab("enqueue", "--spec", str(spec), url=url)
        assert "no run 999 in postgresql+psycopg://" in decodelab("recommend", "--run", "999", url=url, code=2)
    url = forms(schema_url)["all"]
    # The model stored first: the run loads it rather than trains it (training logs no URL).
    store = Store(schema_url)
    store_model_of(store, tomllib.loads(QUICK_SPEC))
    store.close()
    assert "stored run" in decodelab("run", "--spec", str(spec), url=url)
    decodelab("export", "--format", "json", "--out", str(tmp_path / "runs.json"), url=url)
    assert "cases added" in decodelab("import", str(tmp_path / "runs.json"), url=url)
    decodelab("workers", url=url)
    stored = store_text(schema_url)
    assert "quick" in stored or "tiny" in stored  # the jobs and the run are there to be read
    for output in (*outputs, stored):
        assert not secrets_in(output, schema_url), output


@pytest.mark.browser
@pytest.mark.slow
def test_no_page_and_no_start_line_shows_a_secret(schema_url: str, tmp_path: Path) -> None:
    """One dashboard on the URL that carries every form; every page's HTML read in Chromium."""
    require_browser()
    url = forms(schema_url)["all"]
    assert run_decodelab("db", "upgrade", cwd=tmp_path, DECODELAB_DB=url).returncode == 0
    seen: list[str] = []
    with serve_dashboard(url, tmp_path) as address, chromium() as browser:
        server = SERVERS[address]
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for path in ["", *PAGES]:
            open_page(page, address, path)
            html = page.content()
            assert "Store:" in html and "***" in html, path  # the sidebar names the store, masked
            seen.append(html)
    start = server.stdout.read() if server.stdout else ""
    assert "dashboard for postgresql+psycopg://" in start
    for text in (*seen, start):
        assert not secrets_in(text, schema_url)
