"""`pricewatch serve`: the dashboard and the HTTP API, one ASGI app over the typed client.

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
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode, urlsplit

import uvicorn
from fastapi import FastAPI, Form, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.exceptions import HTTPException
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware

from client import manifest
from client.manifest import Entry
from client.pricewatch import BadInput, Pricewatch
from pricewatch.durations import parse_duration
from pricewatch.models import CheckStatus
from pricewatch.settings import Settings
from pricewatch.slots import format_slot
from pricewatch.views import PricesRow, TargetState
from surfaces import api, charts
from surfaces.errors import EXPECTED, Fault, failure, one_line
from surfaces.render import masked

HERE = Path(__file__).parent
STATUS = {Fault.INPUT: 400, Fault.UNKNOWN: 404, Fault.SERVICE: 503}
PAGE_SIZE = 50
CHART_POINTS = 500
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
STATES: list[TargetState] = ["unhealthy", "paused", "retrying", "prices"]


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


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def templates() -> Jinja2Templates:
    env = Environment(
        loader=PackageLoader("surfaces", "templates"), autoescape=True, undefined=StrictUndefined
    )
    env.filters["when"] = _when
    env.filters["slot"] = format_slot
    env.filters["quote"] = lambda text: quote(str(text), safe="")
    env.globals["sparkline"] = charts.sparkline
    return Jinja2Templates(env=env)


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
    pages = templates()

    def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        said = request.session.pop("said", None)
        return pages.TemplateResponse(
            request,
            name,
            {"said": said, "csrf": csrf_token(request), "signed_in": token is not None,
             "ui_url": settings.resolved_ui_url(), **context},
            status_code=status,
        )  # fmt: skip

    def error(request: Request, status: int, line: str) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": line}, status_code=status)
        return page(request, "error.html", status, line=line)

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

    @app.middleware("http")
    async def guarded(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        path = request.url.path
        refused = None
        if path.startswith("/api/"):
            refused = _api_refusal(request, token)
        elif token is not None and not request.session.get("signed_in") and _private(path):
            where = urlencode({"next": str(request.url.path)})
            response: Response = RedirectResponse(f"/login?{where}", status_code=303)
            response.headers.update(HEADERS)
            return response
        if refused is not None:
            status, line = refused
            response = JSONResponse({"error": line}, status_code=status)
        else:
            response = await call_next(request)
        response.headers.update(HEADERS)
        if not path.startswith("/static/"):
            response.headers["Cache-Control"] = "no-store"
        return response

    secret = (
        hmac.new(token.encode(), b"pricewatch session", "sha256").hexdigest() if token else None
    )
    app.add_middleware(
        SessionMiddleware,
        secret_key=secret or secrets.token_hex(32),
        session_cookie="pricewatch_session",
        same_site="strict",
        https_only=False,
        max_age=7 * 24 * 3600,
    )
    app.add_middleware(
        TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS if loopback(host) else ["*"]
    )

    # Pages -------------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def targets_page(
        request: Request,
        q: Annotated[str | None, Query(max_length=200)] = None,
        state: TargetState | None = None,
        page_number: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
    ) -> Response:
        pricewatch = api.client(request)
        found = await pricewatch.targets(q, state, PAGE_SIZE, (page_number - 1) * PAGE_SIZE)
        pages_in_all = max(1, -(-found.total // PAGE_SIZE))

        def link(**changed: object) -> str:
            query = {"q": q, "state": state, "page": page_number, **changed}
            return "/?" + urlencode({k: v for k, v in query.items() if v not in (None, "", 1)})

        return page(
            request, "targets.html", targets=found.targets, total=found.total, q=q or "",
            state=state, states=STATES, page=page_number, pages=pages_in_all, link=link,
        )  # fmt: skip

    @app.get("/targets/{target_id}", response_class=HTMLResponse, include_in_schema=False)
    async def target_page(
        request: Request,
        target_id: api.TargetId,
        before: datetime | None = None,
        change: Annotated[str | None, Query(pattern=api.WORK_ID_PATTERN)] = None,
    ) -> Response:
        pricewatch = api.client(request)
        view = await pricewatch.status_view(target_id)
        config = view.status.config
        history = await pricewatch.history(target_id, PAGE_SIZE, before)
        rows: list[PricesRow] = []
        if config.price_mode is not None:
            with contextlib.suppress(BadInput):  # none recorded yet
                rows = await pricewatch.prices(target_id, api.EPOCH, CHART_POINTS)
        diff, no_diff = None, None
        try:
            shown = await pricewatch.change(target_id, change)
            diff = (shown, charts.side_by_side(shown.diff))
        except BadInput as err:
            no_diff = one_line(err)
        deliveries = await pricewatch.deliveries(target_id, PAGE_SIZE)
        by_channel: dict[str, list[Any]] = {}
        for delivery in deliveries:
            by_channel.setdefault(delivery.channel_id, []).append(delivery)
        older = history[-1].slot if len(history) == PAGE_SIZE else None
        return page(
            request, "target.html", target_id=target_id, view=view, config=config,
            history=history, older=older, before=before, charts=_charts(rows),
            diff=diff, no_diff=no_diff, deliveries=by_channel,
            channels=[masked(c) for c in await pricewatch.channels(target_id)],
            screenshots=config.render is not None, changed=CheckStatus.CHANGED,
            as_written=manifest.dump([(config, view.status.paused)]),
        )  # fmt: skip

    @app.get("/failures", response_class=HTMLResponse, include_in_schema=False)
    async def failures_page(request: Request) -> Response:
        failed = await api.client(request).failures(None, PAGE_SIZE * 2)
        return page(request, "failures.html", failures=failed)

    @app.get("/screenshots/{work_id}", include_in_schema=False)
    async def screenshot(request: Request, work_id: api.WorkId) -> Response:
        shot = await api.client(request).screenshot(work_id)
        return Response(shot, media_type="image/png")

    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    async def login_page(request: Request, next: str = "/") -> Response:
        return page(request, "login.html", next=_local(next))

    # Actions: each a POST with the session's CSRF token, answered with a redirect to the
    # page it came from, or the error's one line.

    @app.post("/login", include_in_schema=False)
    async def login(
        request: Request,
        csrf: Annotated[str, Form()] = "",
        api_token: Annotated[str, Form(alias="token")] = "",
        next: Annotated[str, Form()] = "/",
    ) -> Response:
        check_csrf(request, csrf)
        if token is None or not hmac.compare_digest(api_token.encode(), token.encode()):
            return page(request, "login.html", 401, next=_local(next), line="wrong token")
        request.session.clear()  # a fresh session: a new CSRF token too
        request.session["signed_in"] = True
        return RedirectResponse(_local(next), status_code=303)

    @app.post("/logout", include_in_schema=False)
    async def logout(request: Request, csrf: Annotated[str, Form()] = "") -> Response:
        check_csrf(request, csrf)
        request.session.clear()
        return RedirectResponse("/login" if token else "/", status_code=303)

    @app.post("/targets", include_in_schema=False)
    async def add(
        request: Request,
        target_id: Annotated[str, Form(alias="id", max_length=63)],
        url: Annotated[str, Form(max_length=2000)],
        every: Annotated[str, Form(max_length=20)] = "24h",
        selector: Annotated[str, Form(max_length=500)] = "",
        prices: Annotated[bool, Form()] = False,
        csrf: Annotated[str, Form()] = "",
    ) -> Response:
        check_csrf(request, csrf)
        entry = Entry(
            id=target_id.strip(), url=url.strip(), every=parse_duration(every.strip() or "24h"),
            selector=None if prices else selector.strip() or None,
            prices={"selector": selector.strip() or None} if prices else None,
        )  # fmt: skip
        steps = await api.client(request).put(entry, where="")
        request.session["said"] = f"{', '.join(s.action.value for s in steps)} {entry.id}"
        return RedirectResponse(f"/targets/{entry.id}", status_code=303)

    @app.post("/targets/{target_id}/{action}", include_in_schema=False)
    async def act(
        request: Request,
        target_id: api.TargetId,
        action: str,
        csrf: Annotated[str, Form()] = "",
    ) -> Response:
        check_csrf(request, csrf)
        pricewatch = api.client(request)
        if action == "pause":
            await pricewatch.pause(target_id)
            said = f"paused {target_id}: no more slots fall due until it is resumed"
        elif action == "resume":
            await pricewatch.resume(target_id)
            said = f"resuming {target_id}"
        elif action == "check":
            result = await pricewatch.check_now(target_id)
            said = f"checked {result.work_id}: {result.status.value}"
            if result.error_message:
                said += f" ({result.error_message})"
        elif action == "remove":
            await pricewatch.remove(target_id)
            request.session["said"] = f"removed {target_id}"
            return RedirectResponse("/", status_code=303)
        else:
            raise HTTPException(404, "Not Found")
        request.session["said"] = said
        return RedirectResponse(f"/targets/{target_id}", status_code=303)

    @app.post("/checks/{work_id}/retry", include_in_schema=False)
    async def retry(
        request: Request, work_id: api.WorkId, csrf: Annotated[str, Form()] = ""
    ) -> Response:
        check_csrf(request, csrf)
        result = await api.client(request).retry(work_id)
        said = "already recorded, not fetched again: " if result.already_recorded else ""
        request.session["said"] = f"{said}{result.work_id}: {result.status.value}"
        return RedirectResponse("/failures", status_code=303)

    return app


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


def csrf_token(request: Request) -> str:
    if "csrf" not in request.session:
        request.session["csrf"] = secrets.token_urlsafe(32)
    token: str = request.session["csrf"]
    return token


def check_csrf(request: Request, given: str) -> None:
    expected = request.session.get("csrf")
    if not expected or not hmac.compare_digest(given.encode(), str(expected).encode()):
        raise HTTPException(403, "the form's CSRF token is wrong or missing: reload the page")


def _local(path: str) -> str:
    """A path on this server to go back to, never another site (`//evil`, `https://`)."""
    return path if path.startswith("/") and not path.startswith("//") and "\\" not in path else "/"


def _charts(rows: list[PricesRow]) -> list[tuple[str, Any, int]]:
    """One chart per named price, in the order the page lists them: (name, svg, points)."""
    series: dict[str, list[tuple[datetime, Decimal]]] = {}
    for row in rows:
        for price in row.prices:
            series.setdefault(price.name, []).append((row.slot, price.amount))
    return [
        (name, charts.price_chart(name, points), len(points)) for name, points in series.items()
    ]


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything starts: a port in use is one line."""
    try:
        return socket.create_server((host, port), family=_family(host), reuse_port=False)
    except OSError as err:
        raise OSError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err


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
