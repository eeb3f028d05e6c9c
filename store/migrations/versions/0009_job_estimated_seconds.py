"""The launcher's estimate of a job's time, kept to set beside the run's wall time.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("estimated_seconds", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_column("estimated_seconds")
