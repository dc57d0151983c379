"""jobs.version and runs.version: optimistic concurrency between the controller's passes and API
requests (a stale writer fails instead of overwriting the other's change)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ('jobs', 'runs'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('version', sa.Integer(), nullable=False, server_default='1'))


def downgrade() -> None:
    for table in ('runs', 'jobs'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('version')
