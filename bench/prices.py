"""`python -m bench.prices [--json] [--repeats N]`: price mode's reader on the real-page corpus.

The corpus (tests/corpus/, docs/prices-corpus.md) is pages, structured-data samples and price
strings from other projects' public test suites, each with the prices a person sees on it. Each
case is read as a check reads it (`readers.price_reader.observe`, the case's content type,
default `text/html` without a charset) and gets one verdict:
- agree: the amounts read, in order, are the expected ones (and the currency, struck-out regular
  price, availability and name where the case gives them); a page that shows no price is agree
  when the reader says it found none;
- wrong: prices read, but not those;
- nothing: the reader found no price on a page that shows one;
- error: any other exception.
`struck_out_won` marks a reading that took a struck-out ("was", "compare at") price for the
current one. A case's time is the fastest of `--repeats` batches of reads (`fastest_reads`).

`--against REV` (default: the 1.2.0 release) reads the same cases, and a generated 250 KiB
shop page, with that commit's reader too, in the same run: verdicts and times side by side.
"""

import argparse
import contextlib
import html
import json
import random
import re
import statistics
import subprocess
import sys
import time
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from bench.report import commit_name
from pricewatch.models import PriceSettings
from pricewatch.periods import unit
from pricewatch.prices import Price
from readers.normalise import ExtractionError
from readers.price_reader import observe

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
RELEASE_1_2 = "d5c9328"  # `release 1.2.0`: its reader is activities/prices.py
BATCH_SECONDS = 0.002  # a batch of reads (`fastest_reads`)
Reader = Callable[[bytes, str, PriceSettings], Any]
VERDICTS = ("agree", "wrong", "error", "nothing")
# Issue 43's kinds: the report counts their cases apart (`by_kind`).
KINDS = (
    "user-named-element", "from-price", "screen-reader-price", "split-parts",
    "repeated-structured-data", "attribute-only", "compound-price-specification",
    "billing-period",
)  # fmt: skip
# The classes of issue 29, then issue 43's kinds: each has a case of its own (tests/test_corpus.py).
CLASSES = (
    "plain", "struck-out-del-ins", "compare-at", "was-now", "strikethrough-jsonld",
    "og-sale-vs-regular", "bad-value-beside-good", "empty-selector-match", "microdata-low-high",
    "aggregate-offer-low-high", "offers-without-type", "type-as-url", "type-alias",
    "several-price-specifications", "jsonld-trailing-comma", "jsonld-raw-newline",
    "jsonld-comments", "jsonld-wrapped", "nested-itemprop-price", "microdata-nested-name",
    "review-count", "quantity-before-price", "unit-quantity", "hidden-elements",
    "price-in-attribute", "charset-meta", "typographic-apostrophe", "arabic-indic-digits",
    "three-decimal-currency", "currency-iso", "availability", "no-price", *KINDS,
)  # fmt: skip
TEXT_SELECTOR = ".price"


@dataclass(frozen=True)
class Expected:
    """One price a person sees; None: the case does not say (not compared)."""

    amount: Decimal
    currency: str | None = None
    regular: Decimal | None = None
    availability: str | None = None
    name: str | None = None
    period: str | None = None
    per: str | None = None

    def matches(self, price: Price) -> bool:
        return (
            price.amount == self.amount
            and (self.currency is None or price.currency == self.currency)
            and (self.regular is None or price.regular == self.regular)
            and (self.availability is None or price.availability == self.availability)
            and (self.name is None or price.name == self.name)
            and (self.period is None or price.period == _said(self.period))
            and (self.per is None or price.per == _said(self.per))
        )

    def line(self) -> str:
        return _line(
            self.amount, self.currency, self.regular, self.availability, self.name,
            self.period, self.per,
        )  # fmt: skip


@dataclass(frozen=True)
class Case:
    id: str
    source: str
    classes: tuple[str, ...]
    expect: tuple[Expected, ...]
    body: bytes
    content_type: str
    settings: PriceSettings


@dataclass
class CaseResult:
    id: str
    source: str
    classes: list[str]
    verdict: str
    expected: list[str]
    read: list[str] = field(default_factory=list)
    error: str | None = None
    struck_out_won: bool = False
    skipped: list[str] = field(default_factory=list)
    bytes: int = 0
    ms: float = 0.0

    def line(self) -> str:
        """The miss, for a person: what the page shows and what was read."""
        shown = "; ".join(self.expected) or "no price"
        got = self.error if self.error is not None else "; ".join(self.read)
        flag = " [struck-out price won]" if self.struck_out_won else ""
        return f"{self.id} [{', '.join(self.classes)}] {self.verdict}{flag}: {shown} <- {got}"


def _said(expected: str) -> str | None:
    """An expected period or per as the reader gives it: `none` is the page saying none."""
    return None if expected == "none" else expected


def _line(
    amount: Decimal,
    currency: str | None,
    regular: Decimal | None,
    availability: str | None,
    name: str | None,
    period: str | None = None,
    per: str | None = None,
) -> str:
    text = f"{amount} {currency}" if currency else str(amount)
    text += unit(period, per)
    if regular is not None:
        text += f" (was {regular})"
    if availability:
        text += f" {availability}"
    if name:
        text += f" {name!r}"
    return text


def read_line(price: Price) -> str:
    return _line(
        price.amount, price.currency, price.regular, price.availability, price.name,
        price.period, price.per,
    )  # fmt: skip


def load_sources() -> dict[str, dict[str, str]]:
    sources: dict[str, dict[str, str]] = yaml.safe_load((CORPUS / "sources.yaml").read_text())
    return sources


def raw_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = yaml.safe_load((CORPUS / "cases.yaml").read_text())
    return cases


def _expected(entry: dict[str, Any]) -> Expected:
    def amount(value: Any) -> Decimal | None:
        return None if value is None else Decimal(str(value))

    value = amount(entry["amount"])
    assert value is not None
    return Expected(
        value, entry.get("currency"), amount(entry.get("regular")), entry.get("availability"),
        entry.get("name"), entry.get("period"), entry.get("per"),
    )  # fmt: skip


def load_case(raw: dict[str, Any]) -> Case:
    """A case as the reader gets it: the page's bytes, its content type, the target's settings."""
    settings = dict(raw.get("settings") or {})
    if "page" in raw:
        body = (CORPUS / "pages" / raw["page"]).read_bytes()
    elif "html" in raw:
        body = raw["html"].encode()
    else:
        body = f'<span class="price">{html.escape(raw["text"], quote=False)}</span>'.encode()
        settings.setdefault("selector", TEXT_SELECTOR)
    return Case(
        id=raw["id"], source=raw["source"], classes=tuple(raw["classes"]),
        expect=tuple(_expected(entry) for entry in raw["expect"]), body=body,
        content_type=raw.get("content_type", "text/html"),
        settings=PriceSettings(**settings),
    )  # fmt: skip


def load_cases() -> list[Case]:
    return [load_case(raw) for raw in raw_cases()]


def judge(case: Case, prices: list[Price] | None, error: BaseException | None) -> CaseResult:
    """The verdict on one reading: `prices` if the reader returned, else the error it raised."""
    result = CaseResult(
        case.id, case.source, list(case.classes), "agree", [e.line() for e in case.expect],
        bytes=len(case.body),
    )  # fmt: skip
    if prices is None:
        assert error is not None
        result.error = f"{type(error).__name__}: {error}"
        if isinstance(error, ExtractionError):
            result.verdict = "agree" if not case.expect else "nothing"
        else:
            result.verdict = "error"
        return result
    result.read = [read_line(price) for price in prices]
    agree = len(prices) == len(case.expect) and all(
        want.matches(price) for want, price in zip(case.expect, prices, strict=True)
    )
    result.verdict = "agree" if agree else "wrong"
    struck = {e.regular for e in case.expect if e.regular is not None}
    struck -= {e.amount for e in case.expect}
    result.struck_out_won = any(price.amount in struck for price in prices)
    return result


def run_case(case: Case, repeats: int = 3, reader: Reader = observe) -> CaseResult:
    """The case's verdict from one read, and its time (`fastest_reads`)."""
    result = verdict(case, reader)
    result.ms = fastest_reads(case, [reader], repeats)[0] * 1000
    return result


def verdict(case: Case, reader: Reader) -> CaseResult:
    prices: list[Price] | None = None
    error: BaseException | None = None
    skipped: list[str] = []
    try:
        reading = reader(case.body, case.content_type, case.settings)
    except Exception as err:  # every failure is a verdict
        error = err
    else:
        if isinstance(reading, list):  # a reader before 1.3: the prices alone
            prices = reading
        else:
            prices, skipped = reading.prices, reading.skipped
    result = judge(case, prices, error)
    result.skipped = list(skipped)
    return result


def fastest_reads(case: Case, readers: list[Reader], repeats: int) -> list[float]:
    """Each reader's seconds per read of the case: the fastest of `repeats` batches, each as
    many reads as fill about `BATCH_SECONDS`, the readers' batches in turns. One read of a 30 µs
    page is timed no better than the machine's noise: timed one read at a time, seven runs of
    one quiet hour put this reader anywhere from 1.20 to 1.29 times 1.8's."""
    batches = []
    for reader in readers:
        started = time.perf_counter()
        with contextlib.suppress(Exception):
            reader(case.body, case.content_type, case.settings)
        batches.append(max(1, int(BATCH_SECONDS / max(time.perf_counter() - started, 1e-7))))
    fastest = [float("inf")] * len(readers)
    for _ in range(max(1, repeats)):
        for index, (reader, batch) in enumerate(zip(readers, batches, strict=True)):
            started = time.perf_counter()
            for _ in range(batch):
                with contextlib.suppress(Exception):
                    reader(case.body, case.content_type, case.settings)
            fastest[index] = min(fastest[index], (time.perf_counter() - started) / batch)
    return fastest


def run_corpus(repeats: int = 3, reader: Reader = observe) -> list[CaseResult]:
    """Every case of the corpus, in its order, timed."""
    return [run_case(case, repeats, reader) for case in load_cases()]


def verdicts(reader: Reader = observe) -> list[CaseResult]:
    """Every case of the corpus, in its order, untimed (the corpus tests)."""
    return [verdict(case, reader) for case in load_cases()]


def reader_at(rev: str) -> Reader:
    """The price reader of an earlier commit (`activities/prices.py` before 1.3, then
    `activities/price_reader.py`, now `readers/price_reader.py`), loaded from git beside this
    one; it imports the modules of this checkout (the readers by their new path)."""
    for path in ("activities/prices.py", "activities/price_reader.py", "readers/price_reader.py"):
        shown = subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True,
            timeout=30,
        )  # fmt: skip
        if shown.returncode == 0:
            break
    shown.check_returncode()
    module = types.ModuleType(f"reader_{rev}")
    source = re.sub(r"\bactivities\.(normalise|price_\w+)\b", r"readers.\1", shown.stdout)
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    reader: Reader = module.observe
    return reader


def big_page(kib: int = 250) -> bytes:
    """A shop listing of about `kib` KiB (seeded: the same page every run): a product's
    JSON-LD and OpenGraph price, and cards each with a price and a struck-out one."""
    rng = random.Random(29)
    head = (
        '<html><head><meta property="og:price:amount" content="49.99">'
        '<script type="application/ld+json">{"@context": "https://schema.org", "@type": '
        '"Product", "name": "Main", "offers": {"@type": "Offer", "price": "49.99", '
        '"priceCurrency": "USD", "availability": "https://schema.org/InStock"}}</script>'
        "</head><body>"
    )
    cards: list[str] = []
    while sum(len(card) for card in cards) < kib * 1024 - len(head):
        cards.append(
            f'<div class="card"><h3>Item {len(cards)}</h3><p>{"lorem ipsum dolor " * 12}</p>'
            f'<span class="price">${rng.randint(1, 999)}.{rng.randint(0, 99):02d}</span> '
            f"<del>${rng.randint(1000, 2000)}.00</del></div>"
        )
    return (head + "".join(cards) + "</body></html>").encode()


def big_page_ms(readers: dict[str, Reader], repeats: int) -> dict[str, dict[str, float]]:
    """Each reader's ms on the big page, in structured-data and selector mode: the readers
    take turns (after one untimed read each), and each keeps its fastest read, the figure
    least moved by the machine's noise."""
    body = big_page()
    modes = {"structured": PriceSettings(), "selector": PriceSettings(selector=".price")}
    best = {name: dict.fromkeys(modes, float("inf")) for name in readers}
    for turn in range(max(3, repeats) + 1):
        for name, reader in readers.items():
            for mode, settings in modes.items():
                started = time.perf_counter()
                reader(body, "text/html", settings)
                if turn:
                    best[name][mode] = min(best[name][mode], time.perf_counter() - started)
    return {name: {m: round(t * 1000, 3) for m, t in times.items()} for name, times in best.items()}


def counts(results: list[CaseResult]) -> dict[str, int]:
    tally = Counter(result.verdict for result in results)
    return {"cases": len(results), **{verdict: tally[verdict] for verdict in VERDICTS}}


def agree_percent(results: list[CaseResult]) -> float:
    return 100 * sum(r.verdict == "agree" for r in results) / len(results) if results else 0.0


def summary(results: list[CaseResult]) -> dict[str, Any]:
    """The figures: verdicts per source and in all, the agree share, the time per page."""
    by_source: dict[str, list[CaseResult]] = {}
    for result in results:
        by_source.setdefault(result.source, []).append(result)
    times = sorted(result.ms for result in results)
    biggest = max(results, key=lambda r: r.bytes) if results else None
    return {
        "by_source": {
            source: {**counts(group), "agree_percent": round(agree_percent(group), 1)}
            for source, group in by_source.items()
        },
        "all": {**counts(results), "agree_percent": round(agree_percent(results), 1)},
        "by_kind": {
            kind: {**counts(group), "agree_percent": round(agree_percent(group), 1)}
            for kind in KINDS
            if (group := [result for result in results if kind in result.classes])
        },
        "struck_out_won": [r.id for r in results if r.struck_out_won],
        "timing": {
            "median_ms": round(statistics.median(times), 4) if times else None,
            "p90_ms": round(statistics.quantiles(times, n=10)[8], 4) if len(times) > 1 else None,
            "biggest_page": biggest.id if biggest else None,
            "biggest_page_bytes": biggest.bytes if biggest else None,
            "biggest_page_ms": round(biggest.ms, 3) if biggest else None,
        },
    }


def table(results: list[CaseResult]) -> str:
    figures = summary(results)
    rows = [("source", "cases", *VERDICTS, "agree %")]
    for source, row in [*figures["by_source"].items(), ("all", figures["all"])]:
        rows.append((
            source, str(row["cases"]), *(str(row[v]) for v in VERDICTS),
            f"{row['agree_percent']:.1f}",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def cells(row: tuple[str, ...]) -> str:
        return "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        )

    lines = [cells(row) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(-1, lines[1])
    if figures["by_kind"]:
        lines.append("")
        lines.append("issue 43's kinds (a case may be of several): " + ", ".join(
            f"{kind} {row['agree']}/{row['cases']}" for kind, row in figures["by_kind"].items()
        ))  # fmt: skip
    timing = figures["timing"]
    lines.append("")
    lines.append(
        f"time per page: median {timing['median_ms']:.2f} ms, p90 {timing['p90_ms']:.2f} ms; "
        f"biggest page {timing['biggest_page']} ({timing['biggest_page_bytes'] / 1024:.1f} KiB) "
        f"{timing['biggest_page_ms']:.2f} ms"
    )
    if figures["struck_out_won"]:
        lines.append(f"struck-out price read as the price: {', '.join(figures['struck_out_won'])}")
    misses = [result for result in results if result.verdict != "agree"]
    if misses:
        lines.append("")
        lines.append(f"{len(misses)} not agreeing (case [classes] verdict: expected <- read):")
        lines.extend(f"  {result.line()}" for result in misses)
    return "\n".join(lines)


def compared(
    results: list[CaseResult], earlier: list[CaseResult], rev: str, repeats: int
) -> dict[str, Any]:
    """This reader beside `rev`'s, in one run: verdicts, struck-out readings, time per page
    of the corpus and of the big page."""

    big = big_page_ms({"this": observe, rev: reader_at(rev)}, repeats)

    def side(found: list[CaseResult], name: str) -> dict[str, Any]:
        figures = summary(found)
        return {
            **figures["all"],
            "struck_out_won": len(figures["struck_out_won"]),
            "median_ms": figures["timing"]["median_ms"],
            "big_page_ms": big[name],
        }

    return {
        "big_page_bytes": len(big_page()),
        "this": side(results, "this"),
        rev: side(earlier, rev),
    }


def comparison_table(against: dict[str, Any]) -> str:
    this, (rev, earlier) = (
        against["this"],
        next((k, v) for k, v in against.items() if k not in ("this", "big_page_bytes")),
    )
    kib = against["big_page_bytes"] / 1024

    def row(label: str, value: Callable[[dict[str, Any]], str]) -> str:
        return f"  {label:<34}{value(this):>16}{value(earlier):>16}"

    return "\n".join([
        "",
        f"beside the reader of {rev} (the same cases, this run):",
        f"  {'':<34}{'this reader':>16}{rev:>16}",
        row("agree", lambda s: f"{s['agree']} ({s['agree_percent']:.1f}%)"),
        row("wrong / nothing / error", lambda s: f"{s['wrong']} / {s['nothing']} / {s['error']}"),
        row("struck-out price read as the price", lambda s: str(s["struck_out_won"])),
        row("median µs per page", lambda s: f"{s['median_ms'] * 1000:.1f}"),
        f"  {'  this reader over ' + rev:<34}{this['median_ms'] / earlier['median_ms']:>16.2f}",
        row(f"{kib:.0f} KiB page, structured data, ms",
            lambda s: f"{s['big_page_ms']['structured']:.2f}"),
        row(f"{kib:.0f} KiB page, price selector, ms",
            lambda s: f"{s['big_page_ms']['selector']:.2f}"),
    ])  # fmt: skip


def as_json(results: list[CaseResult], against: dict[str, Any] | None) -> dict[str, Any]:
    stamp = {"date": datetime.now().astimezone().isoformat(), "commit": commit_name()}
    return {
        **stamp, **summary(results), "against": against,
        "results": [asdict(result) for result in results],
    }  # fmt: skip


REPORT = ("<!-- report: generated by python -m bench.prices --write -->", "<!-- /report -->")


def markdown(figures: dict[str, Any]) -> str:
    """The report as docs/prices-corpus.md shows it: from the same figures `--json` prints."""
    lines = [
        f"Run at {figures['commit']}, {figures['date'][:10]} (`python -m bench.prices --write "
        "docs/prices-corpus.md`):",
        "",
        "| source | cases | agree | wrong | error | nothing | agree % |",
        "|---|---|---|---|---|---|---|",
    ]
    for source, row in [*figures["by_source"].items(), ("**all**", figures["all"])]:
        cells = [row["cases"], *(row[v] for v in VERDICTS), f"{row['agree_percent']:.1f}"]
        lines.append(f"| {source} | " + " | ".join(map(str, cells)) + " |")
    if by_kind := figures.get("by_kind"):
        lines += ["", "Issue 43's kinds (a case may be of several):", "",
                  "| kind | cases | agree |", "|---|---|---|"]  # fmt: skip
        lines += [f"| {kind} | {row['cases']} | {row['agree']} |" for kind, row in by_kind.items()]
    won = figures["struck_out_won"]
    timing = figures["timing"]
    lines += [
        "",
        f"Struck-out price read as the price: {', '.join(won) if won else 'none'}. Time per "
        f"page: median {timing['median_ms']:.3f} ms, p90 {timing['p90_ms']:.3f} ms.",
    ]
    misses = [r for r in figures["results"] if r["verdict"] != "agree"]
    lines += [f"Not agreeing: {', '.join(r['id'] for r in misses) if misses else 'none'}."]
    if (against := figures["against"]) is not None:
        lines += [
            "",
            "Beside the 1.2 reader, in the same run:",
            "```",
            comparison_table(against).strip(),
            "```",
        ]
    return "\n".join(lines)


def write_report(path: Path, figures: dict[str, Any]) -> None:
    text = path.read_text()
    start, end = text.index(REPORT[0]) + len(REPORT[0]), text.index(REPORT[1])
    path.write_text(text[:start] + "\n" + markdown(figures) + "\n" + text[end:])


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.prices",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="JSON on stdout (the table: stderr)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="timed batches of reads (about 2 ms each) per case (default 5)",
    )
    parser.add_argument(
        "--write", type=Path, metavar="FILE", help="replace FILE's report section with this run"
    )
    parser.add_argument(
        "--against", default=RELEASE_1_2, metavar="REV",
        help=f"also read with this commit's reader (default {RELEASE_1_2}, 1.2.0; 'none': not)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    readers: list[Reader] = [observe]
    if args.against != "none":
        readers.append(reader_at(args.against))
    for reader in readers:  # warm up (imports, caches, the CPU's clock): the first pass is slow
        run_corpus(1, reader)
    results, earlier = [], []
    for case in load_cases():  # batches in turns: the machine's drift hits both alike
        found = [verdict(case, reader) for reader in readers]
        for result, seconds in zip(found, fastest_reads(case, readers, args.repeats), strict=True):
            result.ms = seconds * 1000
        results.append(found[0])
        earlier.extend(found[1:])
    report = table(results)
    against = None
    if earlier:
        against = compared(results, earlier, args.against, args.repeats)
        report += "\n" + comparison_table(against)
    print(report, file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        print(json.dumps(as_json(results, against), indent=2, ensure_ascii=False), flush=True)
    if args.write:
        write_report(args.write, as_json(results, against))


if __name__ == "__main__":
    main()
