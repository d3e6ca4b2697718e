"""The dashboard's pages and forms: what `--json` shows, for people. Every action is a POST
form carrying the session's CSRF token; it answers with a redirect to the page it came from
(which says what was done, once) or with the CLI's one line."""

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Path, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.exceptions import HTTPException

from activities.store import PriceLine
from client import manifest
from client.inputs import BadInput, Unknown
from client.pricewatch import StillChecking
from pricewatch.health import DEFAULT_WINDOW
from pricewatch.models import TAG_PATTERN, TARGET_ID_PATTERN, CheckStatus
from pricewatch.settings import Settings
from pricewatch.slots import format_slot
from pricewatch.views import ChangeView, TargetSort, TargetState
from surfaces import api, charts
from surfaces.auth import check_csrf, csrf_token, local, sign_in
from surfaces.errors import EXPECTED, failure, one_line
from surfaces.terminal import masked

PAGE_SIZE = 50
CHART_POINTS = 500
STATES: list[TargetState] = ["unhealthy", "paused", "retrying", "prices"]
GROUP_CHANGES = 20
# The targets a group's chart draws, first by id: past a dozen, a line per plan is a tangle
# (and the reading grows with each: 1,000 targets of 30 slots took 0.3 s).
GROUP_CHART_TARGETS = 12
BULK_AT_ONCE = 8  # client calls in flight for one bulk action: Temporal and Postgres share
Bulk = Literal["pause", "resume", "check", "remove"]
Tag = Annotated[str, Path(pattern=TAG_PATTERN.pattern, max_length=32)]
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


def ago(moment: datetime | None, now: datetime | None = None) -> str:
    """How long ago (or, for a moment to come, in how long), in the largest whole unit:
    `just now`, `5m ago`, `3h ago`, `12d ago`, `in 4m`. The exact moment goes in a title."""
    if moment is None:
        return "-"
    seconds = int(((now or datetime.now(UTC)) - moment).total_seconds())
    size = abs(seconds)
    if size < 60:
        return "just now"
    unit = next((n, u) for n, u in ((86400, "d"), (3600, "h"), (60, "m")) if size >= n)
    said = f"{size // unit[0]}{unit[1]}"
    return f"{said} ago" if seconds > 0 else f"in {said}"


def templates() -> Jinja2Templates:
    env = Environment(
        loader=PackageLoader("surfaces", "templates"), autoescape=True, undefined=StrictUndefined
    )
    env.filters["when"] = _when
    env.filters["ago"] = ago
    env.filters["slot"] = format_slot
    env.filters["quote"] = lambda text: quote(str(text), safe="")
    env.globals["sparkline"] = charts.sparkline
    env.globals["moved"] = charts.moved
    env.globals["colour"] = charts.colour
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


def _charts(lines: list[PriceLine]) -> list[tuple[PriceLine, Any]]:
    """One chart per named price, in the order the page lists them."""
    return [(line, charts.price_chart(line.name, line.points)) for line in lines]


@router.get("/", response_class=HTMLResponse)
async def targets_page(
    request: Request,
    q: Annotated[str | None, Query(max_length=200)] = None,
    state: TargetState | None = None,
    tag: Annotated[str | None, Query(max_length=200)] = None,
    sort: TargetSort = "id",
    desc: bool = False,
    page_number: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
) -> Response:
    """The targets, a page at a time, sorted by a column's link (server-side: no script),
    each with its own checkbox for the bulk actions below the table."""
    pricewatch = api.client(request)
    found = await pricewatch.targets(
        q, state, PAGE_SIZE, (page_number - 1) * PAGE_SIZE, tag or None, sort, desc
    )
    pages_in_all = max(1, -(-found.total // PAGE_SIZE))

    def link(**changed: object) -> str:
        query = {
            "q": q, "state": state, "tag": tag, "sort": sort, "desc": desc, "page": page_number,
            **changed,
        }  # fmt: skip
        defaults = {"q": "", "state": None, "tag": "", "sort": "id", "desc": False, "page": 1}
        shown = {k: v for k, v in query.items() if v is not None and v != defaults[k]}
        said = urlencode({k: "1" if v is True else v for k, v in shown.items()})
        return f"/?{said}" if said else "/"

    def sorted_by(column: str) -> str:
        """The column's header link: by it, and the other way round if it already is."""
        return link(sort=column, desc=column == sort and not desc, page=1)

    return page(
        request, "targets.html", targets=found.targets, total=found.total, q=q or "",
        state=state, states=STATES, tag=tag or "", sort=sort, desc=desc, sorted_by=sorted_by,
        page=page_number, pages=pages_in_all, link=link, here=link(),
    )  # fmt: skip


@router.get("/groups/{tag}", response_class=HTMLResponse)
async def group_page(request: Request, tag: Tag) -> Response:
    """A tag's targets side by side: one chart of every named price of theirs (a line each,
    one time axis), their latest changes, and the list of them."""
    pricewatch = api.client(request)
    found, lines, changes = await asyncio.gather(
        pricewatch.targets(tag=tag, limit=PAGE_SIZE),
        pricewatch.group_lines(tag, CHART_POINTS, GROUP_CHART_TARGETS),
        pricewatch.group_changes(tag, GROUP_CHANGES),
    )  # fmt: skip
    if not found.total:
        raise Unknown(f"no target has the tag {tag!r}")
    drawn = [charts.Line(f"{line.target_id} · {line.name}", line.points) for line in lines]
    return page(
        request, "group.html", tag=tag, targets=found.targets, total=found.total, lines=lines,
        chart=charts.lines_chart(f"prices of {tag}", drawn), changes=changes,
        charted=len({line.target_id for line in lines}), most=GROUP_CHART_TARGETS,
    )  # fmt: skip


@router.get("/targets/{target_id}", response_class=HTMLResponse)
async def target_page(
    request: Request,
    target_id: api.TargetId,
    before: datetime | None = None,
    change: Annotated[str | None, Query(pattern=api.WORK_ID_PATTERN)] = None,
    every: bool = False,
) -> Response:
    """Its settings, charts and the change shown; the history lists changes only unless
    `every` slot is asked for."""
    pricewatch = api.client(request)
    view = await pricewatch.status_view(target_id)  # first: it says if the target exists
    config = view.status.config

    async def prices() -> list[PriceLine]:
        if config.price_mode is None:
            return []
        return await pricewatch.price_lines(target_id, CHART_POINTS)

    async def shown_change() -> tuple[ChangeView | None, str | None]:
        try:
            return await pricewatch.change(target_id, change), None
        except BadInput as err:
            return None, one_line(err)

    history, rows, (shown, no_diff), deliveries, channels = await asyncio.gather(
        pricewatch.history(target_id, PAGE_SIZE, before, changes_only=not every), prices(),
        shown_change(),
        pricewatch.deliveries(target_id, PAGE_SIZE), pricewatch.channels(target_id),
    )  # fmt: skip
    diff = None if shown is None else (shown, charts.side_by_side(shown.diff))
    by_channel: dict[str, list[Any]] = {}
    for delivery in deliveries:
        by_channel.setdefault(delivery.channel_id, []).append(delivery)
    older = history[-1].slot if len(history) == PAGE_SIZE else None
    return page(
        request, "target.html", target_id=target_id, view=view, config=config,
        history=history, older=older, before=before, charts=_charts(rows), every=every,
        diff=diff, no_diff=no_diff, deliveries=by_channel,
        channels=[masked(c) for c in channels],
        screenshots=config.render is not None, changed=CheckStatus.CHANGED,
        as_written=manifest.dump([(config, view.status.paused)]),
    )  # fmt: skip


@router.get("/health", response_class=HTMLResponse)
async def health_page(
    request: Request,
    window: Annotated[str, Query(max_length=40)] = DEFAULT_WINDOW,
    page_number: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
) -> Response:
    """`health`: the verdict first, then the slots (the targets with a slot not on time,
    worst first, PAGE_SIZE a page: 10,000 late targets were a 2.4 MB page), the skip causes,
    the workers and the services."""
    report = await api.client(request).health(window)
    troubled = report.schedule.troubled if report.schedule is not None else []
    start = (page_number - 1) * PAGE_SIZE
    return page(
        request, "health.html", report=report, window=window, windows=["1h", "1d", "7d"],
        troubled=troubled[start : start + PAGE_SIZE], troubled_total=len(troubled),
        page_number=page_number, pages_in_all=max(1, -(-len(troubled) // PAGE_SIZE)),
    )  # fmt: skip


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
        try:
            result = await pricewatch.check_now(target_id)
        except StillChecking as err:
            said = str(err)
        else:
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


@router.post("/bulk")
async def bulk(
    request: Request,
    action: Annotated[Bulk, Form()],
    ids: Annotated[list[str], Form(alias="id", max_length=PAGE_SIZE)] = [],  # noqa: B006
    confirmed: Annotated[bool, Form()] = False,
    back: Annotated[str, Form(max_length=2000)] = "/",
    csrf: Annotated[str, Form()] = "",
) -> Response:
    """The selected targets of the list, each through the client call its own button makes
    (pause, resume, check now, remove). Remove asks first, on a page of its own. Says what
    was done to how many, and each one that failed with its line."""
    check_csrf(request, csrf)
    chosen = list(dict.fromkeys(given.strip() for given in ids))
    if not chosen:
        raise BadInput("id: select at least one target")
    for target_id in chosen:
        if not TARGET_ID_PATTERN.fullmatch(target_id):
            raise BadInput(f"id: {target_id[:63]!r} is not a target id")
    if action == "remove" and not confirmed:
        return page(request, "remove-many.html", ids=chosen, back=local(back))
    pricewatch = api.client(request)
    calls = {
        "pause": pricewatch.pause, "resume": pricewatch.resume,
        "check": pricewatch.check_now, "remove": pricewatch.remove,
    }  # fmt: skip
    gate = asyncio.Semaphore(BULK_AT_ONCE)

    async def one(target_id: str) -> str | None:
        async with gate:
            try:
                await calls[action](target_id)
            except EXPECTED as err:
                said = failure(err)
                if said is None:
                    raise
                return f"{target_id}: {said.line}"
            return None

    failed = [line for line in await asyncio.gather(*map(one, chosen)) if line is not None]
    done = len(chosen) - len(failed)
    verb = {"pause": "paused", "resume": "resumed", "check": "checked", "remove": "removed"}
    said = f"{verb[action]} {done} of {len(chosen)}"
    request.session["said"] = said + (f"; failed: {'; '.join(failed)}" if failed else "")
    return RedirectResponse(local(back), status_code=303)


@router.post("/checks/{work_id}/retry")
async def retry(
    request: Request, work_id: api.WorkId, csrf: Annotated[str, Form()] = ""
) -> Response:
    check_csrf(request, csrf)
    try:
        result = await api.client(request).retry(work_id)
    except StillChecking as err:
        request.session["said"] = str(err)
        return RedirectResponse("/failures", status_code=303)
    said = "already recorded, not fetched again: " if result.already_recorded else ""
    request.session["said"] = f"{said}{result.work_id}: {result.status.value}"
    return RedirectResponse("/failures", status_code=303)
