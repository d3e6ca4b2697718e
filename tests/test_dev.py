"""The README's run command, as a user runs it: `pricewatch dev --demo` starts the embedded
stack, checks the demo page, stops everything it started on Ctrl-C, and resumes on restart."""

import asyncio
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

from workers.embedded import free_port

pytestmark = pytest.mark.e2e
PRICEWATCH = str(Path(sys.executable).parent / "pricewatch")


@asynccontextmanager
async def dev_stack(data_dir: Path, ports: dict[str, int]) -> AsyncIterator[None]:
    env = {**os.environ, "PRICEWATCH_DATA_DIR": str(data_dir)}
    env.pop("PRICEWATCH_DATABASE_URL", None)
    args = [f"--{name}-port={port}" for name, port in ports.items()]
    process = await asyncio.create_subprocess_exec(
        PRICEWATCH, "dev", "--demo", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    seen: list[bytes] = []
    try:
        async with asyncio.timeout(90):
            while b"worker:    running" not in (line := await process.stdout.readline()):
                assert line, b"pricewatch dev exited early:\n" + b"".join(seen[-30:])
                seen.append(line)
        yield
    finally:
        process.send_signal(signal.SIGINT)  # what Ctrl-C does
        async with asyncio.timeout(60):
            await process.communicate()
    assert process.returncode == 0


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def demo_rows(data_dir: Path) -> int:
    url = (data_dir / "postgres.url").read_text().strip()
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM source_checks"))
    finally:
        await conn.close()


async def until_rows(data_dir: Path, more_than: int) -> int:
    for _ in range(60):
        if (rows := await demo_rows(data_dir)) > more_than:
            return rows
        await asyncio.sleep(1)
    raise AssertionError(f"no new check recorded (still {rows} rows)")


def running(pid: str) -> bool:
    """Alive and not a zombie waiting for init to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def test_dev_runs_the_demo_stops_cleanly_and_resumes(tmp_path: Path) -> None:
    ports = {"temporal": free_port(), "ui": free_port(), "demo": free_port()}
    async with dev_stack(tmp_path, ports):
        first_rows = await until_rows(tmp_path, 0)
        postmaster = (tmp_path / "pgdata" / "postmaster.pid").read_text().split()[0]
    assert not any(listening(port) for port in ports.values()), "a port is still served"
    assert not running(postmaster), "Postgres still runs"
    async with dev_stack(tmp_path, ports):
        assert await until_rows(tmp_path, first_rows) > first_rows  # same target, same history
