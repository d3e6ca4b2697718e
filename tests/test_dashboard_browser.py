"""The dashboard in a real browser (Playwright and the render worker's Chromium), over
`pricewatch serve`, a real worker, the dev server and Postgres: what a person sees and
clicks, that no page breaks its own Content-Security-Policy, and that user-written strings
never run."""

import json

import httpx
import pytest
from playwright.async_api import Browser

from tests.browser import registered, watched
from tests.conftest import PageServer
from tests.helpers import serve_process, worker_process
from tests.waits import eventually

pytestmark = pytest.mark.e2e
XSS = ["<script>alert('url')</script>", '<img src=x onerror="alert(1)">']


def plans(pro: str) -> str:
    offer = {"@type": "Offer", "price": pro, "priceCurrency": "EUR"}
    product = {"@context": "https://schema.org", "@type": "Product", "name": "Pro"}
    return (
        '<script type="application/ld+json">'
        + json.dumps({**product, "offers": offer})
        + f"</script><p>Pro {pro} EUR</p>"
    )


async def test_a_target_added_through_the_api_is_listed_and_paused_from_its_page(
    env: dict[str, str], page_server: PageServer, browser: Browser
) -> None:
    page_server.set("/shop", "<p>Pro 10 EUR</p>")
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        shop = {"id": "shop", "url": page_server.url("/shop"), "every": "1h"}
        assert (await http.put("/api/v1/targets/shop", json=shop)).status_code == 200
        await registered(http, "shop")
        seen = await watched(browser, base)
        page = seen.page
        await page.goto("/")
        row = page.locator("#targets tbody tr", has_text="shop")
        assert await row.count() == 1
        assert "active" in await row.inner_text()
        await row.get_by_role("link", name="shop").click()
        await page.wait_for_url("**/targets/shop")
        await page.get_by_role("button", name="Pause").click()
        await page.wait_for_load_state()
        assert await page.locator("#state").inner_text() == "paused"
        assert "paused shop" in await page.locator(".said").inner_text()
        status = (await http.get("/api/v1/targets/shop")).json()["status"]
        assert status["paused"] is True  # the workflow's own answer
        await page.get_by_role("button", name="Resume").click()
        await page.wait_for_load_state()
        assert await page.locator("#state").inner_text() == "active"
        assert seen.errors == [] and seen.dialogs == []


async def test_the_chart_has_a_point_per_slot_and_the_diff_shows_the_change(
    env: dict[str, str], page_server: PageServer, browser: Browser
) -> None:
    page_server.set("/plans", plans("10.00"))
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        target = {"id": "plans", "url": page_server.url("/plans"), "every": "1h", "prices": {}}
        assert (await http.put("/api/v1/targets/plans", json=target)).status_code == 200
        await registered(http, "plans")

        async def first_slot_recorded() -> bool:  # else it can land after `rows` is read
            history = (await http.get("/api/v1/targets/plans/history")).json()
            return any(row["status"] != "retrying" for row in history)

        await eventually(first_slot_recorded, what="the first slot's check recorded")
        for pro in ["10.00", "12.00", "9.00"]:
            page_server.set("/plans", plans(pro))
            checked = await http.post("/api/v1/targets/plans/check")
            assert checked.status_code == 200, checked.text
        rows = (await http.get("/api/v1/targets/plans/prices")).json()
        seen = await watched(browser, base)
        page = seen.page
        await page.goto("/targets/plans")
        chart = page.locator("figure.price", has_text="Pro")
        # A dot per slot, drawn as one path of `h0` marks per run of one amount, titled once.
        marks = await chart.locator("path.point").evaluate_all(
            "paths => paths.map(p => p.getAttribute('d').split('h0').length - 1)"
        )
        titles = await chart.locator("path.point title").all_text_contents()
        assert sum(marks) == len(rows) >= 3
        amounts = [
            t.rsplit(": ", 1)[1] for t, n in zip(titles, marks, strict=True) for _ in range(n)
        ]
        assert amounts == [row["prices"][0]["amount"] for row in rows]  # slot by slot
        assert all(f"{n} slots" in t for t, n in zip(titles, marks, strict=True) if n > 1)
        assert {"10.00", "12.00", "9.00"} <= set(amounts)
        diff = page.locator("table.diff")
        shown = (await http.get("/api/v1/targets/plans/diff")).json()["diff"]
        before, after = await diff.locator("tr.moved td").all_inner_texts()
        assert before != after and f"-{before}" in shown and f"+{after}" in shown
        await page.goto("/")  # the sparkline of the first price
        assert await page.locator("#targets svg.spark polyline").count() == 1
        assert seen.errors == [] and seen.dialogs == []


async def test_user_strings_do_not_run_and_a_wrong_csrf_token_is_refused(
    env: dict[str, str], page_server: PageServer, browser: Browser
) -> None:
    escaped = " ".join(x.replace("<", "&lt;").replace(">", "&gt;") for x in XSS)
    page_server.set("/xss", f"<p>{escaped} 1</p>")
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        targets = [
            {"id": "xss", "url": page_server.url(f"/xss?{XSS[0]}{XSS[1]}")},
            {"id": "fails", "url": page_server.url("/xss"), "selector": f"p[title='{XSS[1]}']"},
        ]
        for target in targets:
            put = await http.put(f"/api/v1/targets/{target['id']}", json=target)
            assert put.status_code == 200, put.text
        await registered(http, "xss", "fails")
        await http.post("/api/v1/targets/xss/check")
        page_server.set("/xss", f"<p>{escaped} 2</p>")
        await http.post("/api/v1/targets/xss/check")
        await http.post("/api/v1/targets/fails/check")
        seen = await watched(browser, base)
        page = seen.page
        for path in ["/", "/targets/xss", "/targets/fails", "/failures"]:
            await page.goto(path)
            assert await page.evaluate("document.scripts.length") == 0, path
            assert await page.locator("img").count() == 0, path  # the payload stayed text
        await page.goto("/targets/xss")
        assert XSS[0] in await page.locator("table.diff").inner_text()
        await page.goto("/targets/fails")
        assert XSS[1] in await page.locator("#history").inner_text()

        await page.goto("/targets/xss")
        await page.evaluate(
            "document.querySelectorAll('input[name=csrf]').forEach(i => i.value = 'forged')"
        )
        await page.get_by_role("button", name="Pause").click()
        await page.wait_for_load_state()
        assert "CSRF token is wrong or missing" in await page.locator(".error").inner_text()
        status = (await http.get("/api/v1/targets/xss")).json()["status"]
        assert status["paused"] is False
        assert seen.dialogs == []
        assert [e for e in seen.errors if "403" not in e] == []  # the refusal's own status
