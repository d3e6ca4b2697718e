"""The targets list, a group and a target's history in a real browser (Playwright and the
render worker's Chromium) over `pricewatch serve`, a real worker, the dev server and
Postgres (issue 44): the list's bulk actions go through to the workflows, a group's chart
holds each plan of each of its targets, and a target's history shows what happened unless
every slot is asked for. No page breaks its Content-Security-Policy."""

import httpx
import pytest
from playwright.async_api import Browser, Page

from tests.conftest import PageServer
from tests.helpers import cli, serve_process, worker_process
from tests.waits import eventually
from workers.chromium import find_chromium

pytestmark = pytest.mark.e2e
ROW = "<tr class=plan><th>{}</th><td>EUR {}</td></tr>"


async def opened(browser: Browser, base: str, errors: list[str]) -> Page:
    """A page whose console errors (a CSP violation among them) land in `errors`."""
    page = await (await browser.new_context(base_url=base)).new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda err: errors.append(str(err)))
    return page


async def put(http: httpx.AsyncClient, *entries: dict[str, object]) -> None:
    for entry in entries:
        answer = await http.put(f"/api/v1/targets/{entry['id']}", json=entry)
        assert answer.status_code == 200, answer.text

    async def listed() -> bool:  # the pages read the worker's mirror
        found = {t["id"] for t in (await http.get("/api/v1/targets")).json()}
        return found >= {str(e["id"]) for e in entries}

    await eventually(listed, what="the targets listed")


async def settled(http: httpx.AsyncClient, target_id: str) -> None:
    """Until the first slot's check is recorded (else it lands among the checks made now)."""

    async def recorded() -> bool:
        history = (await http.get(f"/api/v1/targets/{target_id}/history")).json()
        return any(row["status"] != "retrying" for row in history)

    await eventually(recorded, what=f"{target_id}'s first slot recorded")


async def act(page: Page, button: str, *ids: str) -> str:
    """Select `ids` on the list, press `button`, and what the list then says was done."""
    for target_id in ids:
        await page.get_by_label(f"select {target_id}").check()
    async with page.expect_navigation():
        await page.get_by_role("button", name=button).click()
    return await page.locator(".said").inner_text()


async def paused(http: httpx.AsyncClient, target_id: str) -> bool:
    status = (await http.get(f"/api/v1/targets/{target_id}")).json()["status"]
    return bool(status["paused"])


async def test_bulk_actions_and_a_history_of_changes_only(
    env: dict[str, str], page_server: PageServer, browser: Browser
) -> None:
    page_server.set("/a", "<p>one</p>")
    page_server.set("/b", "<p>same</p>")
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        await put(
            http,
            {"id": "alpha", "url": page_server.url("/a"), "every": "1h"},
            {"id": "beta", "url": page_server.url("/b"), "every": "1h"},
            {"id": "gamma", "url": page_server.url("/b"), "every": "1h"},
        )
        for target_id in ("alpha", "beta", "gamma"):
            await settled(http, target_id)
        errors: list[str] = []
        page = await opened(browser, base, errors)

        await page.goto("/")
        assert await act(page, "Pause", "alpha", "beta") == "paused 2 of 2"
        assert [await paused(http, t) for t in ("alpha", "beta", "gamma")] == [True, True, False]
        assert await act(page, "Resume", "alpha", "beta") == "resumed 2 of 2"
        assert [await paused(http, t) for t in ("alpha", "beta")] == [False, False]

        # alpha's page changes once among its checks; the others' pages stay as they were
        for text in ["one", "two", "two"]:
            page_server.set("/a", f"<p>{text}</p>")
            assert await act(page, "Check now", "alpha", "beta") == "checked 2 of 2"
        row = page.locator("#row-alpha")
        assert await row.locator(".last-changed span").inner_text() == "just now"
        assert "UTC" in str(await row.locator(".last-changed span").get_attribute("title"))
        beta = (await http.get("/api/v1/targets/beta/history")).json()
        assert len(beta) == 4 and {r["status"] for r in beta} == {"unchanged"}

        await page.goto("/targets/alpha")
        history = page.locator("#history tbody tr")
        assert await history.count() == 1  # its one change, not its four slots
        assert "changed" in await history.inner_text()
        await page.get_by_role("link", name="every slot").click()
        await page.wait_for_url("**/targets/alpha?every=true*")
        assert await page.locator("#history tbody tr").count() == 4
        assert await page.locator("#history").get_attribute("data-shown") == "every"

        await page.goto("/")
        await page.get_by_label("select beta").check()
        await page.get_by_label("select gamma").check()
        async with page.expect_navigation():
            await page.get_by_role("button", name="Remove…").click()
        assert await page.locator("h1").inner_text() == "Remove 2 targets?"
        assert await page.locator("ul.ids li").all_inner_texts() == ["beta", "gamma"]
        assert {t["id"] for t in (await http.get("/api/v1/targets")).json()} >= {"beta", "gamma"}
        async with page.expect_navigation():
            await page.get_by_role("button", name="Remove them and their history").click()
        assert await page.locator(".said").inner_text() == "removed 2 of 2"
        assert [t["id"] for t in (await http.get("/api/v1/targets")).json()] == ["alpha"]
        assert errors == []


async def test_a_group_charts_two_targets_plans_side_by_side(
    env: dict[str, str], page_server: PageServer, browser: Browser
) -> None:
    def table(basic: str, pro: str) -> str:
        return f"<table>{ROW.format('Basic', basic)}{ROW.format('Pro', pro)}</table>"

    page_server.set("/acme", table("5", "10"))
    page_server.set("/bolt", table("6", "12"))
    prices = {"selector": "tr.plan", "name": "th"}
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        await put(
            http,
            {"id": "acme", "url": page_server.url("/acme"), "prices": prices, "tags": ["cloud"]},
            {"id": "bolt", "url": page_server.url("/bolt"), "prices": prices, "tags": "cloud"},
            {"id": "solo", "url": page_server.url("/acme"), "prices": prices},
        )
        for target_id in ("acme", "bolt"):
            await settled(http, target_id)
        page_server.set("/acme", table("5", "11"))
        assert (await http.post("/api/v1/targets/acme/check")).status_code == 200
        tagged = (await http.get("/api/v1/targets", params={"tag": "cloud"})).json()
        assert [t["id"] for t in tagged] == ["acme", "bolt"]
        code, out, err = await cli(env, "list", "--tag", "cloud")
        assert code == 0, err
        assert out.split()[:8] == [
            "ID",
            "STATE",
            "SCHEDULE",
            "NEXT",
            "SLOT",
            "LAST",
            "PRICES",
            "TAGS",
        ]
        assert [line.split()[0] for line in out.splitlines()[1:]] == ["acme", "bolt"]
        assert all(" cloud " in line for line in out.splitlines()[1:]), out

        errors: list[str] = []
        page = await opened(browser, base, errors)
        await page.goto("/?tag=cloud")
        await page.get_by_role("link", name="group page").click()
        await page.wait_for_url("**/groups/cloud")
        chart = page.locator("svg.lines")
        lines = chart.locator("g.line")
        assert [await lines.nth(i).get_attribute("data-line") for i in range(4)] == [
            "acme · Basic", "acme · Pro", "bolt · Basic", "bolt · Pro",
        ]  # fmt: skip
        assert await lines.count() == 4
        marks = (
            await lines.nth(1)
            .locator("path.dot")
            .evaluate_all("paths => paths.map(p => p.getAttribute('d').split('h0').length - 1)")
        )
        assert sum(marks) == 2  # acme's two slots, a dot each
        times = await chart.locator("text.time").all_text_contents()  # seconds apart here
        assert len(times) >= 2 and len(set(times)) == len(times), times
        legend = await page.locator("ul.legend li").all_inner_texts()
        assert any("acme · Pro: 11" in item and "EUR" in item for item in legend), legend
        assert any("bolt · Basic: 6" in item and "EUR" in item for item in legend), legend
        assert "acme" in await page.locator("#changes").inner_text()
        box = await chart.bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 100
        await page.goto("/targets/acme")
        assert (
            "11"
            in await page.locator("figure.price", has_text="Pro").locator(".current").inner_text()
        )
        assert errors == []

        solo = {"id": "solo", "url": page_server.url("/acme"), "prices": prices, "tags": ["cloud"]}
        answer = await http.put("/api/v1/targets/solo", json=solo)  # tags alone: a reconfigure
        assert answer.json()["actions"] == ["reconfigure"], answer.text
        tagged = (await http.get("/api/v1/targets", params={"tag": "cloud"})).json()
        assert [t["id"] for t in tagged] == ["acme", "bolt", "solo"]  # as the call returns


async def test_a_rendered_change_shows_both_screenshots_side_by_side(
    env: dict[str, str], page_server: PageServer, browser: Browser
) -> None:
    page_server.set("/shown", "<p>before</p>")
    rendering = {**env, "PRICEWATCH_RENDER": "true", "PRICEWATCH_CHROMIUM": str(find_chromium())}
    async with worker_process(env), worker_process(rendering), serve_process(
        env
    ) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:  # fmt: skip
        await put(http, {"id": "shown", "url": page_server.url("/shown"), "render": True})
        await settled(http, "shown")
        page_server.set("/shown", "<p>after</p>")
        checked = await http.post("/api/v1/targets/shown/check")
        assert checked.json()[0]["status"] == "changed", checked.text
        diff = (await http.get("/api/v1/targets/shown/diff")).json()

        errors: list[str] = []
        page = await opened(browser, base, errors)
        await page.goto("/targets/shown")
        shots = page.locator("table.screenshots img")
        assert [await shots.nth(i).get_attribute("src") for i in range(2)] == [
            f"/screenshots/{diff['previous_work_id'].replace(':', '%3A')}",
            f"/screenshots/{diff['work_id'].replace(':', '%3A')}",
        ]
        widths = await shots.evaluate_all("shots => shots.map(s => s.naturalWidth)")
        assert len(widths) == 2 and min(widths) > 0  # both PNGs served and drawn
        before, after = [await shots.nth(i).bounding_box() for i in range(2)]
        assert before and after and before["x"] < after["x"] and before["y"] == after["y"]
        assert errors == []
