"""`python -m bench.render_memory [--json] [--at-once 1,2,4,8]`: what one more render at once
costs in memory, which `python -m bench.render` cannot see (at its rate renders seldom
overlap, so its peak is mostly the browser's fixed cost).

For each count N, a fresh `BrowserFetcher` (the render worker's own, the product's launch
flags and Chromium, `find_chromium`) renders bench/spa.py's page N at a time, each held open
by a 2 s step, and the Chromium's proportional set size (`fetchers.browser_host.browser_memory`:
the browser process and everything below it, shared pages once) is read while all N are
open and again once they are done. The marginal cost is the slope between counts. The
Playwright driver and the worker's Python are fixed per process and not counted here (the
main bench lists them).
"""

import argparse
import asyncio
import json
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from bench.spa import PRICE_SELECTOR, serve_spa
from fetchers.browser import BrowserFetcher
from fetchers.browser_host import browser_memory
from fetchers.guard import AddressPolicy
from fetchers.http import request_of
from pricewatch.models import CheckInput, PriceSettings, RenderSettings, TargetConfig
from workers.chromium import chromium_args, find_chromium

MIB = 2**20


@dataclass(frozen=True)
class Sample:
    at_once: int
    rendering_mib: float
    idle_mib: float


def _request(url: str) -> CheckInput:
    config = TargetConfig(
        target_id="bench", url=url, interval_seconds=60,
        price_mode=PriceSettings(selector=PRICE_SELECTOR),
        render=RenderSettings(steps=[f"wait {PRICE_SELECTOR}", "wait 2s"]),
    )  # fmt: skip
    return CheckInput.of(config, datetime.now(UTC).replace(microsecond=0))


async def measure(counts: list[int]) -> list[Sample]:
    policy = AddressPolicy.allowing(["127.0.0.1/32"])
    samples = []
    async with serve_spa() as base:
        url = f"{base}/pricing/bench"
        for count in counts:
            fetcher = BrowserFetcher(policy, find_chromium(), chromium_args(), count)
            try:
                await fetcher(request_of(_request(url)))  # launch, warm
                launched = fetcher._current
                assert launched is not None
                renders = [
                    asyncio.create_task(fetcher(request_of(_request(url)))) for _ in range(count)
                ]
                await asyncio.sleep(1.5)  # all open, inside their 2 s step
                rendering = await asyncio.to_thread(browser_memory, launched.profile)
                await asyncio.gather(*renders)
                idle = await asyncio.to_thread(browser_memory, launched.profile)
            finally:
                await fetcher.close()
            samples.append(Sample(count, rendering / MIB, idle / MIB))
    return samples


def table(samples: list[Sample]) -> str:
    lines = [
        f"Chromium ({find_chromium()}) PSS by renders at once, bench/spa.py's page",
        f"{'at once':>8} {'rendering MiB':>14} {'idle MiB':>9} {'MiB per render above idle':>26}",
    ]
    for s in samples:
        per = (s.rendering_mib - s.idle_mib) / s.at_once
        lines.append(f"{s.at_once:>8} {s.rendering_mib:>14.0f} {s.idle_mib:>9.0f} {per:>26.1f}")
    if len(samples) > 1:
        first, last = samples[0], samples[-1]
        slope = (last.rendering_mib - first.rendering_mib) / (last.at_once - first.at_once)
        lines.append(f"marginal: {slope:.1f} MiB per render at once ({first.at_once} to "
                     f"{last.at_once})")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.render_memory", description=__doc__)
    parser.add_argument("--at-once", default="1,2,4,8", help="counts, comma-separated")
    parser.add_argument("--json", action="store_true", help="JSON on stdout (the table: stderr)")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.at_once.split(",") if n.strip()]
    if not counts or min(counts) < 1:
        parser.error("--at-once takes positive counts")
    samples = asyncio.run(measure(counts))
    print(table(samples), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        chromium = str(find_chromium())
        print(json.dumps({"chromium": chromium, "samples": [asdict(s) for s in samples]}))


if __name__ == "__main__":
    main(sys.argv[1:])
