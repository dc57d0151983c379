"""Alembic environment: runs migrations on the engine handed over by rlark.store.db.upgrade."""

from alembic import context

from rlark.store.models import Base

target_metadata = Base.metadata


def run_migrations_online() -> None:
    engine = context.config.attributes["engine"]
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # batch mode rebuilds a table by copying it and dropping the old one; with foreign
            # keys on, that DROP would cascade to every row referring to it (a rebuilt `jobs`
            # would take every Run, Worker and Event with it). The pragma only works outside a
            # transaction, so it is set before the migration's transaction begins.
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        try:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=sqlite,
            )
            with context.begin_transaction():
                if connection.dialect.name == "postgresql":
                    # replicas starting together migrate one after the other: the second finds
                    # the schema at head (the lock is released when the transaction ends)
                    from sqlalchemy import text

                    from rlark.store.lock import MIGRATION_KEY

                    connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_KEY})
                context.run_migrations()
                if sqlite:
                    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise RuntimeError(f"the migration left rows with dangling references: {broken[:5]}")
            connection.commit()
        finally:
            if sqlite:
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                connection.commit()


run_migrations_online()
