"""Tests that kill the mutants `make mutants` found surviving in fetchers/guard.py
(docs/testing.md#mutation-testing).

test_guard.py proves the refusals end to end, mostly through `pricewatch add` in a process of
its own (which imports the unmutated code) and with private addresses that Python's
`is_global` refuses in any spelling. These call the guard in-process: an IPv4 address in
every IPv6 form that carries it is judged as that IPv4 address, allow list included; the
allow list as the operator writes it; the add-time check's scheme rule and its messages.
"""

import ipaddress

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fetchers import guard
from fetchers.guard import AddressPolicy, BlockedAddress, GuardedBackend, check_url

# Mostly addresses a rebinder would aim at (RFC 1918, loopback, link-local, CGNAT), some public.
targets = st.one_of(
    st.ip_addresses(v=4, network="10.0.0.0/8"),
    st.ip_addresses(v=4, network="127.0.0.0/8"),
    st.ip_addresses(v=4, network="169.254.0.0/16"),
    st.ip_addresses(v=4, network="100.64.0.0/10"),
    st.ip_addresses(v=4, network="192.168.0.0/16"),
    st.ip_addresses(v=4),
)


def carriers(v4: ipaddress.IPv4Address) -> list[ipaddress.IPv6Address]:
    """The IPv6 addresses a gateway turns into `v4`: mapped, 6to4, NAT64 (both prefixes),
    IPv4-compatible."""
    low = int(v4)
    return [
        ipaddress.IPv6Address(f"::ffff:{v4}"),
        ipaddress.IPv6Address((0x2002 << 112) | (low << 80) | 1),
        ipaddress.IPv6Address(f"64:ff9b::{v4}"),
        ipaddress.IPv6Address((0x0064_FF9B_0001 << 80) | low),
        ipaddress.IPv6Address(low),
    ]


@given(v4=targets, allowed=st.booleans())
@example(v4=ipaddress.IPv4Address("0.0.0.2"), allowed=False)  # the smallest compatible one
@example(v4=ipaddress.IPv4Address("0.0.0.2"), allowed=True)
@example(v4=ipaddress.IPv4Address("10.0.0.1"), allowed=False)
@example(v4=ipaddress.IPv4Address("10.0.0.1"), allowed=True)
def test_an_ipv4_address_in_ipv6_clothing_is_judged_as_itself(
    v4: ipaddress.IPv4Address, allowed: bool
) -> None:
    policy = AddressPolicy.allowing([f"{v4}/32"] if allowed else [])
    if int(v4) <= 1:  # :: and ::1 are not IPv4-compatible forms
        return
    expected = policy.refusal(v4)
    for carrier in carriers(v4):
        assert policy.refusal(carrier) == expected, carrier


@pytest.mark.parametrize("address", ["::", "::1"])
def test_the_unspecified_and_loopback_ipv6_addresses_are_not_ipv4(address: str) -> None:
    """Allowing 0.0.0.0/8 does not let `::1` (this host) through as if it were 0.0.0.1."""
    policy = AddressPolicy.allowing(["0.0.0.0/8"])
    assert policy.refusal(ipaddress.IPv6Address(address)) is not None


def test_the_allow_list_is_read_as_the_operator_writes_it() -> None:
    """Spaces around an entry, empty entries, host bits set (192.168.1.5/24 is its /24)."""
    policy = AddressPolicy.allowing([" 10.1.0.0/16 ", "", "192.168.1.5/24"])
    assert policy.allow == (
        ipaddress.ip_network("10.1.0.0/16"),
        ipaddress.ip_network("192.168.1.0/24"),
    )


@pytest.mark.parametrize(
    "url", ["http://8.8.8.8/", "https://8.8.8.8/", "https://[2001:4860::8888]:8443/x"]
)
async def test_a_public_http_or_https_address_passes_the_add_time_check(url: str) -> None:
    await check_url(AddressPolicy(), url)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://8.8.8.8/", "refused ftp://8.8.8.8/: only http and https are fetched"),
        ("http://[::1/", "refused http://[::1/: "),
        ("http://no.invalid/", "refused http://no.invalid/: no.invalid does not resolve ("),
        ("http://10.0.0.1/", "refused 10.0.0.1: it resolves to 10.0.0.1, not a public address"),
    ],
)  # fmt: skip
async def test_an_add_time_refusal_names_the_url_and_why(url: str, message: str) -> None:
    with pytest.raises(BlockedAddress) as refused:
        await check_url(AddressPolicy(), url)
    assert str(refused.value).startswith(message)


async def test_unix_sockets_are_refused_by_name_and_sleep_sleeps() -> None:
    backend = GuardedBackend(AddressPolicy())
    with pytest.raises(BlockedAddress, match=r"^unix sockets are never fetched$"):
        await backend.connect_unix_socket("/var/run/docker.sock")
    await backend.sleep(0.001)


@pytest.mark.parametrize(
    ("url", "port"),
    [("http://shop.example/", 80), ("https://shop.example/", 443),
     ("HTTPS://shop.example/x", 443), ("https://shop.example:8443/", 8443),
     ("http://shop.example:443/", 443), ("https://shop.example:80/", 80)],
)  # fmt: skip
async def test_the_add_time_check_resolves_the_host_and_port_the_fetch_will_use(
    monkeypatch: pytest.MonkeyPatch, url: str, port: int
) -> None:
    asked: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[guard.IPAddress]:
        asked.append((host, port))
        return [ipaddress.ip_address("93.184.215.14")]

    monkeypatch.setattr(guard, "resolve", resolve)
    await check_url(AddressPolicy(), url)
    assert asked == [("shop.example", port)]
