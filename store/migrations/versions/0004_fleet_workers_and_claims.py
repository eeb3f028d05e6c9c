"""A fleet's bookkeeping: a worker table (who runs where, last seen by the server's clock),
and on each job its owner's worker id, the machine it runs on (one job per machine at a time)
and how often its worker went silent. Self-contained: it reads nothing from the ORM.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "worker",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("machine_name", sa.String(200), nullable=False),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stale_after_seconds", sa.Float, nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_worker_machine_last_seen", "worker", ["machine_name", "last_seen_at"])
    # Plain columns (no foreign key): adding one would make SQLite rebuild the job table.
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("worker_id", sa.Integer))
        batch.add_column(sa.Column("claimed_by_machine", sa.String(200)))
        batch.add_column(sa.Column("stale_reclaims", sa.Integer, nullable=False, server_default="0"))
    op.create_index("ix_job_status_claimed_by_machine", "job", ["status", "claimed_by_machine"])
    # A job still running under an older worker keeps running: that worker finishes it as it
    # always did, or goes silent and a reclaim requeues it for a worker of this version.


def downgrade() -> None:
    op.drop_index("ix_job_status_claimed_by_machine", table_name="job")
    with op.batch_alter_table("job") as batch:
        batch.drop_column("stale_reclaims")
        batch.drop_column("claimed_by_machine")
        batch.drop_column("worker_id")
    op.drop_index("ix_worker_machine_last_seen", table_name="worker")
    op.drop_table("worker")
