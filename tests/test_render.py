"""Rendered checks (issue 30) with the real Chromium, real Postgres and real local pages: prices
a script writes after load, a toggle clicked and a cookie banner dismissed by steps, a step
whose element never comes (permanent, named), the guard on what the page itself requests, and
a browser killed mid-check (transient, relaunched, one row per slot)."""

import asyncio
import dataclasses
import glob
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from aiohttp import web
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Replayer

from activities import store
from activities.checks import CheckActivities
from client.temporal import DATA_CONVERTER, workflow_id
from fetchers.browser import BrowserFetcher
from fetchers.browser_host import browser_memory
from fetchers.http import FetchError, request_of
from pricewatch.models import CheckInput, CheckResult, PriceSettings, RenderSettings, TargetConfig
from tests.chaos import procs
from tests.chaos.procs import alive
from tests.chaos.stack import serve
from tests.conftest import LOOPBACK, WebhookReceiver
from tests.helpers import PRICEWATCH, SLOT, cli, worker_process
from tests.waits import eventually, wait_for
from workers.chromium import chromium_args, find_chromium
from workflows.monitor import MonitorTarget

SCRIPTED = """<html><body><div id="plans">loading...</div>
<button id="yearly" onclick="show('yearly')">yearly</button>
<div id="cookies" style="position:fixed;inset:0;background:#fff">
  <button id="accept" onclick="this.parentNode.remove()">accept</button></div>
<script>
const prices = {monthly: ["Basic $5", "Pro $12"], yearly: ["Basic $50", "Pro $120"]};
function show(period) {
  document.getElementById("plans").innerHTML =
    prices[period].map(p => `<p class="plan">${p}</p>`).join("");
}
setTimeout(() => show("monthly"), 100);
</script></body></html>"""


class LivePlans:
    """A script-rendered plan whose price the test moves."""

    def __init__(self) -> None:
        self.pro, self.url = "12", ""

    async def handle(self, request: web.Request) -> web.Response:
        shown = f"<p class=plan>Pro ${self.pro}</p>"
        script = f"setTimeout(() => {{ document.body.innerHTML = '{shown}'; }}, 100);"
        return web.Response(text=f"<html><body><script>{script}</script></body></html>",
                            content_type="text/html")  # fmt: skip


@pytest.fixture
async def live() -> AsyncIterator[LivePlans]:
    plans = LivePlans()
    async with serve([web.get("/live", plans.handle)]) as url:
        plans.url = f"{url}/live"
        yield plans


class Victim:
    """A private server (127.0.0.2) the rendered page tries to reach: it must see nothing."""

    def __init__(self) -> None:
        self.hits = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.Response(text="secret")


@pytest.fixture
async def victim() -> AsyncIterator[tuple[Victim, int]]:
    victim = Victim()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", victim.handle)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.2", 0).start()
    try:
        yield victim, runner.addresses[0][1]
    finally:
        await runner.cleanup()


@pytest.fixture
async def pages(victim: tuple[Victim, int]) -> AsyncIterator[str]:
    """The scripted plans page, a page whose scripts, images and frames reach for the private
    server, a redirect to it, and a page that hangs."""
    port = victim[1]

    async def scripted(request: web.Request) -> web.Response:
        return web.Response(text=SCRIPTED, content_type="text/html")

    async def reaching(request: web.Request) -> web.Response:
        private = f"http://127.0.0.2:{port}"
        return web.Response(
            text=f"""<html><body><p class="plan">Pro $12</p>
<img src="{private}/pixel.png"><iframe src="{private}/frame"></iframe>
<link rel="prefetch" href="{private}/prefetch">
<script>fetch("{private}/xhr").catch(() => {{}});
new WebSocket("ws://127.0.0.2:{port}/ws");
navigator.sendBeacon && navigator.sendBeacon("{private}/beacon", "x");</script>
<script src="http://169.254.169.254/latest/meta-data/"></script></body></html>""",
            content_type="text/html",
        )

    async def to_private(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://127.0.0.2:{port}/page")

    async def hangs(request: web.Request) -> web.Response:
        await asyncio.sleep(60)
        return web.Response(text="late")

    async def huge(request: web.Request) -> web.Response:
        script = (
            "for (let i = 0; i < 60000; i++) document.body.append(document.createElement('i'));"
        )
        return web.Response(text=f"<html><body><p class=plan>Pro $12</p><script>{script}</script>"
                            "</body></html>", content_type="text/html")  # fmt: skip

    app = web.Application()
    app.add_routes([web.get("/plans", scripted), web.get("/reaching", reaching),
                    web.get("/to-private", to_private), web.get("/hangs", hangs),
                    web.get("/huge", huge)])  # fmt: skip
    runner = web.AppRunner(app, shutdown_timeout=1.0, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def fetcher() -> AsyncIterator[BrowserFetcher]:
    browser = BrowserFetcher(LOOPBACK, find_chromium(), chromium_args(), concurrency=2)
    try:
        yield browser
    finally:
        await browser.close()


class RenderedChecker:
    """The real check activity, slot after slot, with the browser as its fetcher."""

    def __init__(
        self, pool: asyncpg.Pool, http: httpx.AsyncClient, fetcher: BrowserFetcher,
        config: TargetConfig,
    ) -> None:  # fmt: skip
        self.activities = CheckActivities(pool, http, snapshots_kept=2, fetcher=fetcher)
        self.config, self.slot = config, SLOT

    async def check(self) -> CheckResult:
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, current_attempt_scheduled_time=self.slot)
        result: CheckResult = await env.run(
            self.activities.check_slot, CheckInput.of(self.config, self.slot)
        )
        assert result.next_slot is not None
        self.slot = result.next_slot
        return result


async def rendered(
    pool: asyncpg.Pool, http: httpx.AsyncClient, fetcher: BrowserFetcher, url: str,
    steps: list[str],
) -> RenderedChecker:  # fmt: skip
    config = TargetConfig(
        target_id="rendered", url=url, interval_seconds=3600,
        price_mode=PriceSettings(selector="p.plan"), render=RenderSettings(steps=steps),
    )  # fmt: skip
    await store.sync_target(pool, config, next_slot=SLOT, enabled=True)
    return RenderedChecker(pool, http, fetcher, config)


async def prices_of(pool: asyncpg.Pool) -> list[str]:
    """The amounts the newest row recorded."""
    listed = await pool.fetchval(
        "SELECT prices FROM source_checks WHERE status <> 'skipped' ORDER BY checked_at DESC "
        "LIMIT 1"
    )
    return [price["amount"] for price in json.loads(listed)]


async def test_prices_a_script_writes_after_load_are_read(
    pool: asyncpg.Pool, http: httpx.AsyncClient, fetcher: BrowserFetcher, pages: str
) -> None:
    checks = await rendered(pool, http, fetcher, f"{pages}/plans", ["wait p.plan"])
    assert (await checks.check()).status == "unchanged"
    assert await prices_of(pool) == ["5", "12"], "what the script wrote, not 'loading...'"


async def test_steps_dismiss_a_banner_and_click_a_toggle(
    pool: asyncpg.Pool, http: httpx.AsyncClient, fetcher: BrowserFetcher, pages: str
) -> None:
    steps = ["wait p.plan", "click #accept", "click #yearly", "wait 100ms"]
    checks = await rendered(pool, http, fetcher, f"{pages}/plans", steps)
    await checks.check()
    assert await prices_of(pool) == ["50", "120"], "the yearly plans, behind the banner"


PNG = b"\x89PNG\r\n\x1a\n"


async def test_a_new_state_keeps_a_screenshot_pruned_with_its_snapshot(
    pool: asyncpg.Pool, http: httpx.AsyncClient, fetcher: BrowserFetcher, pages: str
) -> None:
    checks = await rendered(pool, http, fetcher, f"{pages}/plans", ["wait p.plan"])
    baseline = await checks.check()
    unchanged = await checks.check()
    checks.config = checks.config.model_copy(  # the same page, the yearly plans: a change
        update={"render": RenderSettings(steps=["wait p.plan", "click #accept", "click #yearly"])}
    )
    await store.sync_target(pool, checks.config, next_slot=checks.slot, enabled=True)
    rebased = await checks.check()  # new render settings: a new baseline
    shots = {
        r["work_id"]: r["screenshot"]
        for r in await pool.fetch("SELECT work_id, screenshot FROM source_checks")
    }
    assert shots[unchanged.work_id] is None, "an unchanged page keeps no screenshot"
    assert bytes(shots[rebased.work_id]).startswith(PNG)
    found, shot = await store.screenshot(pool, rebased.work_id)
    assert found and shot is not None and bytes(shot).startswith(PNG)
    checks.config = checks.config.model_copy(
        update={"render": RenderSettings(steps=["wait p.plan"])}
    )
    await store.sync_target(pool, checks.config, next_slot=checks.slot, enabled=True)
    await checks.check()  # a third new state; snapshots_kept=2: the oldest loses its snapshot ...
    held = await pool.fetchrow(
        "SELECT snapshot, screenshot FROM source_checks WHERE work_id = $1", baseline.work_id
    )
    assert held is not None
    assert held["snapshot"] is None and held["screenshot"] is None, "... and its screenshot"


async def test_try_render_writes_the_screenshot(pages: str, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    env = {**os.environ, "PRICEWATCH_DATA_DIR": str(tmp_path),
           "PRICEWATCH_ALLOW_NETWORKS": "127.0.0.1/32"}  # fmt: skip
    code, out, err = await cli(
        env, "try", f"{pages}/plans", "--render", "--step", "wait p.plan",
        "--price-selector", "p.plan", "--screenshot", str(shot),
    )  # fmt: skip
    assert code == 0, err
    assert "price 2  12 $" in out and f"screenshot: {shot}" in out
    assert shot.read_bytes().startswith(PNG)
    code, _, err = await cli(env, "try", f"{pages}/plans", "--screenshot", str(shot))
    assert code == 2 and "--screenshot needs --render" in err


async def test_a_step_whose_element_never_comes_is_permanent_and_named(
    fetcher: BrowserFetcher, pages: str
) -> None:
    checks_request = CheckInput.of(
        TargetConfig(
            target_id="x", url=f"{pages}/plans", interval_seconds=60,
            price_mode=PriceSettings(selector="p.plan"),
            render=RenderSettings(steps=["wait p.plan", "click #monthly-toggle"]),
        ),
        SLOT,
    )  # fmt: skip
    with pytest.raises(
        FetchError, match=r"step 2 \(click #monthly-toggle\): not on the page"
    ) as err:
        await fetcher(request_of(checks_request))
    assert err.value.transient is False


async def test_the_guard_covers_every_request_the_page_makes(
    fetcher: BrowserFetcher, pages: str, victim: tuple[Victim, int]
) -> None:
    def request(path: str) -> CheckInput:
        return CheckInput.of(
            TargetConfig(
                target_id="x", url=f"{pages}{path}", interval_seconds=60,
                price_mode=PriceSettings(selector="p.plan"), render=RenderSettings(),
            ),
            SLOT,
        )  # fmt: skip

    page = await fetcher(request_of(request("/reaching")))
    assert [p.amount for p in page.prices or []] == [12], "the page itself is read"
    assert page.refused, "the private requests were refused"
    assert any("127.0.0.2" in line for line in page.refused)
    with pytest.raises(FetchError, match=r"127\.0\.0\.2") as err:
        await fetcher(request_of(request("/to-private")))  # a redirect to a private address
    assert err.value.transient is False
    await asyncio.sleep(0.5)  # anything late would have arrived by now
    assert victim[0].hits == 0, "nothing reached the private server"


async def test_a_page_that_hangs_hits_its_budget(fetcher: BrowserFetcher, pages: str) -> None:
    hanging = CheckInput.of(
        TargetConfig(
            target_id="x", url=f"{pages}/hangs", interval_seconds=60, timeout_seconds=5,
            render=RenderSettings(),
        ),
        SLOT,
    )  # fmt: skip
    with pytest.raises(FetchError, match=r"^timed out: the page was not complete within 5s") as err:
        await fetcher(request_of(hanging))
    assert err.value.transient is True


def plain_render(url: str, steps: list[str] | None = None) -> CheckInput:
    return CheckInput.of(
        TargetConfig(
            target_id="x", url=url, interval_seconds=60,
            price_mode=PriceSettings(selector="p.plan"), render=RenderSettings(steps=steps or []),
        ),
        SLOT,
    )  # fmt: skip


async def test_a_selector_that_matches_nothing_on_the_rendered_page_is_permanent(
    fetcher: BrowserFetcher, pages: str
) -> None:
    """As on a fetched page: one line, not retried (it was an unclassified error, retried
    with a traceback in the console)."""
    request = plain_render(f"{pages}/plans", ["wait p.plan"])
    request = request.model_copy(update={"price_mode": PriceSettings(selector=".no-such-plan")})
    with pytest.raises(FetchError, match=r"extraction rule failed: .*\.no-such-plan") as err:
        await fetcher(request_of(request))
    assert err.value.transient is False


async def test_a_long_temporary_directory_does_not_stop_the_browser(
    pages: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chromium's singleton socket lives in its TMPDIR and must fit in 107 bytes: under a
    long TMPDIR (macOS's /var/folders/...) it would abort at launch, every render failing."""
    deep = tmp_path / ("x" * 60)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    fetcher = BrowserFetcher(LOOPBACK, find_chromium(), chromium_args(), 1)
    try:
        page = await fetcher(request_of(plain_render(f"{pages}/plans", ["wait p.plan"])))
        assert [p.amount for p in page.prices or []] == [5, 12]
    finally:
        await fetcher.close()


async def test_a_browser_that_cannot_start_is_a_transient_error_naming_it(
    pages: str, tmp_path: Path
) -> None:
    broken = tmp_path / "chromium"
    broken.write_text("#!/bin/sh\necho 'cannot start' >&2\nexit 1\n")
    broken.chmod(0o755)
    fetcher = BrowserFetcher(LOOPBACK, broken, chromium_args(), 1)
    try:
        with pytest.raises(FetchError, match=r"the browser did not start") as err:
            await fetcher(request_of(plain_render(f"{pages}/plans")))
        assert err.value.transient is True
    finally:
        await fetcher.close()


async def test_a_page_that_builds_a_runaway_dom_is_refused(
    fetcher: BrowserFetcher, pages: str
) -> None:
    with pytest.raises(FetchError, match=r"has 60\d{3} elements, over the cap of 50000") as err:
        await fetcher(request_of(plain_render(f"{pages}/huge")))
    assert err.value.transient is False


async def test_recycling_lets_the_renders_in_the_old_browser_finish(pages: str) -> None:
    """Due for recycling while another render is in it: the old browser takes no new render,
    finishes the one it has, and is closed after it; nothing fails."""
    fetcher = BrowserFetcher(LOOPBACK, find_chromium(), chromium_args(), 2, recycle_after=1)
    try:
        slow = asyncio.create_task(
            fetcher(request_of(plain_render(f"{pages}/plans", ["wait p.plan", "wait 2s"])))
        )
        await eventually(lambda: asyncio.to_thread(pages_open, fetcher), what="a page open")
        first = chromium_under(os.getpid())
        quick = await fetcher(request_of(plain_render(f"{pages}/plans", ["wait p.plan"])))
        assert [p.amount for p in (await slow).prices or []] == [5, 12]
        assert [p.amount for p in quick.prices or []] == [5, 12]
        assert fetcher._launches == 2, "the second render went to a new browser"
        await eventually(
            lambda: asyncio.to_thread(lambda: not any(map(alive, first))),
            what="the retired browser closing once its render ended",
        )
    finally:
        await fetcher.close()


async def test_a_browser_that_outgrows_its_memory_cap_is_replaced(pages: str) -> None:
    """What a browser holds is measured every `memory_every` renders (its processes' PSS:
    a page's own memory goes with its context, what stays is what leaks; a reading costs
    ~7.5 ms of CPU, so not after every render); over the cap, the next render gets a new
    browser."""
    fetcher = BrowserFetcher(
        LOOPBACK, find_chromium(), chromium_args(), 1, recycle_mib=2048, memory_every=3
    )
    try:
        await fetcher(request_of(plain_render(f"{pages}/plans", ["wait p.plan"])))
        current = fetcher._current
        assert current is not None
        held = await asyncio.to_thread(browser_memory, current.profile)
        assert 32 * 2**20 < held < 2048 * 2**20, f"{held // 2**20} MiB"
        fetcher._recycle_bytes = held // 2  # as if it had grown to twice its cap
        await fetcher(request_of(plain_render(f"{pages}/plans", ["wait p.plan"])))
        assert fetcher._current is current, "the second render is not measured"
        await fetcher(request_of(plain_render(f"{pages}/plans", ["wait p.plan"])))
        assert fetcher._current is None, "retired after the third render, which was measured"
        processes = chromium_under(os.getpid())
        await fetcher(request_of(plain_render(f"{pages}/plans", ["wait p.plan"])))
        assert fetcher._launches == 2
        await eventually(
            lambda: asyncio.to_thread(lambda: not any(map(alive, processes))),
            what="the old browser's processes exiting",
        )
    finally:
        await fetcher.close()


async def test_a_browser_killed_mid_check_is_transient_and_relaunched(
    pool: asyncpg.Pool, http: httpx.AsyncClient, fetcher: BrowserFetcher, pages: str
) -> None:
    checks = await rendered(pool, http, fetcher, f"{pages}/plans", ["wait 3s"])
    first = asyncio.create_task(checks.check())
    while not pages_open(fetcher):  # the browser launched and the page is waiting
        assert not first.done(), first
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    os.kill(browser_pid(), signal.SIGKILL)
    with pytest.raises(Exception, match=r"browser exited mid-render"):
        await first
    checks.config = checks.config.model_copy(
        update={"render": RenderSettings(steps=["wait p.plan"])}
    )
    again = await checks.check()  # the same slot, a relaunched browser
    assert again.status == "unchanged"
    rows = await pool.fetch("SELECT status FROM source_checks WHERE status <> 'skipped'")
    assert [r["status"] for r in rows] == ["unchanged"], "one row for the slot"
    scratch = fetcher._tmp  # what the killed browser left in its TMPDIR goes with the fetcher
    assert scratch is not None and os.path.isdir(scratch)  # noqa: ASYNC240 (a stat, in a test)
    await fetcher.close()
    assert not os.path.isdir(scratch)  # noqa: ASYNC240


# A process whose fetcher has launched its browser, then waits to be killed.
LAUNCHES_AND_WAITS = """
import asyncio, sys
from fetchers.browser import BrowserFetcher
from tests.conftest import LOOPBACK
from workers.chromium import chromium_args, find_chromium

async def main() -> None:
    fetcher = BrowserFetcher(LOOPBACK, find_chromium(), chromium_args(), 1)
    await fetcher._launch()
    print("launched", flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


async def test_a_killed_workers_browser_directory_goes_with_the_next_fetcher(
    pages: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL (a supervisor's, the kernel's) leaves no chance to close: the next fetcher to
    start removes the dead one's directory, and leaves a live one's alone."""
    root = tempfile.mkdtemp(prefix="pwt-", dir="/tmp")  # short: Chromium's socket is below
    monkeypatch.setattr(tempfile, "tempdir", root)
    live = BrowserFetcher(LOOPBACK, find_chromium(), chromium_args(), 1)
    after = BrowserFetcher(LOOPBACK, find_chromium(), chromium_args(), 1)
    try:
        await live(request_of(plain_render(f"{pages}/plans", ["wait p.plan"])))
        doomed = await asyncio.create_subprocess_exec(
            sys.executable, "-c", LAUNCHES_AND_WAITS, stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "TMPDIR": root}, start_new_session=True,
        )  # fmt: skip
        assert doomed.stdout is not None
        assert await asyncio.wait_for(doomed.stdout.readline(), 60) == b"launched\n"
        os.killpg(doomed.pid, signal.SIGKILL)  # the worker and its Chromium
        await doomed.wait()
        assert len(glob.glob(f"{root}/pwc-*")) == 2
        await after(request_of(plain_render(f"{pages}/plans", ["wait p.plan"])))
        assert set(glob.glob(f"{root}/pwc-*")) == {live._tmp, after._tmp}, (
            "the dead one's directory is gone, the live ones stay"
        )
    finally:
        await live.close()
        await after.close()
        shutil.rmtree(root, ignore_errors=True)


def pages_open(fetcher: BrowserFetcher) -> bool:
    browser = fetcher._browser  # the test kills the process it runs
    return browser is not None and any(context.pages for context in browser.contexts)


def browser_pid() -> int:
    """The Chromium this test process launched (its browser process: no --type= flag)."""
    [pid] = procs.browsers_under(os.getpid())
    return pid


def chromium_under(ancestor: int) -> list[int]:
    """Every Chromium process below `ancestor` (browser, renderers, helpers)."""
    return [p.pid for p in procs.descendants({ancestor}) if p.chromium and p.pid != ancestor]


async def test_a_rendered_target_is_checked_by_a_render_worker_on_its_own_queue(
    temporal_address: str, env: dict[str, str], pool: asyncpg.Pool, pages: str
) -> None:
    """Through real processes: a plain worker and a render worker (`PRICEWATCH_RENDER`);
    `add --render` with a step; the check runs on `<queue>-render`, never as a local
    activity, and records what the script wrote; the history replays."""
    rendering = {**env, "PRICEWATCH_RENDER": "true"}
    async with worker_process(env), worker_process(rendering):
        code, _, err = await cli(
            env, "add", "e2e-rendered", f"{pages}/plans", "--every", "5s", "--render",
            "--step", "wait p.plan", "--price-selector", "p.plan",
        )  # fmt: skip
        assert code == 0, err
        await wait_for(
            pool, "SELECT count(*) FROM source_checks WHERE target_id = 'e2e-rendered' "
            "AND status = 'unchanged'",
        )  # fmt: skip
        assert await prices_of(pool) == ["5", "12"]
        baseline = await pool.fetchval(
            "SELECT work_id FROM source_checks WHERE target_id = 'e2e-rendered' "
            "AND screenshot IS NOT NULL"
        )
        shown = await asyncio.create_subprocess_exec(
            PRICEWATCH, "screenshot", baseline, env=env, stdout=asyncio.subprocess.PIPE
        )
        png, _ = await shown.communicate()
        assert shown.returncode == 0 and png.startswith(PNG), "pricewatch screenshot ID > f.png"
        temporal = await Client.connect(temporal_address, data_converter=DATA_CONVERTER)
        history = await temporal.get_workflow_handle(workflow_id("e2e-rendered")).fetch_history()
        # Every run's events: the workflow may have continued as new since its checks ran.
        runs = temporal.list_workflows(f"WorkflowId = '{workflow_id('e2e-rendered')}'")
        events = [*history.events] + [
            event
            async for run in runs
            for event in (
                await temporal.get_workflow_handle(run.id, run_id=run.run_id).fetch_history()
            ).events
        ]
        assert (await cli(env, "remove", "e2e-rendered"))[0] == 0
    queues = [
        e.activity_task_scheduled_event_attributes.task_queue.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "check_slot"
    ]
    assert queues and all(q == f"{env['PRICEWATCH_TASK_QUEUE']}-render" for q in queues)
    markers = [e for e in events if e.HasField("marker_recorded_event_attributes")]
    local = [
        m for m in markers if m.marker_recorded_event_attributes.marker_name == "LocalActivity"
    ]
    assert not local, "a rendered check never runs as a local activity"
    await Replayer(workflows=[MonitorTarget], data_converter=DATA_CONVERTER).replay_workflow(
        history
    )


async def test_a_rendered_price_move_reaches_a_webhook_signed_and_once(
    env: dict[str, str], pool: asyncpg.Pool, live: LivePlans, webhook_receiver: WebhookReceiver
) -> None:
    """The price-mode flow on a rendered page end to end: the move a script shows is told
    once, as a signed `price.changed` (the receiver verifies Standard Webhooks signatures)."""
    rendering = {**env, "PRICEWATCH_RENDER": "true"}
    async with worker_process(env), worker_process(rendering):
        code, _, err = await cli(
            env, "add", "e2e-live", live.url, "--every", "3s", "--render", "--step",
            "wait p.plan", "--price-selector", "p.plan", "--webhook", webhook_receiver.url,
        )  # fmt: skip
        assert code == 0, err
        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE status = 'unchanged'")
        live.pro = "14"
        await wait_for(pool, "SELECT count(*) FROM deliveries WHERE status = 'sent'")
        await wait_for(pool, "SELECT count(*) - 2 FROM source_checks WHERE status = 'unchanged'")
        assert (await cli(env, "remove", "e2e-live"))[0] == 0
    [(_, told)] = webhook_receiver.received
    assert told["type"] == "price.changed"
    moves = told["prices"]
    assert isinstance(moves, list)
    assert [(m["old"], m["new"]) for m in moves] == [("12", "14")]


@pytest.mark.long
async def test_a_render_worker_killed_mid_render_costs_no_slot(
    env: dict[str, str], pool: asyncpg.Pool, pages: str
) -> None:
    """SIGKILL of a render worker while its page waits on a step: its Chromium goes with it,
    and another render worker records the slot (one row) once the dead attempt's heartbeat
    has timed out and its lease has run out (about 50 s here: 20 s, then the lease's 45 s)."""
    rendering = {**env, "PRICEWATCH_RENDER": "true"}
    async with worker_process(env):
        async with worker_process(rendering) as doomed:
            code, _, err = await cli(
                env, "add", "e2e-killed", f"{pages}/plans", "--every", "24h", "--start-at",
                "2020-01-01T00:00:00Z", "--render", "--step", "wait 8s", "--price-selector",
                "p.plan",
            )  # fmt: skip
            assert code == 0, err
            await wait_for(pool, "SELECT count(*) FROM monitor_targets WHERE lease_token <> ''")
            browsers = await eventually(
                lambda: asyncio.to_thread(chromium_under, doomed.pid), what="a Chromium"
            )
            doomed.kill()
            await doomed.wait()
        await eventually(
            lambda: asyncio.to_thread(lambda: not any(map(alive, browsers))),
            what="the killed worker's Chromium exiting",
        )
        async with worker_process(rendering):
            await eventually(
                lambda: pool.fetchval(
                    "SELECT count(*) FROM source_checks WHERE target_id = 'e2e-killed' "
                    "AND status = 'unchanged'"
                ),
                within=150, what="the slot's row",
            )  # fmt: skip
            rows = await pool.fetch(
                "SELECT count(*) AS n FROM source_checks WHERE status <> 'skipped' "
                "GROUP BY scheduled_for"
            )
            assert [r["n"] for r in rows] == [1], "one row for the slot"
            assert (await cli(env, "remove", "e2e-killed"))[0] == 0
