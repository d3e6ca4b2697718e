"""`/api/v1`: the `--json` views over HTTP, and the client's calls that change targets.

Each read answers with exactly what the command's `--json` prints (`pricewatch.views.dump`),
so a script moves from the CLI to HTTP unchanged; the document's schemas are the views' own
(`openapi`), committed in docs/openapi.json. Errors are `{"error": one line}`: 400 the
request, 404 an unknown target or check, 503 Temporal or Postgres away.
"""

import json
from datetime import UTC, datetime
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from client import plans
from client.inputs import BadInput
from client.manifest import Entry
from client.pricewatch import Pricewatch, StillChecking
from pricewatch import views
from pricewatch.health import DEFAULT_WINDOW
from pricewatch.views import TargetState
from surfaces.terminal import masked

REF = "#/components/schemas/{model}"
ID_PATTERN = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
WORK_ID_PATTERN = "^[a-z0-9-]{1,63}:(manual:)?[0-9T:.Z-]{1,40}$"
NO_NUL = "^[^\\x00]*$"  # Postgres holds no NUL: a search with one can match nothing
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The document's version: the API's, not the package's (a release that adds nothing to the
# API leaves docs/openapi.json as it is).
API_VERSION = "1"
DOCUMENT = FilePath(__file__).resolve().parent.parent / "docs" / "openapi.json"


class ErrorView(BaseModel):
    """Every error's body: the line the CLI would print."""

    error: str


class PendingView(BaseModel):
    """A check-now or retry not final within its wait: it goes on, and the line says where
    to see it (the target's history)."""

    pending: str


# A check's answer: its result, or 202 while it goes on.
CHECKED: dict[int | str, dict[str, Any]] = {
    202: {"model": PendingView, "description": "Not final within 30 s: the check goes on."}
}


class AppliedView(BaseModel):
    """`PUT /targets/{id}`: what was done to make the target what the entry says."""

    target_id: str
    actions: list[str]
    """`add`, `reconfigure`, `pause`, `resume`, or `unchanged`."""
    changes: list[str]
    """A reconfiguration's changed settings, as `apply` prints them."""


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorView, "description": what}
    for code, what in [
        (400, "The request is invalid; nothing was changed."),
        (401, "PRICEWATCH_API_TOKEN is set and the bearer token is missing or wrong."),
        (404, "No such target or check."),
        (422, "A parameter has the wrong shape."),
        (503, "Temporal or Postgres did not answer; try again."),
    ]
}


def returns(
    command: str, description: str, others: dict[int | str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A route's answer when it prints `command --json` (`answer`): documented with that
    view's schema, since the route returns a Response FastAPI does not look into."""
    shape = OUTPUTS[command].json_schema(mode="serialization", by_alias=False, ref_template=REF)
    shape.pop("$defs", None)
    content = {"application/json": {"schema": shape}}
    return {
        "response_class": Response,
        "responses": {200: {"description": description, "content": content}, **(others or {})},
    }


OUTPUTS = views.OUTPUTS
router = APIRouter(prefix="/api/v1", responses=ERRORS)


def client(request: Request) -> Pricewatch:
    pricewatch: Pricewatch = request.app.state.pricewatch
    return pricewatch


Client = Annotated[Pricewatch, Depends(client)]
TargetId = Annotated[str, Path(pattern=ID_PATTERN, max_length=63)]
WorkId = Annotated[str, Path(pattern=WORK_ID_PATTERN, max_length=120)]
Limit = Annotated[int, Query(ge=1, le=1000)]


def answer(command: str, value: object) -> Response:
    return Response(views.dump(command, value), media_type="application/json")


@router.get("/targets", **returns("list", "Targets by id."))
async def targets(
    pricewatch: Client,
    search: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
    state: TargetState | None = None,
    limit: Limit = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    tag: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    """`list --json`, a page of it: `X-Total-Count` says how many match; `tag`: `list --tag`."""
    page = await pricewatch.targets(search, state, limit, offset, tag)
    response = answer("list", page.targets)
    response.headers["X-Total-Count"] = str(page.total)
    return response


@router.get("/targets/{target_id}", **returns("status", "Its status."))
async def status(pricewatch: Client, target_id: TargetId) -> Response:
    """`status --json`: the workflow's view, slots being retried, its Temporal UI link."""
    return answer("status", await pricewatch.status_view(target_id))


@router.put("/targets/{target_id}")
async def put_target(
    pricewatch: Client,
    target_id: TargetId,
    entry: Annotated[Entry, Body(description="One entry of a targets file (`apply`).")],
) -> AppliedView:
    """Add or update one target as `apply` does for its entry: the same entry again changes
    nothing (`unchanged`)."""
    if entry.id != target_id:
        raise BadInput(f"the entry's id {entry.id!r} is not the path's {target_id!r}")
    steps = await plans.put(pricewatch, entry)
    return AppliedView(
        target_id=target_id,
        actions=[step.action.value for step in steps],
        changes=[change for step in steps for change in step.changes],
    )


@router.delete("/targets/{target_id}", status_code=204)
async def remove(pricewatch: Client, target_id: TargetId) -> Response:
    """`remove`: stop watching and delete its rows (waits for its workflow to finish)."""
    await pricewatch.remove(target_id)
    return Response(status_code=204)


@router.post("/targets/{target_id}/pause", status_code=204)
async def pause(pricewatch: Client, target_id: TargetId) -> Response:
    await pricewatch.pause(target_id)
    return Response(status_code=204)


@router.post("/targets/{target_id}/resume", status_code=204)
async def resume(pricewatch: Client, target_id: TargetId) -> Response:
    await pricewatch.resume(target_id)
    return Response(status_code=204)


@router.post(
    "/targets/{target_id}/check",
    **returns("history", "A list of the one result.", CHECKED),
)
async def check_now(pricewatch: Client, target_id: TargetId) -> Response:
    """`check-now`: one extra check now; answers when it is recorded, or 202 when it is not
    final within 30 s (a page failing for a while is retried: see the history)."""
    try:
        return answer("history", [await pricewatch.check_now(target_id)])
    except StillChecking as err:
        return JSONResponse({"pending": str(err)}, status_code=202)


@router.get(
    "/targets/{target_id}/history",
    **returns("history", "Newest slot first."),
)
async def history(
    pricewatch: Client, target_id: TargetId, limit: Limit = 50, before: datetime | None = None
) -> Response:
    """`history --json`; `before`: the page after the last slot of this one."""
    return answer("history", await pricewatch.history(target_id, limit, before))


@router.get(
    "/targets/{target_id}/prices",
    **returns("prices", "Oldest slot first."),
)
async def prices(
    pricewatch: Client,
    target_id: TargetId,
    since: datetime = EPOCH,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
    per: views.Per | None = None,
) -> Response:
    """`prices --json`: the prices each check read (price mode); `per=month`: each amount
    whose period is known as an amount a month, as `prices --per month`."""
    rows = await pricewatch.prices(target_id, since, limit)
    if per is views.Per.MONTH:
        rows = [row.per_month() for row in rows]
    return answer("prices", rows)


@router.get(
    "/targets/{target_id}/channels",
    **returns("channels", "Secrets masked."),
)
async def channels(pricewatch: Client, target_id: TargetId) -> Response:
    """`channels --json`, always masked: the API never hands out a secret."""
    return answer("channels", [masked(row) for row in await pricewatch.channels(target_id)])


@router.get(
    "/targets/{target_id}/deliveries",
    **returns("deliveries", "Newest first."),
)
async def deliveries(pricewatch: Client, target_id: TargetId, limit: Limit = 50) -> Response:
    return answer("deliveries", await pricewatch.deliveries(target_id, limit))


@router.get(
    "/targets/{target_id}/diff",
    **returns("diff", "A unified diff."),
)
async def diff(
    pricewatch: Client,
    target_id: TargetId,
    work_id: Annotated[str | None, Query(pattern=WORK_ID_PATTERN, max_length=120)] = None,
) -> Response:
    """`diff --json`: a change (default: the newest) against the snapshot before it."""
    return answer("diff", await pricewatch.change(target_id, work_id))


@router.get("/failures", **returns("failures", "Newest slot first."))
async def failures(
    pricewatch: Client,
    target_id: Annotated[str | None, Query(pattern=ID_PATTERN, max_length=63)] = None,
    limit: Limit = 50,
) -> Response:
    """`failures --json`: dead letters and slots still being retried."""
    return answer("failures", await pricewatch.failures(target_id, limit))


@router.get(
    "/health",
    **returns("health", "Schedule health; 200 whether healthy or not (`healthy` says)."),
)
async def health(
    pricewatch: Client,
    window: Annotated[
        str, Query(max_length=40, description="1h, 1d, 7d, or any duration from 1m to 7d.")
    ] = DEFAULT_WINDOW,
) -> Response:
    """`health --json`: the window's due slots, the workers polling, Temporal and Postgres
    (each asked within 5 s; one that does not answer is said beside the other's part)."""
    return answer("health", await pricewatch.health(window))


@router.post(
    "/checks/{work_id}/retry",
    **returns("history", "A list of the one result.", CHECKED),
)
async def retry(pricewatch: Client, work_id: WorkId) -> Response:
    """`retry`: re-run one failed slot through its workflow, on its own row; 202 when it is
    not final within 30 s."""
    try:
        return answer("history", [await pricewatch.retry(work_id)])
    except StillChecking as err:
        return JSONResponse({"pending": str(err)}, status_code=202)


@router.get(
    "/checks/{work_id}/screenshot",
    response_class=Response,
    responses={200: {"description": "A PNG.", "content": {"image/png": {}}}},
)
async def screenshot(pricewatch: Client, work_id: WorkId) -> Response:
    """A rendered check's screenshot (the baseline's and each change's)."""
    return Response(await pricewatch.screenshot(work_id), media_type="image/png")


def openapi(routes: list[Any]) -> dict[str, Any]:
    """The API's document: FastAPI's, with the `--json` views' schemas as the CLI names
    their fields (`slot`, not the wire's `scheduled_for`), and the bearer token on every
    operation (PRICEWATCH_API_TOKEN; without one set, on loopback, it is not asked for)."""
    document = get_openapi(title="pricewatch", version=API_VERSION, routes=routes)
    components = document.setdefault("components", {})
    components["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "description": "PRICEWATCH_API_TOKEN"}
    }
    for path, methods in document.get("paths", {}).items():
        for operation in methods.values() if path.startswith(router.prefix) else ():
            operation["security"] = [{"bearer": []}]
    schemas = components.setdefault("schemas", {})
    for shape in OUTPUTS.values():
        written = shape.json_schema(mode="serialization", by_alias=False, ref_template=REF)
        schemas.update(written.get("$defs", {}))
    return document


def document() -> str:
    return json.dumps(openapi(router.routes), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # `python -m surfaces.api`: after a change to the API
    DOCUMENT.write_text(document())
    print(f"wrote {DOCUMENT}")
