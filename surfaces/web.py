"""`pricewatch serve`: the dashboard (dashboard.py) and the HTTP API (api.py), one ASGI app
over the typed client, and what guards both.

FastAPI (on Starlette) because the views are pydantic models: it validates every parameter
with them and writes the API's OpenAPI document from them. Pages are rendered on the server
(Jinja2, autoescaped) and need no script: the Content-Security-Policy allows none. Without
PRICEWATCH_API_TOKEN it listens on loopback only and asks no one to sign in; with it, the API
wants `Authorization: Bearer <token>` and the dashboard a session begun with the token.
Every form carries the session's CSRF token. docs/web.md lists every rule and limit.
"""

import contextlib
import functools
import ipaddress
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware.sessions import SessionMiddleware
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Apprise and the mail sender load with the server, not on its event loop at the first request
# that checks a channel or sends a test notice (the CLI leaves them out to start faster).
import activities.notify  # noqa: F401
from client.inputs import BadInput
from client.pricewatch import Pricewatch
from pricewatch.settings import Settings, long_enough
from surfaces import add, api, auth, dashboard, failures
from surfaces.errors import EXPECTED, Fault, failure

HERE = Path(__file__).parent
STATUS = {Fault.INPUT: 400, Fault.UNKNOWN: 404, Fault.SERVICE: 503, Fault.PENDING: 202}
# No script at all; styles and images from this server only; forms post here only.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
# The largest request body read. A targets-file entry with its templates is a few KiB;
# a form far less. Refused (413) before any of it is parsed or sent on to Temporal, whose
# own limit (4 MB a message) would otherwise answer as an outage.
MAX_BODY = 1024 * 1024


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_open_bind(host: str, settings: Settings) -> None:
    """BadInput for a bind beyond loopback without a token: anyone who can reach it could
    steer every target."""
    if not loopback(host) and settings.api_token is None:
        raise BadInput(
            f"listening on {host} lets other machines in: set PRICEWATCH_API_TOKEN "
            "(or listen on 127.0.0.1)"
        )


def create_app(settings: Settings, host: str = "127.0.0.1", port: int = 8090) -> FastAPI:
    """The app; it opens its client (Temporal, Postgres) on first use and closes it at
    shutdown."""
    refuse_open_bind(host, settings)
    # `is not None`, never truthiness: a token is set or unset (Settings makes "" unset), and
    # one that got here short anyway is refused rather than taken as no token.
    token = None if settings.api_token is None else settings.api_token.get_secret_value()
    if token is not None:
        long_enough(token)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with Pricewatch(settings, pool_size=10) as pricewatch:
            app.state.pricewatch = pricewatch
            yield

    app = FastAPI(
        title="pricewatch",
        version=api.API_VERSION,
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc load from a CDN
        redoc_url=None,
        openapi_url="/api/v1/openapi.json",
    )
    app.include_router(api.router)
    # Built once, on first ask (every route is in by then): it took 120-220 ms a request.
    app.openapi = functools.cache(lambda: api.openapi(app.routes))  # type: ignore[method-assign]
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(failures.router)
    app.include_router(add.router)
    app.include_router(dashboard.router)
    app.state.served = dashboard.Served(settings, token, dashboard.templates())

    async def expected(request: Request, err: Exception) -> Response:
        said = failure(err)
        if said is None:
            raise err
        return error(request, STATUS[said.fault], said.line)

    for kind in EXPECTED:  # inside the middleware (the session, the headers), unlike Exception
        app.add_exception_handler(kind, expected)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, err: RequestValidationError) -> Response:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"] if p not in ("body", "query", "path"))
        said = str(first["msg"]).removeprefix("Value error, ")
        line = f"{where}: {said}" if where else said
        return error(request, 422 if request.url.path.startswith("/api/") else 400, line)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> Response:
        line = f"no such page: {request.url.path}" if err.status_code == 404 else str(err.detail)
        answer = error(request, err.status_code, line)
        answer.headers.update(err.headers or {})
        if err.status_code == 405:  # Starlette's Allow names the first route's methods only
            answer.headers["Allow"] = _allowed(app, request)
        return answer

    app.add_middleware(Guard, token=token, hosts=LOOPBACK_HOSTS if loopback(host) else None)
    app.add_middleware(
        SessionMiddleware,
        secret_key=auth.session_key(token),
        session_cookie=auth.cookie_name(settings, port),
        same_site="lax",  # a link from a notice keeps the session; forms carry CSRF tokens
        https_only=settings.cookie_secure,
        max_age=7 * 24 * 3600,
    )
    return app


def _allowed(app: FastAPI, request: Request) -> str:
    """The methods some route at the request's path takes (each tried in turn: a router
    included in the app only says whether it matches)."""
    return ", ".join(
        method
        for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in app.routes)
    )


def error(request: Request, status: int, line: str) -> Response:
    """The one-line error: `{"error": line}` under /api/, the error page elsewhere."""
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": line}, status_code=status)
    shown: Response = dashboard.page(request, "error.html", status, line=line)
    return shown


class Guard:
    """Who may in, with how much, and the headers every answer gets, refusals included
    (plain ASGI: Starlette's BaseHTTPMiddleware costs a task and a stream per request).

    In order: the host name (`hosts`, on loopback: a DNS name rebound to 127.0.0.1 is
    refused), the token, then the body, read whole up to MAX_BODY before the app sees it."""

    def __init__(self, app: ASGIApp, token: str | None, hosts: set[str] | None) -> None:
        self.app = app
        self.token = token
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        path = request.url.path

        async def headed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.update(HEADERS)
                if not path.startswith("/static/"):
                    headers["Cache-Control"] = "no-store"
            await send(message)

        refused: Response | None = None
        if self.hosts is not None and (named := _host(request)) not in self.hosts:
            refused = error(request, 400, f"this server does not answer to the host {named!r}")
        elif path.startswith("/api/"):
            if (why := auth.api_refusal(request, self.token)) is not None:
                refused = JSONResponse({"error": why[1]}, status_code=why[0])
        elif self.token and not request.session.get("signed_in") and auth.private(path):
            where = urlencode({"next": path})
            refused = RedirectResponse(f"/login?{where}", status_code=303)
        if refused is None:
            body = await _body(request, receive)
            if body is None:
                line = f"the request body is over the limit of {MAX_BODY // 2**20} MiB"
                refused = error(request, 413, line)
            else:
                receive = _replay(body, receive)
        await (refused or self.app)(scope, receive, headed)


def _host(request: Request) -> str:
    """The Host header's name, without the port (`[::1]:8090` is `::1`)."""
    try:
        return urlsplit(f"//{request.headers.get('host', '')}").hostname or ""
    except ValueError:
        return ""


async def _body(request: Request, receive: Receive) -> list[Message] | None:
    """The body's messages, read whole; None past MAX_BODY (by its Content-Length before a
    byte is read, else as it arrives)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        return None
    messages, size = [], 0
    while True:
        message = await receive()
        messages.append(message)
        size += len(message.get("body", b""))
        if size > MAX_BODY:
            return None
        if message["type"] != "http.request" or not message.get("more_body"):
            return messages


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive that hands out the body already read, then what the client sends next
    (its disconnect)."""
    waiting = list(messages)

    async def replayed() -> Message:
        return waiting.pop(0) if waiting else await receive()

    return replayed


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything starts: a port in use is one line.

    TCP_NODELAY is set here, on the listener, and every accepted connection inherits it.
    asyncio sets it only on a socket whose `proto` is IPPROTO_TCP, and `create_server`
    makes one with proto 0, so without this each answer written in two parts (head, body)
    on a reused connection waited for the client's delayed ACK: about 40 ms (Nagle)."""
    try:
        bound = socket.create_server((host, port), family=_family(host), reuse_port=False)
    except OSError as err:
        why = os.strerror(err.errno) if err.errno else str(err)
        raise OSError(f"cannot listen on {host}:{port}: {why}") from err
    bound.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return bound


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class _Embedded(uvicorn.Server):
    """A server inside a process that handles its own signals (`pricewatch dev`)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


def server(settings: Settings, host: str, port: int, embedded: bool = False) -> uvicorn.Server:
    config = uvicorn.Config(
        create_app(settings, host, port), host=host, port=port, log_level="warning",
        access_log=False, lifespan="on", server_header=False,
    )  # fmt: skip
    return _Embedded(config) if embedded else uvicorn.Server(config)
