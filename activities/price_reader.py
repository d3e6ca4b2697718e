"""Read the named prices on a page (price mode): structured data first, or a CSS selector.

Structured data, the first kind the page has: JSON-LD (`Offer`, `AggregateOffer`,
`Product.offers`), then microdata (`itemprop=price`), then OpenGraph (`product:price:amount`).
With a price selector, each match is one price, named by `name` (a selector relative to the
match) or by its position. Amounts are parsed by Zyte's `price-parser`: `1.234,56 €`,
`$1,234.56`, `12,-`, `CHF 12.-` (with an en dash), `from $9/mo`. A price that cannot be read is an
ExtractionError naming where it looked and what it found: never a guessed amount.
"""

import json
import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

from price_parser import Price as ParsedPrice
from selectolax.lexbor import LexborHTMLParser, LexborNode, SelectolaxError

from activities.normalise import ExtractionError, decode, looks_html
from pricewatch.models import PriceSettings
from pricewatch.prices import Price, Reading

OFFER_TYPES = {"Offer", "AggregateOffer"}
# "0.007" or "0,50": a leading zero means the separator is a decimal one (price-parser would
# read "$0.007/hour" as 7: three digits after a dot look like thousands to it).
_LEADING_ZERO = re.compile(r"0([.,])\d+")


def observe(body: bytes, content_type: str, settings: PriceSettings) -> Reading:
    """The prices of a fetched body (HTML only)."""
    media_type, _, params = content_type.partition(";")
    media_type = media_type.strip().lower()
    text = decode(body, params)
    if media_type not in ("text/html", "application/xhtml+xml", "") or (
        not media_type and not looks_html(text)
    ):
        raise ExtractionError(f"price mode reads HTML pages, not {media_type or 'this body'}")
    return Reading(read_prices(text, settings))


def validate_price_settings(settings: PriceSettings) -> None:
    for selector in (settings.selector, settings.name):
        if selector is not None:
            try:
                LexborHTMLParser("").css(selector)
            except (SelectolaxError, ValueError) as err:
                raise ExtractionError(f"invalid CSS selector {selector!r}: {err}") from err


def read_prices(html: str, settings: PriceSettings) -> list[Price]:
    """The page's prices in page order, uniquely named; ExtractionError if there are none."""
    tree = LexborHTMLParser(html)
    if settings.selector is not None:
        found = list(_selected(tree, settings.selector, settings.name))
    else:
        found = _json_ld(tree) or _microdata(tree) or _open_graph(tree)
        if not found:
            raise ExtractionError(
                "no prices on the page: no JSON-LD offer, microdata price or OpenGraph "
                "product:price; name them with a price selector"
            )
    return _unique_names(found)


def parse_amount(text: str, where: str, *, structured: bool = False) -> tuple[Decimal, str | None]:
    """Amount and currency (as written: `€`, `EUR`, `CHF`) of one price text."""
    text = " ".join(text.split())
    if structured:  # schema.org: a plain number with a dot
        try:
            return Decimal(text), None
        except InvalidOperation:
            pass
    parsed = ParsedPrice.fromstring(text)
    if parsed.amount_text and (zero := _LEADING_ZERO.fullmatch(parsed.amount_text)):
        parsed = ParsedPrice.fromstring(text, decimal_separator=zero.group(1))
    if parsed.amount is None:
        raise ExtractionError(f"{where}: no price in {text[:80]!r}")
    return parsed.amount, parsed.currency


def _selected(tree: LexborHTMLParser, selector: str, name: str | None) -> Iterator[Price]:
    """One price per match; with `name`, the named element's text is left out of the amount
    (a plan called `CX22` must not read as 22, or `CX22 4,51 €` as 224.51)."""
    matches = tree.css(selector)
    if not matches:
        raise ExtractionError(f"price selector {selector!r} matched nothing")
    for position, match in enumerate(matches, 1):
        shown = " ".join(match.text(separator=" ").split())[:80]
        text, label = match.text(), None
        if name is not None:
            named = match.css_first(name)
            if named is None:
                raise ExtractionError(
                    f"price name selector {name!r} matched nothing inside price {position} "
                    f"({shown!r})"
                )
            text = text.replace(named.text(), " ", 1)
            label = " ".join(named.text().split())
        try:
            amount, currency = parse_amount(text, f"price selector {selector!r}")
        except ExtractionError:  # name what was there, as a reader sees it
            raise ExtractionError(
                f"price selector {selector!r}: no price in match {position} {shown!r}"
            ) from None
        yield Price(label or f"price {position}", amount, currency)


def _json_ld(tree: LexborHTMLParser) -> list[Price]:
    found: list[Price] = []
    for script in tree.css('script[type="application/ld+json"]'):
        try:
            data = json.loads(script.text())
        except json.JSONDecodeError:
            continue  # a broken block elsewhere on the page: the others may do
        for offer, product in _offers(data, None):
            found.extend(_offer_prices(offer, product))
    return found


def _offers(node: Any, product: str | None) -> Iterator[tuple[dict[str, Any], str | None]]:
    """Every Offer/AggregateOffer in a JSON-LD tree, with the name of the product it is in."""
    if isinstance(node, list):
        for item in node:
            yield from _offers(item, product)
        return
    if not isinstance(node, dict):
        return
    types = node.get("@type")
    types = set(types) if isinstance(types, list) else {types}
    if types & OFFER_TYPES:
        if "AggregateOffer" in types and node.get("offers"):  # the plans themselves
            yield from _offers(node["offers"], product)
        else:
            yield node, product
        return
    if "Product" in types and isinstance(node.get("name"), str):
        product = node["name"]
    for key, value in node.items():
        if key != "@context":
            yield from _offers(value, product)


def _offer_prices(offer: dict[str, Any], product: str | None) -> Iterator[Price]:
    name = next(
        (v for v in (offer.get("name"), offer.get("sku"), product) if isinstance(v, str) and v),
        "price",
    )
    currency = offer.get("priceCurrency")
    spec = offer.get("priceSpecification")
    if isinstance(spec, list):
        spec = spec[0] if spec else None
    amounts = [
        (name, offer.get("price", spec.get("price") if isinstance(spec, dict) else None)),
        (f"{name} (low)", offer.get("lowPrice")),
        (f"{name} (high)", offer.get("highPrice")),
    ]
    if isinstance(spec, dict):
        currency = currency or spec.get("priceCurrency")
    for label, value in amounts:
        if value is None:
            continue
        amount, written = parse_amount(str(value), f"JSON-LD offer {name!r}", structured=True)
        yield Price(label, amount, currency if isinstance(currency, str) else written)


def _microdata(tree: LexborHTMLParser) -> list[Price]:
    found = []
    for node in tree.css('[itemprop="price"]'):
        scope = _scope(node)
        content = node.attributes.get("content")
        value = content or node.text()
        amount, written = parse_amount(value, "microdata price", structured=bool(content))
        currency = _property(scope, "priceCurrency") if scope is not None else None
        name = None
        while scope is not None and name is None:
            name = _property(scope, "name") or _property(scope, "sku")
            scope = _scope(scope)
        found.append(Price(name or "price", amount, currency or written))
    return found


def _scope(node: LexborNode) -> LexborNode | None:
    parent = node.parent
    while parent is not None and "itemscope" not in parent.attributes:
        parent = parent.parent
    return parent


def _property(scope: LexborNode, name: str) -> str | None:
    node = scope.css_first(f'[itemprop="{name}"]')
    if node is None:
        return None
    value = node.attributes.get("content") or node.text()
    return " ".join(value.split()) or None


def _open_graph(tree: LexborHTMLParser) -> list[Price]:
    def meta(prop: str) -> str | None:
        node = tree.css_first(f'meta[property="{prop}"]')
        return node.attributes.get("content") if node is not None else None

    value = meta("product:price:amount") or meta("og:price:amount")
    if value is None:
        return []
    amount, written = parse_amount(value, "OpenGraph product:price:amount", structured=True)
    currency = meta("product:price:currency") or meta("og:price:currency") or written
    return [Price(meta("og:title") or "price", amount, currency)]


def _unique_names(prices: list[Price]) -> list[Price]:
    """Two plans with one name (a monthly and a yearly "Pro") stay two prices."""
    seen: dict[str, int] = {}
    unique = []
    for price in prices:
        seen[price.name] = seen.get(price.name, 0) + 1
        name = price.name if seen[price.name] == 1 else f"{price.name} ({seen[price.name]})"
        unique.append(Price(name, price.amount, price.currency))
    return unique
