"""Suggested price selectors (issue 43): `try` with no selector lists the prices a page shows,
each with settings that read them, and every suggestion reads what it says it reads."""

import html
import json
import re
import shlex
from decimal import Decimal

import asyncpg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pricewatch.models import PriceSettings
from readers.price_reader import read_prices
from readers.price_suggest import Suggestion, suggest, suggest_body
from tests.conftest import PageServer
from tests.helpers import cli, worker_process
from tests.waits import wait_for

PLANS = """<html><body><nav><a href="/">Home</a> <span class="cart">0 items</span></nav>
<section class="plans">
 <div class="plan"><h3>Starter</h3><p class="price"><span>$</span><span>9</span>/mo</p>
  <ul><li>5 users</li><li>10 GB</li></ul></div>
 <div class="plan featured"><h3>Pro</h3><p class="price">$29/mo</p><ul><li>50 users</li></ul></div>
 <div class="plan"><h3>Business</h3><p class="price"><del>$99</del> $79/mo</p></div>
</section>
<p class="fine">Prices exclude VAT. Call us: 0800 123 456.</p>
<footer><span class="total">Gift cards from €25</span></footer></body></html>"""


def reads(suggestion: Suggestion, page: str) -> list[tuple[str, Decimal, str | None]]:
    """What price mode with the suggestion's settings reads on the page."""
    settings = PriceSettings(selector=suggestion.selector, name=suggestion.name)
    return [(p.name, p.amount, p.currency) for p in read_prices(page, settings).prices]


def said(suggestion: Suggestion) -> list[tuple[str, Decimal, str | None]]:
    return [(p.name, p.amount, p.currency) for p in suggestion.prices]


def test_a_pricing_table_is_suggested_as_named_plans_first() -> None:
    first, *others = suggest(PLANS)
    assert (first.selector, first.name) == (".plan", "h3")
    assert said(first) == [
        ("Starter", Decimal(9), "$"), ("Pro", Decimal(29), "$"), ("Business", Decimal(79), "$")
    ]  # fmt: skip
    assert [p.regular for p in first.prices] == [None, None, Decimal(99)]
    assert [p.period for p in first.prices] == ["month"] * 3
    # The counts, the phone number and the struck-out price are no suggestion of their own.
    assert [(s.selector, said(s)) for s in others] == [
        (".total", [("price 1", Decimal(25), "EUR")])
    ]


def test_structured_data_comes_first_and_needs_no_selector() -> None:
    page = PLANS.replace(
        "</body>",
        '<script type="application/ld+json">{"@type": "Offer", "price": "29.00",'
        ' "priceCurrency": "USD"}</script></body>',
    )
    first = suggest(page)[0]
    assert (first.selector, first.name) == (None, None)
    assert said(first) == reads(first, page)


def test_build_tool_classes_are_not_suggested() -> None:
    page = (
        '<div class="css-1x2y3z price-box"><span class="sc-AxjAm kWiAWz Price_amount__x7Yq2">'
        "$12</span></div>"
    )
    [suggestion] = suggest(page)
    assert suggestion.selector is not None
    assert not re.search(r"css-|sc-|kWiAWz|__x7Yq2", suggestion.selector), suggestion.selector
    assert said(suggestion) == [("price 1", Decimal(12), "$")]


def test_a_table_row_is_named_by_its_first_cell() -> None:
    page = "<table>" + "".join(
        f"<tr><td>{name}</td><td>{amount} €</td></tr>"
        for name, amount in (("Basis", "4,49"), ("Plus", "9,99"), ("Max", "19,99"))
    ) + "</table>"  # fmt: skip
    [suggestion] = suggest(page)
    assert [p.name for p in suggestion.prices] == ["Basis", "Plus", "Max"]
    assert said(suggestion) == reads(suggestion, page)


def test_a_body_that_is_not_html_has_no_suggestions() -> None:
    assert suggest_body(b'{"price": "$10"}', "application/json") == []
    assert suggest_body(b"", "text/html") == []
    assert suggest("<html><body><p>No prices here, only 3 items.</p></body></html>") == []


def test_a_long_listing_is_read_whole() -> None:
    items = "".join(
        f'<li class="item"><a class="title">Thing {i}</a> <b class="cost">${i}.99</b></li>'
        for i in range(1500)
    )
    first = suggest(f"<ul>{items}</ul>")[0]
    assert len(first.prices) == 1500
    assert first.prices[-1].name == "Thing 1499" and first.prices[-1].amount == Decimal("1499.99")


CURRENCIES = ["$", "€", "£", "CHF ", "EUR "]
CLASSES = ["plan", "tier", "card", "pricing-item", "css-9f8e7d", "box"]
# A name is read with its spaces collapsed, so it is written so.
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz "
NAMES = st.text(alphabet=LETTERS, min_size=2, max_size=20).map(lambda name: " ".join(name.split()))


@st.composite
def pricing_pages(draw: st.DrawFn) -> tuple[str, list[tuple[str, Decimal]]]:
    """A pricing page of 2-6 plans, each a card with a heading and a price, laid out in one of
    the ways such pages are, with a currency of several, and noise around them."""
    names = draw(
        st.lists(
            NAMES.filter(lambda name: len(name) >= 2), min_size=2, max_size=6, unique_by=str.lower
        )
    )
    cents = draw(st.lists(st.integers(100, 999_999), min_size=len(names), max_size=len(names)))
    amounts = [Decimal(c).scaleb(-2) for c in cents]
    currency = draw(st.sampled_from(CURRENCIES))
    card_class = draw(st.sampled_from(CLASSES))
    heading = draw(st.sampled_from(["h2", "h3", "h4"]))
    split = draw(st.booleans())  # `<span>$</span><span>9</span>`
    cards = []
    for name, amount in zip(names, amounts, strict=True):
        shown = (
            f"<span>{currency.strip()}</span><span>{amount}</span>"
            if split
            else f"{currency}{amount}"
        )
        cards.append(
            f'<div class="{card_class}"><{heading}>{html.escape(name)}</{heading}>'
            f'<div class="amount">{shown}<small>/mo</small></div>'
            f"<ul><li>{len(name)} users</li><li>{len(name) * 10} GB</li></ul></div>"
        )
    page = f"<html><body><h1>Pricing</h1><p>Since 2019, 4 plans.</p>{''.join(cards)}</body></html>"
    return page, list(zip(names, amounts, strict=True))


@settings(max_examples=60)
@given(pricing_pages())
def test_every_generated_pricing_page_is_suggested_with_its_plans_named(
    page_and_plans: tuple[str, list[tuple[str, Decimal]]],
) -> None:
    page, plans = page_and_plans
    first = suggest(page)[0]
    assert [(p.name, p.amount) for p in first.prices] == plans, (first.selector, first.name)
    assert said(first) == reads(first, page)


MARKUP = st.recursive(
    st.text(alphabet="$€£ 0123456789.,/mo abcXYZ<>&\"'", max_size=12).map(html.escape),
    lambda inner: st.builds(
        lambda tag, cls, children: f'<{tag} class="{cls}">{"".join(children)}</{tag}>',
        st.sampled_from(["div", "span", "p", "li", "del", "td", "h3", "script", "b"]),
        st.sampled_from(["", "price", "plan", "x", "sr-only", "old-price", "css-1ab2c3"]),
        st.lists(inner, max_size=4),
    ),
    max_leaves=30,
)


@settings(max_examples=150)
@given(MARKUP)
def test_any_markup_gives_only_suggestions_that_read_what_they_say(fragment: str) -> None:
    page = f"<html><body>{fragment}</body></html>"
    for suggestion in suggest(page):
        assert suggestion.prices, suggestion
        assert said(suggestion) == reads(suggestion, page), suggestion


@pytest.mark.e2e
async def test_a_suggested_add_command_checks_the_prices_try_showed(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer
) -> None:
    """The done-when of issue 43: `try URL` on a page without structured data lists the
    plans with working selectors; the command `try --suggest` prints, run as it is (but for
    its cadence), makes a worker record the same prices."""
    page_server.set("/plans", PLANS)
    url = page_server.url("/plans")
    code, out, err = await cli(env, "try", url, "--json")
    assert code == 0, err
    [first, *_] = json.loads(out)["suggestions"]
    shown = [(p["name"], Decimal(p["amount"]), p["currency"]) for p in first["prices"]]
    assert shown == [
        ("Starter", Decimal(9), "$"), ("Pro", Decimal(29), "$"), ("Business", Decimal(79), "$")
    ]  # fmt: skip
    code, command, err = await cli(env, "try", url, "--suggest")
    assert code == 0, err
    words = shlex.split(command)
    assert words[:4] == ["pricewatch", "add", "127-0-0-1", url], words
    assert shlex.join(words[6:]) == first["options"], (words, first)
    words[words.index("--every") + 1] = "2s"
    async with worker_process(env):
        code, _, err = await cli(env, *words[1:])
        assert code == 0, err
        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE target_id = '127-0-0-1'"
                             " AND prices IS NOT NULL")  # fmt: skip
        recorded = await pool.fetchval(
            "SELECT prices FROM source_checks WHERE target_id = '127-0-0-1'"
            " AND prices IS NOT NULL ORDER BY scheduled_for LIMIT 1"
        )
        assert (await cli(env, "remove", "127-0-0-1"))[0] == 0
    prices = json.loads(recorded) if isinstance(recorded, str) else recorded
    assert [(p["name"], Decimal(p["amount"]), p["currency"]) for p in prices] == shown


async def test_try_says_which_selectors_would_read_a_page_it_cannot_read(
    env: dict[str, str], page_server: PageServer
) -> None:
    """`--prices` on a page without structured data fails as a check would, and the
    suggestions say what would read it; `--suggest` prints the command all the same."""
    page_server.set("/plans", PLANS)
    code, out, err = await cli(env, "try", page_server.url("/plans"), "--prices")
    assert code == 1, (out, err)
    assert err.startswith("pricewatch: a check would fail (permanent): extraction rule failed:")
    assert "--prices --price-selector .plan --price-name h3    (3 shown)" in out, out
    assert "Starter: 9 $/month" in out, out
    code, out, err = await cli(env, "try", page_server.url("/plans"), "--prices", "--suggest")
    assert (code, err) == (0, ""), err
    assert out.endswith("--prices --price-selector .plan --price-name h3\n"), out
    page_server.set("/none", "<p>Nothing for sale, 3 items.</p>")
    code, out, err = await cli(env, "try", page_server.url("/none"), "--suggest")
    assert code == 1, (out, err)
    assert err == "pricewatch: no prices found on the page to suggest a selector for\n", err
