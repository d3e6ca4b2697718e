"""`fetch_page` against real HTTP servers on 127.0.0.1: digests, and the verdict on
whether a failure is worth retrying."""

import asyncio
import hashlib
import socket
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from urllib.parse import urlencode

import httpx
import pytest
import trustme
from aiohttp import web

from fetchers import http as fetch
from fetchers.http import (
    FetchError,
    classify_connection_error,
    fetch_page,
    parse_retry_after,
)

BODY = b"<html>Pro plan: 12.00 EUR / month</html>"
NOW = datetime(2026, 8, 7, 8, 0, tzinfo=UTC)


async def page(request: web.Request) -> web.Response:
    return web.Response(body=BODY, content_type="text/html")


async def status(request: web.Request) -> web.Response:
    """`/status/<code>?retry_after=<value>`: an error response, optionally with advice."""
    headers = {}
    if "retry_after" in request.query:
        headers["Retry-After"] = request.query["retry_after"]
    if "date" in request.query:  # the origin's clock, as it says in its Date header
        headers["Date"] = request.query["date"]
    return web.Response(status=int(request.match_info["code"]), headers=headers)


async def big(request: web.Request) -> web.Response:
    return web.Response(body=b"x" * 10_000, content_type="text/plain")


async def redirect_loop(request: web.Request) -> web.Response:
    raise web.HTTPFound("/loop")


async def to_file(request: web.Request) -> web.Response:
    raise web.HTTPFound("file:///etc/passwd")


async def typed(request: web.Request) -> web.Response:
    """`/typed?type=<content type>`: a small body with exactly that header."""
    is_json = "json" in request.query["type"]
    response = web.Response(body=b'{"price": 9.99}' if is_json else b"<p>9.99</p>")
    response.headers["Content-Type"] = request.query["type"]
    return response


async def drip(request: web.Request) -> web.StreamResponse:
    """Headers at once, then a byte every 0.1 s for 2 s: no single read ever times out."""
    response = web.StreamResponse(headers={"content-type": "text/html"})
    await response.prepare(request)
    try:
        for _ in range(20):
            await response.write(b"x")
            await asyncio.sleep(0.1)
    except ConnectionResetError:
        pass  # the client gave up, as it should
    return response


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[str]:
    """One local app with every route; yields its base URL."""
    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/big", big)
    app.router.add_get("/loop", redirect_loop)
    app.router.add_get("/drip", drip)
    app.router.add_get("/to-file", to_file)
    app.router.add_get("/typed", typed)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def fetch_error(http: httpx.AsyncClient, url: str) -> FetchError:
    with pytest.raises(FetchError) as caught:
        await fetch_page(http, url)
    return caught.value


async def test_ok_returns_the_digest_of_the_visible_text_and_the_size(
    server: str, http: httpx.AsyncClient
) -> None:
    """The fingerprint is the SHA-256 of the page's normalised text, not of its markup."""
    result = await fetch_page(http, f"{server}/page")

    assert result.status_code == 200
    assert result.text == "Pro plan: 12.00 EUR / month"
    assert result.sha256 == hashlib.sha256(b"Pro plan: 12.00 EUR / month").hexdigest()
    assert result.size == len(BODY)


@pytest.mark.parametrize("code", [401, 404, 410, 451])
async def test_client_errors_are_permanent(server: str, http: httpx.AsyncClient, code: int) -> None:
    """These answer the same next time: retrying only wastes the slot."""
    error = await fetch_error(http, f"{server}/status/{code}")

    assert not error.transient
    assert str(code) in str(error)


@pytest.mark.parametrize("code", [408, 429, 500, 502, 503, 504])
async def test_server_trouble_is_transient(server: str, http: httpx.AsyncClient, code: int) -> None:
    """Overload and outages pass: worth another attempt."""
    error = await fetch_error(http, f"{server}/status/{code}")

    assert error.transient
    assert error.retry_after is None


@pytest.mark.parametrize("code", [429, 503])
async def test_retry_after_seconds_is_honoured(
    server: str, http: httpx.AsyncClient, code: int
) -> None:
    """The server's own advice sets the next attempt's delay."""
    error = await fetch_error(http, f"{server}/status/{code}?retry_after=7")

    assert error.transient
    assert error.retry_after == timedelta(seconds=7)


async def test_retry_after_http_date(server: str, http: httpx.AsyncClient) -> None:
    """An HTTP-date a minute ahead means a delay of about a minute."""
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    error = await fetch_error(http, f"{server}/status/503?{urlencode({'retry_after': when})}")

    assert error.retry_after is not None
    assert timedelta(seconds=55) <= error.retry_after <= timedelta(seconds=60)


async def test_an_http_date_retry_after_is_read_on_the_origins_clock(
    server: str, http: httpx.AsyncClient
) -> None:
    """The origin's clock is 20 years behind ours (its Date header): its Retry-After date,
    90 s after its Date, still means 90 s. The worker's clock never decides a delay."""
    said = datetime(2006, 8, 7, 8, 0, tzinfo=UTC)
    query = {"date": format_datetime(said, usegmt=True),
             "retry_after": format_datetime(said + timedelta(seconds=90), usegmt=True)}  # fmt: skip
    error = await fetch_error(http, f"{server}/status/503?{urlencode(query)}")
    assert error.retry_after == timedelta(seconds=90)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("soon", None),
        ("86400", timedelta(minutes=15)),
        ("99999999999999999999", timedelta(minutes=15)),
    ],
)
async def test_retry_after_garbage_or_huge_through_a_server(
    server: str, http: httpx.AsyncClient, value: str, expected: timedelta | None
) -> None:
    """Bad advice is ignored and excessive advice is capped, never an error of its own."""
    error = await fetch_error(http, f"{server}/status/429?{urlencode({'retry_after': value})}")

    assert error.transient
    assert error.retry_after == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7", timedelta(seconds=7)),
        (" 7 ", timedelta(seconds=7)),
        ("Fri, 07 Aug 2026 08:01:00 GMT", timedelta(seconds=60)),
        ("Fri Aug  7 08:01:00 2026", timedelta(seconds=60)),  # asctime: no zone, means GMT
        ("Thu, 06 Aug 2026 08:00:00 GMT", None),  # in the past
        ("0", None),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("3600", timedelta(minutes=15)),
        ("99999999999999999999", timedelta(minutes=15)),
        ("²", None),  # str.isdigit() is true for it, int() is not
    ],
)
def test_parse_retry_after(value: str | None, expected: timedelta | None) -> None:
    """Delta-seconds or an HTTP-date, clamped to 15 minutes; anything else is no advice."""
    assert parse_retry_after(value, NOW) == expected


async def test_connection_refused_is_transient(http: httpx.AsyncClient) -> None:
    """Nothing listening (a restart, a deploy) may be back next time."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The socket is closed now: nothing listens on that port.
    error = await fetch_error(http, f"http://127.0.0.1:{port}/")

    assert error.transient


async def test_oversized_body_is_permanent(
    server: str, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The byte cap protects the worker; the page will be as large next time."""
    monkeypatch.setattr(fetch, "MAX_BODY_BYTES", 1000)

    error = await fetch_error(http, f"{server}/big")

    assert not error.transient
    assert "larger than 1000 bytes" in str(error)


async def test_redirect_loop_is_permanent(server: str, http: httpx.AsyncClient) -> None:
    """A loop will loop again."""
    error = await fetch_error(http, f"{server}/loop")

    assert not error.transient
    assert "redirects" in str(error)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/page", "not a url", "http://", "http://[::1/"])
async def test_bad_url_is_permanent(http: httpx.AsyncClient, url: str) -> None:
    """A URL that cannot be fetched today cannot be fetched tomorrow either."""
    error = await fetch_error(http, url)

    assert not error.transient


async def test_slow_drip_hits_the_overall_deadline(
    server: str, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body trickling in forever never trips a per-read timeout; the deadline stops it."""
    monkeypatch.setattr(fetch, "FETCH_DEADLINE", timedelta(seconds=0.5))
    started = asyncio.get_running_loop().time()

    error = await fetch_error(http, f"{server}/drip")

    assert error.transient
    assert "the page was not complete within 0.5s (the default limit; raise it with --timeout" in (
        str(error)
    )
    assert asyncio.get_running_loop().time() - started < 1.5


async def test_unknown_host_is_permanent(http: httpx.AsyncClient) -> None:
    """`.invalid` never resolves (RFC 6761): asking again will not make it exist."""
    err = await fetch_error(http, "http://pricewatch-test.invalid/pricing")
    assert not err.transient
    assert "unknown host" in str(err)


def test_temporary_dns_failure_is_transient() -> None:
    """EAI_AGAIN ("try again later") is the resolver's own word for transient."""
    try:
        try:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        except socket.gaierror as dns:
            raise httpx.ConnectError("[Errno -3] Temporary failure") from dns
    except httpx.ConnectError as wrapped:
        err = classify_connection_error(wrapped)
    assert err.transient
    assert "temporary DNS failure" in str(err)


@pytest.fixture(scope="module")
async def tls_server() -> AsyncIterator[str]:
    """HTTPS on 127.0.0.1 with a certificate from a CA nobody trusts."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    app = web.Application()
    app.router.add_get("/page", page)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_untrusted_tls_certificate_is_permanent(
    tls_server: str, http: httpx.AsyncClient
) -> None:
    err = await fetch_error(http, f"{tls_server}/page")
    assert not err.transient
    assert "TLS certificate failure" in str(err)


async def test_redirect_to_a_file_url_is_permanent(server: str, http: httpx.AsyncClient) -> None:
    err = await fetch_error(http, f"{server}/to-file")
    assert not err.transient
    assert "unsupported URL" in str(err)


@pytest.mark.parametrize("content_type", ["image/png", "application/zip", "video/mp4"])
async def test_unsupported_content_type_is_permanent(
    server: str, http: httpx.AsyncClient, content_type: str
) -> None:
    err = await fetch_error(http, f"{server}/typed?type={content_type}")
    assert not err.transient
    assert content_type in str(err)


@pytest.mark.parametrize(
    "content_type",
    ["text/html; charset=utf-8", "application/json", "application/ld+json", "text/plain"],
)
async def test_page_like_content_types_are_fetched(
    server: str, http: httpx.AsyncClient, content_type: str
) -> None:
    page_ = await fetch_page(http, f"{server}/typed?{urlencode({'type': content_type})}")
    assert page_.status_code == 200


async def test_a_response_without_content_type_is_fetched(http: httpx.AsyncClient) -> None:
    async def bare(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\n9.99")
        await writer.drain()
        writer.close()

    raw = await asyncio.start_server(bare, "127.0.0.1", 0)
    try:
        page_ = await fetch_page(http, f"http://127.0.0.1:{raw.sockets[0].getsockname()[1]}/")
    finally:
        raw.close()
        await raw.wait_closed()
    assert page_.size == 4


async def test_dropped_connection_is_transient(http: httpx.AsyncClient) -> None:
    """A server that accepts and hangs up before answering (a reset, a crash)."""

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.close()

    dropper = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = dropper.sockets[0].getsockname()[1]
    try:
        err = await fetch_error(http, f"http://127.0.0.1:{port}/")
    finally:
        dropper.close()
        await dropper.wait_closed()
    assert err.transient


@pytest.fixture
async def starved_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's resolver never answers (its thread is not scheduled on a starved machine),
    and the connect limit is 0.3 s."""

    async def never(*args: object, **kwargs: object) -> list[object]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", never)
    monkeypatch.setattr(fetch, "HTTP_TIMEOUTS", httpx.Timeout(10.0, connect=0.3))


@pytest.mark.usefixtures("starved_resolver")
async def test_a_resolver_that_times_out_is_said_with_its_bound(
    server: str, http: httpx.AsyncClient
) -> None:
    """Not "cannot resolve localhost: " with an empty reason: what ran out, and its bound."""
    error = await fetch_error(http, server.replace("127.0.0.1", "localhost") + "/page")

    assert error.transient
    assert str(error) == (
        "timed out: localhost was not resolved within 0.3s (the connect limit, the same for "
        "every target)"
    )


@pytest.mark.usefixtures("starved_resolver")
async def test_an_ip_literal_needs_no_resolver(server: str, http: httpx.AsyncClient) -> None:
    """The page's address is the URL's own: it is fetched with the resolver gone, and a
    literal where nothing listens fails as a refused connection, never as "cannot resolve"."""
    assert (await fetch_page(http, f"{server}/page")).status_code == 200
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    error = await fetch_error(http, f"http://127.0.0.1:{port}/")
    assert error.transient
    assert str(error).startswith("connection failed: ") and "resolve" not in str(error), error
