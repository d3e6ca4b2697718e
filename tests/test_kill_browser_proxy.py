"""Tests that kill the mutants `make mutants` found surviving in activities/browser_proxy.py
(docs/testing.md#mutation-testing): how the proxy reads the target of a browser's request.

test_browser_proxy.py drives the proxy through real sockets, and no request of it carried
credentials in its authority, a port at the edge of the range, or a malformed target whose
answer it read. These call the parsers in-process: credentials anywhere in the authority are
refused, the ports 1 to 65535 and no other are proxied, and each refusal is a 400 that
names the target (its first 80 characters).
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from activities.browser_proxy import (
    Reply,
    closing_head,
    parse_absolute,
    parse_authority,
    parse_head,
    response,
    valid,
)

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
