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
import re
from dataclasses import replace
from decimal import Decimal

from selectolax.lexbor import LexborHTMLParser, LexborNode, SelectolaxError

from pricewatch import periods
from pricewatch.models import PriceSettings
from pricewatch.prices import Price, Reading
from readers.normalise import ExtractionError, decode, looks_html
from readers.price_structured import (
    inside,
    structured_prices,
)
from readers.price_words import (
    MAX_INTEGER_DIGITS,
    SIMPLE,
    WORDED,
    Implausible,
    amount_of,
    css,
    hidden_by,
    neighbourhoods,
    parse_amount,
    plain,
    plausible,
    price_parser_amount,
    priced_part,
    set_aside,
    simple_amount,
    struck_by,
    worded_amount,
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
# A "from" price on a listing: the least a product costs (`ab € 1248,99`, `From $9`). Searched
# in the lower-cased text, no letter before a word asked after its first letter: re then skips
# ahead to the words' first letters, where it would try every word at every place.
_FROM_WORDS = ("from", "starting at", "as low as", "ab", "dès", "à partir de", "desde", "vanaf")
_FROM = re.compile(
    "(?:"
    + "|".join(rf"{word[0]}(?<!\w{word[0]}){re.escape(word[1:])}" for word in _FROM_WORDS)
    + r")(?!\w)\D{0,5}\d"
)
_PRICE_ATTRIBUTES = ("content", "value", "data-price", "data-price-amount", "data-amount")
# Searched in the lowercased head: a literal start is found fast, where re.I steps byte by byte.
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-z0-9_:.-]+)""")
# WHATWG: these labels mean windows-1252 (a `€` at 0x80), not Latin-1's control characters.
_WINDOWS_1252 = {"iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "ascii", "us-ascii"}


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
        found = selected(tree, settings, skipped)
        if not found:
            raise ExtractionError("; ".join(skipped))
    else:
        found = structured_prices(html, tree, skipped)
        if not found:
            raise ExtractionError(
                "no prices on the page: no JSON-LD offer, microdata price or OpenGraph "
                "product:price; name them with a price selector"
                + (f" ({'; '.join(skipped)})" if skipped else "")
            )
    return Reading(unique_names(found), skipped)


# --- a price selector ---------------------------------------------------------------------


def selected(tree: LexborHTMLParser, settings: PriceSettings, skipped: list[str]) -> list[Price]:
    """One price per visible match; with `name`, the named element's text is left out of the
    amount (a plan called `CX22` must not read as 22, or `CX22 4,51 €` as 224.51)."""
    assert settings.selector is not None
    selector, name, attribute = settings.selector, settings.name, settings.attribute
    matches = css(tree.root, selector)
    if not matches:
        skipped.append(f"price selector {selector!r} matched nothing")
    matches = _outermost(matches)
    asides = [set_aside(match) for match in matches]
    # A page that says no period anywhere (most shops' listings) asks none of its prices: its
    # text holds every match's and every neighbourhood's, each text node apart.
    root = tree.root
    page_says = root is not None and periods.may_say_any(root.text(separator=" "))
    around = neighbourhoods(matches) if page_says else []
    as_named = all(asides)  # nothing else to choose: the user named these, so they are read
    found = []
    told: set[int] = set()  # screen-reader texts read for hidden parts (`_spoken_beside`)
    for position, (match, aside) in enumerate(zip(matches, asides, strict=True), 1):
        if aside == "hidden" and attribute is not None:
            aside = None  # an attribute is read, not shown
        if aside and not as_named:
            skipped.append(f"{_match(match, position)}: {aside}")
            continue
        named = next(iter(css(match, name)), None) if name is not None else None
        if name is not None and named is None:
            skipped.append(f"{_match(match, position)}: price name {name!r} matched nothing")
            continue
        read_from = attribute  # the attribute the amount is read from, if any
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
                    amount, currency, regular, least = shown_amount(match, named)
                except ExtractionError:
                    if (read_from := _price_attribute(match)) is None:
                        raise
                    amount, currency = parse_amount(
                        match.attributes[read_from] or "", "", structured=True
                    )
                    regular, least = None, False
        except Implausible as err:
            skipped.append(f"price selector {selector!r}: {_match(match, position)}: {err}")
            continue
        except ExtractionError:
            skipped.append(f"price selector {selector!r}: no price in {_match(match, position)}")
            continue
        label = f"price {position}" if named is None else " ".join(named.text().split())
        period = per = None
        if page_says:
            own = match.text(separator=" ")
            if named is not None:
                own = own.replace(named.text(separator=" "), " ", 1)
            period, per = periods.read(own, around[position - 1])
        where = f"match {position}" if read_from is None else f"match {position} [{read_from}]"
        if aside or least:  # what the reading is: `match 2 (from)`
            where += f" ({', '.join(flag for flag in (aside, 'from' if least else None) if flag)})"
        found.append(Price(label, amount, currency, regular, None, where, period, per))
    return found


def _spoken_beside(match: LexborNode, named: LexborNode | None) -> LexborNode | None:
    """The screen-reader text of the price a hidden part shows in pieces (Amazon's
    `a-offscreen` `$12.48` beside its `aria-hidden` `a-price-whole` `12`): the first
    screen-reader-only element with a number among the nearest three ancestors' children.
    None for a match that shows a price with its currency itself (WooCommerce's hidden
    `<ins>€9,99</ins>`, beside "Original price was: €12,99" for readers)."""
    with contextlib.suppress(ExtractionError):
        if shown_amount(match, named)[1] is not None:
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


def _outermost(matches: list[LexborNode]) -> list[LexborNode]:
    """The matches not inside another: a match inside one (`[class*=price]` on a price and its
    whole and fraction parts) is part of that price, not a price of its own."""
    if len(matches) < 2:
        return matches
    ids = {match.mem_id for match in matches}
    return [match for match in matches if not inside(match, ids)]


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


def _match(match: LexborNode, position: int) -> str:
    """A match as a reader sees it, for a skipped value's line."""
    return f"match {position} {' '.join(match.text(separator=' ').split())[:80]!r}"


def shown_amount(
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
        visible_text(match, named.mem_id if named is not None else None, shown, struck, spoken)
        # A screen reader's text with a number is the price its visible parts show in pieces.
        parts = spoken if any(map(_HAS_DIGIT.search, spoken)) else shown
        text = _GLUE.sub("", "\0".join(parts)).replace("\0", " ")
    text = plain(" ".join(text.split()))
    was = None
    one_amount = True  # the text's digits are one `_AMOUNT`'s: 3 decimal places at most
    if (simple := SIMPLE.fullmatch(text)) is not None:  # one number: the common case
        amount, currency = simple_amount(simple, text, "")
    elif (worded := WORDED.fullmatch(text)) is not None:
        amount, currency = worded_amount(worded, text)
    else:
        one_amount = False
        priced, was = priced_part(text)
        if priced is None:
            raise ExtractionError("only counts and quantities")
        if priced is text:  # the whole text, which is no simple amount: price-parser's
            amount, currency = price_parser_amount(text, "")
        else:  # plain already: parse_amount's work
            amount, currency = amount_of(priced.strip(), "")
    regular = None
    for struck_text in struck if was is None else [*struck, was]:
        with contextlib.suppress(ExtractionError):
            regular = parse_amount(struck_text, "")[0]
            break
    least = simple is None and _FROM.search(text.lower()) is not None  # simple: no word
    if one_amount and amount.adjusted() < MAX_INTEGER_DIGITS:
        return amount, currency, regular, least  # plausible, without counting its places
    return plausible(amount, text, ""), currency, regular, least


def visible_text(
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
        if tag in ("del", "s", "strike") or struck_by(attributes):
            struck.append(child.text(separator=" "))  # before hidden: WooCommerce hides <del>
        elif _spoken_only(attributes):
            spoken.append(child.text(separator=" "))
        elif not hidden_by(attributes):
            visible_text(child, named, shown, struck, spoken)


def _spoken_only(attributes: dict[str, str | None]) -> bool:
    """Visually hidden, for screen readers: an `sr-only`-style class or a clip/1px style."""
    if (classes := attributes.get("class")) and _spoken_class(classes):
        return True
    style = attributes.get("style")
    return style is not None and _CLIPPED.search(style) is not None


@functools.lru_cache(maxsize=1024)
def _spoken_class(classes: str) -> bool:
    return any(_SPOKEN_CLASS.fullmatch(token) for token in classes.split())


def unique_names(prices: list[Price]) -> list[Price]:
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
