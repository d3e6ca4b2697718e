"""Schema migrations: numbered `.sql` files applied once, in order, all pending ones in one
transaction (a failure applies none of them).

A transaction-level advisory lock serialises concurrent runners (a worker and `pricewatch
dev` starting together), so each file is applied exactly once. The schema starts at 1.0
with one file; a database that a development build created before 1.0 (its ledger names
the old steps in `sql/legacy/`) gets the old steps it lacks, which end at that same schema.
"""

import re
from importlib import resources

import asyncpg
from asyncpg.pool import PoolConnectionProxy

MIGRATION_LOCK_KEY = 0x70726963  # "pric": any constant shared by every runner
# A migration may rewrite a big table: its statements are not held to the pool's statement
# timeout (activities.store.STATEMENT_TIMEOUT), only to this.
MIGRATION_SECONDS = 3600.0

CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


# The schema the legacy steps end at.
LEGACY_END = "0001_schema"


def migration_files(folder: str = "sql") -> list[tuple[str, str]]:
    path = resources.files("activities") / folder
    numbered = (f for f in path.iterdir() if re.fullmatch(r"\d{4}_\w+\.sql", f.name))
    files = sorted(numbered, key=lambda f: f.name)
    return [(f.name.removesuffix(".sql"), f.read_text()) for f in files]


async def migrate(conn: asyncpg.Connection | PoolConnectionProxy) -> list[str]:
    """Apply pending migrations; return the versions this call applied."""
    async with conn.transaction():
        # Another process may be migrating: wait for it as long as a migration may take.
        await conn.execute(
            "SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY, timeout=MIGRATION_SECONDS
        )
        await conn.execute(CREATE_LEDGER)
        done = {row["version"] for row in await conn.fetch("SELECT version FROM schema_migrations")}
        applied = []
        legacy = migration_files("sql/legacy")
        if LEGACY_END not in done and done & {version for version, _ in legacy}:
            applied += await _apply(conn, legacy, done)
            await _record(conn, LEGACY_END)
            done.add(LEGACY_END)
        return applied + await _apply(conn, migration_files(), done)


async def _apply(
    conn: asyncpg.Connection | PoolConnectionProxy, files: list[tuple[str, str]], done: set[str]
) -> list[str]:
    applied = []
    for version, sql in files:
        if version not in done:
            await conn.execute(sql, timeout=MIGRATION_SECONDS)
            await _record(conn, version)
            applied.append(version)
    return applied


async def _record(conn: asyncpg.Connection | PoolConnectionProxy, version: str) -> None:
    await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
