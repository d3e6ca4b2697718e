"""The failures page: failed and retrying slots grouped by target and error class, a page of
groups at a time, with "retry all" of a group (issue 44).

A hundred near-identical rows said less than one line per (target, error class) with its
count. The class is the message's lead, before its first colon (`timed out`, `connection
failed`, `HTTP 503 Service Unavailable`): the part the fetcher words the same each time,
while what follows names the host, the limit or the cause."""

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from client.inputs import BadInput
from pricewatch.models import TARGET_ID_PATTERN, CheckResult, CheckStatus
from surfaces import api
from surfaces.auth import check_csrf
from surfaces.dashboard import page
from surfaces.errors import EXPECTED, failure

GROUPS_PER_PAGE = 25
SHOWN_PER_GROUP = 20  # a group's rows listed under it; "retry all" covers every one
# Failed and retrying rows read for the page, newest first: the partial index over them
# keeps this a short read, and past it the page says that older ones exist.
READ_AT_MOST = 10_000
CLASS_LENGTH = 80
RETRY_AT_ONCE = 8  # retries in flight for one group: each is a workflow Update
router = APIRouter(include_in_schema=False)


def error_class(message: str | None) -> str:
    """The message's lead: up to its first colon, one line, at most CLASS_LENGTH long."""
    if not message or not message.strip():
        return "no message"
    lead = " ".join(message.split(":", 1)[0].split())
    return (lead or "no message")[:CLASS_LENGTH]


@dataclass
class Group:
    target_id: str
    error_class: str
    rows: list[CheckResult] = field(default_factory=list)

    @property
    def newest(self) -> datetime:
        return self.rows[0].slot

    @property
    def failed(self) -> int:
        return sum(r.status is CheckStatus.FAILED for r in self.rows)

    @property
    def retrying(self) -> int:
        return len(self.rows) - self.failed


def grouped(results: list[CheckResult]) -> list[Group]:
    """By (target, error class), the group with the newest slot first; each group's rows in
    the order given (newest first)."""
    groups: dict[tuple[str, str], Group] = {}
    for row in results:
        key = (row.work_id.split(":", 1)[0], error_class(row.error_message))
        groups.setdefault(key, Group(*key)).rows.append(row)
    return sorted(groups.values(), key=lambda g: (g.newest, g.target_id), reverse=True)


@router.get("/failures", response_class=HTMLResponse)
async def failures_page(
    request: Request, page_number: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1
) -> Response:
    read = await api.client(request).failures(None, READ_AT_MOST)
    groups = grouped(read)
    pages = max(1, -(-len(groups) // GROUPS_PER_PAGE))
    page_number = min(page_number, pages)  # a page emptied by "retry all": the last one
    first = (page_number - 1) * GROUPS_PER_PAGE
    return page(
        request, "failures.html", groups=groups[first : first + GROUPS_PER_PAGE],
        total_groups=len(groups), total_rows=len(read), first=first, page_number=page_number,
        pages=pages, shown=SHOWN_PER_GROUP, capped=len(read) == READ_AT_MOST,
    )  # fmt: skip


@router.post("/failures/retry")
async def retry_group(
    request: Request,
    target_id: Annotated[str, Form(max_length=63)],
    error: Annotated[str, Form(max_length=CLASS_LENGTH)],
    back: Annotated[str, Form(max_length=40)] = "1",
    csrf: Annotated[str, Form()] = "",
) -> Response:
    """Every failed slot of one group, each through the client's `retry` (what
    `pricewatch retry WORK_ID` calls), on its own row. Slots still being retried are left to
    their own next attempt. Says how many were retried and each that failed, with its line."""
    check_csrf(request, csrf)
    if not TARGET_ID_PATTERN.fullmatch(target_id):
        raise BadInput(f"target_id: {target_id!r} is not a target id")
    pricewatch = api.client(request)
    rows = await pricewatch.failures(target_id, READ_AT_MOST)
    chosen = [
        r.work_id
        for r in rows
        if r.status is CheckStatus.FAILED and error_class(r.error_message) == error
    ]
    if not chosen:
        raise BadInput(f"error: {target_id} has no failed slot of the class {error!r}")
    gate = asyncio.Semaphore(RETRY_AT_ONCE)

    async def one(work_id: str) -> str | None:
        async with gate:
            try:
                await pricewatch.retry(work_id)
            except EXPECTED as err:
                said = failure(err)
                if said is None:
                    raise
                return f"{work_id}: {said.line}"
            return None

    failed = [line for line in await asyncio.gather(*map(one, chosen)) if line is not None]
    said = f"retried {len(chosen) - len(failed)} of {len(chosen)} ({target_id}, {error})"
    request.session["said"] = said + (f"; failed: {'; '.join(failed)}" if failed else "")
    where = f"/failures?page={int(back)}" if back.isdigit() and int(back) > 1 else "/failures"
    return RedirectResponse(where, status_code=303)
