"""A render reads the page a person would see (issue 42), with the real Chromium: it waits for
the element the target names, follows the navigations the page makes itself (through the
guard), and fails in the plain path's words and classes, never Playwright's."""

import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from playwright.async_api import Error as PlaywrightError

from fetchers.browser import BrowserFetcher, browser_error
from fetchers.http import FetchError, Page, request_of
from pricewatch.models import CheckInput, PriceSettings, RenderSettings, TargetConfig
from pricewatch.steps import parse_step
from tests.chaos.stack import serve
from tests.conftest import LOOPBACK
from tests.helpers import SLOT, cli
from workers.chromium import chromium_args, find_chromium

# Playwright's method names, as its errors start (`Page.goto: net::ERR_...`).
PLAYWRIGHT_WORDS = re.compile(r"\b(Page|Locator|Frame|BrowserContext)\.\w+:")
LANDING = "<html><body><h1>Plans</h1><p class=price>$7</p></body></html>"


def html(text: str) -> web.Response:
    return web.Response(text=text, content_type="text/html")


def page(text: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return html(text)

    return handler


@pytest.fixture
async def site() -> AsyncIterator[str]:
    """Pages that write their price late, move themselves, or fail; 127.0.0.2 is refused
    (the guard allows 127.0.0.1 only) and nothing listens there."""
    refused = "http://127.0.0.2:8/private"

    async def late(request: web.Request) -> web.Response:
        delay = int(request.query["ms"])
        script = f"""addEventListener("load", () => setTimeout(() => {{
          document.getElementById("plans").innerHTML = "<p class=price>$9</p>"; }}, {delay}));"""
        return html(
            f"<html><body><div id=plans>loading</div><script>{script}</script></body></html>"
        )

    def moving(script: str = "", head: str = "") -> str:
        return (f"<html><head>{head}</head><body><p class=price>$1</p>"
                    f"<script>{script}</script></body></html>")  # fmt: skip

    async def to_file(request: web.Request) -> web.Response:
        raise web.HTTPFound("file:///etc/passwd")

    async def download(request: web.Request) -> web.Response:
        attachment = {"Content-Disposition": "attachment; filename=p.bin"}
        return web.Response(
            body=b"x" * 100, content_type="application/octet-stream", headers=attachment
        )

    async def busy(request: web.Request) -> web.Response:
        return html("<html><body><h1>Plans</h1><p class=price>$3</p><script>"
                    "addEventListener('load', () => setTimeout(() => { for (;;) {} }, 50));"
                    "</script></body></html>")  # fmt: skip

    async def missing(request: web.Request) -> web.Response:
        raise web.HTTPNotFound()

    async def no_content(request: web.Request) -> web.Response:
        return web.Response(status=int(request.query["status"]))

    framed = (
        "<html><body><div id=plans>monthly</div><iframe id=pay src=/frame></iframe></body></html>"
    )
    frame = (
        "<html><body><button id=yearly onclick=\"parent.document.getElementById('plans')"
        ".innerHTML = '<p class=price>$50</p>'\">yearly</button></body></html>"
    )
    routes = [
        web.get("/framed", page(framed)),
        web.get("/frame", page(frame)),
        web.get("/late", late),
        web.get("/landing", page(LANDING)),
        web.get("/after-load", page(moving(
            "addEventListener('load', () => { location.href = '/landing'; });"))),
        web.get("/while-parsing", page(moving("location.href = '/landing';"))),
        web.get("/refresh", page(moving(
            head="<meta http-equiv=refresh content='0; url=/landing'>"))),
        web.get("/refresh-later", page(moving(
            head="<meta http-equiv=refresh content='1;url=/landing'>"))),
        web.get("/ticker", page(moving(head="<meta http-equiv=refresh content='1; url=/ticker'>"))),
        web.get("/after-load-refused", page(moving(
            f"addEventListener('load', () => {{ location.href = '{refused}'; }});"))),
        web.get("/while-parsing-refused", page(moving(
            f"location.href = '{refused}';"))),
        web.get("/refresh-refused", page(moving(
            head=f"<meta http-equiv=refresh content='0;url={refused}'>"))),
        web.get("/to-file", to_file),
        web.get("/download", download),
        web.get("/busy", busy),
        web.get("/missing", missing),
        web.get("/no-content", no_content),
    ]  # fmt: skip
    async with serve(routes) as url:
        yield url


@pytest.fixture(scope="module")
def chromium() -> Path:
    return find_chromium()


@pytest.fixture
async def fetcher(chromium: Path) -> AsyncIterator[BrowserFetcher]:
    browser = BrowserFetcher(LOOPBACK, chromium, chromium_args(), concurrency=2)
    try:
        yield browser
    finally:
        await browser.close()


def check(url: str, steps: list[str] | None = None, timeout: int = 10) -> CheckInput:
    return CheckInput.of(
        TargetConfig(
            target_id="x", url=url, interval_seconds=60, timeout_seconds=timeout,
            price_mode=PriceSettings(selector=".price"), render=RenderSettings(steps=steps or []),
        ),
        SLOT,
    )  # fmt: skip


async def read(fetcher: BrowserFetcher, url: str, steps: list[str] | None = None) -> Page:
    return await fetcher(request_of(check(url, steps)))


async def amounts(fetcher: BrowserFetcher, url: str) -> list[str]:
    page = await read(fetcher, url)
    return [f"{price.amount}" for price in page.prices or []]


@pytest.mark.parametrize("delay", [300, 800])
async def test_a_price_written_after_load_is_waited_for_with_its_selector_alone(
    fetcher: BrowserFetcher, site: str, delay: int
) -> None:
    page = await read(fetcher, f"{site}/late?ms={delay}")
    assert [price.amount for price in page.prices or []] == [9]
    assert page.waited is not None and page.waited.startswith("waited ")
    assert "'.price'" in page.waited and "not there" not in page.waited


async def test_a_selector_that_never_comes_fails_once_the_network_is_idle(
    fetcher: BrowserFetcher, site: str
) -> None:
    """Not at the end of the budget: about a second after the page went quiet."""
    started = time.monotonic()
    with pytest.raises(FetchError, match=r"extraction rule failed: .*not there once") as err:
        await fetcher(request_of(check(f"{site}/late?ms=60000", timeout=30)))
    assert err.value.transient is False
    assert time.monotonic() - started < 10


async def test_an_explicit_wait_step_overrides_the_wait_for_the_selector(
    fetcher: BrowserFetcher, site: str
) -> None:
    with pytest.raises(FetchError, match="extraction rule failed") as err:
        await read(fetcher, f"{site}/late?ms=800", ["wait 10ms"])
    assert "waited" not in str(err.value), "read after the step, as the user asked"


async def test_try_render_says_what_it_waited_for(site: str, tmp_path: Path) -> None:
    env = {**os.environ, "PRICEWATCH_DATA_DIR": str(tmp_path),
           "PRICEWATCH_ALLOW_NETWORKS": "127.0.0.1/32"}  # fmt: skip
    code, out, err = await cli(
        env, "try", f"{site}/late?ms=500", "--render", "--prices", "--price-selector", ".price"
    )
    assert code == 0, err
    assert re.search(r"rendered: waited \d+ ms for '\.price'", out), out
    assert "9 $" in out


@pytest.mark.parametrize("path", ["/after-load", "/while-parsing", "/refresh", "/refresh-later"])
async def test_a_page_that_moves_itself_is_read_where_it_lands(
    fetcher: BrowserFetcher, site: str, path: str
) -> None:
    assert await amounts(fetcher, f"{site}{path}") == ["7"]


async def test_a_page_that_refreshes_itself_is_read_without_waiting_for_it(
    fetcher: BrowserFetcher, site: str
) -> None:
    """A ticker's refresh to itself is no move: waiting for it would never end (the read
    would be `timed out: the page was not complete within 5s`, as /busy's is)."""
    assert await amounts(fetcher, f"{site}/ticker") == ["1"]


@pytest.mark.parametrize(
    "path", ["/after-load-refused", "/while-parsing-refused", "/refresh-refused"]
)
async def test_a_page_that_moves_to_a_refused_address_fails_permanently(
    fetcher: BrowserFetcher, site: str, path: str
) -> None:
    """As a redirect there does, in the guard's words: its refusal is never the page."""
    with pytest.raises(FetchError) as err:
        await read(fetcher, f"{site}{path}")
    assert err.value.transient is False
    assert str(err.value).startswith("refused 127.0.0.2:8"), err.value


FAILURES = [
    # path, steps, class, the plain path's words
    ("/to-file", [], False, r"^invalid or unsupported URL: "),
    ("/download", [], False, r"^unsupported content type application/octet-stream"),
    ("/missing", [], False, r"^HTTP 404 Not Found$"),
    ("/busy", ["wait 300ms", "wait h1"], True, r"^timed out: the page was not complete within 5s"),
    ("/landing", ["click #nowhere"], False, r"^step 1 \(click #nowhere\): not on the page$"),
    ("/landing", ["select h1=yearly"], False, r"^step 1 \(select h1=yearly\): "),
    ("/after-load-refused", [], False, r"^refused 127\.0\.0\.2:8"),
    ("/no-content?status=204", [], False, r"^HTTP 204 No Content: the page sent nothing to read$"),
    (
        "/no-content?status=205",
        [],
        False,
        r"^HTTP 205 Reset Content: the page sent nothing to read$",
    ),
]


@pytest.mark.parametrize(("path", "steps", "transient", "words"), FAILURES)
async def test_render_failures_speak_the_plain_paths_words(
    fetcher: BrowserFetcher, site: str, path: str, steps: list[str], transient: bool, words: str
) -> None:
    """A step waits within the target's timeout (5 s here), not a fixed 10 s."""
    started = time.monotonic()
    with pytest.raises(FetchError) as err:
        await fetcher(request_of(check(f"{site}{path}", steps, timeout=5)))
    said = str(err.value)
    assert not PLAYWRIGHT_WORDS.search(said), said
    assert re.search(words, said), said
    assert err.value.transient is transient, said
    assert time.monotonic() - started < 9


async def test_a_step_reaches_into_the_iframe_its_frame_prefix_names(
    fetcher: BrowserFetcher, site: str
) -> None:
    page = await read(fetcher, f"{site}/framed", ["click frame=#pay #yearly"])
    assert [price.amount for price in page.prices or []] == [50]
    with pytest.raises(FetchError, match=r"step 1 \(click #yearly\): not on the page"):
        await fetcher(request_of(check(f"{site}/framed", ["click #yearly"], timeout=5)))


CSS = st.from_regex(r"[#.]?[a-z][a-z0-9_-]{0,15}", fullmatch=True)


@given(frame=CSS, selector=CSS, action=st.sampled_from(["click", "wait"]))
def test_a_frame_prefix_is_parsed_and_written_back_as_given(
    frame: str, selector: str, action: str
) -> None:
    step = parse_step(f"{action} frame={frame} {selector}")
    assert (step.frame, step.selector) == (frame, selector)
    assert parse_step(str(step)) == step


@pytest.mark.parametrize("text", ["click frame=#pay", "click frame= #yearly", "fill frame=#pay"])
def test_a_frame_prefix_without_both_selectors_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(ValueError, match=r"frame= needs the iframe's CSS|needs CSS=VALUE"):
        parse_step(text)


@pytest.mark.parametrize(
    ("said", "transient", "words"),
    [
        ("Page.goto: Target crashed", True, "the page crashed in the browser"),
        ("Page.evaluate: Target crashed", True, "the page crashed in the browser"),
        ("Page.goto: net::ERR_CERT_AUTHORITY_INVALID at https://x/", False, "TLS certificate"),
        ("Page.goto: net::ERR_CONNECTION_RESET at http://x/", True, "connection failed"),
        ("Page.goto: net::ERR_TOO_MANY_REDIRECTS at http://x/", False, "too many redirects"),
    ],
)
def test_browser_errors_map_to_the_plain_paths_classes(
    said: str, transient: bool, words: str
) -> None:
    """The cases a local page cannot stage (a renderer out of memory, a bad certificate)."""
    mapped = browser_error(PlaywrightError(said))
    assert mapped.transient is transient and str(mapped).startswith(words), mapped


METHODS = ["Page.goto", "Page.evaluate", "Locator.click", "Frame.wait_for", "Page.content",
           "BrowserContext.new_page"]  # fmt: skip


@given(
    method=st.sampled_from(METHODS),
    said=st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=60),
)
def test_no_browser_error_keeps_a_playwright_method_name(method: str, said: str) -> None:
    mapped = browser_error(PlaywrightError(f"{method}: {said}\nCall log:\n  - {method}: x"))
    assert not PLAYWRIGHT_WORDS.search(str(mapped)), mapped
