"""How a price is written, and how a page marks one as not the price: amounts, currencies and
stock words (parsed by Zyte's `price-parser` after typographic separators and non-Latin digits
are made plain), and the markup that hides a price or strikes it out. Shared by the readers of
price mode (`readers.price_reader`, `readers.price_structured`)."""

import functools
import re
import threading
import unicodedata
from decimal import Decimal, InvalidOperation
from typing import Any

from price_parser.parser import (
    DOLLAR_CODES,
    OTHER_CURRENCY_SYMBOLS,
    SAFE_CURRENCY_SYMBOLS,
    extract_price_text,
    parse_number,
)
from selectolax.lexbor import LexborCSSSelector, LexborNode

from readers.normalise import ExtractionError

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
SIMPLE = re.compile(rf"(?P<before>{_SYMBOL})? ?{_AMOUNT} ?(?P<after>{_SYMBOL})?")
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
# quantity after it (`priced_part` would read the whole text): price-parser's number is it,
# as a digit-free text before it and one that starts with neither a digit nor `.,'%` leave it
# (`worded_amount`; tests/test_prices.py compares the layouts with price-parser's reading).
WORDED = re.compile(
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
STRUCK = "del, s, strike"
# A class token that names a struck-out price: `was-price`, `price--compare`, `old-price`,
# `compare-at-price`, `strikethrough` (not `compare-table`: a plan comparison is no old price).
_WAS = r"(?:was|old|compare[-_]?at|compare|original|list|strike|strikethrough|crossed|before|rrp)"
_STRUCK_CLASS = re.compile(
    rf"(?<![a-z]){_WAS}[-_]*(?:price|amount)|(?:price|amount)[-_]*{_WAS}"
    r"|^(?:was|strike|strikethrough|crossed|line-through|compare-at)$",
    re.I,
)
_HIDING_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_SEPARATORS = str.maketrans(
    {"\u2019": "'", "\u02bc": "'", "\u2032": "'", "\u202f": " ", "\u2009": " ", "\u00a0": " ",
     "\u066b": ".", "\u066c": ",", "\u060c": ","}
)  # fmt: skip
LAST_SEGMENT = re.compile(r"[/:#]")  # `https://schema.org/InStock`, `schema:Offer`
_OTHER_DIGIT = re.compile(r"[^\D0-9]")  # a decimal digit other than 0-9
_NOT_PLAIN = re.compile(rf"[{''.join(chr(c) for c in _SEPARATORS)}]|{_OTHER_DIGIT.pattern}")
_ENGINE = threading.local()  # a CSS engine per thread (`css`)


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
    return plausible(amount, text, where), currency


def plausible(amount: Decimal, text: str, where: str) -> Decimal:
    if amount and (amount.adjusted() >= MAX_INTEGER_DIGITS or _places(amount) > MAX_DECIMAL_PLACES):
        said = f"{where}: " if where else ""
        raise Implausible(
            f"{said}{text.strip()[:40]!r} is no price (more than {MAX_INTEGER_DIGITS} digits "
            f"or {MAX_DECIMAL_PLACES} decimal places)"
        )
    return amount


def _places(amount: Decimal) -> int:
    """Decimal places without trailing zeros (`1.50`: 1), from `str`: half the time of
    `normalize().as_tuple()`, and every price a reader records asks."""
    written = str(amount)
    if "E" not in written:
        return len(written.partition(".")[2].rstrip("0"))
    exponent = amount.normalize().as_tuple().exponent
    return -exponent if isinstance(exponent, int) else 0


def _parse_amount(text: str, where: str, structured: bool) -> tuple[Decimal, str | None]:
    if structured and text.isascii():  # schema.org: a plain number with a dot (the common case)
        try:
            amount = Decimal(text)  # which, like split(), ignores surrounding whitespace
            if amount.is_finite():
                return amount, None
        except InvalidOperation:
            pass
    text = " ".join(plain(text).split())
    if structured:
        try:
            amount = Decimal(text)
            if amount.is_finite():
                return amount, None
        except InvalidOperation:
            pass
    return amount_of(text, where)


def amount_of(text: str, where: str) -> tuple[Decimal, str | None]:
    """`parse_amount` of a text already plain, its spaces single and stripped."""
    return simple_amount(SIMPLE.fullmatch(text), text, where)


def simple_amount(
    simple: re.Match[str] | None, text: str, where: str
) -> tuple[Decimal, str | None]:
    """`amount_of`, given `SIMPLE.fullmatch(text)`."""
    if simple is None or (simple["before"] and simple["after"]):
        return price_parser_amount(text, where)
    # What price-parser reads in it, without its search (no symbol here has three decimals).
    return _matched_number(simple, text, where), iso(simple["before"] or simple["after"])


def _alternation(symbols: list[str]) -> str:
    """A pattern that finds what `|`.join of the escaped symbols finds, as a trie: symbols that
    share a first character share one branch, in their order (the first that matches wins,
    as before), and after an empty one (the whole symbol matched) nothing else can win. re
    tries each branch of an alternation in turn: 300 symbols cost it 2-6 µs on a short text.
    Equal only where nothing after it can fail: after an empty rest, the cut symbols would be
    tried on backtracking (`_DOLLAR_CODE`'s lookahead is safe: its codes are three letters,
    none a prefix of another)."""
    ends = "" in symbols
    if ends:
        symbols = symbols[: symbols.index("")]
    by_first: dict[str, list[str]] = {}
    for symbol in symbols:
        by_first.setdefault(symbol[0], []).append(symbol[1:])
    branches = []
    for first, rests in by_first.items():
        if len(rests) == 1:  # no choice left: the symbol itself
            branches.append(re.escape(first + rests[0]))
        else:
            rest = _alternation(rests)
            branches.append(re.escape(first) + (f"(?:{rest})" if rest else ""))
    return "|".join(branches) + ("|" if ends and branches else "")


# price-parser's three currency searches (`extract_currency_symbol`), as tries.
_DOLLAR_CODE = re.compile(rf"\b(?:{_alternation(DOLLAR_CODES)})(?=\$?(?:[\W\d]|$))")
_SAFE_SYMBOL = re.compile(_alternation(SAFE_CURRENCY_SYMBOLS))
_OTHER_SYMBOL = re.compile(_alternation(OTHER_CURRENCY_SYMBOLS))


def currency_symbol(text: str) -> str | None:
    """price-parser's `extract_currency_symbol(text, None)`, 2-5 times faster: a dollar code
    (`NZD $`) if the text has a `$`, else the first unambiguous symbol, else the first other."""
    if "$" in text and (found := _DOLLAR_CODE.search(text)):
        return found.group()
    found = _SAFE_SYMBOL.search(text) or _OTHER_SYMBOL.search(text)
    return found.group() if found else None


def worded_amount(worded: re.Match[str], text: str) -> tuple[Decimal, str | None]:
    """`price_parser_amount` of a text `WORDED` matches: price-parser's currency search of
    the whole text, and the number as `simple_amount` reads it."""
    currency = iso(currency_symbol(text))
    if currency in THREE_DECIMALS:  # `423.923 KD`: the fils are price-parser's to read
        return price_parser_amount(text, "")
    return _matched_number(worded, text, ""), currency


def _matched_number(found: re.Match[str], text: str, where: str) -> Decimal:
    """The `_AMOUNT` a match found, as price-parser's `parse_number` reads it (a leading zero
    makes its separator the decimal one)."""
    amount_text = found["amount"].replace("'", "")
    if amount_text.isdigit():  # `[0-9]+`: what parse_number makes of it, a third of its time
        return Decimal(amount_text)
    zero = _LEADING_ZERO.fullmatch(amount_text)
    amount = parse_number(amount_text, zero.group(1) if zero else None)
    if amount is None:
        raise ExtractionError(f"{where}: no price in {text[:80]!r}")
    return amount


def price_parser_amount(text: str, where: str) -> tuple[Decimal, str | None]:
    """What price-parser's `Price.fromstring` reads, its currency searched once, and a leading
    zero's separator (`0,99`) or three digits after a three-decimal currency's (`423.923 KD`)
    taken as the decimal one."""
    currency = iso(currency_symbol(text))
    amount_text = extract_price_text(text)
    separator = None
    if amount_text and (zero := _LEADING_ZERO.fullmatch(amount_text)):
        separator = zero.group(1)
    if (
        currency in THREE_DECIMALS
        and amount_text
        and (last := _LAST_SEPARATOR.fullmatch(amount_text))
    ):
        separator = last.group(1)  # fils, not thousands
    amount = parse_number(amount_text, separator) if amount_text is not None else None
    if amount is None:
        raise ExtractionError(f"{where}: no price in {text[:80]!r}")
    if not any(map(str.isdigit, text)):  # "Free": zero, and no currency ("FR" of "FREE")
        return amount, None
    return amount, currency


def plain(text: str) -> str:
    """Typographic separators as ASCII ones, and every decimal digit (Arabic-Indic,
    Devanagari, full-width) as its ASCII digit."""
    if text.isascii() or _NOT_PLAIN.search(text) is None:  # `€12`: nothing to do
        return text
    text = text.translate(_SEPARATORS)
    if text.isascii():
        return text
    return _OTHER_DIGIT.sub(lambda digit: str(unicodedata.decimal(digit.group())), text)


def iso(currency: str | None) -> str | None:
    if currency is None:
        return None
    currency = currency.strip()
    return ISO_CURRENCY.get(currency, currency.upper() if len(currency) == 3 else currency)


def stock_of(value: Any) -> str | None:
    """schema.org's availability word from a URL (`https://schema.org/InStock`), a short name
    or OpenGraph's `in stock`."""
    return _stock_word(value) if isinstance(value, str) else None


@functools.lru_cache(maxsize=256)
def _stock_word(value: str) -> str | None:
    if not value.strip():
        return None
    word = LAST_SEGMENT.split(value.strip())[-1].strip().lower().replace("_", " ")
    return STOCK.get(word) or STOCK.get(word.replace(" ", ""))


# A price's neighbourhood, where its period is written (`<span>$10</span><span>/mo</span>`):
# at most this many ancestors, none holding another price or more than this much text.
NEIGHBOUR_LEVELS = 3
NEIGHBOUR_CHARS = 400


def neighbourhoods(nodes: list[LexborNode]) -> list[list[str]]:
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


def css(node: LexborNode | None, query: str) -> list[LexborNode]:
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


def priced_part(text: str) -> tuple[str | None, str | None]:
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
    return currency_symbol(token) is not None


def set_aside(node: LexborNode) -> str | None:
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
    if struck_by(attributes):
        return "struck out"
    return "hidden" if hidden_by(attributes) else None


def hidden_by(attributes: dict[str, str | None]) -> bool:
    style = attributes.get("style")
    return (
        "hidden" in attributes
        or attributes.get("aria-hidden") == "true"
        or (style is not None and _HIDING_STYLE.search(style) is not None)
    )


def struck_here(node: LexborNode) -> bool:
    """`<del>`, `<s>`, `<strike>`, a line-through style or a "was"/"compare at" class."""
    return node.tag in ("del", "s", "strike") or struck_by(node.attributes)


def struck_by(attributes: dict[str, str | None]) -> bool:
    return "line-through" in (attributes.get("style") or "") or _struck_class(
        attributes.get("class") or ""
    )


@functools.lru_cache(maxsize=1024)
def _struck_class(classes: str) -> bool:
    return any(_STRUCK_CLASS.search(token) for token in classes.split())
