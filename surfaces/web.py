"""`pricewatch serve`: the dashboard (dashboard.py) and the HTTP API (api.py), one ASGI app
over the typed client, and what guards both.

FastAPI (on Starlette) because the views are pydantic models: it validates every parameter
with them and writes the API's OpenAPI document from them. Pages are rendered on the server
(Jinja2, autoescaped) and need no script: the Content-Security-Policy allows none. Without
PRICEWATCH_API_TOKEN it listens on loopback only and asks no one to sign in; with it, the API
wants `Authorization: Bearer <token>` and the dashboard a session begun with the token.
Every form carries the session's CSRF token.
"""

import contextlib
import hmac
import ipaddress
import os
import secrets
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
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from client.pricewatch import BadInput, Pricewatch
from pricewatch.settings import Settings
from surfaces import api, dashboard
from surfaces.errors import EXPECTED, Fault, failure

HERE = Path(__file__).parent
STATUS = {Fault.INPUT: 400, Fault.UNKNOWN: 404, Fault.SERVICE: 503}
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
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]


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


def create_app(settings: Settings, host: str = "127.0.0.1") -> FastAPI:
    """The app; it opens its client (Temporal, Postgres) on first use and closes it at
    shutdown."""
    refuse_open_bind(host, settings)
    token = settings.api_token.get_secret_value() if settings.api_token else None

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
    app.openapi = lambda: api.openapi(app.routes)  # type: ignore[method-assign]
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(dashboard.router)
    app.state.served = dashboard.Served(settings, token, dashboard.templates())

    def error(request: Request, status: int, line: str) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": line}, status_code=status)
        shown: Response = dashboard.page(request, "error.html", status, line=line)
        return shown

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
        return error(request, err.status_code, line)

    app.add_middleware(Guard, token=token)
    secret = (
        hmac.new(token.encode(), b"pricewatch session", "sha256").hexdigest() if token else None
    )
    app.add_middleware(
        SessionMiddleware,
        secret_key=secret or secrets.token_hex(32),
        session_cookie="pricewatch_session",
        same_site="lax",  # a link from a notice keeps the session; forms carry CSRF tokens
        https_only=False,
        max_age=7 * 24 * 3600,
    )
    app.add_middleware(
        TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS if loopback(host) else ["*"]
    )

    return app


class Guard:
    """Who may in, and the headers every answer gets (plain ASGI: Starlette's
    BaseHTTPMiddleware costs a task and a stream per request)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        path = request.url.path
        refused: Response | None = None
        if path.startswith("/api/"):
            if (why := _api_refusal(request, self.token)) is not None:
                refused = JSONResponse({"error": why[1]}, status_code=why[0])
        elif self.token and not request.session.get("signed_in") and _private(path):
            where = urlencode({"next": path})
            refused = RedirectResponse(f"/login?{where}", status_code=303)

        async def headed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.update(HEADERS)
                if not path.startswith("/static/"):
                    headers["Cache-Control"] = "no-store"
            await send(message)

        await (refused or self.app)(scope, receive, headed)


def _api_refusal(request: Request, token: str | None) -> tuple[int, str] | None:
    """Why an API request is refused, if it is: a missing or wrong bearer token; without a
    token (loopback only), a change asked by another site's page (a browser sends its
    Origin), which could otherwise reach a local server."""
    if token is not None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
            return 401, "a bearer token is needed: Authorization: Bearer $PRICEWATCH_API_TOKEN"
        return None
    origin = request.headers.get("origin")
    changes = request.method not in ("GET", "HEAD")
    if changes and origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        return 403, f"a change from another site ({origin}) is refused"
    return None


def _private(path: str) -> bool:
    """A page that needs the session: all but the sign-in and the stylesheet."""
    return path != "/login" and not path.startswith("/static/")


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything starts: a port in use is one line."""
    try:
        return socket.create_server((host, port), family=_family(host), reuse_port=False)
    except OSError as err:
        why = os.strerror(err.errno) if err.errno else str(err)
        raise OSError(f"cannot listen on {host}:{port}: {why}") from err


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class _Embedded(uvicorn.Server):
    """A server inside a process that handles its own signals (`pricewatch dev`)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


def server(settings: Settings, host: str, port: int, embedded: bool = False) -> uvicorn.Server:
    config = uvicorn.Config(
        create_app(settings, host), host=host, port=port, log_level="warning",
        access_log=False, lifespan="on", server_header=False,
    )  # fmt: skip
    return _Embedded(config) if embedded else uvicorn.Server(config)
