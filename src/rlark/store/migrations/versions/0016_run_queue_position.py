"""runs: queue_position, a queued Run's place in its cluster queue's line as the queue told it

* ``queue_position``: 1 = next; None when the queue has not told it (Kueue without its
  visibility API) or the Run is not waiting in a cluster's queue.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""
from alembic import op
import sqlalchemy as sa

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('queue_position', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('queue_position')
