"""A TCP proxy between the workers and one dependency, with the network's in-between faults.

The chaos run starts one per dependency (Postgres, the Temporal frontend, the page server,
the webhook receiver, the SMTP server) and points the workers at it. Its modes, switched at
seeded moments for a few seconds each:

- `latency`: every chunk waits before it is passed on;
- `reset`: live connections are reset (RST) at once, new ones after their first bytes;
- `blackhole`: new and live connections are accepted and read, and nothing is passed on or
  closed; when the hole ends, every connection it swallowed is reset;
- `throttle`: both directions at a few KiB/s.

A call made into a black hole is a hang: from the first bytes the client sent that were
swallowed to the moment the client gave up and closed the connection. Each is recorded
(`hangs`), so the run can hold every client to its documented bound.
"""

import asyncio
import contextlib
import socket
import struct
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit, urlunsplit

MODES = ("latency", "reset", "blackhole", "throttle")
CHUNK = 65536


@dataclass
class Hang:
    """A call swallowed by a black hole. `ended` is None if the client still waited when
    the hole closed (after `waited` seconds: a hang at least that long)."""

    dependency: str
    since: float
    ended: float | None
    hole_ended: float
    first_bytes: bytes = b""
    """The start of what the client sent into the hole (which call it was)."""

    @property
    def waited(self) -> float:
        return (self.ended or self.hole_ended) - self.since


@dataclass(eq=False)
class Link:
    """One client connection and its upstream."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    swallowed: bool = False  # was in a black hole: reset when it ends
    pending_since: float | None = None  # the first swallowed client bytes
    swallowed_bytes: bytes = b""  # the start of them
    closed_at: float | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self) -> None:
        """Close with RST (SO_LINGER 0), both sides, like a middlebox dropping the flow."""
        for writer in (self.client, self.upstream):
            if writer is None or writer.transport.is_closing():
                continue
            sock = writer.get_extra_info("socket")
            if sock is not None and sock.family != socket.AF_UNIX:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            writer.close()

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.close()


class Proxy:
    def __init__(self, dependency: str, upstream: tuple[str, int] | str) -> None:
        """`upstream`: (host, port), or a Unix socket path (the embedded Postgres)."""
        self.dependency = dependency
        self.upstream = upstream
        self.mode = "normal"
        self.latency = 0.3
        self.bytes_per_second = 4096
        self.links: set[Link] = set()
        self.hangs: list[Hang] = []
        self.server: asyncio.Server | None = None
        self.port = 0
        self.accepted = 0
        self.lock = asyncio.Lock()  # one fault at a time

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        tasks = [task for link in self.links for task in link.tasks]
        for link in list(self.links):
            link.reset()
        self.links.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def fault(self, mode: str, seconds: float) -> int:
        """Switch to `mode` for `seconds`, then back to normal. Returns how many
        connections it met (live ones and new ones)."""
        assert mode in MODES, mode
        met = len(self.links) - self.accepted
        self.mode = mode
        if mode == "reset":
            for link in list(self.links):
                link.reset()
        elif mode == "blackhole":
            for link in self.links:
                link.swallowed = True
        try:
            await asyncio.sleep(seconds)
        finally:
            self.mode = "normal"
            if mode == "blackhole":
                self._close_hole(time.time())
        return met + self.accepted

    def _close_hole(self, now: float) -> None:
        for link in [link for link in self.links if link.swallowed]:
            if link.pending_since is not None:
                self.hangs.append(
                    Hang(
                        self.dependency, link.pending_since, link.closed_at, now,
                        link.swallowed_bytes,
                    )
                )  # fmt: skip
            link.reset()
            self.links.discard(link)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = Link(client=writer, swallowed=self.mode == "blackhole")
        if link.swallowed:  # the client waits from now on (SMTP's server speaks first)
            link.pending_since = time.time()
        self.accepted += 1
        self.links.add(link)
        try:
            if not link.swallowed:
                if isinstance(self.upstream, str):
                    up_reader, link.upstream = await asyncio.open_unix_connection(self.upstream)
                else:
                    up_reader, link.upstream = await asyncio.open_connection(*self.upstream)
                link.tasks.append(asyncio.create_task(self._pump(link, up_reader, writer, False)))
            await self._pump(link, reader, link.upstream, True)
            # The client is done: its call ended here, whatever the upstream still does (a
            # swallowed connection's upstream never hears of the close).
            link.closed_at = time.time()
            await asyncio.gather(*link.tasks, return_exceptions=True)  # `stop` cancels them
        except (OSError, asyncio.IncompleteReadError):
            link.reset()
        finally:
            link.closed_at = link.closed_at or time.time()
            if not link.swallowed:
                self.links.discard(link)
                link.close()

    async def _pump(
        self,
        link: Link,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter | None,
        from_client: bool,
    ) -> None:
        try:
            while data := await source.read(CHUNK):
                if link.swallowed or sink is None:
                    if from_client and link.pending_since is None:
                        link.pending_since = time.time()
                    if from_client and len(link.swallowed_bytes) < 48:
                        link.swallowed_bytes += data[: 48 - len(link.swallowed_bytes)]
                    continue
                if self.mode == "reset":
                    link.reset()
                    return
                if self.mode == "latency":
                    await asyncio.sleep(self.latency)
                if self.mode == "throttle":
                    step = max(1, self.bytes_per_second // 10)
                    for start in range(0, len(data), step):
                        sink.write(data[start : start + step])
                        await sink.drain()
                        await asyncio.sleep(0.1)
                    continue
                sink.write(data)
                await sink.drain()
            if sink is not None and not link.swallowed and sink.can_write_eof():
                sink.write_eof()
        except (OSError, asyncio.IncompleteReadError):
            if not link.swallowed:
                link.reset()


def postgres_upstream(url: str) -> tuple[str, int] | str:
    """Where a Postgres URL connects: (host, port), or the Unix socket's path."""
    parts = urlsplit(url)
    host = parse_qs(parts.query).get("host", [parts.hostname or "localhost"])[0]
    port = parts.port or 5432
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)


def through(url: str, proxy: Proxy) -> str:
    """The same Postgres URL, connecting through `proxy` over TCP."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@{proxy.address}" if credentials else proxy.address
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
