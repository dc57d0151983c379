"""queues: a project's queue and the queue each Run waited in

* ``projects.queue``: the Kueue LocalQueue (in the project's namespace) the Pods of the project's
  Runs wait in for admission as one group; ``none``: no queue; NULL: the server's
  (``rlark server --k8s-queue``).
* ``runs.queue``: the queue the Run's Workers waited in (set when it launched; NULL: none, or
  the local runtime's own admission queue).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""
from alembic import op
import sqlalchemy as sa

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.add_column(sa.Column('queue', sa.String(length=63), nullable=True))
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('queue', sa.String(length=63), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('queue')
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.drop_column('queue')
