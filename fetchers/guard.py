"""Where fetches may connect: the SSRF guard.

A server that fetches user-supplied URLs must not become a way into its own network. Every
connection (the page, each redirect hop, each webhook) resolves its host once, refuses the
host if *any* address is not public, and connects to the address it checked, so a DNS
rebinder cannot swap the answer between the check and the connection. httpx has no hook
for this; its connection pool takes an httpcore network backend, so the guard is one.
"""

import asyncio
import contextlib
import ipaddress
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field

import certifi
import httpcore
import httpx

from pricewatch.urls import as_sent

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class BlockedAddress(Exception):
    """The host is (or resolves to) an address outside the public internet."""


@dataclass(frozen=True)
class AddressPolicy:
    """Public unicast addresses only, plus what the operator allows explicitly
    (`PRICEWATCH_ALLOW_NETWORKS`, e.g. an intranet, or 127.0.0.1 for the dev stack)."""

    allow: tuple[IPNetwork, ...] = field(default=())

    @classmethod
    def allowing(cls, networks: Iterable[str]) -> "AddressPolicy":
        return cls(tuple(ipaddress.ip_network(n.strip(), strict=False) for n in networks if n))

    def refusal(self, address: IPAddress) -> str | None:
        """Why a connection to `address` is refused, or None if it is allowed."""
        if any(address in network for network in self.allow):
            return None
        if isinstance(address, ipaddress.IPv6Address) and (inner := embedded_ipv4(address)):
            return self.refusal(inner)
        # is_global is False for loopback, private (RFC 1918, fc00::/7), link-local (incl.
        # 169.254.169.254, the cloud metadata address), CGNAT, unspecified and reserved.
        if not address.is_global or address.is_multicast:
            return "not a public address (allow it with PRICEWATCH_ALLOW_NETWORKS)"
        return None


# IPv6 forms that carry an IPv4 address a gateway will reach: NAT64 (64:ff9b::/96 and the
# local-use 64:ff9b:1::/48), and IPv4-compatible (::/96); mapped and 6to4 have accessors.
NAT64_PREFIXES = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, if it stands for one."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if any(address in prefix for prefix in NAT64_PREFIXES):
        return low32
    if address in IPV4_COMPATIBLE and int(address) > 1:  # not :: or ::1
        return low32
    return None


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address the host resolves to. Literal IPs in any spelling (decimal, octal,
    hex, IPv4-mapped IPv6) come back in canonical form, so they are checked like names.
    A canonical literal is taken as it is: the resolver runs in a thread, which a starved
    machine may not schedule within the connect timeout."""
    with contextlib.suppress(ValueError):  # not a canonical literal: the resolver reads it
        return [ipaddress.ip_address(host)]
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(info[4][0]) for info in infos]


async def check_host(policy: AddressPolicy, host: str, port: int) -> IPAddress:
    """The address to connect to, after checking all of them; BlockedAddress otherwise."""
    addresses = await resolve(host, port)
    for address in addresses:
        if (reason := policy.refusal(address)) is not None:
            raise BlockedAddress(f"refused {host}: it resolves to {address}, {reason}")
    return addresses[0]


async def check_url(policy: AddressPolicy, url: str) -> None:
    """The add-time check: the same rule, before anything is started."""
    try:
        parsed = httpx.URL(as_sent(url))
    except httpx.InvalidURL as err:
        raise BlockedAddress(f"refused {url}: {err}") from err
    if parsed.scheme not in ("http", "https"):
        raise BlockedAddress(f"refused {url}: only http and https are fetched")
    # The host the fetch connects to (an IDN in punycode), not its Unicode name, which the
    # resolver would encode by IDNA 2003: straße.example would be checked as strasse.example.
    host = parsed.raw_host.decode("ascii")
    try:
        await check_host(policy, host, parsed.port or (443 if parsed.scheme == "https" else 80))
    except socket.gaierror as err:
        raise BlockedAddress(f"refused {url}: {host} does not resolve ({err.strerror})") from err


class ResolveTimeout(httpcore.ConnectTimeout):
    """The host's addresses did not come within the connect timeout (the resolver runs in a
    thread, which a starved machine schedules late); httpx reports it as ConnectTimeout."""


class GuardedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                address = await check_host(self.policy, host, port)
        except socket.gaierror as err:
            # httpx reports this as ConnectError; the cause tells unknown host from a hiccup.
            raise httpcore.ConnectError(f"cannot resolve {host}: {err.strerror}") from err
        except TimeoutError as err:  # the resolver's thread did not answer in time
            raise ResolveTimeout(f"{host} was not resolved within {timeout:g}s") from err
        # TLS still verifies (and sends SNI for) the original host name: httpcore takes it
        # from the request, not from the address we connect to.
        return await self.inner.connect_tcp(
            str(address), port, timeout=timeout, local_address=local_address,
            socket_options=socket_options,
        )  # fmt: skip

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise BlockedAddress("unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport with its pool rebuilt on the guarded backend.

    `_pool` is httpx's private attribute (httpx has no public way to pass a network
    backend). If an upgrade stops using it, requests bypass the guard and
    `test_the_connection_goes_to_the_address_that_was_checked` fails: its host resolves only
    through the guard."""

    def __init__(self, policy: AddressPolicy) -> None:
        super().__init__(trust_env=False)
        limits = httpx.Limits()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl.create_default_context(cafile=certifi.where()),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(policy),
        )
