"""Status types: CHECK constraints on every phase, cause, desired-state and Event-type column;
reasons nullable (no reason: NULL instead of ''); runs.conditions (AllJoined, HeadReady,
ReconcileError)

Existing rows are converted in place: '' reasons become NULL (and back on downgrade); every
other value is kept as it is. A reason this version does not know is kept too (it reads as an
unrecognised reason, rlark.status.Reason.unrecognised). A phase, cause, desired state or Event
type outside the lists below cannot be constrained: the upgrade then stops before changing
anything and names the table, column and values (no RLark version wrote such values).

The value lists are this revision's, written out here on purpose: a migration must not change
when rlark.status grows (a later revision widens a constraint).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

RUN_PHASES = ('Pending', 'Starting', 'Running', 'Succeeded', 'Failed', 'Stopping', 'Stopped')
WORKER_PHASES = ('Pending', 'Starting', 'Preparing', 'Prepared', 'WaitingForHead', 'StartingRay',
                 'RayStarted', 'Joining', 'Joined', 'Running', 'Succeeded', 'Failed', 'Stopped',
                 'Exited', 'Completed', 'Terminated')
CAUSES = ('Submitted', 'Started', 'Restarted', 'Updated', 'Retry')
DESIRED = ('Running', 'Stopped')
EVENT_TYPES = ('Normal', 'Warning')

#: (table, column, allowed values, NULL allowed, constraint name)
CHECKS = (
    ('jobs', 'desired', DESIRED, False, 'ck_jobs_desired'),
    ('jobs', 'phase', RUN_PHASES, False, 'ck_jobs_phase'),
    ('runs', 'cause', CAUSES, False, 'ck_runs_cause'),
    ('runs', 'phase', RUN_PHASES, False, 'ck_runs_phase'),
    ('tasks', 'phase', RUN_PHASES, False, 'ck_tasks_phase'),
    ('workers', 'phase', WORKER_PHASES, False, 'ck_workers_phase'),
    ('events', 'type', EVENT_TYPES, False, 'ck_events_type'),
    ('events', 'from_phase', RUN_PHASES, True, 'ck_events_from_phase'),
    ('events', 'to_phase', RUN_PHASES, True, 'ck_events_to_phase'),
)
REASON_TABLES = ('jobs', 'runs', 'workers')
TABLES = ('jobs', 'runs', 'tasks', 'workers', 'events')


def _condition(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _refuse_unknown_values() -> None:
    conn = op.get_bind()
    for table, column, values, _, _ in CHECKS:
        found = conn.execute(sa.text(
            f"SELECT DISTINCT {column} FROM {table} WHERE {column} IS NOT NULL AND NOT "
            f"({_condition(column, values)})")).scalars().all()
        if found:
            raise RuntimeError(
                f"migration 0009: {table}.{column} holds {sorted(found)!r}, which is not one of "
                f"{list(values)}; nothing was changed. Fix those rows (or restore the RLark "
                "version that wrote them) and start the server again.")


def upgrade() -> None:
    _refuse_unknown_values()
    for table in REASON_TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column('reason', existing_type=sa.String(length=64), nullable=True)
        op.execute(sa.text(f"UPDATE {table} SET reason = NULL WHERE reason = ''"))
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('conditions', sa.JSON(), nullable=False,
                                      server_default='[]'))
    for table in TABLES:
        # SQLite: one rebuild of the table with all its constraints (batch mode copies every
        # row; migrations/env.py keeps foreign keys off meanwhile, so nothing cascades)
        with op.batch_alter_table(table, schema=None) as batch_op:
            for t, column, values, _, name in CHECKS:
                if t == table:
                    batch_op.create_check_constraint(name, _condition(column, values))


def downgrade() -> None:
    for table in reversed(TABLES):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for t, _, _, _, name in CHECKS:
                if t == table:
                    batch_op.drop_constraint(name, type_='check')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('conditions')
    for table in REASON_TABLES:
        op.execute(sa.text(f"UPDATE {table} SET reason = '' WHERE reason IS NULL"))
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column('reason', existing_type=sa.String(length=64), nullable=False)
