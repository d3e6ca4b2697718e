"""The failures page groups by target and error class, pages through every group, and
retries all of a group's failed slots through the client's `retry` (issue 44).

The client is a stand-in holding the rows (the page reads nothing else), so hundreds of
failures cost no Temporal or Postgres here; test_web.py covers the real client's calls."""

import re
from datetime import UTC, datetime, timedelta

import httpx
from hypothesis import given
from hypothesis import strategies as st

from client.inputs import Unknown
from pricewatch.models import CheckResult, CheckStatus
from pricewatch.settings import Settings
from surfaces import failures, web

START = datetime(2026, 12, 1, tzinfo=UTC)


class Rows:
    """A client with only what the failures page calls: `failures` and `retry`."""

    def __init__(self, rows: list[CheckResult]) -> None:
        self.rows = rows
        self.retried: list[str] = []

    async def failures(self, target_id: str | None, limit: int) -> list[CheckResult]:
        chosen = [r for r in self.rows if target_id in (None, r.work_id.split(":")[0])]
        return sorted(chosen, key=lambda r: r.slot, reverse=True)[:limit]

    async def retry(self, work_id: str) -> CheckResult:
        if work_id.endswith("00:07:00Z"):
            raise Unknown(f"unknown work id {work_id!r}")
        self.retried.append(work_id)
        return next(r for r in self.rows if r.work_id == work_id)


def row(target: str, minute: int, message: str, status: str = "failed") -> CheckResult:
    slot = START + timedelta(minutes=minute)
    return CheckResult(
        work_id=f"{target}:{slot:%Y-%m-%dT%H:%M:%SZ}", slot=slot, status=CheckStatus(status),
        checked_at=slot, attempt_count=5, error_message=message,
    )  # fmt: skip


def app_over(rows: list[CheckResult]) -> tuple[httpx.AsyncClient, Rows]:
    app = web.create_app(Settings())
    client = Rows(rows)
    app.state.pricewatch = client
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1"), client


@given(st.text(max_size=300))
def test_an_error_class_is_one_short_line_and_the_lead_of_its_message(message: str) -> None:
    said = failures.error_class(message)
    assert said and len(said) <= failures.CLASS_LENGTH and "\n" not in said
    assert ":" not in said
    assert failures.error_class(message + ": anything else") == said or said == "no message"


def test_messages_that_differ_after_the_colon_share_a_class() -> None:
    rows = [
        row("a", 1, "timed out: the page sent nothing for 10 s (the default limit)"),
        row("a", 2, "timed out: no connection within 5 s (the connect limit)"),
        row("a", 3, "HTTP 503 Service Unavailable", "retrying"),
        row("b", 4, "timed out: the page sent nothing for 10 s"),
    ]
    groups = failures.grouped(rows)
    assert [(g.target_id, g.error_class, g.failed, g.retrying) for g in groups] == [
        ("b", "timed out", 1, 0),
        ("a", "HTTP 503 Service Unavailable", 0, 1),
        ("a", "timed out", 2, 0),
    ]


async def test_every_group_is_reachable_page_by_page() -> None:
    # 183 failures, as in the issue, over 61 targets: 61 groups, three pages of 25.
    rows = [
        row(f"t{n // 3:03d}", n, f"timed out: the page sent nothing for {n} s") for n in range(183)
    ]
    http, _ = app_over(rows)
    seen: list[str] = []
    async with http:
        first = (await http.get("/failures")).text
        assert "183 slots in 61 groups" in first
        for number in (1, 2, 3):
            text = (await http.get(f"/failures?page={number}")).text
            seen += re.findall(
                r'<tr class="group">\s*<td class="id"><a href="/targets/([^"]+)"', text
            )
            assert ('rel="next"' in text) == (number < 3)
        assert (await http.get("/failures?page=0")).status_code == 400
    assert sorted(seen) == sorted({f"t{n:03d}" for n in range(61)})


async def test_retry_all_retries_every_failed_slot_of_the_group_only() -> None:
    rows = [row("a", n, f"connection failed: refused {n}") for n in range(30)]
    rows += [row("a", 100, "connection failed: refused", "retrying")]
    rows += [row("a", 101, "HTTP 404 Not Found"), row("b", 102, "connection failed: reset")]
    http, client = app_over(rows)
    async with http:
        text = (await http.get("/failures")).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', text)
        assert csrf is not None
        form = {"target_id": "a", "error": "connection failed", "back": "1"}
        refused = await http.post("/failures/retry", data=form)
        assert refused.status_code == 403 and not client.retried  # no CSRF token
        done = await http.post("/failures/retry", data={**form, "csrf": csrf[1]})
        assert done.status_code == 303 and done.headers["location"] == "/failures"
        said = (await http.get("/failures")).text
        assert "retried 29 of 30 (a, connection failed); failed: a:2026-12-01T00:07:00Z" in said
        missing = await http.post(
            "/failures/retry", data={**form, "error": "no such class", "csrf": csrf[1]}
        )
        assert missing.status_code == 400 and "error: a has no failed slot" in missing.text
    assert sorted(client.retried) == sorted(r.work_id for r in rows[:30] if r.slot.minute != 7)
