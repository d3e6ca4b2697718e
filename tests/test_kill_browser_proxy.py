"""Tests that kill the mutants `make mutants` found surviving in fetchers/browser_proxy.py
(docs/testing.md#mutation-testing): how the proxy reads the target of a browser's request.

test_browser_proxy.py drives the proxy through real sockets, and no request of it carried
credentials in its authority, a port at the edge of the range, or a malformed target whose
answer it read. These call the parsers in-process: credentials anywhere in the authority are
refused, the ports 1 to 65535 and no other are proxied, and each refusal is a 400 that
names the target (its first 80 characters). Then the proxy's sign-in (`authorised`) in full,
and a `GuardedProxy` talked to through real sockets on 127.0.0.1 whose answers are read back
byte for byte: its failures, its caps and timeouts, and what it relays from an origin.
"""

import asyncio
import base64
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fetchers import guard
from fetchers.browser_proxy import MAX_REASONS, GuardedProxy, Session, note
from fetchers.guard import AddressPolicy
from fetchers.proxy_heads import (
    TOKEN_CHARS,
    Reply,
    Request,
    closing_head,
    origin_head,
    parse_absolute,
    parse_authority,
    parse_head,
    response,
    valid,
)
from tests.conftest import LOOPBACK
from tests.origins import Origin, StartOrigin, asking, connect, echo_answer, get

hosts = st.sampled_from(["example.com", "shop.example", "93.184.216.34", "[2001:db8::1]"])
ports = st.integers(min_value=1, max_value=65535)
userinfo = st.text(
    alphabet=st.characters(codec="ascii", categories=["L", "N"], include_characters="-._~:%"),
    max_size=12,
)


def refusal(parse: object, target: str) -> tuple[int, str]:
    with pytest.raises(Reply) as refused:
        parse(target)  # type: ignore[operator]
    return refused.value.status, refused.value.text


@given(host=hosts, port=ports, user=userinfo)
def test_credentials_in_the_authority_are_never_proxied(host: str, port: int, user: str) -> None:
    assert refusal(parse_authority, f"{user}@{host}:{port}") == (
        400,
        "no credentials in the authority",
    )
    target = f"http://{user}@{host}:{port}/x"
    assert refusal(parse_absolute, target) == (
        400,
        f"no host (or credentials in it) in {target[:80]!r}",
    )


@given(host=hosts, port=ports)
def test_a_host_and_port_are_proxied_as_written(host: str, port: int) -> None:
    bare = host.strip("[]")
    assert parse_authority(f"{host}:{port}") == (bare, port, f"{host}:{port}")
    assert parse_absolute(f"http://{host}:{port}") == (bare, port, f"{host}:{port}", "/")
    assert parse_absolute(f"HTTP://{host}/a/b?q=1") == (bare, 80, f"{host}:80", "/a/b?q=1")


def test_the_port_range_is_one_to_65535() -> None:
    assert valid("example.com", 1) == ("example.com", 1, "example.com:1")
    assert valid("example.com", 65535)[1] == 65535
    for port in (0, 65536, -1):
        with pytest.raises(Reply) as refused:
            valid("example.com", port)
        assert (refused.value.status, refused.value.text) == (400, f"port {port} is out of range")
    assert refusal(parse_authority, "example.com:0") == (400, "port 0 is out of range")


LONG = "example.com/" + "x" * 200


@pytest.mark.parametrize(
    ("parse", "target", "text"),
    [
        (parse_authority, "example.com", "CONNECT to 'example.com': not host:port"),
        (parse_authority, "example.com:99999", "CONNECT to 'example.com:99999': not host:port"),
        (parse_authority, "example.com:443/p", "CONNECT to 'example.com:443/p': not host:port"),
        (parse_authority, "example.com:443?q", "CONNECT to 'example.com:443?q': not host:port"),
        (parse_authority, "example.com:443#f", "CONNECT to 'example.com:443#f': not host:port"),
        (parse_authority, LONG + ":1", f"CONNECT to {LONG[:80]!r}: not host:port"),
        (parse_authority, "[::1:443", f"CONNECT to {'[::1:443'!r}: not host:port"),
        (parse_absolute, "ftp://example.com/",
         "only CONNECT and absolute http:// URLs are proxied, not 'ftp://example.com/'"),
        (parse_absolute, "/" + LONG,
         f"only CONNECT and absolute http:// URLs are proxied, not {('/' + LONG)[:80]!r}"),
        (parse_absolute, "http://[::1/", "not a URL: 'http://[::1/'"),
        (parse_absolute, "http://example.com:99999/" + LONG,
         f"not a URL: {('http://example.com:99999/' + LONG)[:80]!r}"),
        (parse_absolute, "http:///path", "no host (or credentials in it) in 'http:///path'"),
        (parse_absolute, "http://a@" + LONG,
         f"no host (or credentials in it) in {('http://a@' + LONG)[:80]!r}"),
    ],
)  # fmt: skip
def test_a_target_the_proxy_cannot_read_is_a_400_that_names_it(
    parse: object, target: str, text: str
) -> None:
    assert refusal(parse, target) == (400, text)


def test_an_origins_head_is_passed_on_closing_and_without_its_hop_by_hop_fields() -> None:
    """Fields `Connection` names go with it, in any case and spacing; the rest stay in order."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nKeep-Alive: timeout=5\r\n"
        b"CONNECTION: X-Trace ,  Upgrade\r\nx-trace: 1\r\nProxy-Connection: keep-alive\r\n"
        b"Set-Cookie: a=b:c\r\nContent-Length: 3\r\n\r\n"
    )
    assert closing_head(head) == (
        200,
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nSet-Cookie: a=b:c\r\n"
        b"Content-Length: 3\r\nConnection: close\r\n\r\n",
    )
    reason = b"HTTP/1.1 404 Not  Found Here\r\nA: 1\r\n\r\n"  # a reason with spaces
    assert closing_head(reason) == (
        404,
        b"HTTP/1.1 404 Not  Found Here\r\nA: 1\r\nConnection: close\r\n\r\n",
    )


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"HTTP/1.1 100 Continue\r\n\r\n", 100),
        (b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n", 101),
        (b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n", 200),  # not a whole head yet
        (b"HTTP/1.1 xyz OK\r\n\r\n", 0),
        (b"garbage\r\n\r\n", 0),
    ],
)
def test_an_interim_unfinished_or_unreadable_head_passes_unchanged(
    head: bytes, status: int
) -> None:
    assert closing_head(head) == (status, head)


def test_the_proxys_own_answer_is_plain_text_that_closes() -> None:
    assert response(403, "refused example.com:80: private", ("Proxy-Authenticate: Basic",)) == (
        b"HTTP/1.1 403 Forbidden\r\nProxy-Authenticate: Basic\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 32\r\n"
        b"Connection: close\r\n\r\nrefused example.com:80: private\n"
    )
    assert response(418, "\u00e9").startswith(b"HTTP/1.1 418 Error\r\n")
    assert response(418, "\u00e9").endswith(
        b"Content-Length: 3\r\nConnection: close\r\n\r\n\xc3\xa9\n"
    )


def test_a_request_head_is_read_strictly() -> None:
    head = b"GET http://example.com/ HTTP/1.0\r\nHost: example.com\r\nX-A:\t v \r\n\r\n"
    request = parse_head(head)
    assert (request.method, request.target, request.version) == (
        "GET",
        "http://example.com/",
        "HTTP/1.0",
    )
    assert request.headers == [("Host", "example.com"), ("X-A", "v")]


@pytest.mark.parametrize(
    ("line", "status", "text"),
    [
        ("GET  http://example.com/ HTTP/1.1", 400, "not an HTTP request line"),  # two spaces
        (" http://example.com/ HTTP/1.1", 400, "not an HTTP request line"),  # no method
        ("G(T http://example.com/ HTTP/1.1", 400, "not an HTTP request line"),
        ("GET http://example.com/", 400, "not an HTTP request line"),
        ("GET\thttp://example.com/\tHTTP/1.1", 400, "not an HTTP request line"),
        ("GET http://example.com/ HTTP/2", 505, "HTTP/1.0 and HTTP/1.1 only"),
        ("GET http://example.com/ http/1.0", 505, "HTTP/1.0 and HTTP/1.1 only"),
    ],
)
def test_a_request_line_the_proxy_cannot_read_is_answered(
    line: str, status: int, text: str
) -> None:
    with pytest.raises(Reply) as refused:
        parse_head(f"{line}\r\nHost: x\r\n\r\n".encode("latin-1"))
    assert (refused.value.status, refused.value.text) == (status, text)


@pytest.mark.parametrize(
    "line", ["NoColon", ": empty name", "Bad Name: x", "X-A: a\0b", "X(A): b", " Folded: x"]
)
def test_a_header_line_a_proxy_and_an_origin_could_read_apart_is_refused(line: str) -> None:
    with pytest.raises(Reply) as refused:
        parse_head(f"GET http://example.com/ HTTP/1.1\r\n{line}\r\n\r\n".encode("latin-1"))
    assert (refused.value.status, refused.value.text) == (400, f"malformed header line {line!r}")


# -- the proxy's sign-in ------------------------------------------------------------------

CHALLENGE = ('Proxy-Authenticate: Basic realm="pricewatch"',)


def authorization(username: str, password: str, scheme: str = "Basic", space: str = " ") -> str:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return f"{scheme}{space}{token}"


def signed_in(proxy: GuardedProxy, value: str) -> Session:
    """`authorised` for a request with this `Proxy-Authorization`; a refusal must be the 407
    with its challenge, never another error."""
    return proxy.authorised(
        Request("GET", "http://x/", "HTTP/1.1", [("Proxy-Authorization", value)])
    )


def refused_sign_in(proxy: GuardedProxy, value: str | None) -> None:
    headers = [] if value is None else [("Proxy-Authorization", value)]
    with pytest.raises(Reply) as refused:
        proxy.authorised(Request("GET", "http://x/", "HTTP/1.1", headers))
    reply = refused.value
    assert (reply.status, reply.text, reply.headers) == (
        407,
        "proxy credentials of a live session required",
        CHALLENGE,
    )


@given(
    scheme=st.sampled_from(["Basic", "basic", "BASIC", "bAsIc"]),
    space=st.text(alphabet=" ", min_size=1, max_size=3),
)
def test_the_basic_scheme_in_any_case_and_spacing_signs_in(scheme: str, space: str) -> None:
    proxy = GuardedProxy(LOOPBACK)
    session = proxy.new_session()
    live = signed_in(proxy, authorization(session.username, session.password, scheme, space))
    assert live is proxy.sessions[session.username]


@given(scheme=st.text(st.characters(codec="ascii", exclude_characters=" \r\n\0"), max_size=8))
def test_another_scheme_with_the_right_credentials_is_refused(scheme: str) -> None:
    proxy = GuardedProxy(LOOPBACK)
    session = proxy.new_session()
    if scheme.lower() == "basic":
        return
    refused_sign_in(proxy, authorization(session.username, session.password, scheme))


@given(data=st.data())
def test_only_the_exact_password_signs_in(data: st.DataObject) -> None:
    """A prefix of the password (the empty one included), the password with anything before
    or after it, or any other text, each under the right user name, is refused."""
    proxy = GuardedProxy(LOOPBACK)
    session = proxy.new_session()
    right = session.password
    wrong = data.draw(
        st.one_of(
            st.integers(0, len(right) - 1).map(lambda k: right[:k]),
            st.text(min_size=1).map(lambda t: right + t),
            st.text(min_size=1).map(lambda t: t + right),
            st.text().filter(lambda t: t != right),
        )
    )
    refused_sign_in(proxy, authorization(session.username, wrong))
    other = data.draw(st.text().filter(lambda t: t != session.username and ":" not in t))
    refused_sign_in(proxy, authorization(other, right))
    refused_sign_in(proxy, authorization(session.username[:-1], right))


def test_credentials_that_are_not_strict_base64_of_user_and_password_are_refused() -> None:
    proxy = GuardedProxy(LOOPBACK)
    session = proxy.new_session()
    good = authorization(session.username, session.password).removeprefix("Basic ")
    for value in [
        None,
        "",
        "Basic",
        "Basic ",
        f"Basic {good[:5]}*{good[5:]}",  # a character outside base64 is not skipped
        f"Basic {good[:-1]}",  # cut padding or data
        "Basic " + base64.b64encode(b"\xff\xfe:\xfd").decode(),  # not UTF-8
        "Basic " + base64.b64encode(session.username.encode()).decode(),  # no colon
        f"Basic{good}",
        f"{good}",
    ]:
        refused_sign_in(proxy, value)


def test_a_password_is_everything_after_the_first_colon_and_may_be_any_text() -> None:
    """RFC 7617: the user name has no colon, the password may have some. A password that is
    not ASCII is refused like any wrong one (compare_digest raises on such a str)."""
    proxy = GuardedProxy(LOOPBACK)
    proxy.sessions["user"] = Session(password="pa:ss:")
    assert signed_in(proxy, authorization("user", "pa:ss:")) is proxy.sessions["user"]
    refused_sign_in(proxy, authorization("user", "pa:ss"))
    refused_sign_in(proxy, authorization("user", "p\u00e4:ss:"))
    proxy.sessions["other"] = Session(password="gr\u00fc\u00dfe")
    assert signed_in(proxy, authorization("other", "gr\u00fc\u00dfe"))
    refused_sign_in(proxy, authorization("other", "gr\u00fc\u00dfE"))


def test_a_session_has_128_and_192_bits_of_url_safe_randomness() -> None:
    proxy = GuardedProxy(LOOPBACK)
    first, second = proxy.new_session(), proxy.new_session()
    assert (len(first.username), len(first.password)) == (22, 32)  # token_urlsafe(16), (24)
    assert first.username != second.username and first.password != second.password
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert set(first.username + first.password) <= alphabet


def test_a_report_keeps_each_reason_once_and_at_most_fifty() -> None:
    reasons: list[str] = []
    for i in range(MAX_REASONS + 10):
        note(reasons, f"refused {i}")
        note(reasons, "refused 0")
    assert reasons == [f"refused {i}" for i in range(MAX_REASONS)]
    assert str(Reply(403, "refused x")) == "refused x"


# -- a proxy talked to through sockets ---------------------------------------------------


async def whole_answer(proxy: GuardedProxy, head: str | bytes, wait: float = 5) -> bytes:
    """Everything the proxy sends back for this request, up to its close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        writer.write(head.encode() if isinstance(head, str) else head)
        return await asyncio.wait_for(reader.read(), wait)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def stand_in_resolver(
    monkeypatch: pytest.MonkeyPatch, answer: Callable[[str], Awaitable[list[str]]]
) -> list[tuple[str, int]]:
    """The guard's resolver answers with `answer(host)`; returns each (host, port) asked."""
    asked: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[guard.IPAddress]:
        asked.append((host, port))
        return [ipaddress.ip_address(a) for a in await answer(host)]

    monkeypatch.setattr(guard, "resolve", resolve)
    return asked


async def test_a_refused_sign_in_is_answered_407_with_its_challenge(origins: StartOrigin) -> None:
    origin = await origins(echo_answer)
    async with GuardedProxy(LOOPBACK) as proxy:
        session = proxy.new_session()
        wrong = authorization(session.username, "\u00e9")  # not ASCII: once a TypeError
        head = f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\nProxy-Authorization: {wrong}\r\n\r\n"
        assert await whole_answer(proxy, head) == response(
            407, "proxy credentials of a live session required", CHALLENGE
        )
    assert origin.connections == 0


@pytest.mark.parametrize(
    ("answer", "status", "reason"),
    [
        (lambda host: asyncio.Event().wait(), 504, "failed {}: no connection in 0.2s"),
        (lambda host: asyncio.sleep(0, []), 502, "failed {}: slow.example resolves to no address"),
    ],
    ids=["timeout", "no-address"],
)
async def test_a_name_that_cannot_be_connected_to_is_a_failure_named_in_the_report(
    monkeypatch: pytest.MonkeyPatch,
    answer: Callable[[str], Awaitable[list[str]]],
    status: int,
    reason: str,
) -> None:
    asked = stand_in_resolver(monkeypatch, answer)
    async with GuardedProxy(LOOPBACK, connect_timeout=0.2) as proxy:
        session = proxy.new_session()
        target = "slow.example:8443"
        got = await whole_answer(proxy, connect(target, session))
        report = proxy.end_session(session.username)
    assert got == response(status, reason.format(target))
    assert report.failed == [reason.format(target)] and report.refused == []
    assert asked == [("slow.example", 8443)]  # the port asked for is the request's


async def test_an_unknown_name_is_a_502_naming_the_resolvers_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def unknown(host: str) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    stand_in_resolver(monkeypatch, unknown)
    async with GuardedProxy(LOOPBACK) as proxy:
        session = proxy.new_session()
        got = await whole_answer(proxy, get("http://nowhere.example/x", session))
        report = proxy.end_session(session.username)
    reason = f"failed nowhere.example:80: [Errno {socket.EAI_NONAME}] Name or service not known"
    assert got == response(502, reason) and report.failed == [reason]


async def test_a_refused_name_is_named_with_its_port(monkeypatch: pytest.MonkeyPatch) -> None:
    async def private(host: str) -> list[str]:
        return ["10.1.2.3"]

    asked = stand_in_resolver(monkeypatch, private)
    async with GuardedProxy(LOOPBACK) as proxy:
        session = proxy.new_session()
        got = await whole_answer(proxy, get("http://intra.example:8080/", session))
    reason = (
        "refused intra.example:8080: it resolves to 10.1.2.3, not a public address "
        "(allow it with PRICEWATCH_ALLOW_NETWORKS)"
    )
    assert got == response(403, reason) and asked == [("intra.example", 8080)]


async def test_the_proxy_connects_to_the_checked_address_not_to_localhost(
    origins: StartOrigin,
) -> None:
    """An origin listening on 127.0.0.2 only is reached there."""
    origin = await origins(echo_answer, "127.0.0.2")
    async with GuardedProxy(AddressPolicy.allowing(["127.0.0.2/32"])) as proxy:
        session = proxy.new_session()
        async with asking(proxy, connect(f"127.0.0.2:{origin.port}", session)) as (
            answer, reader, writer,
        ):  # fmt: skip
            assert answer == b"HTTP/1.1 200 Connection Established\r\n\r\n"
            writer.write(b"ping")
            assert await asyncio.wait_for(reader.readexactly(4), 5) == b"PING"
    assert origin.connections == 1


async def test_start_is_once_and_not_after_close() -> None:
    proxy = GuardedProxy(LOOPBACK)
    with pytest.raises(RuntimeError, match=r"^the proxy is not started$"):
        _ = proxy.url
    await proxy.start()
    try:
        assert proxy.url == f"http://127.0.0.1:{proxy.port}" and proxy.port > 1024
        with pytest.raises(RuntimeError, match=r"^the proxy is started once$"):
            await proxy.start()
    finally:
        await proxy.close()
    unstarted = GuardedProxy(LOOPBACK)
    await unstarted.close()
    with pytest.raises(RuntimeError, match=r"^the proxy is started once$"):
        await unstarted.start()


async def test_connections_over_the_cap_are_dropped_at_once() -> None:
    async with GuardedProxy(LOOPBACK, max_connections=1) as proxy:
        _, first = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            first.write(b"CONNECT ")  # a head under way holds its place
            await asyncio.sleep(0.05)
            second_reader, second = await asyncio.open_connection("127.0.0.1", proxy.port)
            with contextlib.suppress(ConnectionError):
                assert await asyncio.wait_for(second_reader.read(), 2) == b""
            second.close()
        finally:
            first.close()


async def test_a_client_silent_past_the_head_timeout_is_closed() -> None:
    async with GuardedProxy(LOOPBACK, head_timeout=0.2) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            writer.write(b"GET http://127.0.0.1/ HTTP/1.1\r\n")
            assert await asyncio.wait_for(reader.read(), 3) == b""
        finally:
            writer.close()


def scripted(*parts: bytes, pause: float = 0.0) -> Callable[..., Awaitable[None]]:
    """An origin that reads the request head, then sends these parts (`pause` seconds
    apart) and closes."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, o: Origin) -> None:
        o.heads.append(await reader.readuntil(b"\r\n\r\n"))
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(pause)

    return answer


# The body looks like a head: it must pass unchanged, as must the interim answer.
LOOKALIKE = b"HTTP/1.1 204 No\r\nConnection: keep-alive\r\n\r\n"
BIG = b"x" * (16 * 1024 * 4 + 1000)  # over the 64 KiB the proxy reads an origin's head in
MEDIUM = b"x" * 10_000


@pytest.mark.parametrize(
    ("sent", "relayed"),
    [
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConnection: keep-alive\r\n"
         b"Content-Length: 43\r\n\r\n" + LOOKALIKE,
         b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 43\r\n"
         b"Connection: close\r\n\r\n" + LOOKALIKE),
        (b"HTTP/1.1 200 OK\r\nX-A: 1",  # the origin left in the middle of its head
         b"HTTP/1.1 200 OK\r\nX-A: 1"),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + MEDIUM + b"\r\nConnection: keep-alive\r\n\r\nok",
         b"HTTP/1.1 200 OK\r\nX-Big: " + MEDIUM + b"\r\nConnection: close\r\n\r\nok"),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + BIG + b"\r\nConnection: keep-alive\r\n\r\nok",
         b"HTTP/1.1 200 OK\r\nX-Big: " + BIG + b"\r\nConnection: keep-alive\r\n\r\nok"),
    ],
    ids=["interim", "cut", "medium-head", "huge-head"],
)  # fmt: skip
async def test_an_origins_answer_is_relayed_closing_and_otherwise_as_sent(
    origins: StartOrigin, sent: bytes, relayed: bytes
) -> None:
    """Interim answers pass as they are and the final one gets `Connection: close`; a head
    cut short, or one over 64 KiB, passes as it is; the body is never read as a head."""
    origin = await origins(scripted(sent))
    async with GuardedProxy(LOOPBACK) as proxy:
        session = proxy.new_session()
        got = await whole_answer(proxy, get(f"http://127.0.0.1:{origin.port}/", session))
    assert got == relayed


@pytest.fixture
def errors(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """What the proxy logged as its own failure (a bug: every expected end is quiet)."""
    caplog.set_level(logging.ERROR, logger="fetchers.browser_proxy")
    return lambda: [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("method", ["CONNECT", "GET"])
async def test_an_idle_link_ends_quietly(
    origins: StartOrigin, errors: Callable[[], list[str]], method: str
) -> None:
    """Nothing moves either way (a tunnel, or an origin that never answers): the link ends
    after the idle time, as an expected end, not as the proxy's failure."""
    origin = await origins(lambda reader, writer, o: asyncio.Event().wait())
    async with GuardedProxy(LOOPBACK, idle_timeout=0.3) as proxy:
        session = proxy.new_session()
        target = f"127.0.0.1:{origin.port}"
        head = (
            connect(target, session) if method == "CONNECT" else get(f"http://{target}/", session)
        )
        answer = await whole_answer(proxy, head)
    assert answer in (b"", b"HTTP/1.1 200 Connection Established\r\n\r\n")
    assert errors() == []


async def test_a_steady_download_keeps_a_silent_upload_alive(
    origins: StartOrigin, errors: Callable[[], list[str]]
) -> None:
    # A head, then a byte every 0.1 s for 1 s: over three idle times.
    origin = await origins(scripted(b"HTTP/1.1 200 OK\r\n\r\n", *[b"x"] * 10, pause=0.1))
    async with GuardedProxy(LOOPBACK, idle_timeout=0.3) as proxy:
        session = proxy.new_session()
        got = await whole_answer(proxy, get(f"http://127.0.0.1:{origin.port}/", session))
    assert got == b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"x" * 10
    assert errors() == []


async def flood_forever(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, o: Origin
) -> None:
    while True:
        writer.write(b"z" * 65536)
        await writer.drain()


async def test_a_client_that_stops_reading_is_dropped_after_the_idle_time(
    origins: StartOrigin,
) -> None:
    """It has ended its upload, so only the download is left, stuck in a full buffer."""
    origin = await origins(flood_forever)
    async with GuardedProxy(LOOPBACK, idle_timeout=0.3) as proxy:
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
            await asyncio.wait_for(origin.ended.wait(), 5)
        finally:
            writer.close()


async def test_the_byte_budget_is_inclusive_and_ends_every_tunnel_of_the_check(
    origins: StartOrigin,
) -> None:
    """Exactly the budget passes; one byte over ends each of the check's tunnels."""
    origin = await origins(echo_answer)
    target = f"127.0.0.1:{origin.port}"
    async with GuardedProxy(LOOPBACK, max_bytes_per_session=10) as proxy:
        session = proxy.new_session()
        async with (
            asking(proxy, connect(target, session)) as (_, reader, writer),
            asking(proxy, connect(target, session)) as (_, other_reader, _),
        ):
            writer.write(b"hello")
            assert await asyncio.wait_for(reader.readexactly(5), 5) == b"HELLO"  # 10 bytes
            assert not proxy.sessions[session.username].over_budget
            writer.write(b"!")
            assert await asyncio.wait_for(other_reader.read(), 3) == b""
        again = await whole_answer(proxy, connect(target, session))
        report = proxy.end_session(session.username)
    assert report.over_budget and report.bytes == 11
    assert again == response(403, "this check has spent its byte budget")


async def test_a_closed_connection_frees_its_place_in_the_sessions_cap(
    origins: StartOrigin,
) -> None:
    origin = await origins(echo_answer)
    target = f"127.0.0.1:{origin.port}"
    async with GuardedProxy(LOOPBACK, max_connections_per_session=1) as proxy:
        session = proxy.new_session()
        for word in (b"one", b"two"):
            async with asking(proxy, connect(target, session)) as (answer, reader, writer):
                assert answer.startswith(b"HTTP/1.1 200")
                writer.write(word)
                writer.write_eof()
                assert await asyncio.wait_for(reader.read(), 5) == word.upper() + b"bye"
            await asyncio.sleep(0.1)
    assert origin.connections == 2


async def test_a_request_connecting_when_its_check_ends_goes_no_further(
    origins: StartOrigin, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = await origins(lambda reader, writer, o: asyncio.Event().wait())
    release = asyncio.Event()

    async def slow(host: str) -> list[str]:
        await release.wait()
        return ["127.0.0.1"]

    asked = stand_in_resolver(monkeypatch, slow)
    async with GuardedProxy(LOOPBACK, idle_timeout=10) as proxy:
        session = proxy.new_session()
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            writer.write(connect(f"slow.example:{origin.port}", session).encode())
            while not asked:  # noqa: ASYNC110 (the stand-in resolver is the test's own)
                await asyncio.sleep(0.01)
            proxy.end_session(session.username)
            release.set()
            assert await asyncio.wait_for(reader.read(), 3) == b""
            for _ in range(100):  # its origin connection is closed too, not left to idle
                if not proxy.tasks:
                    break
                await asyncio.sleep(0.02)
            assert proxy.tasks == set()
        finally:
            writer.close()


# -- heads, as parsed and as passed on ---------------------------------------------------


def test_fields_named_by_any_connection_field_are_dropped_from_an_origins_answer() -> None:
    """`Connection` may come first, more than once, list names without spaces, and any
    field's value may hold a colon: a name ends at the first colon."""
    head = (
        b"HTTP/1.1 200 OK\r\nConnection: x-a,x-b\r\nX-A: 1:2\r\nx-b: 2\r\n"
        b"Connection: x-c, a:b\r\nX-C: 3\r\nServer: s:1\r\n\r\n"
    )
    assert closing_head(head) == (
        200,
        b"HTTP/1.1 200 OK\r\nServer: s:1\r\nConnection: close\r\n\r\n",
    )


def test_a_status_line_with_two_spaces_is_not_read() -> None:
    head = b"HTTP/1.1  200 OK\r\nConnection: keep-alive\r\n\r\n"
    assert closing_head(head) == (0, head)


@pytest.mark.parametrize(
    ("authority", "host"),
    [("example.com:80", "example.com"), ("example.com:8080", "example.com:8080"),
     ("[2001:db8::1]:80", "[2001:db8::1]"), ("example.com:8000", "example.com:8000")],
)  # fmt: skip
def test_a_request_is_sent_on_with_its_own_host_and_closing(authority: str, host: str) -> None:
    """The fields the request's `Connection` names go (a list without spaces too); an
    `Upgrade` field alone is no handshake: the request closes like any other."""
    request = Request(
        "GET",
        f"http://{authority}/p",
        "HTTP/1.1",
        [("Connection", "keep-alive,X-Foo"), ("X-Foo", "1"), ("Upgrade", "websocket"),
         ("Accept", "*/*")],
    )  # fmt: skip
    assert origin_head(request, "/p", authority) == (
        f"GET /p HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\nConnection: close\r\n\r\n".encode()
    )


def test_every_token_character_may_make_a_method_or_a_field_name() -> None:
    every = "".join(sorted(TOKEN_CHARS))
    request = parse_head(f"{every} http://x/ HTTP/1.1\r\n{every}: v\r\n\r\n".encode())
    assert request.method == every and request.headers == [(every, "v")]


def test_a_field_value_loses_only_spaces_and_tabs_around_it() -> None:
    request = parse_head(b"GET http://x/ HTTP/1.1\r\nX-A: \t XvX\x0c \t\r\n\r\n")
    assert request.headers == [("X-A", "XvX\x0c")]


def test_a_long_bad_line_or_target_is_named_by_its_start() -> None:
    line = "Bad Name: " + "x" * 60
    with pytest.raises(Reply) as refused:
        parse_head(f"GET http://x/ HTTP/1.1\r\n{line}\r\n\r\n".encode())
    assert refused.value.text == f"malformed header line {line[:40]!r}"
    target = "x" * 100 + ":99999"
    assert refusal(parse_authority, target) == (400, f"CONNECT to {target[:80]!r}: not host:port")


async def test_a_client_that_keeps_sending_after_a_refusal_is_closed_after_the_linger() -> None:
    """The proxy reads (and drops) what follows its own answer for LINGER_TIMEOUT (1 s), not
    for as long as the client goes on."""
    async with GuardedProxy(LOOPBACK) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            writer.write(b"POST http://127.0.0.1/ HTTP/1.1\r\nContent-Length: 99999\r\n\r\n")
            assert (await asyncio.wait_for(reader.read(), 3)).startswith(b"HTTP/1.1 407")
            for _ in range(40):  # 4 s of a trickling body
                writer.write(b"b")
                await asyncio.sleep(0.1)
                if not proxy.tasks:
                    break
            assert proxy.tasks == set()
        finally:
            writer.close()
