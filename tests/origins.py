"""Origins for the browser proxy's tests: TCP servers on 127.0.0.1 that count what reaches
them, and the request heads a client of the proxy sends."""

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from fetchers.browser_proxy import GuardedProxy, ProxySession

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Origin"], Awaitable[None]]


@dataclass(eq=False)
class Origin:
    """A TCP server that counts the connections reaching it and answers each with `answer`."""

    answer: Answer
    connections: int = 0
    open: int = 0
    heads: list[bytes] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    handlers: set[asyncio.Task[None]] = field(default_factory=set)
    server: asyncio.Server | None = None
    port: int = 0

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self.handle, host, port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.connections += 1
        self.open += 1
        self.ended.clear()
        try:
            await self.answer(reader, writer, self)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self.open -= 1
            if not self.open:
                self.ended.set()
            self.handlers.discard(task)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.handlers):
            task.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()


async def http_answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, o: Origin
) -> None:
    """One response (which would keep the connection alive), then the server closes."""
    o.heads.append(await reader.readuntil(b"\r\n\r\n"))
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n"
                 b"Keep-Alive: timeout=5\r\n\r\nok")  # fmt: skip
    await writer.drain()


async def echo_answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, o: Origin
) -> None:
    """Upper-cases what it gets; at the client's end of sending, says bye and closes."""
    while data := await reader.read(65536):
        writer.write(data.upper())
        await writer.drain()
    writer.write(b"bye")
    await writer.drain()


StartOrigin = Callable[..., Awaitable[Origin]]


def credentials(session: ProxySession) -> str:
    token = base64.b64encode(f"{session.username}:{session.password}".encode()).decode()
    return f"Proxy-Authorization: Basic {token}\r\n"


@contextlib.asynccontextmanager
async def asking(
    proxy: GuardedProxy, head: str
) -> AsyncIterator[tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]]:
    """Sends a request head to the proxy: its answer's head, and the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        writer.write(head.encode())
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        yield answer, reader, writer
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def connect(target: str, session: ProxySession | None) -> str:
    auth = credentials(session) if session else ""
    return f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n"


def get(url: str, session: ProxySession | None, extra: str = "") -> str:
    auth = credentials(session) if session else ""
    return f"GET {url} HTTP/1.1\r\nHost: ignored.example\r\n{auth}{extra}\r\n"
