"""The browser's guard: the proxy Chromium sends every request through.

Real sockets on 127.0.0.1 only. Each "private server" counts its connections and the proxy's
one way out (`open_tcp`) is watched, so a refusal is shown to reach nothing, not only to
answer 403. Names are resolved by a stand-in for the guard's resolver where a test needs a
name to mean something (a public-then-private rebinder, a private answer).
"""

import asyncio
import contextlib
import ipaddress
import json
import os
import socket

import httpx
import pytest
from aiohttp import web

from fetchers import browser_proxy, guard
from fetchers.browser_proxy import GuardedProxy, ProxySession
from fetchers.guard import AddressPolicy
from tests.conftest import LOOPBACK
from tests.origins import (
    Origin,
    StartOrigin,
    asking,
    connect,
    credentials,
    echo_answer,
    get,
    http_answer,
)

NO_PRIVATE = AddressPolicy()


async def flood_answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, o: Origin
) -> None:
    chunk = b"x" * 65536
    for _ in range(64):  # 4 MiB, unless the connection ends first
        writer.write(chunk)
        await writer.drain()


async def upgrade_answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, o: Origin
) -> None:
    o.heads.append(await reader.readuntil(b"\r\n\r\n"))
    writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\n\r\n")  # fmt: skip
    await echo_answer(reader, writer, o)


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every connection the proxy opens (or tries to), as (address, port)."""
    seen: list[tuple[str, int]] = []
    real = browser_proxy.open_tcp

    async def watched(address: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        seen.append((address, port))
        return await real(address, port)

    monkeypatch.setattr(browser_proxy, "open_tcp", watched)
    return seen


def resolving(monkeypatch: pytest.MonkeyPatch, *answers: list[str]) -> list[str]:
    """The guard's resolver answers with these in turn (the last one ever after); returns
    the names it was asked, one per resolution."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[guard.IPAddress]:
        answer = answers[min(len(asked), len(answers) - 1)]
        asked.append(host)
        return [ipaddress.ip_address(a) for a in answer]

    monkeypatch.setattr(guard, "resolve", resolve)
    return asked


def client(proxy: GuardedProxy, session: ProxySession | None) -> httpx.AsyncClient:
    auth = f"{session.username}:{session.password}@" if session else ""
    return httpx.AsyncClient(
        proxy=f"http://{auth}127.0.0.1:{proxy.port}", trust_env=False, timeout=5
    )


async def status_of(proxy: GuardedProxy, head: str) -> int:
    async with asking(proxy, head) as (answer, _, _):
        return int(answer.split(b" ")[1])


async def test_without_live_credentials_the_answer_is_407(
    origins: StartOrigin, attempts: list[tuple[str, int]]
) -> None:
    origin = await origins(http_answer)
    url = f"http://127.0.0.1:{origin.port}/page"
    async with GuardedProxy(LOOPBACK) as proxy:
        async with client(proxy, None) as http:
            answer = await http.get(url)
        assert answer.status_code == 407
        assert answer.headers["proxy-authenticate"] == 'Basic realm="pricewatch"'
        assert await status_of(proxy, connect(f"127.0.0.1:{origin.port}", None)) == 407
        wrong = ProxySession(proxy.new_session().username, "not-the-password")
        assert await status_of(proxy, connect(f"127.0.0.1:{origin.port}", wrong)) == 407

        session = proxy.new_session()
        async with client(proxy, session) as http:
            assert (await http.get(url)).status_code == 200
            proxy.end_session(session.username)
            assert (await http.get(url)).status_code == 407
    assert origin.connections == 1 and len(attempts) == 1


async def test_a_get_reaches_the_page_in_origin_form_without_proxy_headers() -> None:
    async def page(request: web.Request) -> web.Response:
        seen = {"method": request.method, "path": request.path_qs, "body": await request.text(),
                "headers": {k.lower(): v for k, v in request.headers.items()}}  # fmt: skip
        return web.Response(text=json.dumps(seen), content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        async with GuardedProxy(LOOPBACK) as proxy:
            session = proxy.new_session()
            async with client(proxy, session) as http:
                got = await http.get(f"http://127.0.0.1:{port}/pricing?plan=pro")
                posted = await http.post(f"http://127.0.0.1:{port}/form", content=b"a=1")
            report = proxy.end_session(session.username)
    finally:
        await runner.cleanup()
    assert got.status_code == 200 and got.headers["connection"] == "close"
    seen = got.json()
    assert seen["method"] == "GET" and seen["path"] == "/pricing?plan=pro"
    assert seen["headers"]["host"] == f"127.0.0.1:{port}"
    assert seen["headers"]["connection"] == "close"
    assert "proxy-authorization" not in seen["headers"]
    assert posted.json()["method"] == "POST" and posted.json()["body"] == "a=1"
    assert report.requests == 2 and report.bytes > 0
    assert report.refused == [] and not report.over_budget


async def test_a_connect_tunnel_carries_bytes_both_ways_and_passes_on_the_end(
    origins: StartOrigin,
) -> None:
    origin = await origins(echo_answer)
    async with GuardedProxy(LOOPBACK) as proxy:
        session = proxy.new_session()
        async with asking(proxy, connect(f"127.0.0.1:{origin.port}", session)) as (
            answer, reader, writer,
        ):  # fmt: skip
            assert answer.startswith(b"HTTP/1.1 200")
            writer.write(b"hello")
            assert await asyncio.wait_for(reader.readexactly(5), 5) == b"HELLO"
            writer.write_eof()  # the origin sees the end of the upload, and answers it
            assert await asyncio.wait_for(reader.read(), 5) == b"bye"
        report = proxy.end_session(session.username)
    assert report.requests == 1 and report.bytes == 13  # hello, HELLO, bye


async def bulk_answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, o: Origin
) -> None:
    """At the end of the client's upload, 2 MiB, then the server closes."""
    await reader.read()
    writer.write(b"y" * BULK)
    await writer.drain()


BULK = 1024 * 1024


async def test_a_tunnel_delivers_its_last_bytes_after_the_origin_closes(
    origins: StartOrigin,
) -> None:
    """The client ends its upload, the origin sends 1 MiB and closes before the client (with
    a small receive buffer) has read it: a half-closed tunnel still delivers it all."""
    origin = await origins(bulk_answer)
    async with GuardedProxy(LOOPBACK) as proxy:
        session = proxy.new_session()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", proxy.port))
        sock.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=sock)
        try:
            writer.write(connect(f"127.0.0.1:{origin.port}", session).encode())
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            writer.write_eof()
            await asyncio.wait_for(origin.ended.wait(), 5)  # the origin sent it all and left
            await asyncio.sleep(0.1)
            assert len(await asyncio.wait_for(reader.read(), 5)) == BULK
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def test_a_407_reaches_a_client_whose_body_is_still_unread(origins: StartOrigin) -> None:
    """The proxy reads (and drops) the body before closing: an unread one could make the
    close a reset. (Linux delivers the answer either way; this pins the behaviour.)"""
    origin = await origins(http_answer)
    async with GuardedProxy(LOOPBACK) as proxy:
        body = "b" * (1024 * 1024)
        head = (f"POST http://127.0.0.1:{origin.port}/form HTTP/1.1\r\n"
                f"Content-Length: {len(body)}\r\n\r\n{body}")  # fmt: skip
        assert await status_of(proxy, head) == 407
    assert origin.connections == 0


async def test_a_websocket_upgrade_in_absolute_form_is_handed_over(origins: StartOrigin) -> None:
    origin = await origins(upgrade_answer)
    async with GuardedProxy(LOOPBACK) as proxy:
        session = proxy.new_session()
        upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\nProxy-Connection: keep-alive\r\n"
        url = f"http://127.0.0.1:{origin.port}/socket"
        async with asking(proxy, get(url, session, upgrade)) as (answer, reader, writer):
            assert answer.startswith(b"HTTP/1.1 101")
            writer.write(b"frame")
            assert await asyncio.wait_for(reader.readexactly(5), 5) == b"FRAME"
    head = origin.heads[0].decode()
    assert head.startswith("GET /socket HTTP/1.1\r\n")
    assert "Upgrade: websocket\r\n" in head and "Connection: Upgrade\r\n" in head
    assert "Proxy-" not in head and "ignored.example" not in head


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "2130706433", "127.0.0.2"])
@pytest.mark.parametrize("method", ["GET", "CONNECT"])
async def test_loopback_is_refused_and_nothing_reaches_it(
    origins: StartOrigin, attempts: list[tuple[str, int]], host: str, method: str
) -> None:
    """The default policy (no private networks); `localhost` is a name that resolves to
    a private address."""
    origin = await origins(http_answer)
    target = f"{host}:{origin.port}"
    async with GuardedProxy(NO_PRIVATE) as proxy:
        session = proxy.new_session()
        # Raw heads: httpx writes an IPv6 literal's absolute URL without its brackets.
        head = (
            get(f"http://{target}/page", session) if method == "GET" else connect(target, session)
        )
        status = await status_of(proxy, head)
        report = proxy.end_session(session.username)
    assert status == 403
    assert len(report.refused) == 1
    assert report.refused[0].startswith(f"refused {target}: it resolves to ")
    assert "not a public address" in report.refused[0]
    if host == "127.0.0.1":
        expected = f"refused 127.0.0.1:{origin.port}: it resolves to 127.0.0.1, not a public"
        assert report.refused[0].startswith(expected)
    assert origin.connections == 0 and attempts == []


async def test_a_name_with_any_private_address_is_refused(
    monkeypatch: pytest.MonkeyPatch, attempts: list[tuple[str, int]]
) -> None:
    resolving(monkeypatch, ["93.184.215.14", "10.0.0.7"])
    async with GuardedProxy(NO_PRIVATE) as proxy:
        session = proxy.new_session()
        assert await status_of(proxy, connect("pricing.example:443", session)) == 403
        report = proxy.end_session(session.username)
    assert report.refused == [
        "refused pricing.example:443: it resolves to 10.0.0.7, not a public address "
        "(allow it with PRICEWATCH_ALLOW_NETWORKS)"
    ]
    assert attempts == []


@pytest.mark.parametrize("method", ["GET", "CONNECT"])
async def test_a_rebinding_name_is_connected_to_at_the_address_that_was_checked(
    origins: StartOrigin,
    monkeypatch: pytest.MonkeyPatch,
    attempts: list[tuple[str, int]],
    method: str,
) -> None:
    """The name resolves to an allowed address, then (every later time) to a forbidden one
    where a server listens on the same port: the request resolves once and connects where
    it checked; the next request resolves again and is refused."""
    allowed = await origins(http_answer, "127.0.0.1")
    forbidden = await origins(http_answer, "127.0.0.2", allowed.port)
    asked = resolving(monkeypatch, ["127.0.0.1"], ["127.0.0.2"])
    target = f"rebind.example:{allowed.port}"
    async with GuardedProxy(LOOPBACK) as proxy:
        session = proxy.new_session()
        if method == "GET":
            async with client(proxy, session) as http:
                first = await http.get(f"http://{target}/page?x=1")
                assert (first.status_code, first.text) == (200, "ok")
                # The origin's keep-alive is not the browser's: one request per connection.
                assert first.headers["connection"] == "close" and "keep-alive" not in first.headers
                second = (await http.get(f"http://{target}/page")).status_code
        else:
            async with asking(proxy, connect(target, session)) as (answer, reader, writer):
                assert answer.startswith(b"HTTP/1.1 200")
                writer.write(f"GET / HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
                assert (await asyncio.wait_for(reader.read(), 5)).endswith(b"\r\n\r\nok")
            second = await status_of(proxy, connect(target, session))
        report = proxy.end_session(session.username)
    assert asked == ["rebind.example", "rebind.example"]  # once per request
    assert attempts == [("127.0.0.1", allowed.port)]
    assert allowed.connections == 1 and forbidden.connections == 0
    assert second == 403 and report.refused == [
        f"refused {target}: it resolves to 127.0.0.2, not a public address "
        "(allow it with PRICEWATCH_ALLOW_NETWORKS)"
    ]
    if method == "GET":
        head = allowed.heads[0].decode()
        assert head.startswith("GET /page?x=1 HTTP/1.1\r\n")
        assert f"Host: {target}\r\n" in head and "Connection: close\r\n" in head
        assert "Proxy-Authorization" not in head


@pytest.mark.parametrize("policy", [NO_PRIVATE, LOOPBACK], ids=["default", "loopback"])
async def test_the_metadata_address_is_refused_without_a_connection_attempt(
    monkeypatch: pytest.MonkeyPatch, attempts: list[tuple[str, int]], policy: AddressPolicy
) -> None:
    async with GuardedProxy(policy) as proxy:
        session = proxy.new_session()
        async with client(proxy, session) as http:
            got = await http.get("http://169.254.169.254/latest/meta-data/")
        tunnel = await status_of(proxy, connect("169.254.169.254:80", session))
        resolving(monkeypatch, ["169.254.169.254"])
        named = await status_of(proxy, connect("metadata.google.internal:80", session))
        report = proxy.end_session(session.username)
    assert got.status_code == tunnel == named == 403
    # The GET and the CONNECT to 169.254.169.254:80 have one reason: each is named once.
    assert len(report.refused) == 2 and "metadata.google.internal:80" in report.refused[1]
    assert all("it resolves to 169.254.169.254, not a public" in r for r in report.refused)
    assert attempts == []


async def test_the_byte_budget_ends_the_tunnel(origins: StartOrigin) -> None:
    origin = await origins(flood_answer)
    budget = 256 * 1024
    async with GuardedProxy(LOOPBACK, max_bytes_per_session=budget) as proxy:
        session = proxy.new_session()
        async with asking(proxy, connect(f"127.0.0.1:{origin.port}", session)) as (
            answer, reader, _,
        ):  # fmt: skip
            assert answer.startswith(b"HTTP/1.1 200")
            received = 0
            with contextlib.suppress(ConnectionError):
                while data := await asyncio.wait_for(reader.read(65536), 5):
                    received += len(data)
        await asyncio.wait_for(origin.ended.wait(), 5)  # the origin's side ended too
        after = await status_of(proxy, connect(f"127.0.0.1:{origin.port}", session))
        report = proxy.end_session(session.username)
    assert 0 < received <= budget
    assert report.over_budget and after == 403
    assert origin.connections == 1


async def test_a_session_has_a_connection_cap(origins: StartOrigin) -> None:
    origin = await origins(echo_answer)
    target = f"127.0.0.1:{origin.port}"
    async with GuardedProxy(LOOPBACK, max_connections_per_session=2) as proxy:
        session = proxy.new_session()
        async with asking(proxy, connect(target, session)), asking(proxy, connect(target, session)):
            assert await status_of(proxy, connect(target, session)) == 503
        report = proxy.end_session(session.username)
    assert report.failed == [f"failed {target}: more than 2 connections at once"]
    assert origin.connections == 2


async def test_ending_a_session_ends_its_tunnels(origins: StartOrigin) -> None:
    origin = await origins(echo_answer)
    async with GuardedProxy(LOOPBACK) as proxy:
        session, other = proxy.new_session(), proxy.new_session()
        target = f"127.0.0.1:{origin.port}"
        async with (
            asking(proxy, connect(target, session)) as (_, reader, _),
            asking(proxy, connect(target, other)) as (_, other_reader, other_writer),
        ):
            proxy.end_session(session.username)
            assert await asyncio.wait_for(reader.read(), 3) == b""
            other_writer.write(b"still")  # another check's tunnel is untouched
            assert await asyncio.wait_for(other_reader.readexactly(5), 3) == b"STILL"


async def test_an_idle_tunnel_is_ended(origins: StartOrigin) -> None:
    origin = await origins(echo_answer)
    async with GuardedProxy(LOOPBACK, idle_timeout=0.3) as proxy:
        session = proxy.new_session()
        async with asking(proxy, connect(f"127.0.0.1:{origin.port}", session)) as (_, reader, _):
            assert await asyncio.wait_for(reader.read(), 3) == b""
        await asyncio.wait_for(origin.ended.wait(), 3)


async def test_what_is_not_a_proxy_request_is_refused(
    origins: StartOrigin, attempts: list[tuple[str, int]]
) -> None:
    origin = await origins(http_answer)
    async with GuardedProxy(LOOPBACK) as proxy:
        s = proxy.new_session()
        for head in [
            get("/relative", s),
            get("ftp://127.0.0.1/file", s),
            get(f"https://127.0.0.1:{origin.port}/", s),
            connect("127.0.0.1", s),  # no port
            connect(f"127.0.0.1:{origin.port}/path", s),
            f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nBad header\r\n{credentials(s)}\r\n",
        ]:
            assert await status_of(proxy, head) == 400, head
        huge = get(f"http://127.0.0.1:{origin.port}/", s, f"X-Big: {'a' * 20000}\r\n")
        assert await status_of(proxy, huge) == 431
        own = await status_of(proxy, connect(f"127.0.0.1:{proxy.port}", s))
        report = proxy.end_session(s.username)
    assert own == 403 and report.refused == [
        f"refused 127.0.0.1:{proxy.port}: the browser proxy's own port"
    ]
    assert origin.connections == 0 and attempts == []


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_close_ends_every_tunnel_and_leaves_no_task_or_socket(
    origins: StartOrigin,
) -> None:
    origin = await origins(echo_answer)
    tasks_before = asyncio.all_tasks()
    files_before = open_files()
    proxy = GuardedProxy(LOOPBACK)
    await proxy.start()
    session = proxy.new_session()
    tunnel_reader, tunnel = await asyncio.open_connection("127.0.0.1", proxy.port)
    silent_reader, silent = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        tunnel.write(connect(f"127.0.0.1:{origin.port}", session).encode())
        assert (await tunnel_reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        silent.write(b"GET http://127.0.0.1/ HTTP/1.1\r\n")  # a head never finished
        await asyncio.sleep(0.05)
        assert len(proxy.tasks) == 2

        await proxy.close()
        await proxy.close()  # idempotent

        assert proxy.tasks == set()
        assert await asyncio.wait_for(tunnel_reader.read(), 3) == b""
        assert await asyncio.wait_for(silent_reader.read(), 3) == b""
        await asyncio.wait_for(origin.ended.wait(), 3)
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", proxy.port)
    finally:
        await proxy.close()
        for writer in (tunnel, silent):
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    assert asyncio.all_tasks() == tasks_before
    assert open_files() == files_before
