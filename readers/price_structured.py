"""Price mode's structured data: JSON-LD offers (`Offer`, `AggregateOffer`, typed or not, every
`priceSpecification`), microdata (`price`, `lowPrice`, `highPrice`) and OpenGraph
(`product:price:amount`), as `readers.price_reader` describes the order they are read in."""

import contextlib
import functools
import json
import re
from dataclasses import replace
from decimal import Decimal
from typing import Any

import json_repair
from selectolax.lexbor import LexborHTMLParser, LexborNode

from pricewatch import periods
from pricewatch.prices import Price
from readers.normalise import ExtractionError
from readers.price_words import (
    LAST_SEGMENT,
    STRUCK,
    css,
    iso,
    neighbourhoods,
    parse_amount,
    stock_of,
    struck_here,
)

OFFER_TYPES = {"Offer", "AggregateOffer"}
PRICE_KEYS = {"price", "lowPrice", "highPrice", "priceSpecification"}
PRICE_PROPS = ("price", "lowPrice", "highPrice")  # microdata's
ITEM_PROPS = {"priceCurrency", "availability", "name", "sku"}  # what a microdata price reads
# What a microdata price's period is read from (a UnitPriceSpecification's properties).
PERIOD_PROPS = ("unitCode", "billingDuration", "unitText")
ITEM_PROPS |= set(PERIOD_PROPS)
_CONTAINERS = (dict, list)  # what a JSON-LD offer can be in
REGULAR_PRICE_TYPES = {"StrikethroughPrice", "ListPrice", "SRP", "MSRP", "RegularPrice"}
_JSON = json.JSONDecoder(strict=False)  # json.loads(strict=False) builds one per call
# A JSON string (kept), or what shops' JSON-LD has that JSON has not: `//` and `/* */`
# comments and a trailing comma (each dropped).
_JSON_COMMENT = r"//[^\n]*|/\*.*?\*/"
_JSON_NOISE = re.compile(
    rf'("(?:[^"\\]|\\.)*")|{_JSON_COMMENT}|,(?=(?:\s|{_JSON_COMMENT})*[}}\]])', re.S
)
# `candidates`' query on a big page; the named metas only where the page text has OpenGraph's
# price. Below `SMALL_PAGE` characters, compiling it costs more than the whole small-page way.
_CANDIDATES = 'script[type*="ld+json" i], [itemprop]'
_WITH_METAS = f"{_CANDIDATES}, meta[property], meta[name]"
SMALL_PAGE = 8192


def structured_prices(html: str, tree: LexborHTMLParser, skipped: list[str]) -> list[Price]:
    """The first kind of structured data the page has, unless its prices are the struck-out
    ones and another kind's are not (a JSON-LD regular price beside OpenGraph's sale price).
    A kind is read where one walk of the tree finds its elements (OpenGraph's where its
    `price:amount` is also in the page text): a page without structured data costs that walk."""
    scripts, metas, itemprop = candidates(tree, html, "price:amount" in html)
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


def candidates(
    tree: LexborHTMLParser, html: str, open_graph: bool
) -> tuple[list[LexborNode], list[LexborNode], bool]:
    """The JSON-LD scripts, the named metas (with `open_graph`), and whether any element may
    have an `itemprop`. Names and the type are matched in any case, as `itemProp` and `LD+JSON`
    are written. A big page takes one walk of the tree; a small one its scripts and metas by
    tag and a search of its lowercased text for `itemprop` (which may also be text: then
    `_microdata` finds none)."""
    if len(html) < SMALL_PAGE:
        scripts = [node for node in tree.tags("script") if _is_json_ld(node.attributes)]
        metas = [n for n in tree.tags("meta") if _is_named(n.attributes)] if open_graph else []
        return scripts, metas, "itemprop" in html.lower()
    scripts, metas, itemprop = [], [], False
    for node in css(tree.root, _WITH_METAS if open_graph else _CANDIDATES):
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
    for node in css(body, f"{STRUCK}, [class], [style*=line-through]"):
        if not struck_here(node):
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
    return LAST_SEGMENT.split(value)[-1]


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
    stock = stock_of(offer.get("availability"))
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
                iso(said) if isinstance(said, str) and said else written,
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
    nodes = [node for node in nodes if not inside(node, taken)]  # the same price, nested
    around = neighbourhoods(nodes)
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
        stock = stock_of(_property(owned, scope, "availability")) if scope is not None else None
        spec = {p: _property(owned, scope, p) for p in PERIOD_PROPS} if scope is not None else {}
        period, per = periods.read(node.text(separator=" "), neighbours, spec)
        name = None
        while scope is not None and name is None:
            name = _property(owned, scope, "name") or _property(owned, scope, "sku")
            scope = _scope(scope)
        label = name or "price"
        if prop != "price":
            label += " (low)" if prop == "lowPrice" else " (high)"
        currency = iso(currency) if currency else written
        found.append(Price(label, amount, currency, None, stock, where, period, per))
    return found


def inside(node: LexborNode, taken: set[int]) -> bool:
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
    for node in css(tree.root, "[itemprop]"):
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
    stock = stock_of(meta("product:availability", "og:availability"))
    return [
        Price(
            meta("og:title") or "price",
            amount,
            iso(currency),
            regular if regular is not None and regular > amount else None,
            stock,
            source=f"OpenGraph {'sale price' if sale else 'price'}",
        )
    ]
