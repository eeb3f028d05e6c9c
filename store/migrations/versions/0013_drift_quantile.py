"""The quantile a machine's drift figure was taken at, kept beside it: the review's quantile moved
from the 95th to the 99th (analysis.between_runs.DRIFT_QUANTILE), and a figure kept before says
which it is (None: kept before the quantile was recorded, the 95th) until its machine's next run
finishes.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("machine") as batch:
        batch.add_column(sa.Column("drift_quantile", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("machine") as batch:
        batch.drop_column("drift_quantile")
