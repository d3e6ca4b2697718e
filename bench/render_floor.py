"""`python -m bench.render_floor [--renders 100] [--json]`: the least CPU a render of
bench/spa.py's page can cost with a fresh browser context per check, beside what the render
worker's own fetcher costs for the same renders (issue 42's 5x asks what is left to save).

Each way renders the page `--renders` times, one at a time, in a child process, and once with
no render: the CPU of the child and every process below it (Python, Playwright's driver,
Chromium and its short-lived renderers, each counted once reaped: `RUSAGE_CHILDREN`), less
the run with none, over the renders; and of it, the child's own process. The ways:

- `bare`: a Playwright loop, the product's launch flags: a new context, goto, wait for
  `td.price`, read the page, close; images, fonts and media refused, as the fetcher does.
- `fetcher`: `fetchers.browser.BrowserFetcher`, the render worker's, with its address guard
  (the proxy every request of the page goes through), steps and reading.

For every Chromium found (`/usr/bin/chromium-headless-shell`, `/usr/bin/chromium`).
"""

import argparse
import asyncio
import json
import resource
import subprocess
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.spa import PRICE_SELECTOR, serve_spa

CHROMIUMS = [Path("/usr/bin/chromium-headless-shell"), Path("/usr/bin/chromium")]
WAYS = ("bare", "fetcher")
BLOCKED = ("image", "font", "media")


@dataclass(frozen=True)
class Floor:
    chromium: str
    way: str
    renders: int
    cpu_ms_per_render: float
    python_ms_per_render: float
    """Of it, the child's own process: the loop, or the fetcher with its guard's proxy."""


async def _bare(chromium: Path, renders: int, base: str) -> None:
    from playwright.async_api import Route, async_playwright

    from workers.chromium import chromium_args

    async def refuse_heavy(route: Route) -> None:
        blocked = route.request.resource_type in BLOCKED
        await (route.abort() if blocked else route.continue_())

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(chromium), args=chromium_args()
        )
        for n in range(renders):
            context = await browser.new_context(service_workers="block")
            await context.route("**/*", refuse_heavy)
            page = await context.new_page()
            await page.goto(f"{base}/pricing/t{n % 4}")
            await page.wait_for_selector(PRICE_SELECTOR)
            await page.content()
            await context.close()
        await browser.close()


async def _fetcher(chromium: Path, renders: int, base: str) -> None:
    from fetchers.browser import BrowserFetcher
    from fetchers.guard import AddressPolicy
    from fetchers.http import request_of
    from pricewatch.models import CheckInput, PriceSettings, RenderSettings, TargetConfig
    from workers.chromium import chromium_args

    fetcher = BrowserFetcher(AddressPolicy.allowing(["127.0.0.1/32"]), chromium, chromium_args(), 1)
    try:
        for n in range(renders):
            config = TargetConfig(
                target_id=f"t{n % 4}", url=f"{base}/pricing/t{n % 4}", interval_seconds=60,
                price_mode=PriceSettings(selector=PRICE_SELECTOR), render=RenderSettings(),
            )  # fmt: skip
            slot = datetime.now(UTC).replace(microsecond=0)
            await fetcher(request_of(CheckInput.of(config, slot)))
    finally:
        await fetcher.close()


async def _child(way: str, chromium: Path, renders: int) -> None:
    async with serve_spa() as base:
        if renders:  # the run with none starts nothing: it is the interpreter and the server
            await {"bare": _bare, "fetcher": _fetcher}[way](chromium, renders, base)


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def _cpu_of_child(way: str, chromium: Path, renders: int) -> tuple[float, float]:
    """Seconds of CPU the child and every process below it spent, and the child alone."""
    before = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN))
    argv = [sys.executable, "-m", "bench.render_floor", "--child", way, str(chromium), str(renders)]
    own = float(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
    return _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - before, own


def measure(renders: int) -> list[Floor]:
    floors = []
    for chromium in (path for path in CHROMIUMS if path.exists()):
        for way in WAYS:
            # The same way with one render and with none differs by the browser's launch too:
            # counted against the renders, it is part of the price of `renders` renders.
            (tree, own), (tree_idle, own_idle) = (
                _cpu_of_child(way, chromium, renders), _cpu_of_child(way, chromium, 0)
            )  # fmt: skip
            per = 1000 / renders
            floors.append(Floor(str(chromium), way, renders, (tree - tree_idle) * per,
                                (own - own_idle) * per))  # fmt: skip
    return floors


def table(floors: list[Floor]) -> str:
    lines = [
        "CPU ms per render of bench/spa.py's page, a fresh context each, one at a time "
        "(child process tree, browser launch included)",
        f"{'chromium':<36} {'bare':>6} {'fetcher':>8} {'fetcher/bare':>13}"
        f" {'of them Python: bare':>21} {'fetcher':>8}",
    ]
    for chromium in dict.fromkeys(f.chromium for f in floors):
        cost = {f.way: f for f in floors if f.chromium == chromium}
        bare, fetcher = cost["bare"], cost["fetcher"]
        lines.append(
            f"{chromium:<36} {bare.cpu_ms_per_render:>6.0f} {fetcher.cpu_ms_per_render:>8.0f} "
            f"{fetcher.cpu_ms_per_render / bare.cpu_ms_per_render:>12.2f}x "
            f"{bare.python_ms_per_render:>21.0f} {fetcher.python_ms_per_render:>8.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.render_floor", description=__doc__)
    parser.add_argument("--renders", type=int, default=100, help="renders per way (default 100)")
    parser.add_argument("--json", action="store_true", help="JSON on stdout (the table: stderr)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        way, chromium, renders = args.child
        asyncio.run(_child(way, Path(chromium), int(renders)))
        print(_cpu(resource.getrusage(resource.RUSAGE_SELF)))  # read by its parent
        return
    if args.renders < 1:
        parser.error("--renders must be positive")
    floors = measure(args.renders)
    print(table(floors), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        print(
            json.dumps({"at": datetime.now(UTC).isoformat(), "floors": [asdict(f) for f in floors]})
        )


if __name__ == "__main__":
    main(sys.argv[1:])
