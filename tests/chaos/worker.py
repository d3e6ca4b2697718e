"""`pricewatch worker` with fault hooks: only the chaos run starts workers this way.

The run arms a window by creating `armed/<window>.<n>` in the chaos folder. The first
check (in any worker) that reaches an armed window takes it with an atomic rename, appends
one line to `hits.jsonl`, then kills its own process (SIGKILL), or freezes it (SIGSTOP) for
a zombie that the run thaws later. A hit is written only when the window really was
reached, so the report counts windows hit, not faults merely attempted.

A render worker (`PRICEWATCH_RENDER=true`) has the render windows only, and takes them only
in a check's first attempt (a retry is not hit again: one slot stalls for one fault, and a
one-minute run still settles): `render worker killed` kills the process mid-render, `browser
killed` SIGKILLs its Chromium browser process mid-render and lets the worker carry on.
"""

import asyncio
import json
import os
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from temporalio import activity

from activities import checks, store
from activities.notify import NotifyActivities
from fetchers.http import Page, Request
from pricewatch.deliveries import DeliveryInput
from pricewatch.models import CheckResult
from tests.chaos.procs import browsers_under

# mid_fetch: the page request is in flight. after_fetch: the page is in hand, nothing
# committed. after_commit: the row is committed, Temporal has not heard. after_send: the
# receiver took the webhook, the delivery row is not marked sent. after_apprise_send: the
# same for an Apprise channel (the service accepted the message). zombie: frozen between
# fetch and commit, past the heartbeat timeout, then let go.
WINDOWS = ("mid_fetch", "after_fetch", "after_commit", "after_send", "after_apprise_send",
           "zombie")  # fmt: skip
# A render worker's: a page is loading or waiting on its step (the chaos pages write their
# content a while after load).
RENDER_WINDOWS = ("render worker killed", "browser killed")
# How long into a render the windows look: past the page's load, before its script has run.
IN_FLIGHT = 0.3


class Faults:
    def __init__(self, folder: Path) -> None:
        self.armed = folder / "armed"
        self.taken = folder / "taken"
        self.hits = folder / "hits.jsonl"
        self.sends = folder / "sends.jsonl"
        self.misses = folder / "misses.jsonl"
        self.takes = folder / "takes.jsonl"

    def take(self, *windows: str) -> tuple[str, str] | None:
        """Claim the oldest armed fault for any of `windows` (window, arm); only one process
        can get each. Oldest first, so one window kind cannot starve another at the same
        point (after a fetch: `after_fetch` and `zombie`). Each take is noted in
        `takes.jsonl` before anything else: the hook reached its window, whatever comes of
        it (a hit, a miss put back, or this process killed by another window first)."""
        for name in sorted(os.listdir(self.armed), key=self._armed_at):
            window = name.partition(".")[0]
            if window in windows:
                try:
                    os.rename(self.armed / name, self.taken / name)
                except FileNotFoundError:  # another worker took it first
                    continue
                with open(self.takes, "a") as log:
                    taken = {"window": window, "arm": name, "pid": os.getpid(), "at": time.time()}
                    log.write(json.dumps(taken) + "\n")
                return window, name
        return None

    def _armed_at(self, name: str) -> int:
        try:
            return (self.armed / name).stat().st_mtime_ns
        except FileNotFoundError:  # just taken: sorts last, and its rename fails
            return 2**63

    def untake(self, arm: str) -> None:
        """Put a taken fault back (its window turned out not to be there after all)."""
        os.rename(self.taken / arm, self.armed / arm)

    def record(self, window: str, arm: str, **details: object) -> None:
        """Record the hit durably (before its fault happens: the process may not survive)."""
        hit = {"window": window, "arm": arm, "pid": os.getpid(), "at": time.time(), **details}
        with open(self.hits, "a") as log:
            log.write(json.dumps(hit) + "\n")
            log.flush()
            os.fsync(log.fileno())

    def missed(self, window: str, arm: str, reason: str, **details: object) -> None:
        """Put a taken window back and note why: its hook reached it, but the fault could not
        hit its work (`reason`). The run counts these as tries, not as a broken hook."""
        self.untake(arm)
        miss = {"window": window, "reason": reason, "pid": os.getpid(), "at": time.time()}
        with open(self.misses, "a") as log:
            log.write(json.dumps({**miss, **details}) + "\n")

    def sending(self, **details: object) -> None:
        """Note which process sends a notice, as it starts: a kill that takes the process
        down may come before the receiver has logged the copy it sent. Flushed, not synced:
        a killed process's writes are in the kernel already."""
        with open(self.sends, "a") as log:
            log.write(json.dumps({"pid": os.getpid(), "at": time.time(), **details}) + "\n")

    def fire(self, window: str, arm: str, **details: object) -> None:
        """Record the hit, then die (or freeze) right here, inside the window."""
        self.record(window, arm, **details)
        os.kill(os.getpid(), signal.SIGSTOP if window == "zombie" else signal.SIGKILL)


def install(faults: Faults) -> None:
    """Wrap the real fetch, commit, webhook post and Apprise send with the window hooks."""
    real_fetch = checks.fetch_page  # type: ignore[attr-defined]
    real_commit = store.commit
    real_post = NotifyActivities._post_webhook
    real_notify = NotifyActivities._notify_service

    async def fetch_page(client: httpx.AsyncClient, request: Request | str) -> Page:
        fetch = asyncio.create_task(real_fetch(client, request))
        await asyncio.sleep(0.01)  # the page server answers in 20-80 ms: still in flight
        if not fetch.done() and (taken := faults.take("mid_fetch")):
            faults.fire(*taken)
        page = await fetch
        if taken := faults.take("after_fetch", "zombie"):
            faults.fire(*taken)
        return page

    async def commit(pool: object, **kwargs: object) -> CheckResult | None:
        result = await real_commit(pool, **kwargs)  # type: ignore[arg-type]
        if result is not None and (taken := faults.take("after_commit")):
            faults.fire(*taken, work_id=result.work_id, status=result.status)
        return result

    async def post_webhook(
        self: NotifyActivities,
        delivery: DeliveryInput,
        notice: dict[str, object],
        url: str,
        secret: str,
        now: datetime,
        disable: bool = True,
    ) -> None:
        faults.sending(webhook_id=NotifyActivities.message_id(delivery))
        await real_post(self, delivery, notice, url, secret, now, disable)
        if taken := faults.take("after_send"):
            faults.fire(*taken, webhook_id=NotifyActivities.message_id(delivery))

    async def notify_service(
        self: NotifyActivities,
        target_id: str,
        channel_id: str,
        notice: dict[str, object],
        row: Any,
        test: bool = False,
    ) -> None:
        if not test:
            faults.sending(work_id=str(notice["work_id"]), channel_id=channel_id)
        await real_notify(self, target_id, channel_id, notice, row, test)  # returns: sent
        if not test and (taken := faults.take("after_apprise_send")):
            faults.fire(*taken, work_id=str(notice["work_id"]), channel_id=channel_id)

    checks.fetch_page = fetch_page  # type: ignore[attr-defined]
    store.commit = commit
    NotifyActivities._post_webhook = post_webhook  # type: ignore[method-assign]
    NotifyActivities._notify_service = notify_service  # type: ignore[method-assign]


def install_render(faults: Faults) -> None:
    """Wrap the browser fetcher's render with the render windows."""
    from fetchers.browser import BrowserFetcher

    real_render = BrowserFetcher._render

    async def render(self: BrowserFetcher, *args: Any) -> Page:
        """`_render(browser, proxy, session, request, steps, budget)`, with the windows."""
        began = time.time()
        rendering = asyncio.create_task(real_render(self, *args))
        try:
            done, _ = await asyncio.wait({rendering}, timeout=IN_FLIGHT)
            first = activity.in_activity() and activity.info().attempt == 1
            if not done and first and (taken := faults.take(*RENDER_WINDOWS)):
                window, arm = taken
                request = args[3]
                url = request.url if isinstance(request, Request) else ""
                if window == "render worker killed":
                    faults.fire(window, arm, url=url, began=began)
                elif browsers := browsers_under(os.getpid()):
                    await kill_browser(faults, arm, rendering, browsers[0], url, began)
                else:  # none below this worker: it just died (a kill of a render beside it)
                    faults.missed(window, arm, "no browser", url=url, began=began)
            return await rendering
        finally:
            rendering.cancel()

    BrowserFetcher._render = render  # type: ignore[assignment,method-assign]


async def kill_browser(
    faults: Faults, arm: str, rendering: "asyncio.Task[Page]", browser: int, url: str,
    began: float,
) -> None:  # fmt: skip
    """SIGKILL the browser mid-render, then judge by the render itself whether the kill hit
    it: on a starved machine the render may have read its page between the window's look
    and the kill, and then ends well. Such a miss is put back for another render (and noted
    in `misses.jsonl`); a hit is recorded once the render failed, with the kill's moment
    between the render's start and end (this process lives on, so it can wait to know)."""
    killed = time.time()
    os.kill(browser, signal.SIGKILL)
    await asyncio.wait({rendering})
    details = {"url": url, "browser": browser, "began": began, "killed": killed,
               "ended": time.time()}  # fmt: skip
    if rendering.cancelled() or rendering.exception() is not None:
        faults.record("browser killed", arm, **details)
        return
    faults.missed("browser killed", arm, "too late", **details)


def main() -> None:
    faults = Faults(Path(os.environ["PRICEWATCH_CHAOS_DIR"]))
    if os.environ.get("PRICEWATCH_RENDER", "").lower() in ("1", "true", "yes"):
        install_render(faults)
    else:
        install(faults)
    from surfaces.cli import main as pricewatch

    sys.argv = ["pricewatch", "worker"]
    pricewatch()


if __name__ == "__main__":
    main()
