"""The SSRF guard: private, loopback, link-local, CGNAT and reserved addresses are refused
in every spelling, before any connection, at fetch time and at add time.

Fetch-level vectors stay on loopback (if the guard failed, nothing would leave the
machine); the other ranges are checked on the policy, which resolves literals without
touching the network.
"""

import gzip
import ipaddress
import os
import subprocess
import sys
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from fetchers import guard
from fetchers.guard import AddressPolicy, BlockedAddress, check_url
from fetchers.http import FetchError, fetch_page, new_client
from tests.conftest import LOOPBACK

NO_PRIVATE = AddressPolicy()


@pytest.fixture
async def server() -> AsyncIterator[int]:
    """A page, a redirect to another loopback address, and a gzip bomb, on 127.0.0.1."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<p>9.99</p>", content_type="text/html")

    async def to_private(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://127.0.0.2:{request.url.port}/page")

    async def bomb(request: web.Request) -> web.Response:
        body = gzip.compress(b"\0" * (20 * 1024 * 1024))  # 20 MiB inflated, ~20 KiB sent
        return web.Response(
            body=body, headers={"content-encoding": "gzip", "content-type": "text/plain"}
        )

    async def stacked(request: web.Request) -> web.Response:
        body = gzip.compress(gzip.compress(b"<p>9.99</p>"))
        headers = {"content-encoding": "gzip, gzip", "content-type": "text/html"}
        return web.Response(body=body, headers=headers)

    async def compressed(request: web.Request) -> web.Response:
        coding = request.query["coding"]
        raw = b"<p>Pro plan: 9.99 EUR</p>"
        body = gzip.compress(raw) if coding == "gzip" else zlib.compress(raw)
        headers = {"content-encoding": coding, "content-type": "text/html"}
        return web.Response(body=body, headers=headers)

    app = web.Application()
    for path, handler in [("/page", page), ("/to-private", to_private), ("/bomb", bomb),
                          ("/stacked", stacked), ("/compressed", compressed)]:  # fmt: skip
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def refused(policy: AddressPolicy, url: str) -> FetchError:
    async with new_client(policy) as http:
        with pytest.raises(FetchError) as caught:
            await fetch_page(http, url)
    assert not caught.value.transient
    return caught.value


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "localhost", "[::1]", "2130706433", "0x7f000001", "0177.0.0.1",
     "[::ffff:127.0.0.1]", "127.0.0.2"],
)  # fmt: skip
async def test_loopback_in_any_spelling_is_refused_at_fetch_time(server: int, host: str) -> None:
    err = await refused(NO_PRIVATE, f"http://{host}:{server}/page")
    # httpx itself rejects the octal spelling as an invalid address: refused all the same.
    assert "not a public address" in str(err) or "Invalid IPv4" in str(err)


async def test_the_allow_list_opens_exactly_what_it_names(server: int) -> None:
    async with new_client(LOOPBACK) as http:
        page = await fetch_page(http, f"http://127.0.0.1:{server}/page")
    assert page.status_code == 200
    err = await refused(LOOPBACK, f"http://127.0.0.2:{server}/page")
    assert "127.0.0.2" in str(err)


async def test_a_redirect_to_a_private_address_is_refused(server: int) -> None:
    err = await refused(LOOPBACK, f"http://127.0.0.1:{server}/to-private")
    assert "127.0.0.2" in str(err)


async def test_the_connection_goes_to_the_address_that_was_checked(
    server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name resolves once: the guard connects to the address it checked (a rebinding
    resolver gets no second chance), and the request still names the host."""
    answers = [[ipaddress.ip_address("127.0.0.1")]]
    seen_hosts: list[str] = []

    async def resolve_once(host: str, port: int) -> list[guard.IPAddress]:
        seen_hosts.append(host)
        return answers.pop(0)  # a second lookup would fail the test with IndexError

    monkeypatch.setattr(guard, "resolve", resolve_once)
    async with new_client(LOOPBACK) as http:
        page = await fetch_page(http, f"http://pricing.example:{server}/page")
    assert page.status_code == 200
    assert seen_hosts == ["pricing.example"]


@pytest.mark.parametrize(
    "address",
    ["10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
     "224.0.0.1", "240.0.0.1", "255.255.255.255", "fc00::1", "fe80::1", "::", "ff02::1",
     "::ffff:10.0.0.1", "::ffff:169.254.169.254"],
)  # fmt: skip
def test_private_and_reserved_ranges_are_refused(address: str) -> None:
    assert NO_PRIVATE.refusal(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert NO_PRIVATE.refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    "url",
    ["http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/", "http://0.0.0.0/",
     "http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://[::1]/",
     "http://[::ffff:127.0.0.1]/", "http://localhost/", "file:///etc/passwd"],
)  # fmt: skip
async def test_add_time_check_refuses_without_connecting(url: str) -> None:
    with pytest.raises(BlockedAddress):
        await check_url(NO_PRIVATE, url)


async def test_a_gzip_bomb_stops_at_the_cap(server: int) -> None:
    async with new_client(LOOPBACK) as http:
        with pytest.raises(FetchError) as caught:
            await fetch_page(http, f"http://127.0.0.1:{server}/bomb")
    assert "larger than" in str(caught.value) and not caught.value.transient


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_compressed_pages_are_inflated(server: int, coding: str) -> None:
    async with new_client(LOOPBACK) as http:
        page = await fetch_page(http, f"http://127.0.0.1:{server}/compressed?coding={coding}")
    assert page.text == "Pro plan: 9.99 EUR"


async def test_stacked_encodings_are_refused(server: int) -> None:
    async with new_client(LOOPBACK) as http:
        with pytest.raises(FetchError) as caught:
            await fetch_page(http, f"http://127.0.0.1:{server}/stacked")
    assert "stacked" in str(caught.value)


@pytest.mark.parametrize(
    "args",
    [["http://127.0.0.1/pricing"], ["http://169.254.169.254/"],
     ["https://example.com/", "--webhook", "http://10.0.0.1/hook"]],
)  # fmt: skip
def test_add_refuses_private_destinations_with_exit_2(args: list[str]) -> None:
    env = {**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1", "PRICEWATCH_ALLOW_NETWORKS": ""}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "pricewatch"), "add", "acme", *args, "--every", "1h"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("pricewatch: refused")
    assert len(done.stderr.strip().splitlines()) == 1
