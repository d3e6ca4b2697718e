"""Read the prices a shopper sees on a page (price mode): structured data, or a CSS selector.

Structured data: JSON-LD offers (`Offer`, `AggregateOffer`, typed or not, `@type` or `type`,
short or full schema.org names, every `priceSpecification`), microdata (`price`, `lowPrice`,
`highPrice`), OpenGraph (`product:price:amount`). The first kind the page has is read, unless
its prices are the struck-out ones (the page shows them struck out, or another kind names them
the regular price) and another kind's are not: then that kind is read, because it is the price
the page shows. With a price selector, each visible match is one price; inside a match, the
struck-out amount is the regular price, and of several numbers the one that reads as a price
(a currency beside it, "now") wins over counts and quantities.

Forgiving reading, strict recording: a value that cannot be read is skipped and named in the
Reading; only a page where no price at all can be read is an ExtractionError. Amounts are
parsed by Zyte's `price-parser` after typographic separators and non-Latin digits are made
plain; `€`, `£` and other unambiguous symbols become ISO codes, `$` and `¥` stay as written.
"""

import contextlib
import functools
import json
import re
import threading
import unicodedata
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any

import json_repair
from price_parser import Price as ParsedPrice
from price_parser.parser import extract_currency_symbol, parse_number
from selectolax.lexbor import LexborCSSSelector, LexborHTMLParser, LexborNode, SelectolaxError

from activities.normalise import ExtractionError, decode, looks_html
from pricewatch import periods
from pricewatch.models import PriceSettings
from pricewatch.prices import Price, Reading

OFFER_TYPES = {"Offer", "AggregateOffer"}
PRICE_KEYS = {"price", "lowPrice", "highPrice", "priceSpecification"}
PRICE_PROPS = ("price", "lowPrice", "highPrice")  # microdata's
ITEM_PROPS = {"priceCurrency", "availability", "name", "sku"}  # what a microdata price reads
# What a microdata price's period is read from (a UnitPriceSpecification's properties).
PERIOD_PROPS = ("unitCode", "billingDuration", "unitText")
ITEM_PROPS |= set(PERIOD_PROPS)
_CONTAINERS = (dict, list)  # what a JSON-LD offer can be in
REGULAR_PRICE_TYPES = {"StrikethroughPrice", "ListPrice", "SRP", "MSRP", "RegularPrice"}
STOCK = {
    word.lower(): word
    for word in (
        "InStock", "OutOfStock", "PreOrder", "PreSale", "BackOrder", "Discontinued", "SoldOut",
        "InStoreOnly", "OnlineOnly", "LimitedAvailability", "Reserved", "MadeToOrder",
    )
}  # fmt: skip
# OpenGraph's and shops' own words for the same states.
STOCK |= {"in stock": "InStock", "out of stock": "OutOfStock", "oos": "OutOfStock",
          "preorder": "PreOrder", "pre-order": "PreOrder", "available for order": "BackOrder",
          "backorder": "BackOrder", "available": "InStock", "pending": "PreOrder"}  # fmt: skip
# Where the symbol names one currency only. `$`, `¥`, `kr` and `Rs` stay as written.
ISO_CURRENCY = {
    "€": "EUR", "£": "GBP", "₹": "INR", "₽": "RUB", "₩": "KRW", "₺": "TRY", "₴": "UAH",
    "₪": "ILS", "฿": "THB", "₫": "VND", "₱": "PHP", "₦": "NGN", "zł": "PLN", "Kč": "CZK",
    "Ft": "HUF", "лв": "BGN", "R$": "BRL", "US$": "USD", "C$": "CAD", "CA$": "CAD",
    "MX$": "MXN", "NT$": "TWD", "円": "JPY", "A$": "AUD", "AU$": "AUD", "NZ$": "NZD",
    "HK$": "HKD", "S$": "SGD", "KD": "KWD",
    "د.ك": "KWD", "BD": "BHD", "د.ب": "BHD", "ر.ع.": "OMR", "د.ا": "JOD", "د.ت": "TND",  # noqa: RUF001
}  # fmt: skip
THREE_DECIMALS = {"KWD", "BHD", "OMR", "JOD", "TND", "LYD", "IQD"}
# "0.007" or "0,50": a leading zero means the separator is a decimal one (price-parser would
# read "$0.007/hour" as 7: three digits after a dot look like thousands to it).
_LEADING_ZERO = re.compile(r"0([.,])\d+")
# Most shown prices (`$12.50`, `1.234,50 €`, `CHF 1'234`): one number, grouped or not, with up
# to two decimals, and one symbol that is the only one price-parser can find in such a text. Its
# number and symbol are taken here as price-parser takes them (tests/test_prices.py compares
# every layout), without its searches, which cost more than the rest of reading a match.
_SYMBOL = "[$€£¥₹]|zł|Kč|CHF|EUR"
_AMOUNT = r"(?P<amount>(?:[0-9]{1,3}(?:[.,' ][0-9]{3})+|[0-9]+)(?:[.,][0-9]{1,2})?)"
_SIMPLE = re.compile(rf"(?P<before>{_SYMBOL})? ?{_AMOUNT} ?(?P<after>{_SYMBOL})?")
_LAST_SEPARATOR = re.compile(r"[\d.,' ]*\d([.,])\d{3}")
# Thousands groups (`1.234,56`, `1 234`, `1'234`) or a plain number with decimals.
_NUMBER = re.compile(r"\d{1,3}(?:[ .,']\d{3})+(?:[.,]\d+)?|\d+(?:[.,]\d+)?")
_NOT_AN_AMOUNT_AFTER = re.compile(
    r"\+|\s*(?:x\b|\u00d7|%|pcs?\b|pieces?|items?|packs?\b|new\b|used\b|offers?|reviews?|ratings?"
    r"|stars?|sold|left|l\b|litres?|liters?|ml\b|cl\b|kg\b|g\b|gr\b|lbs?\b"
    r"|oz\b|cm\b|mm\b|m\b|gb\b|tb\b|mb\b|months?|days?|years?|people|users?|seats?)",
    re.I,
)


def _last_words(*words: str) -> re.Pattern[str]:
    r"""Whether a text ends with one of the words (then perhaps non-word characters), asked of
    the text reversed: `word\W*$` searched forwards tries every position, this one."""
    return re.compile(rf"\W*(?:{'|'.join(re.escape(word[::-1]) for word in words)})", re.I)


# Such an amount among words (`790,00 € HT`, `From $109.90`, `Cena 283,50 PLN`), no count or
# quantity after it (`_priced_part` would read the whole text): price-parser's number is it,
# as a digit-free text before it and one that starts with neither a digit nor `.,'%` leave it
# (`_worded_amount`; tests/test_prices.py compares the layouts with price-parser's reading).
_WORDED = re.compile(
    rf"[^\d(.,']*?{_AMOUNT}(?!{_NOT_AN_AMOUNT_AFTER.pattern})(?: ?[^\d\s.,'%][^\d]*)?", re.I
)
# One number, neither a count or quantity nor in parentheses: most texts price-parser reads
# (`Cena 283,50 PLN`). The number is atomic, so it is the first `_NUMBER` match, as finditer's.
_ONE_NUMBER = re.compile(
    rf"[^\d(]*(?>{_NUMBER.pattern})(?!{_NOT_AN_AMOUNT_AFTER.pattern})\D*", re.I
)
_NOW_BEFORE = _last_words("now", "sale", "price", "only", "from", "jetzt", "nur", "ab", "dès")
_WAS_BEFORE = _last_words(
    "was", "previously", "before", "regular", "regular price", "list price", "rrp", "msrp",
    "compare at", "original", "original price", "old price", "uvp", "statt", "avant",
)  # fmt: skip
_STRUCK = "del, s, strike"
# A class token that names a struck-out price: `was-price`, `price--compare`, `old-price`,
# `compare-at-price`, `strikethrough` (not `compare-table`: a plan comparison is no old price).
_WAS = r"(?:was|old|compare[-_]?at|compare|original|list|strike|strikethrough|crossed|before|rrp)"
_STRUCK_CLASS = re.compile(
    rf"(?<![a-z]){_WAS}[-_]*(?:price|amount)|(?:price|amount)[-_]*{_WAS}"
    r"|^(?:was|strike|strikethrough|crossed|line-through|compare-at)$",
    re.I,
)
# Visually hidden, read by screen readers (Amazon's `a-offscreen`, Bootstrap's `sr-only`,
# WordPress's `screen-reader-text`, `visually-hidden`...), by class or by a clip/1px style.
_SPOKEN_CLASS = re.compile(
    r"(?:[\w-]*[-_])?(?:a-offscreen|offscreen|sr-only|sronly|sr-text|visually-?hidden"
    r"|hidden-visually|screen-?reader(?:-text|-only)?|screenreader(?:-text|-only)?"
    r"|assistive-text|element-invisible|a11y-hidden)(?:--?[\w-]+)?",
    re.I,
)
_CLIPPED = re.compile(
    r"clip\s*:\s*rect|clip-path\s*:\s*inset\(\s*50%|(?<![-\w])width\s*:\s*1px", re.I
)
_HAS_DIGIT = re.compile(r"\d")
# The pieces of one price over elements: `1` `,` `99` or `1,299` `.` `00`, joined by NUL here.
_GLUE = re.compile(r"(?<=\d)\0(?=[.,]\0?\d)|(?:(?<=\d[.,])|(?<=\d\0[.,]))\0(?=\d)")
# A "from" price on a listing: the least a product costs (`ab € 1248,99`, `From $9`).
_FROM = re.compile(
    r"(?<!\w)(?:from|starting at|as low as|ab|dès|à partir de|desde|vanaf)(?!\w)\D{0,5}\d", re.I
)
_PRICE_ATTRIBUTES = ("content", "value", "data-price", "data-price-amount", "data-amount")
_HIDING_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_SEPARATORS = str.maketrans(
    {"\u2019": "'", "\u02bc": "'", "\u2032": "'", "\u202f": " ", "\u2009": " ", "\u00a0": " ",
     "\u066b": ".", "\u066c": ",", "\u060c": ","}
)  # fmt: skip
_LAST_SEGMENT = re.compile(r"[/:#]")  # `https://schema.org/InStock`, `schema:Offer`
_OTHER_DIGIT = re.compile(r"[^\D0-9]")  # a decimal digit other than 0-9
_NOT_PLAIN = re.compile(rf"[{''.join(chr(c) for c in _SEPARATORS)}]|{_OTHER_DIGIT.pattern}")
# Searched in the lowercased head: a literal start is found fast, where re.I steps byte by byte.
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-z0-9_:.-]+)""")
# WHATWG: these labels mean windows-1252 (a `€` at 0x80), not Latin-1's control characters.
_WINDOWS_1252 = {"iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "ascii", "us-ascii"}
_JSON = json.JSONDecoder(strict=False)  # json.loads(strict=False) builds one per call
# A JSON string (kept), or what shops' JSON-LD has that JSON has not: `//` and `/* */`
# comments and a trailing comma (each dropped).
_JSON_COMMENT = r"//[^\n]*|/\*.*?\*/"
_JSON_NOISE = re.compile(
    rf'("(?:[^"\\]|\\.)*")|{_JSON_COMMENT}|,(?=(?:\s|{_JSON_COMMENT})*[}}\]])', re.S
)
_ENGINE = threading.local()  # a CSS engine per thread (`_css`)
# `_candidates`' query on a big page; the named metas only where the page text has OpenGraph's
# price. Below `_SMALL_PAGE` characters, compiling it costs more than the whole small-page way.
_CANDIDATES = 'script[type*="ld+json" i], [itemprop]'
_WITH_METAS = f"{_CANDIDATES}, meta[property], meta[name]"
_SMALL_PAGE = 8192


def observe(body: bytes, content_type: str, settings: PriceSettings) -> Reading:
    """The prices of a fetched body (HTML only)."""
    return read_prices(html_of(body, content_type), settings)


def html_of(body: bytes, content_type: str) -> str:
    """A fetched body's HTML, decoded; ExtractionError for a body that is not HTML."""
    media_type, _, params = content_type.partition(";")
    media_type = media_type.strip().lower()
    text = decode(body, params if "charset" in params.lower() else _document_charset(body))
    if media_type not in ("text/html", "application/xhtml+xml", "") or (
        not media_type and not looks_html(text)
    ):
        raise ExtractionError(f"price mode reads HTML pages, not {media_type or 'this body'}")
    return text


def _document_charset(body: bytes) -> str:
    """The charset the document declares (`<meta charset>`, `http-equiv`), for a response
    whose header names none; a BOM wins over both."""
    if body.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        return "charset=utf-16" if body[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
    found = _CHARSET.search(body[:4096].lower())
    if found is None:
        return ""
    label = found.group(1).decode("ascii")
    return f"charset={'windows-1252' if label in _WINDOWS_1252 else label}"


def validate_price_settings(settings: PriceSettings) -> None:
    for selector in (settings.selector, settings.name):
        if selector is not None:
            try:
                LexborHTMLParser("").css(selector)
            except (SelectolaxError, ValueError) as err:
                raise ExtractionError(f"invalid CSS selector {selector!r}: {err}") from err


def read_prices(html: str, settings: PriceSettings) -> Reading:
    """The page's prices in page order, uniquely named, and what was skipped; ExtractionError
    if there are none."""
    tree = LexborHTMLParser(html)
    skipped: list[str] = []
    if settings.selector is not None:
        found = _selected(tree, settings, skipped)
        if not found:
            raise ExtractionError("; ".join(skipped))
    else:
        found = _structured(html, tree, skipped)
        if not found:
            raise ExtractionError(
                "no prices on the page: no JSON-LD offer, microdata price or OpenGraph "
                "product:price; name them with a price selector"
                + (f" ({'; '.join(skipped)})" if skipped else "")
            )
    return Reading(_unique_names(found), skipped)


# No price has this many integer digits or decimal places (a satoshi is 8 places): such a
# value (`1E+999999` in a JSON-LD offer) is a skipped value, never a stored amount that
# Postgres, a chart or a terminal then has to hold.
MAX_INTEGER_DIGITS = 15
MAX_DECIMAL_PLACES = 8


class Implausible(ExtractionError):
    """An amount no real price has."""


def parse_amount(text: str, where: str, *, structured: bool = False) -> tuple[Decimal, str | None]:
    """Amount and currency (an ISO code where the symbol is unambiguous, else as written) of
    one price text; Implausible for a magnitude or precision no price has."""
    amount, currency = _parse_amount(text, where, structured)
    return _plausible(amount, text, where), currency


def _plausible(amount: Decimal, text: str, where: str) -> Decimal:
    exponent = amount.normalize().as_tuple().exponent
    if amount and (
        amount.adjusted() >= MAX_INTEGER_DIGITS
        or (isinstance(exponent, int) and -exponent > MAX_DECIMAL_PLACES)
    ):
        said = f"{where}: " if where else ""
        raise Implausible(
            f"{said}{text.strip()[:40]!r} is no price (more than {MAX_INTEGER_DIGITS} digits "
            f"or {MAX_DECIMAL_PLACES} decimal places)"
        )
    return amount


def _parse_amount(text: str, where: str, structured: bool) -> tuple[Decimal, str | None]:
    if structured and text.isascii():  # schema.org: a plain number with a dot (the common case)
        try:
            amount = Decimal(text)  # which, like split(), ignores surrounding whitespace
            if amount.is_finite():
                return amount, None
        except InvalidOperation:
            pass
    text = " ".join(_plain(text).split())
    if structured:
        try:
            amount = Decimal(text)
            if amount.is_finite():
                return amount, None
        except InvalidOperation:
            pass
    return _amount_of(text, where)


def _amount_of(text: str, where: str) -> tuple[Decimal, str | None]:
    """`parse_amount` of a text already plain, its spaces single and stripped."""
    return _simple_amount(_SIMPLE.fullmatch(text), text, where)


def _simple_amount(
    simple: re.Match[str] | None, text: str, where: str
) -> tuple[Decimal, str | None]:
    """`_amount_of`, given `_SIMPLE.fullmatch(text)`."""
    if simple is None or (simple["before"] and simple["after"]):
        return _price_parser_amount(text, where)
    # What price-parser reads in it, without its search (no symbol here has three decimals).
    return _matched_number(simple, text, where), _iso(simple["before"] or simple["after"])


def _worded_amount(worded: re.Match[str], text: str) -> tuple[Decimal, str | None]:
    """`_price_parser_amount` of a text `_WORDED` matches: price-parser's currency search of
    the whole text, and the number as `_simple_amount` reads it."""
    currency = extract_currency_symbol(text, None)
    currency = _iso(currency.strip() if currency is not None else None)
    if currency in THREE_DECIMALS:  # `423.923 KD`: the fils are price-parser's to read
        return _price_parser_amount(text, "")
    return _matched_number(worded, text, ""), currency


def _matched_number(found: re.Match[str], text: str, where: str) -> Decimal:
    """The `_AMOUNT` a match found, as price-parser's `parse_number` reads it (a leading zero
    makes its separator the decimal one)."""
    amount_text = found["amount"].replace("'", "")
    zero = _LEADING_ZERO.fullmatch(amount_text)
    amount = parse_number(amount_text, zero.group(1) if zero else None)
    if amount is None:
        raise ExtractionError(f"{where}: no price in {text[:80]!r}")
    return amount


def _price_parser_amount(text: str, where: str) -> tuple[Decimal, str | None]:
    parsed = ParsedPrice.fromstring(text)
    if parsed.amount_text and (zero := _LEADING_ZERO.fullmatch(parsed.amount_text)):
        parsed = ParsedPrice.fromstring(text, decimal_separator=zero.group(1))
    currency = _iso(parsed.currency)
    if (
        currency in THREE_DECIMALS
        and parsed.amount_text
        and (last := _LAST_SEPARATOR.fullmatch(parsed.amount_text))
    ):  # `423.923 KD`, `123,456.789 OMR`: three digits after the last separator are fils
        parsed = ParsedPrice.fromstring(text, decimal_separator=last.group(1))
    if parsed.amount is None:
        raise ExtractionError(f"{where}: no price in {text[:80]!r}")
    return parsed.amount, currency


def _plain(text: str) -> str:
    """Typographic separators as ASCII ones, and every decimal digit (Arabic-Indic,
    Devanagari, full-width) as its ASCII digit."""
    if text.isascii() or _NOT_PLAIN.search(text) is None:  # `€12`: nothing to do
        return text
    text = text.translate(_SEPARATORS)
    if text.isascii():
        return text
    return _OTHER_DIGIT.sub(lambda digit: str(unicodedata.decimal(digit.group())), text)


def _iso(currency: str | None) -> str | None:
    if currency is None:
        return None
    currency = currency.strip()
    return ISO_CURRENCY.get(currency, currency.upper() if len(currency) == 3 else currency)


def _stock(value: Any) -> str | None:
    """schema.org's availability word from a URL (`https://schema.org/InStock`), a short name
    or OpenGraph's `in stock`."""
    return _stock_word(value) if isinstance(value, str) else None


@functools.lru_cache(maxsize=256)
def _stock_word(value: str) -> str | None:
    if not value.strip():
        return None
    word = _LAST_SEGMENT.split(value.strip())[-1].strip().lower().replace("_", " ")
    return STOCK.get(word) or STOCK.get(word.replace(" ", ""))


# --- a price selector ---------------------------------------------------------------------


def _selected(tree: LexborHTMLParser, settings: PriceSettings, skipped: list[str]) -> list[Price]:
    """One price per visible match; with `name`, the named element's text is left out of the
    amount (a plan called `CX22` must not read as 22, or `CX22 4,51 €` as 224.51)."""
    assert settings.selector is not None
    selector, name = settings.selector, settings.name
    matches = _css(tree.root, selector)
    if not matches:
        skipped.append(f"price selector {selector!r} matched nothing")
    matches = _outermost(matches)
    asides = [_set_aside(match) for match in matches]
    around = _neighbourhoods(matches)
    as_named = all(asides)  # nothing else to choose: the user named these, so they are read
    found = []
    told: set[int] = set()  # screen-reader texts read for hidden parts (`_spoken_beside`)
    for position, (match, aside) in enumerate(zip(matches, asides, strict=True), 1):
        if aside == "hidden" and settings.attribute is not None:
            aside = None  # an attribute is read, not shown
        if aside and not as_named:
            skipped.append(f"{_match(match, position)}: {aside}")
            continue
        named = next(iter(_css(match, name)), None) if name is not None else None
        if name is not None and named is None:
            skipped.append(f"{_match(match, position)}: price name {name!r} matched nothing")
            continue
        attribute = settings.attribute
        try:
            if attribute is not None:
                value = match.attributes.get(attribute)
                if not value:
                    skipped.append(f"{_match(match, position)}: no {attribute!r}")
                    continue
                amount, currency = parse_amount(value, "", structured=True)
                regular, least = None, False
            elif aside == "hidden" and (spoken := _spoken_beside(match, named)) is not None:
                if spoken.mem_id in told:
                    continue  # another part of the same price
                told.add(spoken.mem_id)
                amount, currency = parse_amount(spoken.text(separator=" "), "")
                regular, least = None, False
                aside = "hidden; its screen-reader text"
            else:
                try:
                    amount, currency, regular, least = _shown_amount(match, named)
                except ExtractionError:
                    if (attribute := _price_attribute(match)) is None:
                        raise
                    amount, currency = parse_amount(
                        match.attributes[attribute] or "", "", structured=True
                    )
                    regular, least = None, False
        except Implausible as err:
            skipped.append(f"price selector {selector!r}: {_match(match, position)}: {err}")
            continue
        except ExtractionError:
            skipped.append(f"price selector {selector!r}: no price in {_match(match, position)}")
            continue
        label = " ".join(named.text().split()) if named is not None else f"price {position}"
        flags = [aside] if aside else []
        if least:
            flags.append("from")
        where = f"match {position}" + (f" [{attribute}]" if attribute else "")
        own = match.text(separator=" ")
        if named is not None:
            own = own.replace(named.text(separator=" "), " ", 1)
        period, per = periods.read(own, around[position - 1])
        found.append(
            Price(label, amount, currency, regular, None, where + _said(flags), period, per)
        )
    return found


# A price's neighbourhood, where its period is written (`<span>$10</span><span>/mo</span>`):
# at most this many ancestors, none holding another price or more than this much text.
NEIGHBOUR_LEVELS = 3
NEIGHBOUR_CHARS = 400


def _neighbourhoods(nodes: list[LexborNode]) -> list[list[str]]:
    """For each price element, the texts of its nearest ancestors that are its own (no other
    price element is in them), nearest first: where `/mo` or `billed annually` beside the
    amount is read. A pricing table's row is a plan's; the table is no plan's."""
    chains: list[list[LexborNode]] = []
    holders: dict[int, int] = {}
    for node in nodes:
        chain: list[LexborNode] = []
        parent = node.parent
        while parent is not None and len(chain) < NEIGHBOUR_LEVELS and parent.tag != "body":
            chain.append(parent)
            holders[parent.mem_id] = holders.get(parent.mem_id, 0) + 1
            parent = parent.parent
        chains.append(chain)
    found = []
    for chain in chains:
        texts = []
        for ancestor in chain:
            if holders[ancestor.mem_id] > 1:
                break
            text = ancestor.text(separator=" ")
            if len(text) > NEIGHBOUR_CHARS:
                break
            texts.append(text)
        found.append(texts)
    return found


def _spoken_beside(match: LexborNode, named: LexborNode | None) -> LexborNode | None:
    """The screen-reader text of the price a hidden part shows in pieces (Amazon's
    `a-offscreen` `$12.48` beside its `aria-hidden` `a-price-whole` `12`): the first
    screen-reader-only element with a number among the nearest three ancestors' children.
    None for a match that shows a price with its currency itself (WooCommerce's hidden
    `<ins>€9,99</ins>`, beside "Original price was: €12,99" for readers)."""
    with contextlib.suppress(ExtractionError):
        if _shown_amount(match, named)[1] is not None:
            return None
    node = match
    for _ in range(3):
        parent = node.parent
        if parent is None or parent.tag in ("body", "html"):
            return None
        for child in parent.iter():
            if (
                child.mem_id != node.mem_id
                and _spoken_only(child.attributes)
                and _HAS_DIGIT.search(child.text())
            ):
                return child
        node = parent
    return None


def _said(flags: list[str]) -> str:
    """What a reading is, beside where it was read: `match 2 (from)`, `match 1 (hidden)`."""
    return f" ({', '.join(flags)})" if flags else ""


def _outermost(matches: list[LexborNode]) -> list[LexborNode]:
    """The matches not inside another: a match inside one (`[class*=price]` on a price and its
    whole and fraction parts) is part of that price, not a price of its own."""
    if len(matches) < 2:
        return matches
    ids = {match.mem_id for match in matches}
    return [match for match in matches if not _inside(match, ids)]


def _price_attribute(match: LexborNode) -> str | None:
    """The attribute an element without text keeps its price in (`<meta content>`, `<input
    value>`, `data-price`), so that a selector naming it needs no `--price-attr`."""
    attributes = match.attributes
    if match.text().strip():
        return None
    for name in _PRICE_ATTRIBUTES:
        if attributes.get(name):
            return name
    return next((name for name, value in attributes.items() if "price" in name and value), None)


def _css(node: LexborNode | None, query: str) -> list[LexborNode]:
    """`node.css(query)`, by this thread's CSS engine (a parser builds its own at its first
    query, which costs as much as parsing a small page), each element once, as a browser's
    querySelectorAll: lexbor gives an element twice that two selectors of a list match
    (`.price, .sale` on `class="price sale"` would be two prices)."""
    if node is None:
        return []
    engine = getattr(_ENGINE, "selector", None)
    if engine is None:
        # One per thread: it is not thread-safe. (Its stub's __init__ has no return type.)
        engine = _ENGINE.selector = LexborCSSSelector()  # type: ignore[no-untyped-call]
    found = engine.find(query, node)
    if "," not in query or len(found) < 2:
        return found
    seen: set[int] = set()
    once = []
    for element in found:
        if element.mem_id not in seen:
            seen.add(element.mem_id)
            once.append(element)
    return once


def _match(match: LexborNode, position: int) -> str:
    """A match as a reader sees it, for a skipped value's line."""
    return f"match {position} {' '.join(match.text(separator=' ').split())[:80]!r}"


def _shown_amount(
    match: LexborNode, named: LexborNode | None
) -> tuple[Decimal, str | None, Decimal | None, bool]:
    """The amount a match shows now: struck-out and hidden parts and the name are set aside
    (a struck-out amount is the regular price), then the number that reads as a price; and
    whether it is a "from" price (the least of several)."""
    struck: list[str] = []
    child = match.child
    if child is not None and child.next is None and child.tag == "-text":
        text = child.text_content or ""  # text alone, the common case
    else:
        shown: list[str] = []
        spoken: list[str] = []
        _visible_text(match, named.mem_id if named is not None else None, shown, struck, spoken)
        # A screen reader's text with a number is the price its visible parts show in pieces.
        parts = spoken if any(map(_HAS_DIGIT.search, spoken)) else shown
        text = _GLUE.sub("", "\0".join(parts)).replace("\0", " ")
    text = _plain(" ".join(text.split()))
    was = None
    if (simple := _SIMPLE.fullmatch(text)) is not None:  # one number: the common case
        amount, currency = _simple_amount(simple, text, "")
    elif (worded := _WORDED.fullmatch(text)) is not None:
        amount, currency = _worded_amount(worded, text)
    else:
        priced, was = _priced_part(text)
        if priced is None:
            raise ExtractionError("only counts and quantities")
        if priced is text:  # the whole text, which is no simple amount: price-parser's
            amount, currency = _price_parser_amount(text, "")
        else:  # plain already: parse_amount's work
            amount, currency = _amount_of(priced.strip(), "")
    regular = None
    for struck_text in struck if was is None else [*struck, was]:
        with contextlib.suppress(ExtractionError):
            regular = parse_amount(struck_text, "")[0]
            break
    least = not text.isdigit() and _FROM.search(text) is not None
    return _plausible(amount, text, ""), currency, regular, least


def _visible_text(
    node: LexborNode, named: int | None, shown: list[str], struck: list[str], spoken: list[str]
) -> None:
    """The text of a match's children, in order, without its name element and hidden parts;
    struck-out parts go to `struck`, screen-reader-only ones (`sr-only`) to `spoken`."""
    for child in node.iter(include_text=True):
        tag = child.tag
        if tag == "-text":
            shown.append(child.text_content or "")
            continue
        if child.mem_id == named:
            shown.append(" ")
            continue
        attributes = child.attributes  # built anew at each read: once per element
        if tag in ("del", "s", "strike") or _struck_by(attributes):
            struck.append(child.text(separator=" "))  # before hidden: WooCommerce hides <del>
        elif _spoken_only(attributes):
            spoken.append(child.text(separator=" "))
        elif not _hidden_by(attributes):
            _visible_text(child, named, shown, struck, spoken)


def _spoken_only(attributes: dict[str, str | None]) -> bool:
    """Visually hidden, for screen readers: an `sr-only`-style class or a clip/1px style."""
    if (classes := attributes.get("class")) and _spoken_class(classes):
        return True
    style = attributes.get("style")
    return style is not None and _CLIPPED.search(style) is not None


@functools.lru_cache(maxsize=1024)
def _spoken_class(classes: str) -> bool:
    return any(_SPOKEN_CLASS.fullmatch(token) for token in classes.split())


def _priced_part(text: str) -> tuple[str | None, str | None]:
    """Of several numbers, the one that reads as a price, with what is around it (None: every
    number is marked as no price), and the one after "was" if any (the regular price).

    A number is marked as no price by a quantity or unit after it (`2 Litre`, `1 New from`,
    `$49+`) or parentheses around it without a currency (`(22)`, `(min. order: 1)`); "was"
    before it makes it the regular price. Unless some number is marked, or a later number
    carries a currency before it where the first has none (`50 - $2.00`), or "now" is said
    before a later one, the whole text is price-parser's to read (`$119. 95`, `From 26 to
    50 €`). A currency beside a number and "now" before it count for it."""
    if _ONE_NUMBER.fullmatch(text):
        return text, None
    numbers = list(_NUMBER.finditer(text))
    if not numbers:
        return text, None

    def around(i: int) -> str:
        start = numbers[i - 1].end() if i else 0
        end = numbers[i + 1].start() if i + 1 < len(numbers) else len(text)
        return text[start:end]

    best, best_score, was, marked, counted_all = 0, -99, None, False, True
    first_has_currency = False
    for i, number in enumerate(numbers):
        before = text[numbers[i - 1].end() if i else 0 : number.start()]
        after = text[number.end() : numbers[i + 1].start() if i + 1 < len(numbers) else len(text)]
        prefix, suffix = _currency_before(before), _currency_after(after)
        in_parens = text.count("(", 0, number.start()) > text.count(")", 0, number.start())
        counted = bool(_NOT_AN_AMOUNT_AFTER.match(after)) or (in_parens and not (prefix or suffix))
        backwards = before[::-1]
        now = _NOW_BEFORE.match(backwards) is not None
        score = (4 if prefix or suffix else 0) + (2 if now else 0) - (4 if counted else 0)
        if _WAS_BEFORE.match(backwards):
            score -= 3
            was = around(i) if was is None else was
        if i == 0:
            first_has_currency = prefix or suffix
        marked = marked or counted or was is not None or (i > 0 and now)
        marked = marked or (i > 0 and prefix and not first_has_currency)
        counted_all = counted_all and counted
        if score > best_score:
            best, best_score = i, score
    if counted_all:
        return None, None
    if not marked:
        return text, None
    return around(best), was if was != around(best) else None


def _currency_before(before: str) -> bool:
    """Whether the last 1-4 characters before a number (and a space) are a currency."""
    before = before.removesuffix(" ")[-4:]
    return bool(before) and not before[-1].isspace() and _is_currency(before.split()[-1])


def _currency_after(after: str) -> bool:
    """Whether the first 1-4 characters after a number (and a space) are a currency."""
    after = after.removeprefix(" ")[:4]
    return bool(after) and not after[0].isspace() and _is_currency(after.split()[0])


@functools.lru_cache(maxsize=4096)
def _is_currency(token: str) -> bool:
    """Whether the token beside a number is a currency (`$`, `€`, `EUR`, `zł`)."""
    return ParsedPrice.fromstring(token).currency is not None


def _set_aside(node: LexborNode) -> str | None:
    """`hidden` or `struck out` if the node or an ancestor is: hidden by the page itself
    (`hidden`, `aria-hidden`, inline `display:none`: a yearly price behind a monthly toggle),
    or struck out (`<del>`, a "was" class); None if it is shown as it is."""
    current: LexborNode | None = node
    while current is not None and (tag := current.tag) not in ("body", "html"):
        if tag in ("del", "s", "strike"):
            return "struck out"
        if (attributes := current.attributes) and (aside := _aside_by(attributes)):
            return aside
        current = current.parent
    return None


def _aside_by(attributes: dict[str, str | None]) -> str | None:
    """One read of the attributes for both questions; a class alone (most elements) asks one."""
    if len(attributes) == 1 and (classes := attributes.get("class")) is not None:
        return "struck out" if _struck_class(classes) else None
    if _struck_by(attributes):
        return "struck out"
    return "hidden" if _hidden_by(attributes) else None


def _hidden_by(attributes: dict[str, str | None]) -> bool:
    style = attributes.get("style")
    return (
        "hidden" in attributes
        or attributes.get("aria-hidden") == "true"
        or (style is not None and _HIDING_STYLE.search(style) is not None)
    )


def _struck_here(node: LexborNode) -> bool:
    """`<del>`, `<s>`, `<strike>`, a line-through style or a "was"/"compare at" class."""
    return node.tag in ("del", "s", "strike") or _struck_by(node.attributes)


def _struck_by(attributes: dict[str, str | None]) -> bool:
    return "line-through" in (attributes.get("style") or "") or _struck_class(
        attributes.get("class") or ""
    )


@functools.lru_cache(maxsize=1024)
def _struck_class(classes: str) -> bool:
    return any(_STRUCK_CLASS.search(token) for token in classes.split())


# --- structured data ------------------------------------------------------------------------


def _structured(html: str, tree: LexborHTMLParser, skipped: list[str]) -> list[Price]:
    """The first kind of structured data the page has, unless its prices are the struck-out
    ones and another kind's are not (a JSON-LD regular price beside OpenGraph's sale price).
    A kind is read where one walk of the tree finds its elements (OpenGraph's where its
    `price:amount` is also in the page text): a page without structured data costs that walk."""
    scripts, metas, itemprop = _candidates(tree, html, "price:amount" in html)
    kinds: list[tuple[str, list[Price]]] = []
    # The same offer twice in one kind (a variant's copy, a product in two blocks) is one price.
    if scripts and (found := _once(_json_ld(scripts, skipped))):
        kinds.append(("JSON-LD", found))
    if itemprop and (found := _once(_microdata(tree, skipped))):
        kinds.append(("microdata", found))
    if metas and (found := _open_graph(metas, skipped)):
        kinds.append(("OpenGraph", found))
    if len(kinds) <= 1 or len({tuple(p.amount for p in found) for _, found in kinds}) == 1:
        return kinds[0][1] if kinds else []  # one kind, or all say the same
    regular = {p.regular for _, found in kinds for p in found if p.regular is not None}
    regular |= _struck_amounts(tree)
    for kind, found in kinds:
        if not any(p.amount in regular for p in found):
            passed_over = kinds[: kinds.index((kind, found))]
            for other, passed in passed_over:
                amounts = ", ".join(f"{p.amount}" for p in passed)
                skipped.append(f"{other} {amounts}: the struck-out price; {kind} is read")
            return _completed(found, [p for _, passed in passed_over for p in passed])
    return kinds[0][1]


def _once(prices: list[Price]) -> list[Price]:
    """Each price once, in page order (equal: the same name, amount, currency, regular price
    and stock)."""
    return list(dict.fromkeys(prices)) if len(prices) > 1 else prices


def _candidates(
    tree: LexborHTMLParser, html: str, open_graph: bool
) -> tuple[list[LexborNode], list[LexborNode], bool]:
    """The JSON-LD scripts, the named metas (with `open_graph`), and whether any element may
    have an `itemprop`. Names and the type are matched in any case, as `itemProp` and `LD+JSON`
    are written. A big page takes one walk of the tree; a small one its scripts and metas by
    tag and a search of its lowercased text for `itemprop` (which may also be text: then
    `_microdata` finds none)."""
    if len(html) < _SMALL_PAGE:
        scripts = [node for node in tree.tags("script") if _is_json_ld(node.attributes)]
        metas = [n for n in tree.tags("meta") if _is_named(n.attributes)] if open_graph else []
        return scripts, metas, "itemprop" in html.lower()
    scripts, metas, itemprop = [], [], False
    for node in _css(tree.root, _WITH_METAS if open_graph else _CANDIDATES):
        tag = node.tag
        if tag != "script" and tag != "meta":
            itemprop = True
            continue
        attributes = node.attributes
        itemprop = itemprop or "itemprop" in attributes
        if tag == "script":
            if _is_json_ld(attributes):
                scripts.append(node)
        elif open_graph and _is_named(attributes):
            metas.append(node)
    return scripts, metas, itemprop


def _is_json_ld(attributes: dict[str, str | None]) -> bool:
    return "ld+json" in (attributes.get("type") or "").lower()


def _is_named(attributes: dict[str, str | None]) -> bool:
    return "property" in attributes or "name" in attributes


def _completed(found: list[Price], passed: list[Price]) -> list[Price]:
    """One product told by two kinds: the price read keeps the passed-over one's amount as
    its regular price, and its name, currency, stock and period where it has none of its
    own."""
    if len(found) != 1 or len(passed) != 1:
        return found
    price, other = found[0], passed[0]
    return [
        replace(
            price,
            name=other.name if price.name == "price" else price.name,
            regular=price.regular or (other.amount if other.amount > price.amount else None),
            currency=price.currency or other.currency,
            availability=price.availability or other.availability,
            period=price.period or other.period,
            per=price.per or other.per,
        )
    ]


def _struck_amounts(tree: LexborHTMLParser) -> set[Decimal]:
    """Amounts the page shows struck out, or after "was"."""
    found: set[Decimal] = set()
    body = tree.body
    if body is None:
        return found
    for node in _css(body, f"{_STRUCK}, [class], [style*=line-through]"):
        if not _struck_here(node):
            continue
        with contextlib.suppress(ExtractionError):
            found.add(parse_amount(node.text(), "")[0])
    return found


def _json_ld(scripts: list[LexborNode], skipped: list[str]) -> list[Price]:
    found: list[Price] = []
    for position, script in enumerate(scripts, 1):
        data = _lenient_json(script.text())
        if data is None:
            skipped.append(f"JSON-LD block {position}: not JSON")
            continue
        for offer, product in _offers(data, None):
            found.extend(_offer_prices(offer, product, skipped))
    return found


def _lenient_json(text: str) -> Any:
    """JSON as shops serve it: strict but for raw control characters in strings (the common
    case, fast), then without comments and trailing commas, then repaired by json_repair (a
    missing brace, single quotes), which takes a thousand times as long."""
    text = text.strip()
    for wrapper in (("<!--", "-->"), ("<![CDATA[", "]]>"), ("//<![CDATA[", "//]]>")):
        if text.startswith(wrapper[0]):
            text = text.removeprefix(wrapper[0]).strip().removesuffix(wrapper[1]).strip()
            text = text.removesuffix("//").strip()
    if not text:
        return None
    try:
        return _JSON.decode(text)
    except json.JSONDecodeError:
        pass
    try:
        return _JSON.decode(_JSON_NOISE.sub(_kept_string, text))
    except json.JSONDecodeError:
        pass
    repaired = json_repair.loads(text)
    return repaired if isinstance(repaired, dict | list) and repaired else None


def _kept_string(noise: re.Match[str]) -> str:
    return noise.group(1) or ""


def _types(node: dict[str, Any]) -> set[str]:
    """`@type` or `type`, short or as a URL (`http://schema.org/Offer`, `schema:Offer`)."""
    value = node["@type"] if "@type" in node else node.get("type")
    if isinstance(value, str):
        return {_short_type(value)}
    values = value if isinstance(value, list) else []
    return {_short_type(v) for v in values if isinstance(v, str)}


@functools.lru_cache(maxsize=1024)
def _short_type(value: str) -> str:
    return _LAST_SEGMENT.split(value)[-1]


def _offers(
    node: Any,
    product: str | None,
    in_offers: bool = False,
    found: list[tuple[dict[str, Any], str | None]] | None = None,
) -> list[tuple[dict[str, Any], str | None]]:
    """Every offer in a JSON-LD tree, with the name of the product it is in (added to `found`).
    An untyped object under `offers` that carries a price is an offer too."""
    found = [] if found is None else found
    if isinstance(node, list):
        for item in node:
            if isinstance(item, _CONTAINERS):  # a string or number holds no offer
                _offers(item, product, in_offers, found)
        return found
    if not isinstance(node, dict):
        return found
    types = _types(node)
    if types & OFFER_TYPES or (in_offers and not types and not PRICE_KEYS.isdisjoint(node)):
        inner = _offers(node["offers"], product, True) if node.get("offers") else []
        if any(_has_price(offer) for offer, _ in inner):
            found += inner  # the plans themselves, not their low and high
        else:
            found.append((node, product))
        return found
    if isinstance(node.get("name"), str) and "offers" in node:
        product = node["name"]
    for key, value in node.items():
        if key != "@context" and isinstance(value, _CONTAINERS):
            _offers(value, product, key == "offers", found)
    return found


def _has_price(offer: dict[str, Any]) -> bool:
    return any(offer.get(k) not in (None, "") for k in ("price", "lowPrice", "priceSpecification"))


def _offer_prices(offer: dict[str, Any], product: str | None, skipped: list[str]) -> list[Price]:
    name = _first_name(offer.get("name"), offer.get("sku"), product)
    where = f"JSON-LD offer {name!r}"
    currency = offer.get("priceCurrency")
    stock = _stock(offer.get("availability"))
    specs = offer.get("priceSpecification") or []
    regular = None
    # (name, value, currency, the specification its period is read from), as the page shows
    specified: list[tuple[str, Any, Any, dict[str, Any]]] = []
    unit_spec = offer  # the offer's own price: its first specification's period
    for spec, part in _specifications(specs):
        kinds = {_short_type(str(spec.get("priceType", "")))} | _types(spec)
        value = spec.get("price")
        label = f"{name} ({part})" if part else name
        if kinds & REGULAR_PRICE_TYPES:  # the struck-out price: kept as the regular one
            regular = regular if regular is not None else _amount(value, where, skipped)
            continue
        unit_spec = spec if unit_spec is offer else unit_spec
        if spec.get("validForMemberTier") is not None:
            specified.append((f"{label} (member)", value, spec.get("priceCurrency"), spec))
        elif value is not None:
            specified.append((label, value, spec.get("priceCurrency"), spec))
    price = offer.get("price")
    if price is not None and (str(price).strip() or not specified):
        shown = [(name, price, currency, unit_spec), *(s for s in specified if s[0] != name)]
    else:
        shown = specified
    for key, suffix in (("lowPrice", " (low)"), ("highPrice", " (high)")):
        if (value := offer.get(key)) is not None:
            shown.append((name + suffix, value, currency, unit_spec))
    prices = []
    for label, value, own_currency, unit_of in shown:
        if value is None:
            continue
        amount_currency = _amount_and_currency(value, where, skipped)
        if amount_currency is None:
            continue
        amount, written = amount_currency
        said = own_currency or currency
        prices.append(
            Price(
                label,
                amount,
                _iso(said) if isinstance(said, str) and said else written,
                regular if label == name and regular is not None and regular > amount else None,
                stock,
                where,
                *periods.from_structured(unit_of),
            )
        )
    return prices


def _specifications(specs: Any) -> list[tuple[dict[str, Any], str | None]]:
    """An offer's price specifications, each with the name of the part it is (None: the
    whole price): a `CompoundPriceSpecification` is its own price if it has one, then its
    `priceComponent`s (a downpayment and instalments, a unit price and a fee), named by
    `name` or `priceComponentType`."""
    found: list[tuple[dict[str, Any], str | None]] = []
    for spec in specs if isinstance(specs, list) else [specs]:
        if not isinstance(spec, dict):
            continue
        found.append((spec, None))
        parts = spec.get("priceComponent") or []
        for position, part in enumerate(parts if isinstance(parts, list) else [parts], 1):
            if isinstance(part, dict):
                kind = part.get("priceComponentType")
                named = part.get("name") or (_short_type(kind) if isinstance(kind, str) else None)
                found.append((part, named if isinstance(named, str) else f"part {position}"))
    return found


def _first_name(*names: Any) -> str:
    for name in names:
        if isinstance(name, str) and name:
            return name
    return "price"


def _amount(value: Any, where: str, skipped: list[str]) -> Decimal | None:
    found = _amount_and_currency(value, where, skipped)
    return found[0] if found else None


def _amount_and_currency(
    value: Any, where: str, skipped: list[str]
) -> tuple[Decimal, str | None] | None:
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, dict):
        value = value.get("@value", value.get("value"))
    text = "" if value is None or isinstance(value, bool) else str(value)
    if not text or text.isspace():
        skipped.append(f"{where}: an empty price")
        return None
    try:
        return parse_amount(text, where, structured=True)
    except ExtractionError as err:
        skipped.append(str(err))
        return None


def _microdata(tree: LexborHTMLParser, skipped: list[str]) -> list[Price]:
    found = []
    nodes, owned, loose = _itemprops(tree)
    taken = {node.mem_id for node in nodes}
    nodes = [node for node in nodes if not _inside(node, taken)]  # the same price, nested
    around = _neighbourhoods(nodes)
    for node, neighbours in zip(nodes, around, strict=True):
        props = (node.attributes.get("itemprop") or "").split()
        prop = next(p for p in PRICE_PROPS if p in props)
        scope = _scope(node)
        content = node.attributes.get("content")
        where = f"microdata {prop}"
        try:
            if content and content.strip():
                try:
                    amount, written = parse_amount(content, where, structured=True)
                except ExtractionError:  # `content="itemprop value"`: the text may be it
                    amount, written = parse_amount(node.text(), where)
            else:
                amount, written = parse_amount(node.text(), where)
        except ExtractionError as err:
            skipped.append(str(err))
            continue
        currency = _property(owned, scope, "priceCurrency") if scope is not None else None
        if scope is None and loose is not None:
            currency = loose.attributes.get("content") or loose.text()  # no item: the page's
        stock = _stock(_property(owned, scope, "availability")) if scope is not None else None
        spec = {p: _property(owned, scope, p) for p in PERIOD_PROPS} if scope is not None else {}
        period, per = periods.read(node.text(separator=" "), neighbours, spec)
        name = None
        while scope is not None and name is None:
            name = _property(owned, scope, "name") or _property(owned, scope, "sku")
            scope = _scope(scope)
        label = name or "price"
        if prop != "price":
            label += " (low)" if prop == "lowPrice" else " (high)"
        currency = _iso(currency) if currency else written
        found.append(Price(label, amount, currency, None, stock, where, period, per))
    return found


def _inside(node: LexborNode, taken: set[int]) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.mem_id in taken:
            return True
        parent = parent.parent
    return False


def _scope(node: LexborNode) -> LexborNode | None:
    parent = node.parent
    while parent is not None and "itemscope" not in parent.attributes:
        parent = parent.parent
    return parent


def _itemprops(
    tree: LexborHTMLParser,
) -> tuple[list[LexborNode], dict[tuple[int, str], LexborNode], LexborNode | None]:
    """In one walk: the price elements (`price`, `lowPrice`, `highPrice`) in page order, each
    item's first own element of the properties a price reads, by (item, property), and the
    page's first `priceCurrency` (a query per property costs more to compile than to run)."""
    prices: list[LexborNode] = []
    owned: dict[tuple[int, str], LexborNode] = {}
    loose = None
    for node in _css(tree.root, "[itemprop]"):
        props = (node.attributes.get("itemprop") or "").split()
        if any(prop in PRICE_PROPS for prop in props):
            prices.append(node)
        if wanted := [prop for prop in props if prop in ITEM_PROPS]:
            if loose is None and "priceCurrency" in wanted:
                loose = node
            if (owner := _scope(node)) is not None:
                for prop in wanted:
                    owned.setdefault((owner.mem_id, prop), node)
    return prices, owned, loose


def _property(owned: dict[tuple[int, str], LexborNode], scope: LexborNode, name: str) -> str | None:
    """The scope's own property: not one of an item nested in it (a venue's name)."""
    node = owned.get((scope.mem_id, name))
    if node is None:
        return None
    value = node.attributes.get("content") or node.attributes.get("href") or node.text()
    return " ".join(value.split()) or None


def _open_graph(metas: list[LexborNode], skipped: list[str]) -> list[Price]:
    tags: dict[str, str] = {}
    for node in metas:
        attributes = node.attributes
        key, content = (
            attributes.get("property") or attributes.get("name"),
            attributes.get("content"),
        )
        if key and content:
            tags.setdefault(key, content)

    def meta(*props: str) -> str | None:
        return next((tags[prop] for prop in props if prop in tags), None)

    listed = meta("product:price:amount", "og:price:amount")
    sale = meta("product:sale_price:amount", "og:sale_price:amount")
    value = sale or listed
    if value is None:
        return []
    where = "OpenGraph product:price:amount"
    found = _amount_and_currency(value, where, skipped)
    if found is None:
        return []
    amount, written = found
    standard = meta("og:price:standard_amount", "product:original_price:amount")
    standard = standard or (listed if sale else None)
    regular = _amount(standard, where, skipped) if standard else None
    currency = meta("product:price:currency", "og:price:currency") or written
    stock = _stock(meta("product:availability", "og:availability"))
    return [
        Price(
            meta("og:title") or "price",
            amount,
            _iso(currency),
            regular if regular is not None and regular > amount else None,
            stock,
            source=f"OpenGraph {'sale price' if sale else 'price'}",
        )
    ]


def _unique_names(prices: list[Price]) -> list[Price]:
    """Two plans with one name (a monthly and a yearly "Pro") stay two prices."""
    if len(prices) < 2:
        return prices
    seen: dict[str, int] = {}
    unique = []
    for price in prices:
        seen[price.name] = seen.get(price.name, 0) + 1
        name = price.name if seen[price.name] == 1 else f"{price.name} ({seen[price.name]})"
        unique.append(price if name == price.name else replace(price, name=name))
    return unique
