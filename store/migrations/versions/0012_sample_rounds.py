"""A sample of an A/B session (`decodelab ab`) keeps its round: each round runs in fresh worker
processes, so the review tests the rounds, not the pairs, as its independent units (a process's
own speed, its memory layout, is shared by every pair it times).

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sample") as batch:
        batch.add_column(sa.Column("round_index", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("sample") as batch:
        batch.drop_column("round_index")
