"""A case that could not be measured (a machine too busy to time it, or a summary whose inputs
were not measured) is kept with its reason instead of ending the run: its row has no
measurements and ``unmeasured_reason`` says why; `decodelab run --only-unmeasured RUN` retries it.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("case") as batch:
        batch.add_column(sa.Column("unmeasured_reason", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("case") as batch:
        batch.drop_column("unmeasured_reason")
