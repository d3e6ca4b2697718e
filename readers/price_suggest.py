"""The prices a page shows, each with the price-mode settings that would read it: `try` with no
price selector lists them, so a user picks a selector from the page instead of its source.

Structured data first (price mode reads it with no selector), then the visible amounts: every
smallest element that shows an amount with a currency, grouped by its tag and classes. Each
group gets the shortest selector, from its own classes and its parent's, that reads exactly
the group's amounts; when each of its elements sits in a card of its own with a heading (a
pricing table's plans), the cards and the heading are offered instead, so each price is
named. Every suggestion was read back with its settings before it is offered: a suggestion
that does not work is never shown.
"""

import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal

from selectolax.lexbor import LexborHTMLParser, LexborNode

from pricewatch.models import PriceSettings
from pricewatch.prices import Price
from readers.normalise import ExtractionError
from readers.price_reader import html_of, selected, shown_amount, unique_names, visible_text
from readers.price_structured import structured_prices
from readers.price_words import css, set_aside

MAX_SUGGESTIONS = 5
MAX_GROUPS = 12  # the largest groups tried, each by a few selectors read back: bounded work
SHOWN_CHARS = 80  # an element with more text than this is a section, not a price
CLIMB = 3  # ancestors of a number's text tried for its currency (`<b>$</b><b>10</b>`)
CARD_LEVELS = 6  # ancestors of a price tried as its card
NAME_CHARS = 60
_SKIPPED_TAGS = {"script", "style", "noscript", "template", "title", "head", "option", "svg"}
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
# A class a build tool made (`css-1x2y3z`, `sc-AxjAm`, `jsx-123456`) changes with the next
# deploy: a selector of it would break silently.
# So does a CSS module's (`Price_amount__x7Yq2`) and a short mixed-case hash (`kWiAWz`).
_STABLE_CLASS = re.compile(r"(?!(?:css|sc|jsx|svelte|emotion)-)[A-Za-z_][A-Za-z0-9_-]{0,39}")
_MODULE_HASH = re.compile(r"__[A-Za-z0-9_-]{5,}$")
_MANY_DIGITS = re.compile(r"\d{3}")
_NAME_CLASS = re.compile(r"name|title|plan|tier|heading", re.I)
_DIGIT = re.compile(r"\d")


@dataclass(frozen=True)
class Suggestion:
    """Settings that read prices on this page, and what they read. `selector` None: the
    page's structured data, which price mode reads with no selector."""

    selector: str | None
    name: str | None
    prices: list[Price]


def suggest_body(body: bytes, content_type: str) -> list[Suggestion]:
    """`suggest` of a fetched body; none for a body that is not HTML."""
    try:
        html = html_of(body, content_type)
    except ExtractionError:
        return []
    return suggest(html)


def suggest(html: str) -> list[Suggestion]:
    """At most MAX_SUGGESTIONS ways to read the page's prices, the most prices first."""
    tree = LexborHTMLParser(html)
    found: list[Suggestion] = []
    if structured := structured_prices(html, tree, []):
        found.append(Suggestion(None, None, unique_names(structured)))
    groups: dict[str, list[LexborNode]] = {}
    for node in _amounts(tree):
        groups.setdefault(_signature(node), []).append(node)
    seen: set[str] = set()
    by_size = sorted(groups.values(), key=len, reverse=True)  # stable: page order within a size
    for group in by_size[:MAX_GROUPS]:
        suggestion = _named(tree, group) or _read_by_selector(tree, group)
        if suggestion is not None and suggestion.selector not in seen:
            seen.add(str(suggestion.selector))
            found.append(suggestion)
        if len(found) == MAX_SUGGESTIONS:
            break
    return found


def _amounts(tree: LexborHTMLParser) -> list[LexborNode]:
    """The smallest shown elements whose text is an amount with a currency, in page order. An
    element above a number's own is taken only for the currency or period beside it (`<b>$</b>
    <b>9</b>/mo`): one with another number in it is a section, not a price."""
    amounts: dict[int, LexborNode] = {}
    holding: set[int] = set()  # the ancestors of the amounts found
    body = tree.body
    if body is None:
        return []
    for text in body.traverse(include_text=True):
        own = text.text_content or ""
        if text.tag != "-text" or not _DIGIT.search(own):
            continue
        node = text.parent
        for _ in range(CLIMB):
            if node is None or node.tag in _SKIPPED_TAGS or node.tag in ("body", "html"):
                break
            shown = node.text()
            if len(shown) > SHOWN_CHARS or node.mem_id in holding:
                break
            if _DIGIT.search(_shown_text(node).replace(own, "", 1)):
                break
            if _currency_amount(node) is not None:
                above = _ancestors(node)
                if set_aside(node) is None and not above.keys() & amounts.keys():
                    amounts[node.mem_id] = node
                    holding.update(above)
                break
            node = node.parent
    return list(amounts.values())


def _shown_text(node: LexborNode) -> str:
    """The element's text as shown: without its struck-out (a sale's "was") and hidden parts."""
    shown: list[str] = []
    visible_text(node, None, shown, [], [])
    return "".join(shown)


def _ancestors(node: LexborNode, levels: int = 1000) -> dict[int, LexborNode]:
    """The element's ancestors below `body`, nearest first, by id."""
    found: dict[int, LexborNode] = {}
    current = node.parent
    while current is not None and current.tag not in ("body", "html") and len(found) < levels:
        found[current.mem_id] = current
        current = current.parent
    return found


def _currency_amount(node: LexborNode) -> Decimal | None:
    """The amount the element shows, if it shows one with a currency (not a count)."""
    try:
        amount, currency, _, _ = shown_amount(node, None)
    except ExtractionError:
        return None
    return amount if currency is not None else None


def _classes(node: LexborNode) -> list[str]:
    return [c for c in (node.attributes.get("class") or "").split() if _stable(c)]


def _stable(name: str) -> bool:
    if not _STABLE_CLASS.fullmatch(name) or _MANY_DIGITS.search(name):
        return False
    hashed = len(name) <= 8 and sum(c.isupper() for c in name) >= 2 and not name[0].isupper()
    return not hashed and _MODULE_HASH.search(name) is None


def _signature(node: LexborNode) -> str:
    """Its tag and stable classes: what the elements of one group share."""
    return ".".join([node.tag or "", *sorted(_classes(node))])


def _own_selectors(node: LexborNode) -> list[str]:
    """Selectors of the element alone, shortest first: each class, the tag with it, all."""
    classes = _classes(node)
    tag = node.tag or ""
    options = [f".{c}" for c in classes] + [f"{tag}.{c}" for c in classes]
    if len(classes) > 1:
        options.append(tag + "".join(f".{c}" for c in classes))
    return options


def _selectors(node: LexborNode) -> list[str]:
    """The element's own selectors, each under its parent's (`.plan > .amount`), its tag
    under its parent's, and its tag alone last (the broadest)."""
    tag = node.tag or ""
    own = _own_selectors(node)
    parent = node.parent
    if parent is None or parent.tag in ("body", "html"):
        return [*own, tag]
    under = [f"{p} > {o}" for p in _own_selectors(parent) for o in [*own, tag]]
    return [*own, *under, tag]


def _reads(tree: LexborHTMLParser, selector: str, name: str | None) -> list[Price] | None:
    try:
        prices = selected(tree, PriceSettings(selector=selector, name=name), [])
    except (ExtractionError, ValueError):
        return None
    return unique_names(prices) if prices else None


def _read_by_selector(tree: LexborHTMLParser, group: list[LexborNode]) -> Suggestion | None:
    """The first selector that reads exactly the group's amounts, in order."""
    wanted = [_currency_amount(node) for node in group]
    for selector in _selectors(group[0]):
        prices = _reads(tree, selector, None)
        if prices is not None and [p.amount for p in prices] == wanted:
            return Suggestion(selector, None, prices)
    return None


def _named(tree: LexborHTMLParser, group: list[LexborNode]) -> Suggestion | None:
    """A pricing table's plans: each price's own card (its largest ancestor that holds no
    other price of the group) and a heading in it, read back as named prices."""
    if len(group) < 2:
        return None
    chains = [_ancestors(node, CARD_LEVELS) for node in group]
    holding = Counter(id_ for chain in chains for id_ in chain)
    # A card: the outermost ancestor within CARD_LEVELS that holds no other price of the group.
    cards = [[a for id_, a in chain.items() if holding[id_] == 1] for chain in chains]
    if not all(cards):
        return None
    first_card = cards[0][-1]
    first_heading = _heading(first_card)
    if first_heading is None:
        return None
    wanted = [_currency_amount(node) for node in group]
    for name in [*_own_selectors(first_heading), first_heading.tag or ""]:
        for selector in _selectors(first_card):
            prices = _reads(tree, selector, name)
            if prices is None or [p.amount for p in prices] != wanted:
                continue
            names = [p.name for p in prices]
            if all(names) and len(set(names)) == len(names) and not _numbered(prices):
                return Suggestion(selector, name, prices)
    return None


def _numbered(prices: list[Price]) -> bool:
    """Whether a name is the reader's own (`price 2`, a position): no heading was read."""
    return any(p.name == f"price {i}" for i, p in enumerate(prices, 1))


def _heading(card: LexborNode) -> LexborNode | None:
    """The card's first heading (a table row's: its first cell), or an element whose class
    says it names the plan."""
    query = ", ".join(_HEADINGS) + ", th, [class]" + (", td" if card.tag == "tr" else "")
    for element in css(card, query):
        text = " ".join(element.text().split())
        if not text or len(text) > NAME_CHARS or _currency_amount(element) is not None:
            continue
        tag = element.tag or ""
        if (
            tag in _HEADINGS
            or tag in ("th", "td")
            or _NAME_CLASS.search(element.attributes.get("class") or "")
        ):
            return element
    return None
