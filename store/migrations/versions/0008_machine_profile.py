"""Machine profiles: each machine's measured roof (peak multiply-adds per precision, read bandwidth
per working-set size), for placing every timed decode on its roofline.

Revision ID: 0008
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "machine_profile",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("machine_id", sa.Integer, sa.ForeignKey("machine.id", ondelete="CASCADE"), nullable=False),
        sa.Column("instruction_set", sa.String(100), nullable=False),
        sa.Column("quick", sa.Boolean, nullable=False),
        sa.Column("figures", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_machine_profile_machine", "machine_profile", ["machine_id"])


def downgrade() -> None:
    op.drop_index("ix_machine_profile_machine", table_name="machine_profile")
    op.drop_table("machine_profile")
