"""runs: the per-Run Ray token (sealed), the local Workers' uid, and the lifecycle channel

* ``ray_token``: the Run's Ray GCS token (``RAY_AUTH_TOKEN``), random per Run and sealed with the
  server's secret key; no longer derived from anything a log holds.
* ``worker_uid``: local runtime, the unprivileged uid the Run's Workers run as (None: the
  server's own user, or another runtime).
* ``channel``: how the Run's lifecycle lines are authenticated: ``keeper`` (written only by the
  Worker's keeper, out of the workload's reach; no token in any line), None for Runs launched
  before (their lines carry ``event_token``).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('ray_token', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('worker_uid', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('channel', sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('channel')
        batch_op.drop_column('worker_uid')
        batch_op.drop_column('ray_token')
