"""Safe to share: each enqueue and claim carries a request id, so a retry after a lost reply
finds its own earlier effect (unique columns on the job); a model's parameter count is 64-bit.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("request_id", sa.String(36)))
        batch.add_column(sa.Column("claim_request_id", sa.String(36)))
    # Unique indexes (NULL for jobs enqueued before this revision: NULLs never collide).
    op.create_index("ix_job_request_id", "job", ["request_id"], unique=True)
    op.create_index("ix_job_claim_request_id", "job", ["claim_request_id"], unique=True)
    with op.batch_alter_table("model") as batch:
        batch.alter_column("parameter_count", existing_type=sa.Integer, type_=sa.BigInteger, existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("model") as batch:
        batch.alter_column("parameter_count", existing_type=sa.BigInteger, type_=sa.Integer, existing_nullable=False)
    op.drop_index("ix_job_claim_request_id", table_name="job")
    op.drop_index("ix_job_request_id", table_name="job")
    with op.batch_alter_table("job") as batch:
        batch.drop_column("claim_request_id")
        batch.drop_column("request_id")
