"""Shared fixtures: a real Postgres (embedded, or `PRICEWATCH_TEST_DATABASE_URL`) with a
fresh database per test cloned from a migrated template, and the Temporal test servers."""

import asyncio
import contextlib
import json
import multiprocessing.forkserver
import os
import shutil
import socket
import sys
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pytest
from aiohttp import web
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope
from hypothesis import settings
from playwright.async_api import Browser, async_playwright
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from activities import checks, freezes, notify
from activities.migrate import migrate
from activities.notify import SmtpSettings
from client.temporal import DATA_CONVERTER, register_search_attributes, start_monitor
from fetchers.guard import AddressPolicy
from fetchers.http import new_client
from pricewatch import notices
from pricewatch.models import MonitorState, TargetConfig
from tests.chaos import procs
from tests.chaos.stack import serve
from tests.origins import Answer, Origin, StartOrigin
from workers import lifeline, observability
from workers.chromium import chromium_args, find_chromium
from workers.embedded import (
    find_binary,
    free_port,
    start_embedded_postgres,
    start_temporal_dev_server_anywhere,
    stop_process,
)

# No per-example deadline: an example's time says how busy the machine is, not whether the
# code is right (speed is measured by `bench`), and a busy CI made examples "flaky" by it.
settings.register_profile("pricewatch", deadline=None)
settings.load_profile("pricewatch")

# One per test process (pytest-xdist), which may share an external server.
TEMPLATE_DB = f"pricewatch_template_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
# The tests' pages and receivers live on 127.0.0.1, which the SSRF guard refuses by default.
LOOPBACK = AddressPolicy.allowing(["127.0.0.1/32"])


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """The render worker's Chromium, driven by Playwright, for the dashboard's browser tests."""
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(find_chromium()), args=chromium_args()
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture(autouse=True)
def never_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's process starts never frozen: the stall registry is process-wide, and a
    freeze one test feeds it was named on another test's skipped slots (CI, 1.10.0)."""
    stalls = freezes.Stalls()
    for module in (freezes, checks, notify, observability):
        monkeypatch.setattr(module, "STALLS", stalls)


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """The server's admin URL: external if configured, else an embedded one in a temp dir."""
    external = os.environ.get("PRICEWATCH_TEST_DATABASE_URL")
    if external:
        yield external
        return
    tmp = Path(tempfile.mkdtemp(prefix="pricewatch-pg-"))
    lifeline.remove(str(tmp))  # also if this run is interrupted or killed
    url, server = start_embedded_postgres(tmp / "pgdata")
    try:
        yield url
    finally:
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under `make mutants` (mutmut 3.8) each mutant's session is a process forked, through
    mutmut's fork server, from the one that recorded the test map, and that one started
    multiprocessing's forkserver (`isolated.run`, for the first notice rendered): the copy
    of its state says "running" with a pid that is not this process's child, so the next
    render fails with ChildProcessError, and every mutant a test that renders reaches was
    counted killed by that failure. Forget it: the first render here starts one of its own."""
    if "MUTANT_UNDER_TEST" not in os.environ:
        return
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if server is None or pid is None:
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # another process's child: not one this process can use
        with contextlib.suppress(OSError, TypeError):
            os.close(server._forkserver_alive_fd)
        server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None


@pytest.fixture(scope="session")
async def template_database(postgres_server_url: str) -> AsyncIterator[str]:
    """A migrated database that every test's database is cloned from (cheap per test).

    Under `make mutants` each mutant is a session of its own in a forked process, two at a
    time on one server (mutation/pg.py): each gets a template of its own, dropped after."""
    mutant = bool(os.environ.get("MUTANT_UNDER_TEST"))
    name = f"{TEMPLATE_DB}_{os.getpid()}" if mutant else TEMPLATE_DB
    admin = await asyncpg.connect(postgres_server_url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name}")
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    conn = await asyncpg.connect(with_database(postgres_server_url, name))
    try:
        await migrate(conn)
    finally:
        await conn.close()
    yield name
    if mutant:
        admin = await asyncpg.connect(postgres_server_url)
        try:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await admin.close()


@pytest.fixture
async def database_url(postgres_server_url: str, template_database: str) -> AsyncIterator[str]:
    name = f"test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres_server_url)
    try:
        await admin.execute(f"CREATE DATABASE {name} TEMPLATE {template_database}")
        yield with_database(postgres_server_url, name)
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=25)
    try:
        yield pool
    finally:
        await pool.close()


def guard_children(name: bytes) -> None:
    """Have this process's lifeline stop its children named `name` (a server the SDK
    started) if the run is killed. The embedded Postgres and Temporal dev servers are
    guarded where they start (workers/embedded.py)."""
    for child in procs.processes():
        if child.ppid == os.getpid() and name in child.cmdline.split(b"\0", 1)[0]:
            lifeline.guard(child.pid)


@pytest.fixture
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server of the test's own (about a second to start). Shared servers
    were flaky: a task handed to a worker as it shut down holds the clock until that task
    times out, stalling the next test's sleeps."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=DATA_CONVERTER,
        test_server_existing_path=find_binary("temporal-test-server"),
    )
    guard_children(b"temporal-test-server")
    try:
        await register_search_attributes(env.client)
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(time_skipping_env: WorkflowEnvironment) -> Client:
    return time_skipping_env.client


@dataclass(frozen=True)
class Hold:
    arrived: asyncio.Event
    release: asyncio.Event


class PageServer:
    """A real HTTP server on 127.0.0.1 whose pages a test edits while checks run."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, str]] = {}
        self.queued: dict[str, list[tuple[int, str, dict[str, str]]]] = {}
        self.hits: Counter[str] = Counter()
        self.held: dict[str, Hold] = {}
        self.base_url = ""

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def set(self, path: str, body: str, status: int = 200) -> None:
        self.pages[path] = (status, body)

    def queue(
        self, path: str, *responses: tuple[int, str], headers: dict[str, str] | None = None
    ) -> None:
        """Answer the next requests with these (and headers), then with the page as set."""
        self.queued.setdefault(path, []).extend((s, b, headers or {}) for s, b in responses)

    def hold_next(self, path: str) -> "Hold":
        """Keep the next request to `path` waiting (with the page as it is now) until
        released: a fetch stuck on a slow server."""
        hold = Hold(arrived=asyncio.Event(), release=asyncio.Event())
        self.held[path] = hold
        return hold

    async def handle(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        queued = self.queued.get(request.path)
        status, body, headers = (
            queued.pop(0) if queued else (*self.pages.get(request.path, (404, "no")), {})
        )
        if (hold := self.held.pop(request.path, None)) is not None:
            hold.arrived.set()
            await hold.release.wait()
        return web.Response(status=status, text=body, content_type="text/html", headers=headers)


@pytest.fixture
async def page_server() -> AsyncIterator[PageServer]:
    pages = PageServer()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", pages.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    pages.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        yield pages
    finally:
        await runner.cleanup()


# The tests that mostly wait on real time (a minute boundary, a lease running out, a timed
# run), longest first, as measured on a fresh clone (issue 41; seconds there). Started first,
# they wait beside the short tests; started last, one of them was the run's tail.
LONG_FIRST = (
    "tests/test_chaos.py::test_a_short_seeded_chaos_run",  # 147: a one-minute chaos run
    "tests/test_calendar_cli.py::test_a_calendar_target_from_add_to_export",  # 98
    "tests/test_api_schema.py::test_the_api_passes_every_schemathesis_check",  # 80
    "tests/test_bench.py::test_bench_runs_every_design",  # 73
    "tests/test_render.py::test_a_render_worker_killed_mid_render",  # 73
    "tests/test_freezes.py::test_a_worker_frozen_past_its_lease",  # 70
    "tests/test_outages.py::test_a_postgres_outage_under_pricewatch_dev",  # 61
    "tests/test_calendar_cli.py::test_a_worker_killed_mid_check",  # 61
    "tests/test_recovery.py::test_every_target_is_checked_within",  # 53
    "tests/test_e2e.py::test_three_workers",  # 52
    "tests/test_calendar_cli.py::test_apply_spreads",  # 52
    "tests/test_grid_e2e.py::test_resets",  # 44
)


def _rank(item: pytest.Item) -> int:
    """Where a test goes in the run: the long waiters first, then the other tests with a real
    Temporal server and workers, then the rest (unit tests fill the gaps at the end)."""
    for rank, prefix in enumerate(LONG_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    return len(LONG_FIRST) + ("temporal_address" not in getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first (a stable sort: a module's other tests stay together, in file order),
    handed out one at a time (`--maxschedchunk 1` in pyproject.toml): no worker is left
    with a long test to start once the others have run out of work."""
    items.sort(key=_rank)


_exit_status = 0


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _exit_status
    _exit_status = exitstatus


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave without interpreter teardown, once every report is written.

    The Temporal SDK's native threads can abort a finalizing interpreter
    (temporalio/sdk-python#300), turning a green run into exit code 134. Not under
    `make mutants`: mutmut runs pytest inside its own process, which must go on.
    """
    if "MUTANT_UNDER_TEST" in os.environ:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status)


def verified(body: bytes, headers: dict[str, str], secrets: list[str]) -> Any:
    """The payload, if one of the secrets of the channels that point here signed it (several
    targets may share a receiver); raises if none did."""
    for secret in secrets[:-1]:
        with contextlib.suppress(WebhookVerificationError):
            return Webhook(secret).verify(body, headers)
    return Webhook(secrets[-1]).verify(body, headers)


@dataclass
class WebhookReceiver:
    """A real endpoint on 127.0.0.1 that verifies Standard Webhooks signatures (with the
    reference `standardwebhooks` package) and logs every delivery it accepts."""

    pool: asyncpg.Pool | None = None
    url: str = ""
    answers: list[int] = field(default_factory=list)
    received: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    hold: Hold | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        assert self.pool is not None
        secrets = await self.pool.fetch(
            "SELECT secret FROM channels WHERE destination = $1", str(request.url)
        )
        payload = verified(body, dict(request.headers), [s["secret"] for s in secrets])
        self.received.append((request.headers["webhook-id"], payload))
        if self.hold is not None:
            hold, self.hold = self.hold, None
            hold.arrived.set()
            await hold.release.wait()
        return web.Response(status=self.answers.pop(0) if self.answers else 204)

    def ids(self) -> list[str]:
        return [webhook_id for webhook_id, _ in self.received]


@pytest.fixture
async def webhook_receiver(pool: asyncpg.Pool) -> AsyncIterator[WebhookReceiver]:
    receiver = WebhookReceiver(pool=pool)
    async with serve([web.post("/hook", receiver.handle)]) as url:
        receiver.url = f"{url}/hook"
        yield receiver


class MailSink:
    """aiosmtpd handler: keeps what it accepts; scripted SMTP answers first."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.answers: list[str] = []

    async def handle_DATA(self, server: object, session: object, envelope: Envelope) -> str:
        if self.answers:
            return self.answers.pop(0)
        assert isinstance(envelope.content, bytes)
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture
def smtp_server() -> Iterator[tuple[MailSink, SmtpSettings]]:
    """A real SMTP server (aiosmtpd) on 127.0.0.1, in its own thread."""
    sink = MailSink()
    port = free_port()
    controller = Controller(sink, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield sink, SmtpSettings(host="127.0.0.1", port=port, sender="pricewatch@test.local")
    finally:
        controller.stop()


Start = Callable[..., Awaitable[WorkflowHandle[Any, None]]]


@pytest.fixture
async def start(time_skipping_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Start]:
    """Start a target's workflow; terminate it after the test, since a workflow left open
    with no worker would stall time skipping for every later test."""
    handles: list[WorkflowHandle[Any, None]] = []

    async def start_target(config: TargetConfig, **state: Any) -> WorkflowHandle[Any, None]:
        state_ = MonitorState(config=config, **state)
        handle = await start_monitor(time_skipping_env.client, state_, task_queue)
        handles.append(handle)
        return handle

    yield start_target
    for handle in handles:
        with contextlib.suppress(RPCError):
            await time_skipping_env.client.get_workflow_handle(handle.id).terminate("test done")


@dataclass
class Site:
    """A pricing page whose HTML the test edits; it answers If-None-Match with 304."""

    html: str = ""
    etag: str | None = None
    url: str = ""
    conditional_hits: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        if self.etag and request.headers.get("if-none-match") == self.etag:
            self.conditional_hits += 1
            return web.Response(status=304, headers={"etag": self.etag})
        headers = {"etag": self.etag} if self.etag else {}
        return web.Response(text=self.html, content_type="text/html", headers=headers)


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    site = Site()
    async with serve([web.get("/pricing", site.handle)]) as url:
        site.url = f"{url}/pricing"
        yield site


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with new_client(LOOPBACK) as client:
        yield client


@pytest.fixture(scope="module")
def temporal_address() -> Iterator[str]:
    """A dev server of the test module's own (end-to-end tests), with continue-as-new
    suggested after 40 events."""
    with tempfile.TemporaryDirectory(prefix="pricewatch-temporal-") as tmp:
        lifeline.remove(tmp)  # also if this run is interrupted or killed
        server, port = start_temporal_dev_server_anywhere(
            Path(tmp) / "temporal.db",
            ui_port=None,
            extra_args=("--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=40"),
        )
        try:
            yield f"127.0.0.1:{port}"
        finally:
            stop_process(server)


@pytest.fixture
def env(temporal_address: str, database_url: str, task_queue: str) -> dict[str, str]:
    """The environment of a `pricewatch` process (CLI or worker) against that server."""
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": temporal_address,
        "PRICEWATCH_DATABASE_URL": database_url,
        "PRICEWATCH_TASK_QUEUE": task_queue,
        "PRICEWATCH_MIN_INTERVAL": "1s",  # test-only: real seconds instead of 15 minutes
        "PRICEWATCH_ALLOW_NETWORKS": "127.0.0.1/32",  # the test pages and receivers
    }


MATTERMOST_TOKEN = "3ccdd113474722377935511fc85d3dd4"
GOTIFY_TOKEN = "AbCdEfGhIjKlMnO"


@dataclass
class Services:
    """Five self-hosted services in one app: what each received, and scripted answers."""

    base: str = ""
    received: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    answers: dict[str, list[int]] = field(default_factory=dict)
    hold: asyncio.Event | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        kind = {"/": "ntfy", "/message": "gotify"}.get(request.path, request.path.split("/")[1])
        kind = "mmost" if kind == "hooks" else kind
        if request.content_type == "application/x-www-form-urlencoded":
            body: dict[str, Any] = dict(await request.post())
        else:
            body = json.loads(await request.read())
        self.received.append((kind, body))
        self.arrived.set()
        if self.hold is not None:
            await self.hold.wait()
        scripted = self.answers.get(kind)
        status = scripted.pop(0) if scripted else 200
        return web.json_response({"error": "invalid token"} if status >= 400 else {}, status=status)

    def urls(self) -> dict[str, str]:
        host = self.base.removeprefix("http://")
        return {
            "json": f"json://{host}/json",
            "form": f"form://{host}/form",
            "ntfy": f"ntfy://{host}/prices",
            "gotify": f"gotify://{host}/{GOTIFY_TOKEN}",
            "mmost": f"mmost://{host}/{MATTERMOST_TOKEN}",
        }

    def texts(self, kind: str) -> list[str]:
        """Each message's title and body as one text (the services name them apart)."""
        return [" ".join(str(v) for v in body.values()) for k, body in self.received if k == kind]


@pytest.fixture
async def services_app() -> AsyncIterator[Services]:
    app = Services()
    routes = [web.post(path, app.handle) for path in ("/", "/message", "/json", "/form")]
    async with serve([*routes, web.post("/hooks/{token}", app.handle)]) as base:
        app.base = base
        yield app


@pytest.fixture
async def origins() -> AsyncIterator[StartOrigin]:
    """Starts origins (all stopped at the end, also on failure)."""
    started: list[Origin] = []

    async def start(answer: Answer, host: str = "127.0.0.1", port: int = 0) -> Origin:
        origin = Origin(answer)
        started.append(origin)
        await origin.start(host, port)
        return origin

    try:
        yield start
    finally:
        for origin in started:
            await origin.stop()


Held = tuple[threading.Event, threading.Event]


@pytest.fixture
def held_after_the_claim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    """The first render of a notice (after its claim, before its send) waits to be let go, as
    a worker stopped or starved there would; the real render follows. Returns (claimed, go)."""
    claimed, go = threading.Event(), threading.Event()
    real_render = notices.render

    def render(*args: Any) -> notices.Message:
        if not claimed.is_set():
            claimed.set()
            assert go.wait(timeout=60)
        return real_render(*args)

    monkeypatch.setattr(notices, "render", render)
    yield claimed, go
    go.set()
    freezes.STALLS.stop()
    freezes.STALLS.notices_given_up.clear()
