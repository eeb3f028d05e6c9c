"""Runs get a globally unique id and keep their model's hash, so a run exported from one store
and imported into another is recognised (no duplicates) and keeps its model reference even
where that store lacks the checkpoint.

Revision ID: 0003
Revises: 0002
"""

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.add_column(sa.Column("uid", sa.String(36)))
        batch.add_column(sa.Column("model_hash", sa.String(64)))
    connection = op.get_bind()
    run = sa.table(
        "run",
        sa.column("id", sa.Integer),
        sa.column("uid", sa.String),
        sa.column("model_id", sa.Integer),
        sa.column("model_hash", sa.String),
    )
    model = sa.table("model", sa.column("id", sa.Integer), sa.column("weights_hash", sa.String))
    for (run_id,) in connection.execute(sa.select(run.c.id)).all():
        connection.execute(sa.update(run).where(run.c.id == run_id).values(uid=str(uuid.uuid4())))
    connection.execute(
        sa.update(run).values(
            model_hash=sa.select(model.c.weights_hash).where(model.c.id == run.c.model_id).scalar_subquery()
        )
    )
    # uid stays nullable in the table (the ORM always sets it): making it NOT NULL would make
    # SQLite rebuild the run table.
    op.create_index("ix_run_uid", "run", ["uid"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_run_uid", table_name="run")
    with op.batch_alter_table("run") as batch:
        batch.drop_column("model_hash")
        batch.drop_column("uid")
