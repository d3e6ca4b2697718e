"""Outside text is data on every page (issue 49): each field of each dashboard page that can
hold text from a page, a user, a channel or a service is filled with its own markup and
found escaped, never raw. Fields a real run reaches are filled by one (the URL, the page's
text, a price's name, a selector and the error it causes, an ignore pattern, a notice
template, the search, the path, the sign-in's way back, what an action said); the ones it
makes hard to reach are written into Postgres (a delivery's error, a channel's destination
and why it was disabled). Every template is walked."""

import html
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import asyncpg
import httpx
import pytest
from aiohttp import web
from markupsafe import escape

from tests.chaos.stack import serve
from tests.conftest import PageServer
from tests.helpers import serve_process, worker_process
from tests.waits import eventually

pytestmark = pytest.mark.e2e
RAW = ["<script", "<img", "onerror=1>", "\"'&"]


def mark(field: str) -> str:
    """The field's own markup: found as text names the field that showed it."""
    return f"{tags(field)}\"'&"


def tags(field: str) -> str:
    """The part of the mark a field quotes as it is (an error's repr of a selector doubles
    its backslashes before the quotes; RAW finds the quotes raw wherever they are)."""
    return f"<i>{field}</i><script>x</script><img src=x onerror=1>"


def written(text: str) -> str:
    """As a page's HTML holds it, so that its text is `text`."""
    return html.escape(text)


@pytest.fixture
async def gone() -> AsyncIterator[str]:
    """Where the channels point: 410 to every notice, which fails it for good (no retry
    overwrites the error written in its place) and disables the channel."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=410)

    async with serve([web.post(p, answer) for p in ("/hook", "/json")]) as base:
        yield base


async def test_every_field_of_every_page_is_escaped(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer, gone: str
) -> None:
    page_server.set("/text", f"<p>{written(mark('text'))} 1</p>")
    row = "<tr class=plan><th>{}</th><td>EUR {}</td></tr>"
    page_server.set("/plans", f"<table>{row.format(written(mark('price')), 10)}</table>")
    page_server.set("/fails", "<p>1 EUR</p>")
    selector = 'p[title="' + mark("selector").replace('"', '\\"') + '"]'
    entries: list[dict[str, object]] = [
        {
            "id": "esc-text", "url": page_server.url("/text?q=" + mark("url")),
            "ignore": mark("ignore"), "webhooks": [f"{gone}/hook"],
            "notify": [{"url": f"json://{gone.removeprefix('http://')}/json",
                        "body": mark("template") + " {{ target }}"}],
        },
        {"id": "esc-plans", "url": page_server.url("/plans"),
         "prices": {"selector": "tr.plan", "name": "th"}, "tags": ["esc"]},
        {"id": "esc-fails", "url": page_server.url("/fails"), "selector": selector},
    ]  # fmt: skip
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        for entry in entries:
            put = await http.put(f"/api/v1/targets/{entry['id']}", json=entry)
            assert put.status_code == 200, put.text
            assert (await http.post(f"/api/v1/targets/{entry['id']}/check")).status_code == 200
        page_server.set("/text", f"<p>{written(mark('text'))} 2</p>")
        page_server.set("/plans", f"<table>{row.format(written(mark('price')), 12)}</table>")
        for target_id in ["esc-text", "esc-plans"]:  # (its first slot may be the one)
            assert (await http.post(f"/api/v1/targets/{target_id}/check")).status_code == 200
            history = (await http.get(f"/api/v1/targets/{target_id}/history")).json()
            assert "changed" in [r["status"] for r in history], history

        async def told_and_failed() -> bool:
            failed = "SELECT count(*) FROM deliveries WHERE status = 'failed'"
            return bool(await pool.fetchval(failed) == 2)

        await eventually(told_and_failed, what="both notices failed for good")
        await pool.execute("UPDATE deliveries SET last_error = $1", mark("delivery"))
        await pool.execute("UPDATE channels SET disabled_reason = $1", mark("disabled"))
        await pool.execute(
            "UPDATE channels SET destination = $1 WHERE kind = 'apprise'", mark("destination")
        )

        csrf = (await http.get("/")).text.split('name="csrf" value="')[1].split('"')[0]
        acted = await http.post("/targets/esc-fails/check", data={"csrf": csrf})
        assert acted.status_code == 303
        from_paths = {
            "/targets/esc-fails": ["said", "selector", "error"],  # said once, after the action
            "/": ["url", "price", "error"],
            "/groups/esc": ["price"],
            "/?" + urlencode({"q": mark("search")}): ["search"],
            "/targets/esc-text": ["url", "text", "ignore", "template", "delivery", "disabled",
                                  "destination"],
            "/targets/esc-plans": ["price"],
            "/targets/esc-text/remove": ["url"],
            "/failures": ["error"],
            "/login?" + urlencode({"next": "/" + mark("next")}): ["next"],
            "/" + mark("path"): ["path"],
        }  # fmt: skip
        status = (await http.get("/api/v1/targets/esc-text")).json()
        stored_url = status["status"]["config"]["url"]  # as validated: its query encoded
        shown: dict[str, str] = {}
        for path in from_paths:
            answer = await http.get(path)
            assert answer.status_code in (200, 404), (path, answer.text)
            shown[path] = answer.text
        # The prices found on a page (plans named by it), beside the form's own fields kept.
        two = row.format(written(mark("found")), 10) + row.format("Pro", 20)
        page_server.set("/two", f"<table>{two}</table>")
        form = {"csrf": csrf, "url": page_server.url("/two"), "tags": mark("form")}
        found = await http.post("/targets/find", data=form)
        assert found.status_code == 200, found.text
        shown["POST /targets/find"] = found.text
        from_paths["POST /targets/find"] = ["found", "form"]
    wrong: list[str] = []
    for path, fields in from_paths.items():
        page = shown[path]
        wrong += [f"{path}: {raw!r} raw" for raw in RAW if raw in page.lower()]
        text = html.unescape(page)
        for field in fields:
            expected = {
                "url": stored_url if "<" not in stored_url else tags("url"),
                "error": f"extraction rule failed: selector 'p[title=\"{tags('selector')}",
                "said": f"failed (extraction rule failed: selector 'p[title=\"{tags('selector')}",
            }.get(field, tags(field))
            if expected not in text:
                wrong.append(f"{path}: the {field} field is not shown")
            elif str(escape(expected)) not in page:
                wrong.append(f"{path}: the {field} field is not escaped as Jinja escapes")
    assert wrong == []
