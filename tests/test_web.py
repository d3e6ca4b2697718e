"""`pricewatch serve` end to end: the API and the dashboard as processes, over a real worker,
the dev server and Postgres. The API answers what `--json` prints, byte for byte; every
change needs the session's CSRF token (a form) or comes from no other site (the API); a
token closes both; user-written strings render inert."""

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from pricewatch.settings import Settings
from surfaces import api, web
from tests.conftest import PageServer
from tests.helpers import cli, serve_process, worker_process
from tests.waits import eventually

pytestmark = pytest.mark.e2e
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
XSS = "<script>alert(1)</script>"


def entry(page_server: PageServer, target_id: str, **fields: object) -> dict[str, object]:
    return {"id": target_id, "url": page_server.url(f"/{target_id}"), "every": "1h", **fields}


async def test_the_api_adds_reads_and_steers_a_target_as_the_cli_does(
    env: dict[str, str], page_server: PageServer
) -> None:
    page_server.set("/acme", "<p>Pro 10 EUR</p>")
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=f"{base}/api/v1", timeout=60
    ) as http:  # fmt: skip
        put = await http.put("/targets/acme", json=entry(page_server, "acme"))
        assert put.status_code == 200, put.text
        assert put.json() == {"target_id": "acme", "actions": ["add"], "changes": []}
        again = await http.put("/targets/acme", json=entry(page_server, "acme"))
        assert again.json()["actions"] == ["unchanged"]
        changed = await http.put("/targets/acme", json=entry(page_server, "acme", selector="p"))
        assert changed.json()["actions"] == ["reconfigure"]
        assert changed.json()["changes"], changed.json()

        async def registered() -> httpx.Response | None:  # by the worker, in the mirror
            listed = await http.get("/targets")
            return listed if listed.json() else None

        listed = await eventually(registered, what="acme listed")
        assert listed is not None
        assert listed.headers["x-total-count"] == "1"
        assert [t["id"] for t in listed.json()] == ["acme"]

        async def first_slot_recorded() -> bool:  # its first slot falls due at the add
            history = (await http.get("/targets/acme/history")).json()
            return any(row["kind"] == "scheduled" for row in history)

        await eventually(first_slot_recorded, what="acme's first slot recorded")
        first = await http.post("/targets/acme/check")
        assert first.status_code == 200, first.text
        assert first.json()[0]["status"] == "unchanged"  # the baseline
        page_server.set("/acme", "<p>Pro 12 EUR</p>")
        second = await http.post("/targets/acme/check")
        assert second.json()[0]["status"] == "changed"

        # The same bytes as `--json`: one set of views for both surfaces.
        for path, command in [
            ("/targets/acme/history", ["history", "acme"]),
            ("/targets/acme/diff", ["diff", "acme"]),
            ("/targets/acme/channels", ["channels", "acme"]),
            ("/failures", ["failures"]),
        ]:
            code, out, err = await cli(env, *command, "--json")
            assert code == 0, err
            assert (await http.get(path)).text == out.rstrip("\n"), path
        diff = (await http.get("/targets/acme/diff")).json()
        assert "-Pro 10 EUR" in diff["diff"] and "+Pro 12 EUR" in diff["diff"]
        history = (await http.get("/targets/acme/history")).json()
        assert {second.json()[0]["work_id"], first.json()[0]["work_id"]} <= {
            r["work_id"] for r in history
        }
        older = await http.get(
            "/targets/acme/history", params={"limit": 1, "before": history[0]["slot"]}
        )
        assert older.json() == history[1:2]

        assert (await http.post("/targets/acme/pause")).status_code == 204
        status = (await http.get("/targets/acme")).json()
        assert status["status"]["paused"] is True
        assert status["history_url"].endswith("/workflows/pricewatch-acme")
        assert (await http.post("/targets/acme/resume")).status_code == 204
        assert (await http.get("/targets/acme")).json()["status"]["paused"] is False

        assert (await http.delete("/targets/acme")).status_code == 204
        gone = await http.get("/targets/acme")
        assert gone.status_code == 404
        assert gone.json()["error"].startswith("unknown target 'acme'")


async def test_api_errors_are_the_cli_s_one_line(
    env: dict[str, str], page_server: PageServer
) -> None:
    async with (
        serve_process(env) as base,
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=60) as http,
    ):
        cases: list[tuple[Callable[[], Awaitable[httpx.Response]], int, str]] = [
            (lambda: http.get("/targets/nope/history"), 404, "unknown target 'nope'"),
            (lambda: http.post("/checks/nope:2026-01-01T00:00:00Z/retry"), 404, "unknown work id"),
            (
                lambda: http.put("/targets/a", json=entry(page_server, "a", selector="p[")),
                400,
                "selector",
            ),
            (
                lambda: http.put("/targets/a", json=entry(page_server, "b")),
                400,
                "is not the path's",
            ),
            (
                lambda: http.put(
                    "/targets/a", json={**entry(page_server, "a"), "url": "http://10.0.0.1/"}
                ),
                400,
                "10.0.0.1",
            ),
            (lambda: http.put("/targets/a", json={"id": "a"}), 422, "url: Field required"),
            (lambda: http.get("/targets", params={"limit": 0}), 422, "limit:"),
            (lambda: http.get("/targets", params={"state": "odd"}), 422, "state:"),
            (lambda: http.get("/nothing-here"), 404, "no such page: /api/v1/nothing-here"),
            (  # refused before it is read: Temporal would have refused it as an outage
                lambda: http.put(
                    "/targets/a",
                    json={**entry(page_server, "a"), "notify": ["json://" + "x" * 10 * 2**20]},
                ),
                413,
                "the request body is over the limit of 1 MiB",
            ),
            (
                lambda: http.put("/targets/a", json=entry(page_server, "a", every="1ms")),
                422,
                "every: invalid duration '1ms'",
            ),
        ]
        for request, status, says in cases:
            answer = await request()
            assert answer.status_code == status, answer.text
            assert list(answer.json()) == ["error"] and says in answer.json()["error"], answer.text
            assert "\n" not in answer.json()["error"]
        assert (await http.get("/targets")).json() == []  # nothing was half-added


async def test_a_form_without_the_session_s_csrf_token_changes_nothing(
    env: dict[str, str], page_server: PageServer
) -> None:
    page_server.set("/shop", "<p>Pro 10 EUR</p>")
    form = {"id": "shop", "url": page_server.url("/shop"), "every": "1h"}
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as browser:  # fmt: skip
        token = CSRF.findall((await browser.get("/")).text)[0]
        for wrong in [{}, {"csrf": "forged"}]:
            refused = await browser.post("/targets", data={**form, **wrong})
            assert refused.status_code == 403
            assert "CSRF token is wrong or missing" in refused.text
        async with httpx.AsyncClient(base_url=base, timeout=60) as other:  # another session's token
            refused = await other.post("/targets", data={**form, "csrf": token})
            assert refused.status_code == 403
        assert (await browser.get("/api/v1/targets")).json() == []

        added = await browser.post("/targets", data={**form, "csrf": token})
        assert (added.status_code, added.headers["location"]) == (303, "/targets/shop")
        page = await browser.get("/targets/shop")
        assert "add shop" in page.text  # said once, after the redirect
        assert "add shop" not in (await browser.get("/targets/shop")).text
        paused = await browser.post("/targets/shop/pause", data={"csrf": token})
        assert paused.status_code == 303
        assert (await browser.get("/api/v1/targets/shop")).json()["status"]["paused"]
        bad = await browser.post("/targets", data={**form, "id": "Bad Id", "csrf": token})
        assert bad.status_code == 400 and "pricewatch: " in bad.text

        # Remove asks first, on a page of its own; its form is CSRF-protected like the rest.
        target_page = (await browser.get("/targets/shop")).text
        assert 'method="post" action="/targets/shop/remove"' not in target_page
        assert 'method="get" action="/targets/shop/remove"' in target_page
        confirm = await browser.get("/targets/shop/remove")
        assert confirm.status_code == 200 and "deletes its whole history" in confirm.text
        assert 'method="post" action="/targets/shop/remove"' in confirm.text
        assert (await browser.get("/api/v1/targets/shop")).status_code == 200  # still there
        assert (await browser.get("/targets/nope/remove")).status_code == 404
        refused = await browser.post("/targets/shop/remove", data={"csrf": "forged"})
        assert refused.status_code == 403
        removed = await browser.post("/targets/shop/remove", data={"csrf": token})
        assert (removed.status_code, removed.headers["location"]) == (303, "/")
        assert (await browser.get("/api/v1/targets/shop")).status_code == 404


async def test_urls_page_text_and_errors_render_escaped(
    env: dict[str, str], page_server: PageServer
) -> None:
    page_server.set("/xss", f"<p>{XSS.replace('<', '&lt;').replace('>', '&gt;')} 1</p>")
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        url = page_server.url(f"/xss?q={XSS}")
        put = await http.put("/api/v1/targets/xss", json={"id": "xss", "url": url})
        assert put.status_code == 200, put.text
        failing = {"id": "fails", "url": page_server.url("/xss"), "selector": f'p[title="{XSS}"]'}
        assert (await http.put("/api/v1/targets/fails", json=failing)).status_code == 200
        await http.post("/api/v1/targets/xss/check")
        page_server.set("/xss", f"<p>{XSS.replace('<', '&lt;').replace('>', '&gt;')} 2</p>")
        await http.post("/api/v1/targets/xss/check")
        failed = (await http.post("/api/v1/targets/fails/check")).json()[0]
        assert XSS in failed["error_message"]
        pages = ["/", "/targets/xss", "/targets/fails", "/failures", "/targets/nope"]
        for path in pages:
            html = (await http.get(path)).text
            assert "<script" not in html.lower(), path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in (await http.get("/targets/xss")).text
        assert "&lt;script&gt;" in (await http.get("/targets/fails")).text


async def test_a_token_closes_the_api_and_the_dashboard(env: dict[str, str]) -> None:
    token = "s3cret-token-long-enough"
    async with serve_process({**env, "PRICEWATCH_API_TOKEN": token}) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        for headers in [{}, {"Authorization": "Bearer wrong"}, {"Authorization": token}]:
            refused = await http.get("/api/v1/targets", headers=headers)
            assert refused.status_code == 401 and "bearer token" in refused.json()["error"]
        allowed = await http.get("/api/v1/targets", headers={"Authorization": f"Bearer {token}"})
        assert allowed.status_code == 200

        to_login = await http.get("/failures")
        assert (to_login.status_code, to_login.headers["location"]) == (
            303, "/login?next=%2Ffailures"
        )  # fmt: skip
        login = await http.get("/login")
        csrf = CSRF.findall(login.text)[0]
        wrong = await http.post("/login", data={"csrf": csrf, "token": "nope", "next": "/"})
        assert wrong.status_code == 401 and "wrong token" in wrong.text
        elsewhere = {"csrf": csrf, "token": token, "next": "//evil.example/"}
        signed_in = await http.post("/login", data=elsewhere)
        assert (signed_in.status_code, signed_in.headers["location"]) == (303, "/")
        assert (await http.get("/failures")).status_code == 200
        # The session is not a bearer token: the API still wants the token.
        assert (await http.get("/api/v1/targets")).status_code == 401


async def test_only_loopback_is_served_without_a_token(env: dict[str, str]) -> None:
    code, _, err = await cli(env, "serve", "--host", "0.0.0.0")
    assert code == 2
    assert err == (
        "pricewatch: listening on 0.0.0.0 lets other machines in: set PRICEWATCH_API_TOKEN "
        "(or listen on 127.0.0.1)\n"
    )


async def test_other_sites_and_other_host_names_are_refused(env: dict[str, str]) -> None:
    """A page on another site may post to a local server, and a rebound DNS name may point
    at it: neither reaches a target."""
    async with serve_process(env) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        cross = await http.post(
            "/api/v1/targets/a/pause", headers={"Origin": "http://evil.example"}
        )
        assert cross.status_code == 403 and "another site" in cross.json()["error"]
        rebound = await http.get("/api/v1/targets", headers={"Host": "evil.example"})
        assert rebound.status_code == 400
        same = await http.post("/api/v1/targets/a/pause", headers={"Origin": base})
        assert same.status_code == 404  # let through: no such target
        page = await http.get("/")
        for header, value in web.HEADERS.items():
            assert page.headers[header] == value
        assert "script-src" not in page.headers["content-security-policy"]  # none at all


def test_the_committed_openapi_document_is_the_api_s() -> None:
    """After a change to the API: `python -m surfaces.api` writes docs/openapi.json."""
    served = web.create_app(Settings()).openapi()
    committed = json.loads(Path(api.DOCUMENT).read_text())
    assert served == committed, "docs/openapi.json is stale: run python -m surfaces.api"
    assert api.document() == Path(api.DOCUMENT).read_text()
    every_view = set(committed["components"]["schemas"])
    assert {"TargetSummary", "CheckResult", "PricesRow", "ChannelView", "Entry"} <= every_view
    slots = committed["components"]["schemas"]["CheckResult"]["properties"]
    assert "slot" in slots and "scheduled_for" not in slots  # as `--json` names it


async def test_the_targets_page_pages_and_filters(
    env: dict[str, str], page_server: PageServer
) -> None:
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        for n in range(3):
            page_server.set(f"/p{n}", "<p>1 EUR</p>")
            fields: dict[str, object] = {"prices": {}} if n == 1 else {}
            put = await http.put(
                f"/api/v1/targets/p{n}", json=entry(page_server, f"p{n}", **fields)
            )
            assert put.status_code == 200, put.text
        await http.post("/api/v1/targets/p2/pause")

        async def ids(**params: str | int) -> list[str]:
            answer = await http.get("/api/v1/targets", params=params)
            return [t["id"] for t in answer.json()]

        async def paused() -> bool:  # the worker mirrors each registration and pause
            return await ids(state="paused") == ["p2"] and len(await ids()) == 3

        await eventually(paused, what="three targets, p2 paused")
        assert await ids(limit=2) == ["p0", "p1"]
        assert await ids(limit=2, offset=2) == ["p2"]
        assert await ids(state="prices") == ["p1"]
        assert await ids(search="P0") == ["p0"]
        assert await ids(search=page_server.url("/p1")) == ["p1"]
        past = await http.get("/api/v1/targets", params={"offset": 10})
        assert (past.json(), past.headers["x-total-count"]) == ([], "3")
        html = (await http.get("/", params={"state": "paused"})).text
        assert "/targets/p2" in html and "/targets/p0" not in html
