"""Reviews: a run can carry tags (baseline, reviewed, suspect, or free ones) and a note.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_tag",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("run.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("run_id", "name", name="uq_run_tag_run_name"),
    )
    op.create_index("ix_run_tag_name", "run_tag", ["name"])
    with op.batch_alter_table("run") as batch:
        batch.add_column(sa.Column("note", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.drop_column("note")
    op.drop_index("ix_run_tag_name", table_name="run_tag")
    op.drop_table("run_tag")
