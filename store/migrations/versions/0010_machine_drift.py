"""Each machine's drift figure: how far a timed headline value moves between consecutive
comparable runs on it (the review's allowance for between-run drift), kept with the machine and
updated as each of its runs finishes.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("machine") as batch:
        batch.add_column(sa.Column("drift_log_ratio", sa.Float))
        batch.add_column(sa.Column("drift_moves", sa.Integer))
        batch.add_column(sa.Column("drift_run_id", sa.Integer))
        batch.add_column(sa.Column("drift_updated_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    with op.batch_alter_table("machine") as batch:
        batch.drop_column("drift_updated_at")
        batch.drop_column("drift_run_id")
        batch.drop_column("drift_moves")
        batch.drop_column("drift_log_ratio")
