"""The guard for the browser: an HTTP proxy every request of a headless Chromium goes through.

A page's scripts choose their own URLs (XHR, images, iframes, WebSockets, redirects), so the
check that plain fetches make on each connection (fetchers/guard.py) has to happen where the
browser connects. Chromium is launched with this proxy for every scheme and host-resolver rules
that leave it nothing to resolve, so names reach the proxy unresolved; the proxy resolves each
once, refuses the request if any address is outside the policy, and connects to the address it
checked: a DNS rebinder gets no second answer.

Each check runs in a session of its own (`new_session`, one browser context): its credentials
come with every request (`Proxy-Authorization`), which both attributes refusals and bytes to the
check and keeps other local processes from using the proxy. Everything is bounded: the request
head, the connect, each tunnel's idle time, the connections and bytes of a session.

Tried with Chromium 150 under Playwright (`--proxy-server=<url>`, `--proxy-bypass-list=<-loopback>`,
`--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1`, the session as the context's proxy
credentials): the 407 is answered with them, and documents, fetch, images and WebSockets are
carried or refused here.

Stdlib asyncio streams only: the proxy reads one request head per connection and then pipes
bytes, so an HTTP library would add a dependency and a second parser to trust, and nothing else.
"""

import asyncio
import base64
import binascii
import contextlib
import logging
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self, TypeVar

from fetchers.guard import AddressPolicy, BlockedAddress, IPAddress, check_host
from fetchers.proxy_heads import (
    Reply,
    Request,
    closing_head,
    origin_head,
    parse_absolute,
    parse_authority,
    parse_head,
    response,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_HEAD_BYTES = 16 * 1024
CHUNK_BYTES = 64 * 1024
# A rendered check loads scripts, styles and XHR (images, fonts and media are blocked by the
# fetcher): a few MiB is usual, this much is a page running away.
MAX_BYTES_PER_SESSION = 32 * 1024 * 1024
# Chromium's own limit of sockets per proxy server: a context never needs more.
MAX_CONNECTIONS_PER_SESSION = 32
# Unauthenticated connections included; each also has the head timeout.
MAX_CONNECTIONS = 256
HEAD_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
IDLE_TIMEOUT = 30.0
MAX_REASONS = 50
LINGER_TIMEOUT = 1.0


@dataclass(frozen=True)
class ProxySession:
    """The credentials of one check (one browser context): Playwright's `proxy` option
    takes them as `username` and `password`."""

    username: str
    password: str


@dataclass(frozen=True)
class SessionReport:
    """What one session's requests met: `refused` are the address policy's one-line reasons
    (the check's error names them); `failed` are requests that could not be carried out
    (unknown host, connection refused, timeouts, the connection cap), a transient matter."""

    refused: list[str]
    failed: list[str]
    requests: int
    bytes: int
    over_budget: bool


@dataclass(eq=False)
class Link:
    """One client connection and, once it is open, its origin connection."""

    client: asyncio.StreamWriter
    origin: asyncio.StreamWriter | None = None
    last_active: float = 0.0

    def end(self) -> None:
        """Drop both connections now: their readers see the end, the pumps return."""
        for writer in (self.client, self.origin):
            if writer is not None:
                writer.transport.abort()


@dataclass(eq=False)
class Session:
    """One check's state: what its requests met, and its open links (ended with it)."""

    password: str
    refused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    requests: int = 0
    bytes: int = 0
    over_budget: bool = False
    ended: bool = False
    links: set[Link] = field(default_factory=set)

    def refuse(self, reason: str) -> Reply:
        note(self.refused, reason)
        return Reply(403, reason)

    def fail(self, status: int, reason: str) -> Reply:
        note(self.failed, reason)
        return Reply(status, reason)


def note(reasons: list[str], reason: str) -> None:
    """Each reason once, and a bounded number of them: a page that polls a refused address
    must not grow the report (or the check's error) without end."""
    if reason not in reasons and len(reasons) < MAX_REASONS:
        reasons.append(reason)


async def open_tcp(address: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The one place the proxy connects out (to an address already checked): a seam the
    tests watch to show that a refused request never reaches this far."""
    return await asyncio.open_connection(address, port, limit=MAX_HEAD_BYTES * 4)


class GuardedProxy:
    """An HTTP proxy on 127.0.0.1 that holds every request to the address policy.

    CONNECT (https, wss) opens a tunnel to the checked address; an absolute-form request
    (plain http, ws upgrades) is sent on in origin form, one request per connection."""

    def __init__(
        self,
        policy: AddressPolicy,
        *,
        max_bytes_per_session: int = MAX_BYTES_PER_SESSION,
        max_connections_per_session: int = MAX_CONNECTIONS_PER_SESSION,
        max_connections: int = MAX_CONNECTIONS,
        head_timeout: float = HEAD_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.policy = policy
        self.max_bytes_per_session = max_bytes_per_session
        self.max_connections_per_session = max_connections_per_session
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.sessions: dict[str, Session] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None
        self.port = 0
        self.closing = False
        self.closed = asyncio.Event()

    @property
    def url(self) -> str:
        if self.server is None:
            raise RuntimeError("the proxy is not started")
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        if self.server is not None or self.closing:
            raise RuntimeError("the proxy is started once")
        # The callback is a plain function so each connection's task is created (and
        # tracked) before anything else runs: close() can cancel every one of them. No port:
        # the system picks a free one.
        self.server = await asyncio.start_server(self.accept, "127.0.0.1", limit=MAX_HEAD_BYTES)
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening, end every tunnel and wait for every task; idempotent."""
        if self.closing:
            await self.closed.wait()
            return
        self.closing = True
        try:
            if self.server is not None:
                self.server.close()
            for session in self.sessions.values():
                for link in list(session.links):
                    link.end()
            tasks = list(self.tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.server is not None:
                await self.server.wait_closed()
        finally:
            self.closed.set()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def new_session(self) -> ProxySession:
        session = ProxySession(secrets.token_urlsafe(16), secrets.token_urlsafe(24))
        self.sessions[session.username] = Session(password=session.password)
        return session

    def end_session(self, username: str) -> SessionReport:
        """The session's report; its credentials stop working and its tunnels end."""
        session = self.sessions.pop(username)
        session.ended = True
        for link in list(session.links):
            link.end()
        return SessionReport(
            refused=list(session.refused),
            failed=list(session.failed),
            requests=session.requests,
            bytes=session.bytes,
            over_budget=session.over_budget,
        )

    # -- connections -------------------------------------------------------------------

    def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.closing or len(self.tasks) >= self.max_connections:
            writer.transport.abort()
            return
        task = asyncio.get_running_loop().create_task(self.serve(reader, writer))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = Link(writer)
        session: Session | None = None
        try:
            request = await self.read_request(reader)
            if request is None:
                return
            session = self.authorised(request)
            if session.over_budget:
                raise Reply(403, "this check has spent its byte budget")
            if len(session.links) >= self.max_connections_per_session:
                reason = f"more than {self.max_connections_per_session} connections at once"
                raise session.fail(503, f"failed {request.target}: {reason}")
            session.requests += 1
            session.links.add(link)
            await self.carry(request, reader, link, session)
        except Reply as reply:
            await self.answer(reader, writer, reply)
        except (ConnectionError, OSError, TimeoutError):
            pass
        except Exception:
            log.exception("the browser proxy failed on a request")
        finally:
            if session is not None:
                session.links.discard(link)
            await self.finish(link)

    async def answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: Reply
    ) -> None:
        """The proxy's own answer, then a lingering close: a request body still unread when
        the socket closes would make the kernel reset the connection, and the client could
        lose the answer (a 407 it should retry with credentials). (ConnectionError and
        TimeoutError are OSErrors.)"""
        with contextlib.suppress(OSError):
            writer.write(response(reply.status, reply.text, reply.headers))
            async with asyncio.timeout(self.idle_timeout):
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(LINGER_TIMEOUT):
                while await reader.read(CHUNK_BYTES):
                    pass

    async def finish(self, link: Link) -> None:
        """Close both connections after what is buffered for them is sent (a tunnel's last
        bytes), within the idle time; a link ended by force is already gone."""
        writers = [w for w in (link.client, link.origin) if w is not None]
        for writer in writers:
            writer.close()
        try:
            async with asyncio.timeout(self.idle_timeout):
                for writer in writers:
                    with contextlib.suppress(OSError):  # ConnectionError included
                        await writer.wait_closed()
        except TimeoutError:
            pass  # a peer that reads nothing more: dropped below
        finally:
            link.end()

    async def read_request(self, reader: asyncio.StreamReader) -> Request | None:
        """The request head, or None if the client left (or was silent) before sending one."""
        try:
            async with asyncio.timeout(self.head_timeout):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError as err:
            raise Reply(431, f"request head over {MAX_HEAD_BYTES} bytes") from err
        except (asyncio.IncompleteReadError, TimeoutError):
            return None
        return parse_head(head)

    def authorised(self, request: Request) -> Session:
        """The live session `Proxy-Authorization` names: the `Basic` scheme only (its name in
        any case, RFC 7235), then strict base64 of `username:password` (split at the first
        colon, RFC 7617), the password compared in full and in constant time. Compared as
        bytes: `compare_digest` refuses a str that is not ASCII with a TypeError."""
        challenge = ('Proxy-Authenticate: Basic realm="pricewatch"',)
        credentials = request.header("proxy-authorization") or ""
        scheme, _, token = credentials.partition(" ")
        try:
            decoded = base64.b64decode(token.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            decoded = ""
        username, _, password = decoded.partition(":")
        session = self.sessions.get(username) if scheme.lower() == "basic" else None
        if session is None or not secrets.compare_digest(
            session.password.encode(), password.encode()
        ):
            raise Reply(407, "proxy credentials of a live session required", headers=challenge)
        return session

    async def carry(
        self, request: Request, reader: asyncio.StreamReader, link: Link, session: Session
    ) -> None:
        head: bytes | None = None  # a CONNECT tunnel sends no head of ours
        if request.method == "CONNECT":
            host, port, authority = parse_authority(request.target)
        else:
            host, port, authority, path = parse_absolute(request.target)
            head = origin_head(request, path, authority)
        origin_reader, origin = await self.connect(session, host, port, authority)
        link.origin = origin
        if session.ended:
            return  # the check ended while this request was connecting
        link.last_active = asyncio.get_running_loop().time()
        if head is None:
            link.client.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            async with asyncio.TaskGroup() as pumps:
                pumps.create_task(self.pump(reader, origin, link, session))
                pumps.create_task(self.pump(origin_reader, link.client, link, session))
            return
        if not self.spend(session, len(head)):
            return
        origin.write(head)
        async with asyncio.TaskGroup() as pumps:
            pumps.create_task(self.pump(reader, origin, link, session))
            pumps.create_task(self.relay_response(origin_reader, link, session))

    async def relay_response(
        self, origin: asyncio.StreamReader, link: Link, session: Session
    ) -> None:
        """The answer, then the end of the client's connection (flushed): the origin's close
        ends the exchange, which was one request (or one WebSocket)."""
        await self.relay_answer(origin, link, session)
        link.client.close()

    async def connect(
        self, session: Session, host: str, port: int, authority: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Check the host (one resolution) and connect to the address that was checked."""
        if port == self.port:
            raise session.refuse(f"refused {authority}: the browser proxy's own port")
        try:
            async with asyncio.timeout(self.connect_timeout):
                address = await checked(self.policy, host, port, authority)
                return await open_tcp(str(address), port)
        except BlockedAddress as err:
            raise session.refuse(str(err)) from err
        except TimeoutError as err:
            reason = f"failed {authority}: no connection in {self.connect_timeout}s"
            raise session.fail(504, reason) from err
        except (OSError, UnicodeError, ValueError) as err:
            # socket.gaierror (an unknown host) is an OSError too.
            raise session.fail(502, f"failed {authority}: {err}") from err

    def spend(self, session: Session, count: int) -> bool:
        """Count bytes against the session; over its budget, every tunnel of it ends."""
        if session.ended:
            return False  # its check is over: what is still open of it ends
        session.bytes += count
        if session.bytes > self.max_bytes_per_session:
            session.over_budget = True
            for link in list(session.links):
                link.end()
        return not session.over_budget

    async def active(self, link: Link, step: Callable[[], Awaitable[T]]) -> T | None:
        """`step()`, or None once neither direction of the link has moved for the idle time.
        (Each direction waits on its own; a long download keeps a silent upload alive.)"""
        loop = asyncio.get_running_loop()
        while True:
            try:
                async with asyncio.timeout(self.idle_timeout):
                    return await step()
            except TimeoutError:
                if loop.time() - link.last_active >= self.idle_timeout:
                    return None

    async def pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        link: Link,
        session: Session,
    ) -> None:
        """Copy one direction until its end (passed on as a half-close), the idle time, the
        budget or an error; the latter three end the whole link."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await self.active(link, lambda: source.read(CHUNK_BYTES))
                if data is None:
                    link.end()
                    return
                if not data:
                    if sink.can_write_eof():
                        sink.write_eof()
                    return
                if not self.spend(session, len(data)):
                    return
                link.last_active = loop.time()
                sink.write(data)
                async with asyncio.timeout(self.idle_timeout):
                    await sink.drain()
        except (ConnectionError, OSError, TimeoutError):
            link.end()

    async def relay_answer(
        self, origin: asyncio.StreamReader, link: Link, session: Session
    ) -> None:
        """The origin's answer with `Connection: close` in its head (each request is one
        connection, so Chromium must not send a second on it), then the rest as it comes."""
        try:
            while True:
                try:
                    head = await self.active(link, lambda: origin.readuntil(b"\r\n\r\n"))
                except asyncio.LimitOverrunError:
                    break  # a head this large is relayed as it is
                except asyncio.IncompleteReadError as err:
                    head = err.partial
                if head is None:
                    link.end()
                    return
                status, rewritten = closing_head(head)
                if not self.spend(session, len(rewritten)):
                    return
                link.client.write(rewritten)
                # 100 Continue and the like come before the answer; 101 hands over the link.
                if not (100 <= status < 200) or status == 101 or not head.endswith(b"\r\n\r\n"):
                    break
        except (ConnectionError, OSError):
            link.end()
            return
        await self.pump(origin, link.client, link, session)


async def checked(policy: AddressPolicy, host: str, port: int, authority: str) -> IPAddress:
    """The guard's check (one resolution), its refusal naming the port as well."""
    try:
        return await check_host(policy, host, port)
    except BlockedAddress as err:  # check_host's words are "refused {host}: ..."
        raise BlockedAddress(
            f"refused {authority}: {str(err).removeprefix(f'refused {host}: ')}"
        ) from err
    except IndexError as err:  # a resolver that answered with no address at all
        raise socket.gaierror(f"{host} resolves to no address") from err
