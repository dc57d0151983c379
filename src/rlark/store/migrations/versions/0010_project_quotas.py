"""projects.quotas: a project's own quotas (maxJobs, maxActiveWorkers); unset means the server's
defaults

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.add_column(sa.Column('quotas', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.drop_column('quotas')
