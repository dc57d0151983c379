"""controller_state: term, the fencing token of the controller whose writes count

* ``term``: each controller claims the next one when it starts acting; a transaction of a
  controller holding an earlier one rolls back (rlark.controller.fencing). 0: none claimed yet.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""
from alembic import op
import sqlalchemy as sa

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('controller_state', schema=None) as batch_op:
        batch_op.add_column(sa.Column('term', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('controller_state', schema=None) as batch_op:
        batch_op.drop_column('term')
