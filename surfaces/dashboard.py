"""The dashboard's pages and forms: what `--json` shows, for people. Every action is a POST
form carrying the session's CSRF token; it answers with a redirect to the page it came from
(which says what was done, once) or with the CLI's one line."""

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.exceptions import HTTPException

from client import manifest
from client.manifest import Entry
from client.pricewatch import BadInput
from pricewatch.durations import parse_duration
from pricewatch.health import DEFAULT_WINDOW
from pricewatch.models import CheckStatus
from pricewatch.settings import Settings
from pricewatch.slots import format_slot
from pricewatch.views import ChangeView, TargetState
from surfaces import api, charts
from surfaces.auth import check_csrf, csrf_token, local, sign_in
from surfaces.errors import one_line
from surfaces.render import masked

PAGE_SIZE = 50
CHART_POINTS = 500
STATES: list[TargetState] = ["unhealthy", "paused", "retrying", "prices"]
router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class Served:
    """What the pages need of the app (`app.state.served`)."""

    settings: Settings
    token: str | None
    pages: Jinja2Templates


def served(request: Request) -> Served:
    found: Served = request.app.state.served
    return found


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


def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    shared = {
        "said": request.session.pop("said", None),  # what the last action did, once
        "csrf": csrf_token(request),
        "signed_in": bool(request.session.get("signed_in")),
        "ui_url": served(request).settings.resolved_ui_url(),
    }
    return served(request).pages.TemplateResponse(
        request, name, {**shared, **context}, status_code=status
    )


def _charts(series: dict[str, list[tuple[datetime, Decimal]]]) -> list[tuple[str, Any, int]]:
    """One chart per named price, in the order the page lists them: (name, svg, points)."""
    return [(name, charts.price_chart(name, dots), len(dots)) for name, dots in series.items()]


@router.get("/", response_class=HTMLResponse)
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


@router.get("/targets/{target_id}", response_class=HTMLResponse)
async def target_page(
    request: Request,
    target_id: api.TargetId,
    before: datetime | None = None,
    change: Annotated[str | None, Query(pattern=api.WORK_ID_PATTERN)] = None,
) -> Response:
    pricewatch = api.client(request)
    view = await pricewatch.status_view(target_id)  # first: it says if the target exists
    config = view.status.config

    async def prices() -> dict[str, list[tuple[datetime, Decimal]]]:
        if config.price_mode is None:
            return {}
        return await pricewatch.price_points(target_id, CHART_POINTS)

    async def shown_change() -> tuple[ChangeView | None, str | None]:
        try:
            return await pricewatch.change(target_id, change), None
        except BadInput as err:
            return None, one_line(err)

    history, rows, (shown, no_diff), deliveries, channels = await asyncio.gather(
        pricewatch.history(target_id, PAGE_SIZE, before), prices(), shown_change(),
        pricewatch.deliveries(target_id, PAGE_SIZE), pricewatch.channels(target_id),
    )  # fmt: skip
    diff = None if shown is None else (shown, charts.side_by_side(shown.diff))
    by_channel: dict[str, list[Any]] = {}
    for delivery in deliveries:
        by_channel.setdefault(delivery.channel_id, []).append(delivery)
    older = history[-1].slot if len(history) == PAGE_SIZE else None
    return page(
        request, "target.html", target_id=target_id, view=view, config=config,
        history=history, older=older, before=before, charts=_charts(rows),
        diff=diff, no_diff=no_diff, deliveries=by_channel,
        channels=[masked(c) for c in channels],
        screenshots=config.render is not None, changed=CheckStatus.CHANGED,
        as_written=manifest.dump([(config, view.status.paused)]),
    )  # fmt: skip


@router.get("/failures", response_class=HTMLResponse)
async def failures_page(request: Request) -> Response:
    failed = await api.client(request).failures(None, PAGE_SIZE * 2)
    return page(request, "failures.html", failures=failed)


@router.get("/health", response_class=HTMLResponse)
async def health_page(
    request: Request, window: Annotated[str, Query(max_length=40)] = DEFAULT_WINDOW
) -> Response:
    """`health`: the verdict first, then the slots (each target with a slot not on time,
    worst first), the skip causes, the workers and the services."""
    report = await api.client(request).health(window)
    return page(request, "health.html", report=report, window=window, windows=["1h", "1d", "7d"])


@router.get("/screenshots/{work_id}")
async def screenshot(request: Request, work_id: api.WorkId) -> Response:
    shot = await api.client(request).screenshot(work_id)
    return Response(shot, media_type="image/png")


@router.get("/targets/{target_id}/remove", response_class=HTMLResponse)
async def remove_page(request: Request, target_id: api.TargetId) -> Response:
    """Remove deletes a target's whole history: it asks first, on a page of its own whose
    form (CSRF-protected, like every other) does it."""
    view = await api.client(request).status_view(target_id)  # an unknown target is a 404
    return page(request, "remove.html", target_id=target_id, url=view.status.config.url)


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, next: str = "/") -> Response:
    return page(request, "login.html", next=local(next))


# Actions ---------------------------------------------------------------------------------


@router.post("/login")
async def login(
    request: Request,
    csrf: Annotated[str, Form()] = "",
    api_token: Annotated[str, Form(alias="token")] = "",
    next: Annotated[str, Form()] = "/",
) -> Response:
    check_csrf(request, csrf)
    if not sign_in(request, api_token, served(request).token):
        return page(request, "login.html", 401, next=local(next), line="wrong token")
    return RedirectResponse(local(next), status_code=303)


@router.post("/logout")
async def logout(request: Request, csrf: Annotated[str, Form()] = "") -> Response:
    check_csrf(request, csrf)
    request.session.clear()
    return RedirectResponse("/login" if served(request).token else "/", status_code=303)


@router.post("/targets")
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


@router.post("/targets/{target_id}/{action}")
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


@router.post("/checks/{work_id}/retry")
async def retry(
    request: Request, work_id: api.WorkId, csrf: Annotated[str, Form()] = ""
) -> Response:
    check_csrf(request, csrf)
    result = await api.client(request).retry(work_id)
    said = "already recorded, not fetched again: " if result.already_recorded else ""
    request.session["said"] = f"{said}{result.work_id}: {result.status.value}"
    return RedirectResponse("/failures", status_code=303)
