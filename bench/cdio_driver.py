"""changedetection.io's Playwright content fetcher, driven at the bench's offered rate.

Run by `python -m bench.render` with the python of changedetection.io's own venv (this file
imports nothing of pricewatch): `python cdio_driver.py CONFIG.json OUT.jsonl`. CONFIG says
the CDP URL of the Chromium to use (PLAYWRIGHT_DRIVER_URL, as changedetection.io is set up
with a browser of its own), each watch's URL and first due instant, the interval, when to
stop, how many fetch workers, and the CSS selector (the watch's include filter).

It does what changedetection.io's own workers do with a due watch: a queue of due watches,
`workers` consumers, each building `content_fetchers.playwright.fetcher` as the processor
does (JPEG screenshots, the default timeout, favicon on a watch's first fetch) and awaiting
its `run()`. A watch whose previous fetch has not finished when its next slot comes is not
queued twice (changedetection.io does not queue a watch already queued or being checked):
that slot is missed. Every other knob is changedetection.io's default, so every check waits
WEBDRIVER_DELAY_BEFORE_CONTENT_READY (5 s) and takes a screenshot. Only the fetch is run:
its text filtering, diffing and history writes are not, so its cost here is a lower bound.

One JSON line per slot to OUT: the watch, the due instant, start, finish (Unix seconds), ok,
the error, the rendered page's size and whether the script's prices were in it.
"""

import asyncio
import contextlib
import json
import os
import sys
import time
from importlib import metadata
from typing import Any, TextIO


def main(config_path: str, out_path: str) -> None:
    with open(config_path) as file:
        config = json.load(file)
    with open(out_path, "a", buffering=1) as out:
        asyncio.run(drive(config, out))


async def drive(config: dict[str, Any], out: TextIO) -> None:
    os.environ["PLAYWRIGHT_DRIVER_URL"] = config["cdp"]
    # The page is on 127.0.0.1, which its guard refuses unless told (as pricewatch's is
    # told with PRICEWATCH_ALLOW_NETWORKS).
    os.environ["ALLOW_IANA_RESTRICTED_ADDRESSES"] = "true"
    from changedetectionio.content_fetchers.playwright import (  # type: ignore[import-not-found]
        fetcher as Playwright,
    )
    from changedetectionio.processors.base import (  # type: ignore[import-not-found]
        SCREENSHOT_FORMAT_JPEG,
    )

    interval, until = float(config["interval"]), float(config["until"])
    queue: asyncio.Queue[tuple[int, float]] = asyncio.Queue()
    busy: set[int] = set()
    fetched_once: set[int] = set()

    def record(**row: Any) -> None:
        out.write(json.dumps(row) + "\n")

    async def ticker(watch: int, anchor: float) -> None:
        due = anchor
        while due < until:
            await asyncio.sleep(max(0.0, due - time.time()))
            if watch in busy:
                record(watch=watch, due=due, started=None, finished=None, ok=False,
                       error="still queued or being checked")  # fmt: skip
            else:
                busy.add(watch)
                queue.put_nowait((watch, due))
            due += interval

    async def worker(worker_id: int) -> None:
        while True:
            watch, due = await queue.get()
            url = config["watches"][watch]["url"]
            started = time.time()
            fetch = Playwright(
                proxy_override=None, custom_browser_connection_url=None,
                screenshot_format=SCREENSHOT_FORMAT_JPEG, worker_id=worker_id,
            )  # fmt: skip
            error, content = None, ""
            try:
                await fetch.run(
                    current_include_filters=[config["selector"]],
                    empty_pages_are_a_change=False,
                    fetch_favicon=watch not in fetched_once,
                    ignore_status_codes=False,
                    is_binary=False,
                    request_body=None,
                    request_headers={},
                    request_method=None,
                    screenshot_format=SCREENSHOT_FORMAT_JPEG,
                    timeout=45,
                    url=url,
                    watch_uuid=f"watch-{watch}",
                )
                await fetch.quit()
                content = fetch.content or ""
            except Exception as err:  # what its worker would record as the watch's error
                error = f"{type(err).__name__}: {err}"[:300]
            fetched_once.add(watch)
            busy.discard(watch)
            queue.task_done()
            record(watch=watch, due=due, started=started, finished=time.time(),
                   ok=error is None, error=error, bytes=len(content),
                   prices=config["marker"] in content,
                   screenshot_bytes=len(fetch.screenshot or b""))  # fmt: skip

    record(version=metadata.version("changedetection.io"),
           playwright=metadata.version("playwright"), pid=os.getpid())  # fmt: skip
    workers = [asyncio.create_task(worker(n)) for n in range(config["workers"])]
    await asyncio.gather(*(ticker(i, w["anchor"]) for i, w in enumerate(config["watches"])))
    with contextlib.suppress(TimeoutError):  # the last fetches may still land
        await asyncio.wait_for(queue.join(), timeout=until + interval - time.time())
    for task in workers:
        task.cancel()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
