"""Run a command beside one embedded Postgres that every test process it starts shares.

    python mutation/pg.py COMMAND [ARG ...]

The tests take an external server from `PRICEWATCH_TEST_DATABASE_URL` (tests/conftest.py);
without it each pytest session starts its own, and a mutation run starts a session per
mutant (mutmut forks one per mutant, mutation/sql.py runs one per mutant), which would cost
a server start each time. This starts one in a temporary directory, runs the command with
the variable set, and stops and removes the server when the command ends. An already set
variable is kept (its server is used, nothing is started). Exits with the command's status.
"""

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import asyncpg

from workers.embedded import start_embedded_postgres

VARIABLE = "PRICEWATCH_TEST_DATABASE_URL"


async def _throwaway(url: str) -> None:
    """No flush to disk: the server is deleted afterwards, and each test's database is a
    copy of a template, which otherwise waits on the disk for every copy."""
    conn = await asyncpg.connect(url)
    try:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            await conn.execute(f"ALTER SYSTEM SET {setting} = off")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


def main(command: list[str]) -> int:
    if not command:
        print("usage: python mutation/pg.py COMMAND [ARG ...]", file=sys.stderr)
        return 2
    if os.environ.get(VARIABLE):
        return subprocess.call(command)
    tmp = Path(tempfile.mkdtemp(prefix="pricewatch-mutants-pg-"))
    try:
        url, server = start_embedded_postgres(tmp / "pgdata")
        try:
            asyncio.run(_throwaway(url))
            return subprocess.call(command, env={**os.environ, VARIABLE: url})
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
