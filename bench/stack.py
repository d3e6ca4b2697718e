"""The benchmark's own stack on 127.0.0.1 in a temporary directory: an embedded Postgres
behind a round-trip-counting proxy, one page server, and per design a fresh Temporal dev
server and the design's worker process. Everything started here is stopped by its PID and
the directory removed, also on failure or Ctrl-C.
"""

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg
from aiohttp import web

from activities.migrate import migrate
from bench.wire import RoundTripCounter
from workers.dev import DEV_SQLITE_PRAGMAS
from workers.embedded import (
    free_port,
    start_embedded_postgres,
    start_temporal_dev_server,
    stop_process,
)

REPO = Path(__file__).resolve().parent.parent
# About 200 bytes, the same on every request: each check is an unchanged check.
PAGE = (
    b"<html><head><title>Bench Cloud pricing</title></head><body><h1>Bench Cloud</h1>"
    b"<p>Small server: <b>EUR 4.49</b> per month</p><p>Large server: <b>EUR 17.99</b>"
    b" per month</p></body></html>"
)
TASK_QUEUE = "bench"
READY_TIMEOUT = 60.0


@dataclass(frozen=True)
class Database:
    direct_url: str
    """For the benchmark's own queries: not counted."""
    counted_url: str
    """For the design's processes: every round trip goes through the counting proxy."""


@dataclass(frozen=True)
class TemporalServer:
    process: subprocess.Popen[bytes]
    address: str
    db_file: Path

    def storage_bytes(self) -> int:
        """The SQLite store: the database file and its write-ahead log."""
        files = (self.db_file, self.db_file.with_name(self.db_file.name + "-wal"))
        return sum(path.stat().st_size for path in files if path.exists())


class Stack:
    def __init__(self, root: Path, postgres_url: str, postgres_pid: int) -> None:
        self.root = root
        self.postgres_url = postgres_url
        self.postgres_pid = postgres_pid
        socket_dir = parse_qs(urlsplit(postgres_url).query)["host"][0]
        self.wire = RoundTripCounter(f"{socket_dir}/.s.PGSQL.5432")
        self.wire_port = 0
        self.page_port = 0

    def page_url(self, target_id: str) -> str:
        return f"http://127.0.0.1:{self.page_port}/{target_id}"

    async def database(self, name: str) -> Database:
        """A fresh, migrated database for one design."""
        admin = await asyncpg.connect(self.postgres_url)
        try:
            await admin.execute(f"CREATE DATABASE {name}")
        finally:
            await admin.close()
        direct = _with_database(self.postgres_url, name)
        conn = await asyncpg.connect(direct)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        user = urlsplit(self.postgres_url).username or "postgres"
        counted = f"postgresql://{user}@127.0.0.1:{self.wire_port}/{name}?sslmode=disable"
        return Database(direct, counted)

    @contextlib.contextmanager
    def temporal(self, name: str) -> Iterator[TemporalServer]:
        """A dev server of the design's own, with the WAL pragmas `pricewatch dev` ships."""
        directory = self.root / name
        directory.mkdir()
        port = free_port()
        process = start_temporal_dev_server(
            directory / "temporal.db",
            port=port,
            ui_port=None,
            extra_args=DEV_SQLITE_PRAGMAS,
            log_file=directory / "temporal.log",
        )
        try:
            yield TemporalServer(process, f"127.0.0.1:{port}", directory / "temporal.db")
        finally:
            stop_process(process)

    @contextlib.asynccontextmanager
    async def process(
        self, name: str, args: list[str], env: dict[str, str]
    ) -> AsyncIterator[subprocess.Popen[bytes]]:
        """A design's worker: started, waited for until it says it polls, stopped by PID."""
        log_path = self.root / f"{name}.log"
        process = spawn(args, env, log_path)
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while b"polling" not in log_path.read_bytes():
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{name} did not start:\n{tail}")
                await asyncio.sleep(0.1)
            yield process
        finally:
            await asyncio.to_thread(stop_process, process, 45)

    def design_env(self, database: Database, temporal: TemporalServer | None) -> dict[str, str]:
        return {
            **os.environ,
            "TEMPORAL_ADDRESS": temporal.address if temporal else "",
            "PRICEWATCH_DATABASE_URL": database.counted_url,
            "PRICEWATCH_TASK_QUEUE": TASK_QUEUE,
            "PRICEWATCH_ALLOW_NETWORKS": "127.0.0.1/32",  # the page server
        }


async def _page(request: web.Request) -> web.Response:
    return web.Response(body=PAGE, content_type="text/html")


@contextlib.asynccontextmanager
async def open_stack() -> AsyncIterator[Stack]:
    root = Path(tempfile.mkdtemp(prefix="pricewatch-bench-"))
    try:
        url, postgres = await asyncio.to_thread(start_embedded_postgres, root / "pgdata")
        try:
            pid = postgres.get_pid()
            assert pid is not None
            stack = Stack(root, url, pid)
            stack.wire_port = await stack.wire.start()
            app = web.Application()
            app.router.add_get("/{target}", _page)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            stack.page_port = free_port()
            await web.TCPSite(runner, "127.0.0.1", stack.page_port).start()
            try:
                yield stack
            finally:
                await runner.cleanup()
                stack.wire.close()
        finally:
            await asyncio.to_thread(postgres.cleanup)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def spawn(args: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:  # the child keeps its own copy
        return subprocess.Popen(
            args, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip


def _with_database(url: str, database: str) -> str:
    return urlsplit(url)._replace(path=f"/{database}").geturl()


def python_module(module: str) -> list[str]:
    return [sys.executable, "-m", module]
