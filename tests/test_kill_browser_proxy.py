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

from activities.browser_proxy import Reply, parse_absolute, parse_authority, valid

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
