"""The first tables: machine, model, run, case, measurement, sample, job.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "machine",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False, unique=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("cpu_model", sa.String(300), nullable=False),
        sa.Column("cores", sa.Integer, nullable=False),
        sa.Column("memory_bytes", sa.BigInteger, nullable=False),
        sa.Column("os", sa.String(300), nullable=False),
        sa.Column("python_version", sa.String(50), nullable=False),
        sa.Column("torch_version", sa.String(50), nullable=False),
        sa.Column("threads", sa.Integer, nullable=False),
        sa.Column("device", sa.String(50), nullable=False),
        sa.Column("gpu_name", sa.String(300)),
        sa.Column("created_at", TIMESTAMP, nullable=False),
    )
    op.create_table(
        "model",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("weights_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("recipe_hash", sa.String(64), nullable=False, index=True),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("corpus_hash", sa.String(64), nullable=False),
        sa.Column("train_loss", sa.Float, nullable=False),
        sa.Column("val_loss", sa.Float, nullable=False),
        sa.Column("parameter_count", sa.Integer, nullable=False),
        sa.Column("weight_bytes", sa.BigInteger, nullable=False),
        sa.Column("weights", sa.LargeBinary, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
    )
    op.create_table(
        "run",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("machine_id", sa.Integer, sa.ForeignKey("machine.id"), nullable=False),
        sa.Column("model_id", sa.Integer, sa.ForeignKey("model.id")),
        sa.Column("preset", sa.String(100)),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("code_version", sa.String(100), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("finished_at", TIMESTAMP),
    )
    op.create_table(
        "case",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("run.id", ondelete="CASCADE"), nullable=False),
        sa.Column("experiment", sa.String(100), nullable=False),
        sa.Column("case_key", sa.String(1000), nullable=False),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.UniqueConstraint("run_id", "experiment", "case_key", name="uq_case_run_key"),
    )
    op.create_table(
        "measurement",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("case_id", sa.Integer, sa.ForeignKey("case.id", ondelete="CASCADE"), nullable=False),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("run.id", ondelete="CASCADE"), nullable=False),
        sa.Column("experiment", sa.String(100), nullable=False),
        sa.Column("metric", sa.String(100), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("unit", sa.String(30), nullable=False),
    )
    op.create_table(
        "sample",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("measurement_id", sa.Integer, sa.ForeignKey("measurement.id", ondelete="CASCADE"), nullable=False),
        sa.Column("pair_index", sa.Integer, nullable=False),
        sa.Column("side", sa.String(1), nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
    )
    op.create_table(
        "job",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("preset", sa.String(100)),
        sa.Column("machine_name", sa.String(200)),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("worker", sa.String(200)),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("run.id")),
        sa.Column("cases_done", sa.Integer, nullable=False),
        sa.Column("cases_total", sa.Integer, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("claimed_at", TIMESTAMP),
        sa.Column("heartbeat_at", TIMESTAMP),
        sa.Column("finished_at", TIMESTAMP),
    )


def downgrade() -> None:
    for table in ("job", "sample", "measurement", "case", "run", "model", "machine"):
        op.drop_table(table)
