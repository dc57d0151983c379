"""controller_state: the controller's heartbeat, so a restarted server can adopt active Runs and
say when a Worker nobody watched ended

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'controller_state',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('heartbeat_at', sa.Float(), nullable=True),
        sa.Column('owner', sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )


def downgrade() -> None:
    op.drop_table('controller_state')
