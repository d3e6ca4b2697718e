"""Render a page in Chromium before it is read (issue 30): the render worker's fetcher.

One browser per worker process, a fresh context per check (no cookie, storage or cache
passes from one target to the next), at most `concurrency` renders at once. Every request
the page makes goes through the guarded proxy (fetchers/browser_proxy.py), which applies
the same address policy as a plain fetch on the address it connects to; Chromium itself
resolves no name (`--host-resolver-rules`) and sends loopback through the proxy too.
Images, fonts and media are not loaded; downloads, service workers and any navigation that
is not http(s) are refused. The rendered DOM is then read exactly as a fetched body is
(`http.read_body`): the claim, lease, fencing and one-row commit around it do not change.

What is read (issue 42): with a price or text selector and no `wait` step, the render first
waits for the selector to match, giving up once the page's network has been idle for
IDLE_GRACE (then the rule fails as on a fetched page). A navigation the page makes itself
(`location.href`, `<meta http-equiv=refresh>`) before it is read is followed, through the
guard, and the landing page is what is read; one the guard refuses fails the check as a
redirect there would.

Errors speak the plain path's words and classes (fetchers/http.py), never Playwright's: a
refused address, a non-http(s) redirect, a download (an unsupported content type) and a step
whose element never appears are permanent; a page that runs out of time (naming the limit),
a crashed page, a browser that dies mid-render (relaunched for the next check) and a 5xx are
transient.
"""

import asyncio
import logging
import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Frame, Playwright, Route, async_playwright
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page as BrowserPage
from playwright.async_api import Response as BrowserResponse
from playwright.async_api import TimeoutError as PlaywrightTimeout

from fetchers.browser_host import LAUNCH_MARK, browser_memory, scratch_dir, short_temp_root
from fetchers.browser_proxy import GuardedProxy, ProxySession
from fetchers.guard import AddressPolicy
from fetchers.http import (
    MAX_BODY_BYTES,
    MAX_REDIRECTS,
    TRANSIENT_STATUSES,
    USER_AGENT,
    FetchError,
    Page,
    Request,
    read_body,
    timed_out,
)
from pricewatch.steps import Action, Step, parse_steps
from pricewatch.urls import as_sent

log = logging.getLogger(__name__)

BLOCKED_RESOURCES = frozenset({"image", "font", "media"})
# A PNG of the 1280x800 viewport is typically 50-400 KiB; a bigger one is not kept.
MAX_SCREENSHOT_BYTES = 2 * 1024 * 1024
RENDERED_TYPE = "text/html; charset=utf-8"  # what a rendered page is read as: its DOM, serialised
# A page with more elements than this after its steps is refused (permanent): no pricing
# page comes near it (a large shop's product page has a few thousand), a runaway script does.
MAX_DOM_ELEMENTS = 50_000
# How long the page's network stays idle (after Playwright's own 500 ms of quiet) before a
# selector that has not matched is given up: a script's timer fills a price well within it.
IDLE_GRACE = 1.0
# What the budget keeps back for reading the page after a wait or a step.
READ_ROOM = 1.0
VIEWPORT = {"width": 1280, "height": 800}
# Launch flags of the guard: no name resolution in the browser (everything goes to the
# proxy, which resolves and checks), loopback not exempt from the proxy, no UDP outside it.
GUARD_ARGS = [
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--proxy-bypass-list=<-loopback>",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-features=DnsOverHttps,NetworkPrediction",
    "--dns-prefetch-disable",
]


class DocumentFailed(FetchError):
    """The page itself did not load (not a step, not a subresource): where the guard refused
    it, the refusal is the error. `said`: the body of a 403 answer, which is the guard's
    refusal line when the proxy gave it (never read as the page's text)."""

    def __init__(self, message: str, *, transient: bool, said: str | None = None) -> None:
        super().__init__(message, transient=transient)
        self.said = said


class _Documents:
    """The main frame's documents: the latest one's response (what is read, after any
    navigation), whether a navigation is under way, and `moved`, set at each commit."""

    def __init__(self, page: BrowserPage) -> None:
        self.frame = page.main_frame
        self.last: BrowserResponse | None = None
        self.leaving = False
        self.moved = asyncio.Event()
        page.on("response", self._response)
        page.on("request", self._request)
        page.on("requestfailed", self._ended)
        page.on("framenavigated", self._committed)

    def _ours(self, request: Any) -> bool:
        return bool(request.is_navigation_request() and request.frame == self.frame)

    def _response(self, response: BrowserResponse) -> None:
        if self._ours(response.request):
            self.last = response

    def _request(self, request: Any) -> None:
        if self._ours(request):
            self.leaving = True

    def _ended(self, request: Any) -> None:
        if self._ours(request):
            self.leaving = False
            self.moved.set()

    def _committed(self, frame: Frame) -> None:
        if frame == self.frame:
            self.leaving = False
            self.moved.set()


@dataclass(eq=False)
class _Launched:
    """One Chromium and the renders in it. A browser due for recycling takes no new render
    and is closed when its last one ends: recycling never cuts a render short."""

    browser: Browser
    profile: str  # its TMPDIR, and in its LAUNCH_MARK: how its processes are found in /proc
    renders: int = 0
    in_flight: int = 0
    retiring: bool = False


class BrowserFetcher:
    """`CheckActivities(fetcher=BrowserFetcher(...))` on the render task queue."""

    def __init__(
        self,
        policy: AddressPolicy,
        executable: Path,
        args: list[str],
        concurrency: int,
        recycle_after: int = 200,
        recycle_mib: int = 1024,
        memory_every: int = 10,
    ) -> None:
        self._policy = policy
        self._executable = executable
        self._args = [*args, *GUARD_ARGS]
        self._slots = asyncio.Semaphore(concurrency)
        self._recycle_after = recycle_after
        self._recycle_bytes = recycle_mib * 1024 * 1024
        # Reading the browser's memory walks /proc (~7.5 ms of CPU, 3% of a render), so it
        # is sampled every `memory_every` renders: a leaking page is still caught within a few.
        self._memory_every = memory_every
        self._playwright: Playwright | None = None
        self._current: _Launched | None = None
        self._proxy: GuardedProxy | None = None
        self._launches = 0
        self._launching = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        # Chromium's own temporary files (a killed browser leaves its singleton socket
        # directory behind) go here, one directory per launch, removed on close; locked
        # while this fetcher lives (`scratch_dir`).
        self._tmp: str | None = None
        self._tmp_lock: int | None = None

    @property
    def _browser(self) -> Browser | None:
        """The browser new renders go to (tests kill its process)."""
        return self._current.browser if self._current is not None else None

    async def __call__(self, request: Request) -> Page:
        assert request.render is not None, "a plain request reached the render worker"
        steps = parse_steps(request.render.steps)
        async with self._slots:
            launched, proxy = await self._acquire()
            browser = launched.browser
            session = proxy.new_session()
            failure: FetchError | None = None
            try:
                page = await self._render(browser, proxy, session, request, steps)
            except FetchError as err:
                failure = err
            except (TimeoutError, PlaywrightTimeout):
                failure = timed_out(request, None)
            except PlaywrightError as err:
                failure = (
                    FetchError("the browser exited mid-render", transient=True)
                    if not browser.is_connected()
                    else browser_error(err)
                )
            finally:
                report = proxy.end_session(session.username)
                await self._release(launched)
            if (
                isinstance(failure, DocumentFailed)
                and report.refused
                and failure.said in (None, *report.refused)
            ):
                raise FetchError(report.refused[0], transient=False) from failure  # the guard
            if failure is not None:
                raise failure
            if report.over_budget:
                raise FetchError("the page loaded more than the byte cap", transient=False)
        return replace(page, refused=report.refused)

    async def _render(
        self,
        browser: Browser,
        proxy: GuardedProxy,
        session: ProxySession,
        request: Request,
        steps: list[Step],
    ) -> Page:
        # Every call to the browser is within the budget, opening the page included: after
        # a renderer crashed, a new context or page could wait forever for its answer.
        ends = asyncio.get_running_loop().time() + request.deadline.total_seconds()
        async with asyncio.timeout_at(ends):
            context = await browser.new_context(
                proxy={"server": proxy.url, "username": session.username,
                       "password": session.password},
                user_agent=request.user_agent or USER_AGENT,
                service_workers="block",
                accept_downloads=False,
                viewport=VIEWPORT,  # type: ignore[arg-type]
            )  # fmt: skip
        try:
            async with asyncio.timeout_at(ends):
                await context.route("**/*", _route)
                page = await context.new_page()
                documents = _Documents(page)
                try:
                    await page.goto(as_sent(request.url), wait_until="load")
                except PlaywrightError as err:
                    if not browser.is_connected():
                        raise  # the browser went, not the page (BrowserFetcher.__call__)
                    raise document_error(err, documents.last) from err
                for number, step in enumerate(steps, 1):
                    await _run_step(page, step, number, ends)
                named = _named(request)
                waited = None
                if named and not any(step.action is Action.WAIT for step in steps):
                    waited = await _wait_for(page, named, ends)
                body = await _settled(page, documents, ends)
                await _check_document(page, documents.last)
                if len(body) > MAX_BODY_BYTES:
                    raise FetchError(
                        f"the rendered page is over {MAX_BODY_BYTES} bytes", transient=False
                    )
                assert documents.last is not None  # _check_document
                hint = f" ({waited})" if waited else ""  # why a rule found nothing
                read = await read_body(
                    documents.last.status, body, RENDERED_TYPE, request.extraction, hint=hint
                )
                if request.keep_body:
                    read = replace(read, body=body, content_type=RENDERED_TYPE)
                if request.screenshot or read.sha256 != request.previous_hash:  # a new state
                    shot = await page.screenshot(type="png")
                    if len(shot) <= MAX_SCREENSHOT_BYTES:
                        read = replace(read, screenshot=shot)
                return replace(read, waited=waited)
        finally:
            await _quietly(context.close())

    async def _acquire(self) -> tuple[_Launched, GuardedProxy]:
        """The browser for the next render, and the proxy: launched on first use, and again
        after the browser died or was retired (every `recycle_after` renders, or once its
        processes hold more than `recycle_mib`: a page that leaks memory)."""
        async with self._launching:
            if self._proxy is None:
                self._proxy = GuardedProxy(self._policy)
                await self._proxy.start()
            current = self._current
            if current is not None and (
                not current.browser.is_connected() or current.renders >= self._recycle_after
            ):
                self._retire(current)
                current = None
            if current is None:
                current = self._current = await self._launch()
            current.renders += 1
            current.in_flight += 1
            return current, self._proxy

    async def _launch(self) -> _Launched:
        if self._playwright is None:
            self._playwright = await async_playwright().start()
            self._tmp, self._tmp_lock = scratch_dir(short_temp_root())
        assert self._tmp is not None
        self._launches += 1
        profile = os.path.join(self._tmp, str(self._launches))
        os.makedirs(profile)
        try:
            browser = await self._playwright.chromium.launch(
                executable_path=self._executable,
                args=[*self._args, f"{LAUNCH_MARK}{profile}", f"--crash-dumps-dir={profile}"],
                proxy={"server": "http://per-context"},  # every context sets its own
                env={**os.environ, "TMPDIR": profile},
            )
        except PlaywrightError as err:  # this worker's browser, not the page: another may
            shutil.rmtree(profile, ignore_errors=True)
            raise FetchError(
                f"the browser did not start: {_first_line(err)}", transient=True
            ) from err
        return _Launched(browser, profile)

    async def _release(self, launched: _Launched) -> None:
        """A render ended: close its browser if it was retired and this was its last one;
        retire the current browser if its processes have grown past the memory cap."""
        launched.in_flight -= 1
        if (
            launched is self._current
            and not launched.retiring
            and launched.renders % self._memory_every == 0
        ):
            held = await asyncio.to_thread(browser_memory, launched.profile)
            if held > self._recycle_bytes:
                log.info(
                    "recycling the browser: it holds %d MiB (cap %d MiB) after %d renders",
                    held // 2**20, self._recycle_bytes // 2**20, launched.renders,
                )  # fmt: skip
                self._retire(launched)
        if launched.retiring and launched.in_flight == 0:
            self._close_later(launched)

    def _retire(self, launched: _Launched) -> None:
        launched.retiring = True
        if self._current is launched:
            self._current = None
        if launched.in_flight == 0:
            self._close_later(launched)

    def _close_later(self, launched: _Launched) -> None:
        """Close a retired browser without holding up the render that ended."""
        launched.in_flight = -1  # closed once, whoever asks again
        task = asyncio.create_task(self._close(launched))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close(self, launched: _Launched) -> None:
        await _quietly(launched.browser.close())
        shutil.rmtree(launched.profile, ignore_errors=True)

    async def close(self) -> None:
        if self._current is not None:
            self._retire(self._current)
        if self._closing:
            await asyncio.gather(*self._closing)
        if self._playwright is not None:
            await _quietly(self._playwright.stop())
        if self._proxy is not None:
            await self._proxy.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
        if self._tmp_lock is not None:
            os.close(self._tmp_lock)
        self._playwright = self._proxy = self._tmp = self._tmp_lock = None


async def _route(route: Route) -> None:
    """Images, fonts and media are not loaded; only http(s) is."""
    request = route.request
    if request.resource_type in BLOCKED_RESOURCES or not request.url.startswith(
        ("http://", "https://")
    ):
        await route.abort("blockedbyclient")
    else:
        await route.continue_()


async def _run_step(page: BrowserPage, step: Step, number: int, ends: float) -> None:
    """One step. An element that never appears before the budget `ends` (less READ_ROOM) is
    permanent: the page does not have it (unless the page stopped answering: out of time)."""
    wait_ms = max(0.0, ends - asyncio.get_running_loop().time() - READ_ROOM) * 1000
    try:
        if step.action is Action.WAIT and step.pause is not None:
            await page.wait_for_timeout(step.pause.total_seconds() * 1000)
        elif step.action is Action.SCROLL:
            await page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        elif step.action is Action.PRESS:
            assert step.key is not None
            await page.keyboard.press(step.key)
        else:
            assert step.selector is not None
            root = page.frame_locator(step.frame) if step.frame else page
            element = root.locator(step.selector).first
            await element.wait_for(state="attached" if step.action is Action.WAIT else "visible",
                                   timeout=wait_ms)  # fmt: skip
            if step.action is Action.CLICK:
                await element.click(timeout=wait_ms)
            elif step.action is Action.SELECT:
                await element.select_option(step.value, timeout=wait_ms)
            elif step.action is Action.FILL:
                await element.fill(step.value or "", timeout=wait_ms)
    except PlaywrightTimeout as err:
        try:  # a page too busy to answer is out of time, not missing the element
            async with asyncio.timeout(READ_ROOM / 2):
                await page.evaluate("0")
        except (TimeoutError, PlaywrightError):
            raise TimeoutError from err  # the check's budget: BrowserFetcher.__call__
        raise FetchError(f"step {number} ({step}): not on the page", transient=False) from err
    except PlaywrightError as err:
        if page.is_closed() or "has been closed" in str(err):
            raise  # the browser went, not the step: transient (BrowserFetcher.__call__)
        raise FetchError(f"step {number} ({step}): {_said(err)}", transient=False) from err


def _named(request: Request) -> str | None:
    """The selector the target reads: the one a render waits for."""
    rules = request.extraction
    if rules.price_mode is not None and rules.price_mode.selector:
        return rules.price_mode.selector
    return rules.selector


async def _wait_for(page: BrowserPage, selector: str, ends: float) -> str | None:
    """Wait until `selector` matches, or the page's network has been idle for IDLE_GRACE
    and it still does not (or the budget `ends`): what was waited for and how long. None
    when Chromium cannot use the selector (the reader may: it reads as it is)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    limit = max(0.0, ends - started - READ_ROOM) * 1000

    async def quiet() -> None:
        await page.wait_for_load_state("networkidle", timeout=limit)
        await asyncio.sleep(IDLE_GRACE)

    found = asyncio.ensure_future(page.wait_for_selector(selector, state="attached", timeout=limit))
    idle = asyncio.ensure_future(quiet())
    try:
        await asyncio.wait({found, idle}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (found, idle):
            task.cancel()
        await asyncio.gather(found, idle, return_exceptions=True)
    took = f"waited {(loop.time() - started) * 1000:.0f} ms for {selector!r}"
    if found.cancelled() or isinstance(found.exception(), PlaywrightTimeout):
        return f"{took}: not there once the page's network was idle"
    if found.exception() is not None:
        return None
    return took


# When the page's <meta http-equiv=refresh> to another address will navigate: seconds, or
# null (none, or one that reloads the page itself: a ticker's, never followed).
REFRESH_DUE = """() => {
  const meta = document.querySelector('meta[http-equiv="refresh" i]');
  const parts = meta && /^\\s*(\\d+(?:\\.\\d*)?)\\s*[;,]\\s*(?:url\\s*=\\s*)?['"]?([^'"]+)/i
    .exec(meta.content || "");
  if (!parts) return null;
  try {
    return new URL(parts[2].trim(), location.href).href === location.href ? null
      : parseFloat(parts[1]);
  } catch (e) { return null; }
}"""


async def _settled(page: BrowserPage, documents: _Documents, ends: float) -> bytes:
    """The DOM once the page has stopped moving: a navigation it starts before it is read
    (a script's, a refresh's that is due within the budget) is followed, and the landing
    page read; more than MAX_REDIRECTS of them is refused as a fetch's redirects are."""
    moves = 0
    while True:
        documents.moved.clear()
        try:
            await page.wait_for_load_state("load")
            due = await page.evaluate(REFRESH_DUE)
            left = ends - asyncio.get_running_loop().time() - READ_ROOM
            if not documents.leaving and (due is None or due > left):
                elements = await page.evaluate("document.getElementsByTagName('*').length")
                body = await page.content()
                if not documents.leaving and not documents.moved.is_set():
                    break
            await documents.moved.wait()
        except PlaywrightError as err:
            if not page.is_closed() and "navigat" in str(err):
                continue  # the context went with a navigation: read where it landed
            raise
        moves += 1
        if moves > MAX_REDIRECTS:
            raise FetchError(f"more than {MAX_REDIRECTS} redirects", transient=False)
    if elements > MAX_DOM_ELEMENTS:
        raise FetchError(
            f"the rendered page has {elements} elements, over the cap of {MAX_DOM_ELEMENTS}",
            transient=False,
        )
    return body.encode()


async def _check_document(page: BrowserPage, response: BrowserResponse | None) -> None:
    """The document read must have loaded: an error status fails the check as a fetch's
    would, and a navigation that failed (Chromium's error page) as its connection would."""
    if page.main_frame.url.startswith("chrome-error:") or response is None:
        raise DocumentFailed("connection failed: the page did not load", transient=True)
    if response.status >= 400:
        said = (await response.text()).strip() if response.status == 403 else None
        raise DocumentFailed(
            f"HTTP {response.status} {response.status_text}".strip(),
            transient=response.status in TRANSIENT_STATUSES,
            said=said,
        )


# Chromium's net errors that a fetch would meet as a refused redirect or certificate.
UNSUPPORTED_SCHEME = {"ERR_UNSAFE_REDIRECT", "ERR_DISALLOWED_URL_SCHEME", "ERR_UNKNOWN_URL_SCHEME"}
NET_ERROR = re.compile(r"net::(ERR_\w+)")
NO_CONTENT = {204, 205}  # a navigation answered No Content / Reset Content


def document_error(err: PlaywrightError, response: BrowserResponse | None) -> FetchError:
    """The page did not load (`goto` failed), in a fetch's words and classes."""
    said = _said(err)
    if response is not None and response.status in NO_CONTENT:
        # Chromium keeps the page it had (none) and reports only an aborted navigation.
        return DocumentFailed(
            f"HTTP {response.status} {response.status_text}: the page sent nothing to read",
            transient=False,
        )
    if "Download is starting" in said:
        kind = response.headers.get("content-type", "unknown") if response else "unknown"
        return DocumentFailed(f"unsupported content type {kind} (a download)", transient=False)
    failed = browser_error(err)
    return DocumentFailed(str(failed), transient=failed.transient)


def browser_error(err: PlaywrightError) -> FetchError:
    """A browser error in a fetch's words and classes: never Playwright's method names."""
    said = _said(err)
    net = NET_ERROR.search(said)
    if net and net[1] in UNSUPPORTED_SCHEME:
        return FetchError(
            f"invalid or unsupported URL: a redirect to a scheme other than http(s) ({net[1]})",
            transient=False,
        )
    if net and net[1].startswith("ERR_CERT_"):
        return FetchError(f"TLS certificate failure: {net[1]}", transient=False)
    if net and net[1] == "ERR_TOO_MANY_REDIRECTS":
        return FetchError("too many redirects", transient=False)
    if net:
        return FetchError(f"connection failed: {net[1]}", transient=True)
    if "crash" in said.lower():
        return FetchError("the page crashed in the browser (out of memory?)", transient=True)
    return FetchError(f"rendering failed: {said}", transient=True)


def _said(err: BaseException) -> str:
    """An error's first line without Playwright's `Page.goto: ` (its method name)."""
    return re.sub(r"^\w+\.\w+: ", "", _first_line(err))


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


# Closing a context or a browser that died can wait on a process that is gone: never longer.
CLOSE_WAIT = 10.0


async def _quietly(closing: Any) -> None:
    try:
        async with asyncio.timeout(CLOSE_WAIT):
            await closing
    except Exception:  # a browser already gone, or stuck going
        log.debug("closing the browser failed", exc_info=True)
