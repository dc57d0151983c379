"""runs.sealed_secrets: the RLark-managed secret values a Run was launched with, sealed, so its
logs stay masked after a secret is deleted or given a new value

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sealed_secrets', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('sealed_secrets')
