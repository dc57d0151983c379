"""runs.event_token: the secret that marks a Run's genuine lifecycle lines

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""
from alembic import op
import sqlalchemy as sa

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('event_token', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('event_token')
