"""Schema migrations: numbered `.sql` files applied once, in order, all pending ones in one
transaction (a failure applies none of them).

A transaction-level advisory lock serialises concurrent runners (a worker and `pricewatch
dev` starting together), so each file is applied exactly once.
"""

import re
from importlib import resources

import asyncpg
from asyncpg.pool import PoolConnectionProxy

MIGRATION_LOCK_KEY = 0x70726963  # "pric": any constant shared by every runner

CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


def migration_files() -> list[tuple[str, str]]:
    folder = resources.files("activities") / "sql"
    numbered = (f for f in folder.iterdir() if re.fullmatch(r"\d{4}_\w+\.sql", f.name))
    files = sorted(numbered, key=lambda f: f.name)
    return [(f.name.removesuffix(".sql"), f.read_text()) for f in files]


async def migrate(conn: asyncpg.Connection | PoolConnectionProxy) -> list[str]:
    """Apply pending migrations; return the versions this call applied."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
        await conn.execute(CREATE_LEDGER)
        done = {row["version"] for row in await conn.fetch("SELECT version FROM schema_migrations")}
        applied = []
        for version, sql in migration_files():
            if version in done:
                continue
            await conn.execute(sql)
            await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
            applied.append(version)
        return applied
