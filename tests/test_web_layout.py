"""Every page fits a phone (390 px) and a laptop (1280 px) with no sideways scrolling, long
ids, URLs and a 5,000-character price name included, and the charts' labels stay readable
(issue 44). Real Chromium over `pricewatch serve`, a worker, the dev server and Postgres;
with PRICEWATCH_SHOTS=docs/web it retakes the screenshots docs/web.md shows."""

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page

from tests.browser import registered, watched
from tests.conftest import PageServer
from tests.helpers import serve_process, worker_process
from tests.waits import eventually

pytestmark = pytest.mark.e2e
SHOTS = os.environ.get("PRICEWATCH_SHOTS")  # a folder: save each shown page there
WIDTHS = {"wide": (1280, 800), "phone": (390, 844)}
LONG_ID = "a" + "-very-long-target-id" * 3 + "-1"  # 63 characters
NAME = "Pro " + "unlimited-seats-" * 312  # 5,000 characters, no space to break at
# The pages that have a screenshot in docs/web.md, by file name.
SHOWN = {"/": "targets", "/groups/cloud": "group", "/targets/plans": "target",
         "/failures": "failures"}  # fmt: skip


def offer(name: str, amount: str) -> str:
    product = {"@context": "https://schema.org", "@type": "Product", "name": name,
               "offers": {"@type": "Offer", "price": amount, "priceCurrency": "EUR"}}  # fmt: skip
    return f'<script type="application/ld+json">{json.dumps(product)}</script><p>{amount}</p>'


async def overflow(page: Page) -> int:
    """How far the page is wider than the window (0: no sideways scrolling)."""
    wider: int = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    return wider


async def test_every_page_fits_a_phone_and_a_laptop(
    env: dict[str, str],
    page_server: PageServer,
    browser: Browser,
) -> None:
    page_server.set("/plans", offer("Pro", "10.00"))
    page_server.set("/long", offer(NAME, "99.00"))
    long_url = page_server.url("/long?" + "q=" + "x" * 1500)
    targets: list[dict[str, Any]] = [
        {"id": "plans", "url": page_server.url("/plans"), "every": "1h", "prices": {},
         "tags": ["cloud"]},
        {"id": LONG_ID, "url": long_url, "every": "1h", "prices": {}, "tags": ["cloud"]},
        {"id": "fails", "url": page_server.url("/plans"), "selector": "#missing" * 40},
    ]  # fmt: skip
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        for target in targets:
            put = await http.put(f"/api/v1/targets/{target['id']}", json=target)
            assert put.status_code == 200, put.text
        await registered(http, "plans", LONG_ID, "fails")
        for amount in ["12.00", "9.00"]:
            page_server.set("/plans", offer("Pro", amount))
            assert (await http.post("/api/v1/targets/plans/check")).status_code == 200
        assert (await http.post(f"/api/v1/targets/{LONG_ID}/check")).status_code == 200
        await http.post("/api/v1/targets/fails/check")

        async def failed() -> bool:
            return bool((await http.get("/api/v1/failures")).json())

        await eventually(failed, what="a failure listed")
        paths = ["/", "/groups/cloud", "/targets/plans", f"/targets/{LONG_ID}", "/failures",
                 "/health", "/targets/fails", f"/targets/{LONG_ID}/remove"]  # fmt: skip
        seen = await watched(browser, base)
        page = seen.page
        wrong = []
        for size, (width, height) in WIDTHS.items():
            await page.set_viewport_size({"width": width, "height": height})
            for path in paths:
                answer = await page.goto(path)
                assert answer is not None and answer.status == 200, path
                if wider := await overflow(page):
                    wrong.append(f"{path} at {width} px: {wider} px too wide")
                if SHOTS and path in SHOWN:
                    await page.screenshot(path=Path(SHOTS) / f"{SHOWN[path]}-{size}.png")
            await page.goto("/targets/plans")
            label = page.locator("figure.price svg text").first
            box = await label.bounding_box()
            assert box is not None
            if box["height"] < 9:  # was about 5 px
                wrong.append(f"a chart's label at {width} px is {box['height']:.1f} px high")
        await page.goto("/")
        name = page.locator(".price-line .name", has_text="Pro unlimited").first
        assert await name.get_attribute("title") == NAME  # the whole value, on hover
        assert wrong == [], "\n".join(wrong)
        assert seen.errors == [] and seen.dialogs == []
