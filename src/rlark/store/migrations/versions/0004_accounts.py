"""accounts: users, projects, memberships, tokens, sessions, audit; jobs belong to a project
(existing Jobs to ``default``), Job names unique per project; runs.namespace; events.actor

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""
from datetime import datetime, timezone

from alembic import op
import sqlalchemy as sa

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

ROLE = sa.Enum('viewer', 'member', 'admin', name='projectrole', native_enum=False, length=16,
               create_constraint=True)


def upgrade() -> None:
    op.create_table(
        'users',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=63), nullable=False),
        sa.Column('is_admin', sa.Boolean(), nullable=False),
        sa.Column('disabled', sa.Boolean(), nullable=False),
        sa.Column('password_hash', sa.String(length=255), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('created_by', sa.String(length=63), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('name', name='uq_users_name'),
    )
    projects = op.create_table(
        'projects',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=63), nullable=False),
        sa.Column('namespace', sa.String(length=63), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('created_by', sa.String(length=63), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('name', name='uq_projects_name'),
    )
    op.create_table(
        'memberships',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('role', ROLE, nullable=False),
        sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('user_id', 'project_id', name='uq_memberships_user_project'),
    )
    op.create_index('ix_memberships_user_id', 'memberships', ['user_id'])
    op.create_index('ix_memberships_project_id', 'memberships', ['project_id'])
    op.create_table(
        'tokens',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=63), nullable=False),
        sa.Column('prefix', sa.String(length=16), nullable=False),
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('digest', name='uq_tokens_digest'),
    )
    op.create_index('ix_tokens_user_id', 'tokens', ['user_id'])
    op.create_table(
        'sessions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('csrf', sa.String(length=64), nullable=False),
        sa.Column('token_id', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['token_id'], ['tokens.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('digest', name='uq_sessions_digest'),
    )
    op.create_index('ix_sessions_user_id', 'sessions', ['user_id'])
    op.create_index('ix_sessions_token_id', 'sessions', ['token_id'])
    op.create_table(
        'audit',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('time', sa.DateTime(timezone=True), nullable=False),
        sa.Column('actor', sa.String(length=63), nullable=True),
        sa.Column('action', sa.String(length=32), nullable=False),
        sa.Column('project', sa.String(length=63), nullable=True),
        sa.Column('target', sa.String(length=127), nullable=True),
        sa.Column('outcome', sa.String(length=8), nullable=False),
        sa.Column('detail', sa.Text(), nullable=False),
        sa.Column('client', sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_audit_time', 'audit', ['time'])
    op.create_index('ix_audit_actor', 'audit', ['actor'])
    op.create_index('ix_audit_action', 'audit', ['action'])
    op.create_index('ix_audit_project_time', 'audit', ['project', 'time'])

    # every existing Job goes to the project "default"
    op.bulk_insert(projects, [{'id': 1, 'name': 'default', 'namespace': None,
                               'created_at': datetime.now(timezone.utc), 'created_by': None}])
    bind = op.get_bind()
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('project_id', sa.Integer(), nullable=True))
    bind.execute(sa.text("UPDATE jobs SET project_id = 1"))
    # the unique constraint on jobs.name was created unnamed in 0001: PostgreSQL named it
    # jobs_name_key; on SQLite batch mode recreates the table and names it by this convention
    unnamed = {'uq': 'uq_%(table_name)s_%(column_0_name)s'}
    old_unique = 'jobs_name_key' if bind.dialect.name == 'postgresql' else 'uq_jobs_name'
    with op.batch_alter_table('jobs', schema=None, naming_convention=unnamed) as batch_op:
        batch_op.alter_column('project_id', existing_type=sa.Integer(), nullable=False)
        batch_op.drop_constraint(old_unique, type_='unique')
        batch_op.create_unique_constraint('uq_jobs_project_name', ['project_id', 'name'])
        batch_op.create_foreign_key('fk_jobs_project_id', 'projects', ['project_id'], ['id'])
        batch_op.create_index('ix_jobs_project_id', ['project_id'], unique=False)
        batch_op.create_index('ix_jobs_name', ['name'], unique=False)
    if bind.dialect.name == 'postgresql':  # the explicit id 1 above did not advance the sequence
        bind.execute(sa.text(
            "SELECT setval(pg_get_serial_sequence('projects', 'id'), (SELECT max(id) FROM projects))"))

    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('namespace', sa.String(length=63), nullable=True))
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('actor', sa.String(length=63), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_column('actor')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('namespace')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_name')
        batch_op.drop_index('ix_jobs_project_id')
        batch_op.drop_constraint('fk_jobs_project_id', type_='foreignkey')
        batch_op.drop_constraint('uq_jobs_project_name', type_='unique')
        batch_op.create_unique_constraint('uq_jobs_name', ['name'])
        batch_op.drop_column('project_id')
    for table in ('audit', 'sessions', 'tokens', 'memberships', 'projects', 'users'):
        op.drop_table(table)
