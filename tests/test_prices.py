"""Price mode: reading prices from every kind of page, the rules' semantics (properties), and
the check activity on real Postgres and a real page server: what is recorded and told."""

import itertools
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from price_parser import Price as ParsedPrice
from price_parser.parser import (
    DOLLAR_CODES,
    OTHER_CURRENCY_SYMBOLS,
    SAFE_CURRENCY_SYMBOLS,
    extract_currency_symbol,
)
from selectolax.lexbor import LexborHTMLParser
from temporalio.testing import ActivityEnvironment

from activities import store
from activities.notify import NotifyActivities, SmtpSettings
from pricewatch import views
from pricewatch.deliveries import DeliveryInput, Notice
from pricewatch.models import Channel, ChannelKind, NotifyOn, PriceSettings, TargetConfig
from pricewatch.prices import Price, listing, move_line, moves, tells
from readers import price_structured, price_words
from readers.normalise import ExtractionError
from readers.price_reader import observe, read_prices
from readers.price_words import parse_amount
from tests.conftest import MailSink, Site, WebhookReceiver
from tests.helpers import SLOT, Checker

PAGES = Path(__file__).parent / "pages"
STRUCTURED = PriceSettings()


def read(page: str, settings: PriceSettings = STRUCTURED) -> list[tuple[str, str, str | None]]:
    found = read_prices((PAGES / page).read_text(), settings).prices
    return [(p.name, str(p.amount), p.currency) for p in found]


def test_json_ld_offers_of_several_plans() -> None:
    """Offer names, an sku, a priceSpecification; a broken JSON-LD block is passed over."""
    assert read("jsonld-plans.html") == [
        ("CX22", "4.51", "EUR"),
        ("cx32", "7.59", "EUR"),
        ("CX42", "18.92", "EUR"),
    ]


def test_json_ld_aggregate_offer_is_its_low_and_high_price() -> None:
    assert read("jsonld-aggregate.html") == [
        ("Widget (low)", "9.00", "USD"),
        ("Widget (high)", "19.00", "USD"),
    ]


def test_microdata_offers_with_names_and_swiss_formatting() -> None:
    assert read("microdata-plans.html") == [
        ("Starter", "12.00", "CHF"),
        ("Business", "1234.50", "CHF"),
    ]


def test_open_graph_price() -> None:
    assert read("opengraph.html") == [("Pro plan", "29.00", "GBP")]


def test_a_price_selector_names_each_match_and_reads_european_formats() -> None:
    assert read("table-eu.html", PriceSettings(selector="tr.plan", name="th")) == [
        ("Basis", "1234.56", "EUR"),
        ("Plus", "12", "EUR"),
        ("Pro", "9.90", "EUR"),
        ("Stunde", "0.007", "EUR"),
        ("US", "1234.56", "$"),
    ]


def test_a_name_with_digits_is_not_read_as_the_amount() -> None:
    html = "<div class=plan><b>CX22</b> 4,51 €</div><div class=plan><b>CX32</b>€ 7.59</div>"
    found = read_prices(html, PriceSettings(selector=".plan", name="b")).prices
    assert [(p.name, str(p.amount)) for p in found] == [("CX22", "4.51"), ("CX32", "7.59")]


def test_unnamed_matches_are_named_by_position_and_duplicates_stay_apart() -> None:
    html = (
        "<p class=p>$5</p><p class=p>$6</p>"
        "<div><b>Pro</b><i>$7</i></div><div><b>Pro</b><i>$8</i></div>"
    )
    assert [p.name for p in read_prices(html, PriceSettings(selector="p.p")).prices] == [
        "price 1",
        "price 2",
    ]
    named = read_prices(html, PriceSettings(selector="div", name="b")).prices
    assert [(p.name, p.amount) for p in named] == [("Pro", Decimal(7)), ("Pro (2)", Decimal(8))]


@pytest.mark.parametrize(
    ("text", "amount", "currency"),
    [
        ("1.234,56 €", "1234.56", "EUR"),
        ("$1,234.56", "1234.56", "$"),
        ("12,-", "12", None),
        ("CHF 12.\u2013", "12", "CHF"),  # an en dash
        ("from $9/mo", "9", "$"),
        ("$0.007/hour", "0.007", "$"),
        ("0,50 €", "0.50", "EUR"),
    ],
)
def test_amounts_as_pages_write_them(text: str, amount: str, currency: str | None) -> None:
    assert parse_amount(text, "test") == (Decimal(amount), currency)


def test_a_plain_amount_is_read_as_price_parser_reads_it() -> None:
    """The common shapes skip price-parser's search (`SIMPLE`): the same amount, currency
    and failure as price-parser's own reading (`price_parser_amount`), for every symbol the
    shortcut takes and some it must not (`KD` has three decimals), in every layout."""
    symbols = ["", "$", "€", "£", "¥", "₹", "zł", "Kč", "CHF", "EUR", "KD", "USD", "kr"]
    numbers = ["0", "7", "007", "12", "999", "1234", "123456789", "0.123", "1.234", "1,234",
               "1 234", "1'234", "12.345.678", "1,234,567", "99 999 999"]  # fmt: skip
    decimals = ["", ".5", ".50", ",5", ",05", ".00"]

    def reading(read: Callable[[str, str], tuple[Decimal, str | None]], text: str) -> object:
        try:
            amount, currency = read(text, "test")
        except ExtractionError as err:
            return str(err)
        return str(amount), currency

    for before, after, number, decimal, space in itertools.product(
        symbols, symbols, numbers, decimals, ["", " "]
    ):
        text = f"{before}{space}{number}{decimal}{space}{after}".strip()
        read = reading(price_words.amount_of, text)
        assert read == reading(price_words.price_parser_amount, text), text
        if isinstance(read, tuple):  # plausible without counting (`shown_amount`'s one_amount)
            assert price_words._places(Decimal(read[0])) <= 3, text


def test_an_amount_among_words_is_read_as_price_parser_reads_it() -> None:
    """`WORDED`'s shortcut (`790,00 € HT`, `From $109.90`): where it applies, `priced_part`
    would have read the whole text and price-parser reads the same amount, currency and
    failure, in every layout; words it must not take (`%`, a count, `.` after) go the long way."""
    leads = ["", "Price:", "From", "Cena", "ab", "€", "EUR", "$", "US$", "NZD", "NZD $", "Rs",
             "only", "Běžná cena", "Цена:", "P.V.P.", "(", "euro", "Fr."]  # fmt: skip
    numbers = ["0", "7", "12", "1234", "0.123", "1.234", "1,234", "1 234", "1'234", "12.345.678"]
    decimals = ["", ".5", ".50", ",05"]
    tails = [
        "",
        "€",
        " €",
        " HT",
        "/EA",
        "/mo",
        " iva inclusa",
        " PLN",
        " \u0440\u0443\u0431.",
        " KD",
        " OMR",
        "*",
        " *",
        " pcs",
        " x",
        "%",
        " %",
        ".",
        ",",
        ", incl. VAT",
        ". Sale",
        " (inc VAT",
        "-",
        " Kč",
        " kr",
        "\u0440.",
    ]  # fmt: skip (Russian roubles)

    def reading(read: Callable[..., tuple[Decimal, str | None]], *args: Any) -> object:
        try:
            amount, currency = read(*args)
        except ExtractionError:
            return "no price"
        return str(amount), currency

    taken = 0
    for lead, number, decimal, tail, space in itertools.product(
        leads, numbers, decimals, tails, ["", " "]
    ):
        text = " ".join(f"{lead}{space}{number}{decimal}{tail}".split())
        worded = price_words.WORDED.fullmatch(text)
        if worded is None:
            continue
        taken += 1
        assert price_words.priced_part(text) == (text, None), text
        read = reading(price_words.worded_amount, worded, text)
        assert read == reading(price_words.price_parser_amount, text, ""), text
        if isinstance(read, tuple):  # plausible without counting (`shown_amount`'s one_amount)
            assert price_words._places(Decimal(read[0])) <= 3, text
    assert taken > 10_000


_SYMBOLS = [*SAFE_CURRENCY_SYMBOLS, *OTHER_CURRENCY_SYMBOLS, *DOLLAR_CODES]
# Texts made of currency symbols, their pieces and what stands beside them on a page: most draws
# put several symbols, prefixes of symbols and word boundaries in one text.
_CURRENCY_TEXTS = st.lists(
    st.one_of(
        st.sampled_from(_SYMBOLS),
        st.sampled_from(_SYMBOLS).map(lambda symbol: symbol[: len(symbol) // 2 + 1]),
        st.sampled_from(["$", " ", "", ".", ",", "0", "12", "9.99", "/mo", "\u200f", "-"]),
        st.text(max_size=3),
    ),
    max_size=8,
).map("".join)


@given(_CURRENCY_TEXTS)
def test_the_currency_search_finds_what_price_parsers_finds(text: str) -> None:
    """`currency_symbol`'s tries find what price-parser's alternations of ~470 symbols find."""
    assert price_words.currency_symbol(text) == extract_currency_symbol(text, None)


def test_every_currency_symbol_is_found_as_price_parser_finds_it() -> None:
    for symbol, before, after in itertools.product(_SYMBOLS, ["", "a", "9 ", "$"], ["", "$5", "x"]):
        text = before + symbol + after
        assert price_words.currency_symbol(text) == extract_currency_symbol(text, None), text


def _fromstring_amount(text: str) -> object:
    """1.15's `price_parser_amount`: price-parser's `Price.fromstring` up to three times."""
    parsed = ParsedPrice.fromstring(text)
    if parsed.amount_text and (zero := price_words._LEADING_ZERO.fullmatch(parsed.amount_text)):
        parsed = ParsedPrice.fromstring(text, decimal_separator=zero.group(1))
    currency = price_words.iso(parsed.currency)
    if (
        currency in price_words.THREE_DECIMALS
        and parsed.amount_text
        and (last := price_words._LAST_SEPARATOR.fullmatch(parsed.amount_text))
    ):
        parsed = ParsedPrice.fromstring(text, decimal_separator=last.group(1))
    if parsed.amount is None:
        return "no price"
    if not any(map(str.isdigit, text)):
        return str(parsed.amount), None
    return str(parsed.amount), currency


@given(
    st.lists(
        st.one_of(
            _CURRENCY_TEXTS,
            st.sampled_from(["0", "007", "1.234", "1,234", "423.923", "0,99", "12,-", " ", "KD"]),
            st.from_regex(r"[0-9][0-9.,' ]{0,8}", fullmatch=True),
        ),
        max_size=5,
    ).map("".join)
)
def test_the_price_parser_reading_is_price_parsers(text: str) -> None:
    """`price_parser_amount` searches the currency once and reads the number as
    `Price.fromstring` does, with the same separators chosen."""
    try:
        amount, currency = price_words.price_parser_amount(text, "")
        ours: object = (str(amount), currency)
    except ExtractionError:
        ours = "no price"
    assert ours == _fromstring_amount(text)


def test_one_walk_finds_what_each_kind_of_structured_data_reads() -> None:
    """`candidates` finds in one walk what each kind's own selector finds."""
    pages = [path.read_text(errors="replace") for path in sorted(PAGES.iterdir())]
    pages += [
        '<script TYPE="Application/LD+JSON">{}</script><script type="text/json"></script>'
        "<script type=ld+json></script><script type></script><meta name=a><meta property>"
        '<meta content=x><svg><script type="application/ld+json"></script></svg>'
        '<meta itemprop="price" content="1"><script itemprop=x></script>',
        "<p itemProp=price>1</p>",
        "<p>no structured data</p>",
    ]
    pages += ["<p>about itemprop</p>"]  # text, no attribute: a small page may say True
    padding = f"<!-- {'x' * price_structured.SMALL_PAGE} -->"  # the big-page way too
    for page in [*pages, *(padding + page for page in pages)]:
        tree = LexborHTMLParser(page)
        for open_graph in (True, False):
            scripts, metas, itemprop = price_structured.candidates(tree, page, open_graph)
            assert [n.mem_id for n in scripts] == [
                n.mem_id for n in tree.css('script[type*="ld+json" i]')
            ]
            assert [n.mem_id for n in metas] == [
                n.mem_id for n in tree.css("meta[property], meta[name]") if open_graph
            ]
            has_itemprop = tree.css_first("[itemprop]") is not None
            big = len(page) >= price_structured.SMALL_PAGE
            assert itemprop == has_itemprop if big else itemprop >= has_itemprop, page[:80]


def test_structured_data_is_found_whatever_the_case_of_its_names() -> None:
    """HTML names are not case-sensitive: React writes `itemProp`, some shops `LD+JSON`."""
    pages = [
        '<script TYPE="Application/LD+JSON">{"@type": "Offer", "price": "5"}</script>',
        '<div itemScope><span itemProp="price" content="5">5 €</span></div>',
    ]
    for page in pages:
        assert [p.amount for p in read_prices(page, STRUCTURED).prices] == [Decimal(5)], page


def test_an_element_two_selectors_of_a_list_match_is_one_price() -> None:
    """As a browser's querySelectorAll: `.price, .sale` on `class="price sale"` is one match,
    and a microdata `lowPrice highPrice` one price (lexbor lists such an element twice)."""
    page = '<p class="price sale">$5</p><p class="sale">$6</p>'
    found = read_prices(page, PriceSettings(selector=".price, .sale")).prices
    assert [p.amount for p in found] == [Decimal(5), Decimal(6)]
    page = '<div itemscope><span itemprop="lowPrice highPrice" content="7">7</span></div>'
    assert [p.amount for p in read_prices(page, STRUCTURED).prices] == [Decimal(7)]


def test_a_price_that_cannot_be_read_names_the_selector_and_the_text() -> None:
    with pytest.raises(ExtractionError, match=r"price selector 'td'.*'Call us'"):
        read_prices("<table><tr><td>Call us</td></tr></table>", PriceSettings(selector="td"))
    with pytest.raises(ExtractionError, match="matched nothing"):
        read_prices("<p>$5</p>", PriceSettings(selector="td"))
    with pytest.raises(ExtractionError, match="no prices on the page"):
        read_prices("<p>$5</p>", STRUCTURED)


def shown(html: str | bytes, settings: PriceSettings = STRUCTURED) -> list[tuple[object, ...]]:
    """What price mode records for a page served as text/html without a charset."""
    body = html.encode() if isinstance(html, str) else html
    found = observe(body, "text/html", settings).prices
    return [(str(p.amount), p.currency, p.regular and str(p.regular)) for p in found]


def ld(value: str) -> str:
    return f'<script type="application/ld+json">{value}</script>'


OFFER = '"@type": "Product", "name": "Kettle", "offers": '
SELECTED = PriceSettings(selector=".p")


@pytest.mark.parametrize(
    ("html", "settings", "expected"),
    [
        # the current price wins; the struck-out one is kept as the regular price
        ('<p class=p><del aria-hidden="true">€12,99</del> <ins>€9,99</ins></p>', SELECTED,
         [("9.99", "EUR", "12.99")]),
        ('<div class=p><s class="price-item--regular">$120.00</s><span>$60.00</span></div>',
         SELECTED, [("60.00", "$", "120.00")]),
        ('<div class=p><span class="compare-at-price">$80</span> $64</div>', SELECTED,
         [("64", "$", "80")]),
        ("<div class=p>Was $120.00 Now $60.00</div>", SELECTED, [("60.00", "$", "120.00")]),
        (ld("{" + OFFER + '{"@type": "Offer", "priceCurrency": "EUR", "priceSpecification": ['
            '{"priceType": "https://schema.org/StrikethroughPrice", "price": "129.00"},'
            '{"@type": "UnitPriceSpecification", "price": "99.00"}]}}'),
         STRUCTURED, [("99.00", "EUR", "129.00")]),
        ('<meta property="og:price:amount" content="60.00">'
         '<meta property="og:price:standard_amount" content="120.00">'
         + ld("{" + OFFER + '{"@type": "Offer", "price": "120.00", "priceCurrency": "USD"}}'),
         STRUCTURED, [("60.00", "USD", "120.00")]),
        # one bad value never hides the good ones
        ('<div itemscope><span itemprop="price" content="itemprop value">$5.00</span></div>'
         '<div itemscope><span itemprop="price">Call for price</span></div>', STRUCTURED,
         [("5.00", "$", None)]),
        ('<p class=p>$5</p><p class=p></p>', SELECTED, [("5", "$", None)]),
        # structured data as real shops write it
        ('<div itemscope><meta itemprop="lowPrice" content="10"><meta itemprop="highPrice" '
         'content="20"></div>', STRUCTURED, [("10", None, None), ("20", None, None)]),
        (ld("{" + OFFER + '{"@type": "AggregateOffer", "lowPrice": 10, "highPrice": 20, '
            '"offers": [{"@type": "Offer", "url": "a"}]}}'),
         STRUCTURED, [("10", None, None), ("20", None, None)]),
        (ld("{" + OFFER + '{"price": "10", "priceCurrency": "EUR"}}'), STRUCTURED,
         [("10", "EUR", None)]),
        (ld('{"@type": "http://schema.org/Product", "offers": {"@type": "http://schema.org/Offer"'
            ', "price": "11"}}'), STRUCTURED, [("11", None, None)]),
        (ld('{"type": "Product", "offers": {"type": "Offer", "price": "12"}}'), STRUCTURED,
         [("12", None, None)]),
        (ld("{" + OFFER + '{"@type": "Offer", "priceSpecification": [{"price": "50"}, '
            '{"price": "45", "validForMemberTier": {"@id": "#gold"}}]}}'),
         STRUCTURED, [("50", None, None), ("45", None, None)]),
        (ld("{" + OFFER + '{"@type": "Offer", "price": "13",},}'), STRUCTURED,
         [("13", None, None)]),
        (ld('{"@type": "Product", "description": "two\nlines", // a comment\n'
            ' "offers": {"@type": "Offer", "price": "14"}}'.replace("\\n", "\n")),
         STRUCTURED, [("14", None, None)]),
        (ld("<!--{" + OFFER + '{"@type": "Offer", "price": "15"}}-->'), STRUCTURED,
         [("15", None, None)]),
        (ld("//<![CDATA[\n{" + OFFER + '{"@type": "Offer", "price": "16"}}\n//]]>'),
         STRUCTURED, [("16", None, None)]),
        ('<div itemscope><span itemprop="price" content="7"><span itemprop="price">7</span>'
         "</span></div>", STRUCTURED, [("7", None, None)]),
        # numbers that are not the price
        ("<div class=p>(22) $297.50</div>", SELECTED, [("297.50", "$", None)]),
        ("<div class=p>1 New from $29.99</div>", SELECTED, [("29.99", "$", None)]),
        ("<div class=p>2 Litre bottle 4,99 €</div>", SELECTED, [("4.99", "EUR", None)]),
        ("<div class=p>$10/mo <span hidden>$100/yr</span></div>"
         '<div class=p style="display: none">$100</div><div class=p aria-hidden="true">$9</div>',
         SELECTED, [("10", "$", None)]),
        ('<div class=p data-price="21.50">21,50 € <small>incl. VAT</small></div>',
         PriceSettings(selector=".p", attribute="data-price"), [("21.50", None, None)]),
        # text
        (b'<html><head><meta charset="windows-1252"></head><p class=p>\x8012,50</p></html>',
         SELECTED, [("12.50", "EUR", None)]),
        (b'<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1">'
         b"<p class=p>12,50 \x80</p>", SELECTED, [("12.50", "EUR", None)]),
        ("<p class=p>CHF 1\u2019234.50</p>", SELECTED, [("1234.50", "CHF", None)]),
        ("<p class=p>\u0663\u0664\u066b\u0665\u0660 SAR</p>", SELECTED,
         [("34.50", "SAR", None)]),
        ("<p class=p>423.923 KD</p>", SELECTED, [("423.923", "KWD", None)]),
        ("<p class=p>\u00a35.00</p><p class=p>\u00a55.00</p>", SELECTED,
         [("5.00", "GBP", None), ("5.00", "\u00a5", None)]),
    ],
)  # fmt: skip
def test_the_price_a_shopper_sees(
    html: str | bytes, settings: PriceSettings, expected: list[tuple[object, ...]]
) -> None:
    assert shown(html, settings) == expected


def test_a_skipped_value_is_named_and_only_a_page_without_any_price_fails() -> None:
    reading = read_prices("<p class=p>$5</p><p class=p>Call for price</p>", SELECTED)
    assert reading.skipped == ["price selector '.p': no price in match 2 'Call for price'"]
    with pytest.raises(ExtractionError, match=r"match 1 'Call'.*match 2 'Ask'"):
        read_prices("<p class=p>Call</p><p class=p>Ask</p>", SELECTED)


def test_when_structured_sources_disagree_the_one_the_page_shows_wins() -> None:
    page = (
        '<meta property="og:price:amount" content="60.00">'
        + ld("{" + OFFER + '{"@type": "Offer", "price": "120.00"}}')
        + "<body><del>$120.00</del> $60.00</body>"
    )
    reading = read_prices(page, STRUCTURED)
    assert [p.amount for p in reading.prices] == [Decimal("60.00")]
    assert reading.skipped == ["JSON-LD 120.00: the struck-out price; OpenGraph is read"]
    alone = ld("{" + OFFER + '{"@type": "Offer", "price": "120.00"}}') + "<body>$120.00</body>"
    assert [p.amount for p in read_prices(alone, STRUCTURED).prices] == [Decimal("120.00")]


def test_availability_is_read_beside_each_price() -> None:
    page = ld("{" + OFFER + '{"@type": "Offer", "price": "9", '
              '"availability": "https://schema.org/OutOfStock"}}')  # fmt: skip
    microdata = (
        '<div itemscope><meta itemprop="price" content="9">'
        '<link itemprop="availability" href="http://schema.org/InStock"></div>'
    )
    og = (
        '<meta property="og:price:amount" content="9">'
        '<meta property="og:availability" content="oos">'
    )
    assert [read_prices(p, STRUCTURED).prices[0].availability for p in (page, microdata, og)] == [
        "OutOfStock",
        "InStock",
        "OutOfStock",
    ]
    assert listing(read_prices(page, STRUCTURED).prices) == "Kettle: 9, out of stock"


def prices(*amounts: str, names: str = "ABC") -> list[Price]:
    return [Price(name, Decimal(a), "EUR") for name, a in zip(names, amounts, strict=False)]


def test_moves_name_the_old_and_new_price_and_the_change() -> None:
    [move] = moves(prices("10.00", "20.00"), prices("10.00", "18.00"), PriceSettings())
    assert move.as_json() == {
        "name": "B", "old": "20.00", "new": "18.00", "currency": "EUR",
        "previous_currency": "EUR", "change": "-2.00", "change_percent": "-10.00",
        "rules": ["price-change"],
    }  # fmt: skip
    assert move_line(move.as_json()) == "B: 20.00 -> 18.00 EUR (-2.00, -10.00%) [price-change]"
    [gone] = moves(prices("10.00", "20.00"), prices("10.00"), PriceSettings())
    assert move_line(gone.as_json()) == "B: 20.00 -> - EUR"


@pytest.mark.parametrize(
    ("rules", "told"),
    [
        (PriceSettings(), True),
        (PriceSettings(notify_on=NotifyOn.DROP), True),
        (PriceSettings(notify_on=NotifyOn.RISE), False),
        (PriceSettings(below=Decimal(19)), True),
        (PriceSettings(below=Decimal(17)), False),
        (PriceSettings(above=Decimal(15)), False),
        (PriceSettings(min_change_percent=Decimal(10)), True),
        (PriceSettings(min_change_percent=Decimal("10.01")), False),
        (PriceSettings(notify_on=NotifyOn.RISE, below=Decimal(19)), False),
    ],
)
def test_every_rule_given_must_hold(rules: PriceSettings, told: bool) -> None:
    assert tells(moves(prices("20.00"), prices("18.00"), rules)) is told


def test_a_plan_that_appears_is_told_only_for_any_change() -> None:
    assert not tells(moves(prices("5"), prices("5", "9"), PriceSettings()))
    [move] = moves(prices("5"), prices("5", "9"), PriceSettings(notify_on=NotifyOn.ANY_CHANGE))
    assert (move.name, move.old, move.new, move.rules) == ("B", None, Decimal(9), ("any-change",))


@pytest.mark.parametrize(
    ("rules", "told"),
    [
        (PriceSettings(above=Decimal(19)), True),
        (PriceSettings(above=Decimal(18)), True),  # from the threshold itself: it rose above
        (PriceSettings(above=Decimal(20)), False),  # reaching it is not rising above it
        (PriceSettings(above=Decimal(17)), False),  # was above already
        (PriceSettings(below=Decimal(19)), False),
        (PriceSettings(notify_on=NotifyOn.RISE, above=Decimal(19)), True),
        (PriceSettings(notify_on=NotifyOn.DROP, above=Decimal(19)), False),
    ],
)
def test_a_rise_through_above_is_told(rules: PriceSettings, told: bool) -> None:
    [move] = moves(prices("18.00"), prices("20.00"), rules)
    assert bool(move.rules) is told
    assert (f"above {rules.above}" in move.rules) is (told and rules.above is not None)


def told_per_check(amounts: list[int], rules: PriceSettings) -> list[bool]:
    """Check by check, as the activity compares: each check against the one before it (the
    first is the baseline; an unchanged price is no move)."""
    return [
        before != after and tells(moves(prices(str(before)), prices(str(after)), rules))
        for before, after in itertools.pairwise(amounts)
    ]


@pytest.mark.parametrize(
    ("rules", "amounts", "told"),
    [
        # up through, stays above, falls back (not told as above), up again, onto it, off it
        (PriceSettings(above=Decimal(15)), [10, 20, 25, 10, 20, 15, 16],
         [True, False, False, True, False, True]),
        # the mirror image for below
        (PriceSettings(below=Decimal(15)), [20, 10, 5, 20, 10, 15, 14],
         [True, False, False, True, False, True]),
    ],
)  # fmt: skip
def test_each_crossing_is_told_once_and_again_after_a_way_back(
    rules: PriceSettings, amounts: list[int], told: list[bool]
) -> None:
    assert told_per_check(amounts, rules) == told


def stocked(amount: str, availability: str | None) -> list[Price]:
    return [Price("Kettle", Decimal(amount), "EUR", availability=availability)]


def told_rules(seen: list[tuple[str, str | None]], rules: PriceSettings) -> list[tuple[str, ...]]:
    """Check by check: the rules each observation's moves fired against the one before."""
    return [
        tuple(r for move in moves(stocked(*before), stocked(*after), rules) for r in move.rules)
        for before, after in itertools.pairwise(seen)
    ]


BACK = PriceSettings(notify_on=[NotifyOn.BACK_IN_STOCK])


@pytest.mark.parametrize(
    ("rules", "seen", "told"),
    [
        # out, back (told), stays in, out again, unknown, in (no known state before: not told)
        (BACK, [("9", "OutOfStock"), ("9", "InStock"), ("9", "InStock"), ("9", "SoldOut"),
                ("9", None), ("9", "InStock")],
         [("back-in-stock",), (), (), (), ()]),
        (PriceSettings(notify_on=[NotifyOn.OUT_OF_STOCK]),
         [("9", "InStock"), ("9", "OutOfStock"), ("9", "PreOrder"), ("9", "LimitedAvailability"),
          ("9", "Discontinued")],
         [("out-of-stock",), (), (), ("out-of-stock",)]),
        # a stock rule alone tells no price move; with a price rule beside it, both are told
        (BACK, [("9", "InStock"), ("7", "InStock"), ("6", "OutOfStock"), ("5", "InStock")],
         [(), (), ("back-in-stock",)]),
        (PriceSettings(notify_on=[NotifyOn.DROP, NotifyOn.BACK_IN_STOCK]),
         [("9", "InStock"), ("7", "InStock"), ("6", "OutOfStock"), ("5", "InStock")],
         [("drop",), ("drop",), ("drop", "back-in-stock")]),
        # a stock change is no price move, and any-change tells it
        (PriceSettings(), [("9", "InStock"), ("9", "OutOfStock")], [()]),
        (PriceSettings(notify_on=[NotifyOn.ANY_CHANGE]), [("9", "InStock"), ("9", "OutOfStock")],
         [("any-change",)]),
    ],
)  # fmt: skip
def test_stock_rules_are_told_once_per_transition(
    rules: PriceSettings, seen: list[tuple[str, str | None]], told: list[tuple[str, ...]]
) -> None:
    assert told_rules(seen, rules) == told


def test_a_stock_move_says_both_states() -> None:
    [move] = moves(stocked("9", "OutOfStock"), stocked("9", "InStock"), BACK)
    assert (
        move_line(move.as_json()) == "Kettle: 9 -> 9 EUR, out of stock -> in stock [back-in-stock]"
    )
    assert PriceSettings(notify_on=NotifyOn.DROP).model_dump(mode="json")["notify_on"] == "drop"
    several = PriceSettings(notify_on=[NotifyOn.DROP, NotifyOn.BACK_IN_STOCK])
    assert several.model_dump(mode="json")["notify_on"] == ["drop", "back-in-stock"]


def entries(amounts: list[int], beyond: Callable[[int], bool]) -> int:
    """How often the price entered the region `beyond` (strictly below / above the
    threshold) after the baseline: its stretches in that region, less one if the baseline
    already was in it. Counted on runs of the sequence, not on pairs of checks, so it does
    not restate the rule's own comparison."""
    runs = [inside for inside, _ in itertools.groupby(map(beyond, amounts))]
    return runs.count(True) - runs[0]


@given(
    st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30),
    st.integers(min_value=1, max_value=40),
)
def test_each_crossing_below_or_above_is_told_once(amounts: list[int], threshold: int) -> None:
    """One notice per fall through `below` and per rise through `above`, none while the price
    stays on the far side, whatever the sequence."""
    below = PriceSettings(below=Decimal(threshold))
    above = PriceSettings(above=Decimal(threshold))
    assert sum(told_per_check(amounts, below)) == entries(amounts, lambda a: a < threshold)
    assert sum(told_per_check(amounts, above)) == entries(amounts, lambda a: a > threshold)


def test_the_listing_is_what_is_hashed_and_ignores_trailing_zeros() -> None:
    assert listing(prices("12.00", "7.5")) == "A: 12 EUR\nB: 7.5 EUR"
    assert listing(prices("12.00")) == listing(prices("12"))


# The check activity, on real Postgres and a real page server.


def plans(basic: str, pro: str, banner: str = "") -> str:
    return (
        f"<html><body><p>{banner}</p><table>"
        f"<tr class=plan><th>Basic</th><td>{basic} €</td></tr>"
        f"<tr class=plan><th>Pro</th><td>{pro} €</td></tr></table></body></html>"
    )


async def price_checker(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site, rules: PriceSettings
) -> Checker:
    config = TargetConfig(target_id="acme", url=site.url, interval_seconds=3600, price_mode=rules)
    await store.sync_target(pool, config, next_slot=SLOT, enabled=True)
    return Checker(pool, http, config)


PLANS = PriceSettings(selector="tr.plan", name="th")


async def stored(pool: asyncpg.Pool) -> list[tuple[str, bool, object, object]]:
    rows = await pool.fetch(
        "SELECT status, notify, prices, price_moves FROM source_checks WHERE status <> 'skipped' "
        "ORDER BY scheduled_for"
    )
    return [(r["status"], r["notify"], r["prices"], r["price_moves"]) for r in rows]


async def test_prices_are_recorded_per_slot_and_only_their_moves_are_changes(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site
) -> None:
    checks = await price_checker(pool, http, site, PLANS)
    site.html = plans("9,90", "19,90", banner="Black Friday!")
    await checks.check()  # the baseline
    site.html = plans("9,90", "19,90", banner="Cyber Monday!")
    unchanged = await checks.check()
    site.html = plans("9,90", "24,90")
    changed = await checks.check()
    assert [unchanged.status, changed.status] == ["unchanged", "changed"]
    rows = await stored(pool)
    assert [r[0] for r in rows] == ["unchanged", "unchanged", "changed"]
    assert all(r[2] is not None for r in rows), "every slot keeps the prices it saw"
    assert '"new": "24.90"' in str(rows[2][3]) and '"old": "19.90"' in str(rows[2][3])
    assert rows[2][1] is True


async def test_a_move_no_rule_matches_is_a_change_nobody_is_told(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site
) -> None:
    checks = await price_checker(pool, http, site, PLANS.model_copy(update={"below": Decimal(9)}))
    webhook = Channel(kind=ChannelKind.WEBHOOK, destination="http://127.0.0.1:9/hook")
    checks.config = checks.config.model_copy(update={"channels": [webhook]})
    await store.sync_target(pool, checks.config, next_slot=SLOT, enabled=True)
    site.html = plans("9,90", "19,90")
    await checks.check()
    site.html = plans("9,50", "19,90")
    quiet = await checks.check()
    site.html = plans("8,50", "19,90")
    told = await checks.check()
    site.html = plans("8,00", "19,90")
    still_below = await checks.check()
    assert [(r.status, r.notify) for r in (quiet, told, still_below)] == [
        ("changed", False),
        ("changed", True),
        ("changed", False),
    ]
    owed = await store.unnotified_changes(pool, "acme", SLOT, SLOT.replace(year=2027))
    assert [r.work_id for r in owed] == [told.work_id], "only a told change is owed a notice"


async def test_new_rules_are_a_new_baseline(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site
) -> None:
    checks = await price_checker(pool, http, site, PLANS)
    site.html = plans("9,90", "19,90")
    await checks.check()
    checks.config = checks.config.model_copy(
        update={"price_mode": PLANS.model_copy(update={"notify_on": [NotifyOn.DROP]})}
    )
    site.html = plans("9,90", "14,90")
    rebased = await checks.check()
    assert (rebased.status, rebased.previous_hash) == ("unchanged", None)


async def test_a_page_without_prices_fails_permanently_with_what_it_found(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site
) -> None:
    checks = await price_checker(pool, http, site, PLANS)
    site.html = plans("ask us", "call us")
    with pytest.raises(Exception, match=r"price selector 'tr.plan'.*Basic ask us.*Pro call us"):
        await checks.check()
    [(status, _, recorded_prices, _)] = await stored(pool)
    assert (status, recorded_prices) == ("failed", None), "never a guessed price"


async def test_a_value_that_cannot_be_read_is_named_on_the_row_and_the_line(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    checks = await price_checker(pool, http, site, PLANS)
    site.html = plans("ask us", "19,90")
    with caplog.at_level("INFO", logger="pricewatch.checks"):
        result = await checks.check()
    named = "price selector 'tr.plan': no price in match 1 'Basic ask us €'"
    assert (result.status, result.skipped_values) == ("unchanged", [named])
    stored = await pool.fetchval("SELECT skipped_values FROM source_checks")
    assert stored == [named], "the row names what was skipped"
    assert f"unchanged; skipped 1: {named}" in caplog.text
    site.etag = '"v1"'
    await checks.check()
    as_it_was = await checks.check()  # a 304: the page, and what it could not read, as it was
    assert (site.conditional_hits, as_it_was.skipped_values) == (1, [named])
    site.html, site.etag = plans("9,90", "19,90"), None
    assert (await checks.check()).skipped_values == []


def stock_page(availability: str) -> str:
    offer = f'{{"@type": "Offer", "price": "9.90", "availability": "https://schema.org/{availability}"}}'
    return ld("{" + OFFER + offer + "}")


async def test_back_in_stock_is_a_change_told_once(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site
) -> None:
    checks = await price_checker(pool, http, site, BACK)
    told = []
    for availability in ("OutOfStock", "OutOfStock", "InStock", "InStock", "SoldOut", "InStock"):
        site.html = stock_page(availability)
        result = await checks.check()
        told.append((result.status, result.notify))
    assert told == [
        ("unchanged", True),  # the baseline
        ("unchanged", True),
        ("changed", True),  # back in stock: told
        ("unchanged", True),
        ("changed", False),  # sold out: a change, nobody told (no out-of-stock rule)
        ("changed", True),  # back again: told again
    ]
    moves = await pool.fetch(
        "SELECT price_moves FROM source_checks WHERE status = 'changed' AND notify ORDER BY 1"
    )
    assert all('"rules": ["back-in-stock"]' in str(row["price_moves"]) for row in moves)


async def test_a_price_notice_carries_each_move(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site,
    webhook_receiver: WebhookReceiver, smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    webhook = Channel(kind=ChannelKind.WEBHOOK, destination=webhook_receiver.url)
    mail = Channel(kind=ChannelKind.EMAIL, destination="ops@example.com")
    checks = await price_checker(pool, http, site, PLANS)
    checks.config = checks.config.model_copy(update={"channels": [webhook, mail]})
    await store.sync_target(pool, checks.config, next_slot=SLOT, enabled=True)
    site.html = plans("9,90", "19,90")
    await checks.check()
    site.html = plans("9,90", "24,90")
    change = await checks.check()
    notify = NotifyActivities(pool, http, smtp_server[1])
    for channel in (webhook, mail):
        notice = DeliveryInput(
            notice=Notice.CHANGED, channel_id=channel.channel_id, target_id="acme",
            url=site.url, result=change,
        )  # fmt: skip
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    [(_, payload)] = webhook_receiver.received
    views.PAYLOADS["notice"].validate_python(payload)  # as documented in docs/schemas/
    assert payload["type"] == "price.changed"
    assert payload["prices"] == [
        {"name": "Pro", "old": "19.90", "new": "24.90", "currency": "EUR",
         "previous_currency": "EUR", "change": "5.00", "change_percent": "25.13",
         "rules": ["price-change"]},
    ]  # fmt: skip
    [message] = smtp_server[0].messages
    assert "price changed" in message["Subject"]
    text = message.get_payload(decode=True)
    assert isinstance(text, bytes)
    text = text.decode()
    assert "Pro: 19.90 -> 24.90 EUR (+5.00, +25.13%) [price-change]" in text
