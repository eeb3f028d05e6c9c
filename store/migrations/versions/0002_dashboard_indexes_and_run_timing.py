"""Indexes for the dashboard's queries; run wall time; job attempt count for reclaims.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.add_column(sa.Column("wall_seconds", sa.Float))
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("attempts", sa.Integer, nullable=False, server_default="0"))
    op.create_index("ix_run_started_at", "run", ["started_at"])
    op.create_index("ix_run_machine_started_at", "run", ["machine_id", "started_at"])
    op.create_index("ix_measurement_run_experiment_metric", "measurement", ["run_id", "experiment", "metric"])
    op.create_index("ix_measurement_experiment_metric", "measurement", ["experiment", "metric"])
    op.create_index("ix_measurement_case", "measurement", ["case_id"])
    op.create_index("ix_sample_measurement", "sample", ["measurement_id"])
    op.create_index("ix_job_status_created_at", "job", ["status", "created_at"])


def downgrade() -> None:
    for name, table in (
        ("ix_job_status_created_at", "job"),
        ("ix_sample_measurement", "sample"),
        ("ix_measurement_case", "measurement"),
        ("ix_measurement_experiment_metric", "measurement"),
        ("ix_measurement_run_experiment_metric", "measurement"),
        ("ix_run_machine_started_at", "run"),
        ("ix_run_started_at", "run"),
    ):
        op.drop_index(name, table_name=table)
    with op.batch_alter_table("job") as batch:
        batch.drop_column("attempts")
    with op.batch_alter_table("run") as batch:
        batch.drop_column("wall_seconds")
