"""runs: resume, where a Run resumes from the last checkpoint of an earlier one

* ``resume``: asked by ``rlark restart --resume`` or ``failurePolicy.resume`` (``{"fromRun",
  "automatic", "by"}``), resolved at launch (``resolved``, ``checkpoint``, ``step``,
  ``output``, ``override``, ``notes``); None for a Run that starts afresh.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""
from alembic import op
import sqlalchemy as sa

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('resume', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('resume')
