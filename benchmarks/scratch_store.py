"""A throwaway schema in a PostgreSQL server's database for a benchmark: created, brought to
head (a benchmark never migrates, or leaves rows in, a store someone uses), dropped after."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from store.store import Store


@contextmanager
def scratch_schema(base_url: str) -> Iterator[str]:
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base_url)
    with admin.begin() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    url = sa.engine.make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    rendered = url.render_as_string(hide_password=False)
    try:
        Store(rendered, upgrade=True).close()
        yield rendered
    finally:
        with admin.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
