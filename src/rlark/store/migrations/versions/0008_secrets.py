"""secrets: RLark-managed secrets per project (name, key names, sealed values)

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0008'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'secrets',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=63), nullable=False),
        sa.Column('keys', sa.JSON(), nullable=False),
        sa.Column('sealed', sa.Text(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('created_by', sa.String(length=63), nullable=True),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_by', sa.String(length=63), nullable=True),
        sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('project_id', 'name', name='uq_secrets_project_name'),
    )
    op.create_index('ix_secrets_project_id', 'secrets', ['project_id'])


def downgrade() -> None:
    op.drop_index('ix_secrets_project_id', table_name='secrets')
    op.drop_table('secrets')
