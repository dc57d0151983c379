"""webhooks: a project's webhooks (URL, events, format, sealed signing secret) and their
deliveries (the outbox the notifier sends from, and the delivery log)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

EVENTS = ('run.running', 'run.succeeded', 'run.failed', 'run.stopped', 'run.queued')


def upgrade() -> None:
    op.create_table(
        'webhooks',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=63), nullable=False),
        sa.Column('url', sa.Text(), nullable=False),
        sa.Column('events', sa.JSON(), nullable=False),
        sa.Column('format', sa.Enum('rlark', 'slack', name='ck_webhooks_format',
                                    native_enum=False, create_constraint=True, length=16),
                  nullable=False),
        sa.Column('sealed_secret', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('created_by', sa.String(length=63), nullable=True),
        sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('project_id', 'name', name='uq_webhooks_project_name'),
    )
    op.create_index('ix_webhooks_project_id', 'webhooks', ['project_id'])
    op.create_table(
        'webhook_deliveries',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('webhook_id', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('event', sa.Enum(*EVENTS, name='ck_deliveries_event', native_enum=False,
                                   create_constraint=True, length=32), nullable=False),
        sa.Column('facts', sa.JSON(), nullable=False),
        sa.Column('state', sa.Enum('pending', 'succeeded', 'failed', name='ck_deliveries_state',
                                   native_enum=False, create_constraint=True, length=16),
                  nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('claimed_until', sa.DateTime(timezone=True), nullable=True),
        sa.Column('last_status', sa.Integer(), nullable=True),
        sa.Column('last_error', sa.Text(), nullable=False),
        sa.Column('last_attempt_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['webhook_id'], ['webhooks.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('webhook_id', 'run_id', 'event', name='uq_webhook_deliveries_once'),
    )
    op.create_index('ix_webhook_deliveries_webhook_id', 'webhook_deliveries', ['webhook_id'])
    op.create_index('ix_webhook_deliveries_state', 'webhook_deliveries', ['state'])


def downgrade() -> None:
    op.drop_index('ix_webhook_deliveries_state', table_name='webhook_deliveries')
    op.drop_index('ix_webhook_deliveries_webhook_id', table_name='webhook_deliveries')
    op.drop_table('webhook_deliveries')
    op.drop_index('ix_webhooks_project_id', table_name='webhooks')
    op.drop_table('webhooks')
