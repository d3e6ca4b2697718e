"""Issue 43's reader: the element a user names is read as named (and the reading says what it
is), screen-reader prices are the price of their split visible parts, structured data is one
price per offer, text-less elements are read from their obvious attribute, and compound price
specifications are read as their parts. Generated split parts and attribute values never
crash the reader and never give a price that their text does not hold."""

import html
import json
import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricewatch.models import PriceSettings
from pricewatch.prices import Price
from readers import price_reader
from readers.normalise import ExtractionError
from readers.price_reader import read_prices

STRUCTURED = PriceSettings()


def prices(page: str, selector: str | None = None) -> list[Price]:
    return read_prices(page, PriceSettings(selector=selector)).prices


def amounts(page: str, selector: str | None = None) -> list[str]:
    return [str(price.amount) for price in prices(page, selector)]


SALE = (
    '<p class="price"><del aria-hidden="true">€12,99</del>'
    '<ins aria-hidden="true">€9,99</ins><span class="screen-reader-text">Sale</span></p>'
)


def test_a_hidden_element_the_selector_names_is_read_and_said_hidden() -> None:
    (price,) = prices(SALE, ".price ins")
    assert (price.amount, price.currency, price.source) == (
        Decimal("9.99"),
        "EUR",
        "match 1 (hidden)",
    )


def test_a_struck_out_element_the_selector_names_is_read_and_said_struck_out() -> None:
    (price,) = prices(SALE, ".price del")
    assert (price.amount, price.source) == (Decimal("12.99"), "match 1 (struck out)")


def test_among_matches_the_rules_still_choose() -> None:
    """A selector that also matches shown prices: the hidden and struck-out ones are set aside."""
    page = '<i class="p">$10</i><i class="p" hidden>$100</i><s class="p">$12</s>'
    reading = read_prices(page, PriceSettings(selector=".p"))
    assert [str(p.amount) for p in reading.prices] == ["10"]
    assert [line.split(": ")[-1] for line in reading.skipped] == ["hidden", "struck out"]


def test_a_product_lists_price_class_is_no_list_price() -> None:
    """`productlist__price` is a product list's price, `list-price` a struck-out one."""
    page = (
        '<div class="productlist__price">€ 10</div><div class="productlist__price">€ 12</div>'
        '<div class="productlist__price list-price">€ 15</div>'
    )
    reading = read_prices(page, PriceSettings(selector=".productlist__price"))
    assert [str(p.amount) for p in reading.prices] == ["10", "12"]
    assert reading.skipped == ["match 3 '€ 15': struck out"]


@pytest.mark.parametrize(
    "text", ["ab € 1248,99", "From $9.99", "à partir de 12 €", "starting at $5", "as low as £3"]
)
def test_a_from_price_is_read_and_said_from(text: str) -> None:
    page = f'<div class="productlist__price"><span class="price">{html.escape(text)}</span></div>'
    (price,) = prices(page, ".price")
    assert price.source == "match 1 (from)"


def test_a_price_without_from_is_not_said_from() -> None:
    assert prices('<span class="price">Abholung 9,99 €</span>', ".price")[0].source == "match 1"


@pytest.mark.parametrize(
    "hider",
    [
        'class="a-offscreen"',
        'class="sr-only"',
        'class="visually-hidden"',
        'class="screen-reader-text"',
        'class="u-visually-hidden--inline"',
        'style="position:absolute;clip:rect(0 0 0 0);width:1px;height:1px"',
    ],
)
def test_screen_reader_text_is_the_price_of_its_split_parts(hider: str) -> None:
    page = (
        f'<span class="price"><span {hider}>$1,299.00</span>'
        '<span>$</span><span class="whole">1,299</span><sup class="fraction">00</sup></span>'
    )
    assert amounts(page, "[class*=price], .whole, .fraction") == ["1299.00"]


AMAZON = (
    '<span class="a-price"><span class="a-offscreen">$12.48</span><span aria-hidden="true">'
    '<span class="a-price-symbol"></span><span class="a-price-whole">12<span class="a-price-'
    'decimal">.</span></span><span class="a-price-fraction">48</span></span></span>'
)


@pytest.mark.parametrize(
    "selector", [".a-price-whole", ".a-price-fraction", ".a-price-whole, .a-price-fraction"]
)
def test_a_hidden_part_the_selector_names_is_the_price_its_screen_reader_text_says(
    selector: str,
) -> None:
    (price,) = prices(AMAZON, selector)
    assert (price.amount, price.currency) == (Decimal("12.48"), "$")
    assert price.source == "match 1 (hidden; its screen-reader text)"


def test_a_screen_reader_label_without_a_number_leaves_the_shown_price() -> None:
    page = '<div class="price"><span class="visually-hidden">Sale price</span>$18.00</div>'
    assert amounts(page, ".price") == ["18.00"]


def test_a_match_inside_another_is_part_of_it() -> None:
    page = '<div class="price">€ <b class="price-int">12</b>,<b class="price-dec">50</b></div>'
    assert amounts(page, "[class*=price]") == ["12.50"]


# --- generated split parts --------------------------------------------------------------------

CURRENCIES = st.sampled_from([("$", "$"), ("€", "EUR"), ("£", "GBP"), ("", None)])


@given(
    whole=st.integers(0, 99_999),
    cents=st.integers(0, 99),
    separator=st.sampled_from([".", ","]),
    currency=CURRENCIES,
    before=st.booleans(),
    unit=st.sampled_from(["", " <small>/ 100 g</small>", " <small>(2 items)</small>"]),
)
def test_a_price_split_over_elements_reads_as_one_amount(
    whole: int,
    cents: int,
    separator: str,
    currency: tuple[str, str | None],
    before: bool,
    unit: str,
) -> None:
    """Whole, separator and cents in elements of their own, with a unit or count after them."""
    symbol, code = currency
    parts = f"<span>{whole}</span><span>{separator}</span><span>{cents:02d}</span>"
    inner = (f"{symbol}{parts}" if before else f"{parts} {symbol}") + unit
    (price,) = prices(f'<span class="price">{inner}</span>', ".price")
    assert price.amount == Decimal(f"{whole}.{cents:02d}")
    assert price.currency == code


PART = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)


@given(st.lists(PART, min_size=1, max_size=6), st.sampled_from(["span", "b", "sup", "div"]))
def test_generated_parts_never_crash_nor_give_a_number_they_lack(
    parts: list[str], tag: str
) -> None:
    inner = "".join(f"<{tag}>{html.escape(part)}</{tag}>" for part in parts)
    try:
        found = prices(f'<p class="price">{inner}</p>', ".price")
    except ExtractionError:
        return
    assert any(char.isdigit() for char in "".join(parts)), found


# --- attributes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("element", "where"),
    [
        ('<meta itemprop="price" class="p" content="89.90">', "content"),
        ('<input type="hidden" class="p" value="12.48">', "value"),
        ('<span class="p" data-price="249.00"></span>', "data-price"),
        ('<span class="p" data-product-price="5.50"> </span>', "data-product-price"),
    ],
)
def test_an_element_without_text_is_read_from_its_price_attribute(element: str, where: str) -> None:
    (price,) = prices(f"<div>{element}</div>", ".p")
    assert price.source == f"match 1 [{where}]"


def test_an_element_with_text_is_read_from_its_text_not_its_attribute() -> None:
    assert amounts('<span class="p" data-price="1.00">€ 2,00</span>', ".p") == ["2.00"]


@given(st.text(max_size=20), st.sampled_from(["content", "value", "data-price"]))
def test_generated_attribute_values_never_crash_nor_give_a_number_they_lack(
    value: str, attribute: str
) -> None:
    page = f'<span class="p" {attribute}="{html.escape(value)}"></span>'
    try:
        found = prices(page, ".p")
    except ExtractionError:
        return
    if not any(char.isdigit() for char in value):  # "Free" is zero, of no currency
        assert [(p.amount, p.currency) for p in found] == [(Decimal(0), None)], found
        assert "free" in value.lower(), found


def test_free_in_an_attribute_is_zero_of_no_currency() -> None:
    (price,) = prices('<span class="p" content="FREE"></span>', ".p")
    assert (price.amount, price.currency) == (Decimal(0), None)


# --- structured data ----------------------------------------------------------------------------


def offer(price: str, name: str = "Shirt") -> str:
    return (
        f'<div itemscope itemtype="https://schema.org/Product"><meta itemprop="name" '
        f'content="{name}"><div itemprop="offers" itemscope itemtype="https://schema.org/Offer">'
        f'<meta itemprop="price" content="{price}"><meta itemprop="priceCurrency" content="EUR">'
        "</div></div>"
    )


def json_ld(data: object) -> str:
    return f'<script type="application/ld+json">{json.dumps(data)}</script>'


PRODUCT = {"@type": "Product", "name": "Shirt", "offers": {"@type": "Offer", "price": "19.99"}}


def test_the_same_offer_twice_in_microdata_is_one_price() -> None:
    reading = read_prices(offer("19.99") + offer("19.99"), STRUCTURED)
    assert [(p.name, str(p.amount)) for p in reading.prices] == [("Shirt", "19.99")]


def test_two_offers_that_differ_stay_two_prices() -> None:
    page = offer("19.99", "Shirt S") + offer("19.99", "Shirt M") + offer("21.99", "Shirt L")
    assert amounts(page) == ["19.99", "19.99", "21.99"]


def test_the_same_offer_in_two_json_ld_blocks_and_microdata_is_one_price() -> None:
    reading = read_prices(json_ld(PRODUCT) + json_ld([PRODUCT]) + offer("19.99"), STRUCTURED)
    assert [str(p.amount) for p in reading.prices] == ["19.99"]
    assert reading.skipped == []


def test_a_compound_price_specification_is_read_as_its_parts() -> None:
    parts = [
        {"priceComponentType": "https://schema.org/Downpayment", "price": 99},
        {"name": "monthly", "price": "40.00", "priceCurrency": "USD"},
        {"price": "5"},
    ]
    spec = {"@type": "CompoundPriceSpecification", "priceComponent": parts}
    data = {"@type": "Offer", "name": "Phone", "priceCurrency": "USD", "priceSpecification": spec}
    found = prices(json_ld(data))
    assert [(p.name, str(p.amount), p.currency) for p in found] == [
        ("Phone (Downpayment)", "99", "USD"),
        ("Phone (monthly)", "40.00", "USD"),
        ("Phone (part 3)", "5", "USD"),
    ]


# The "from" test as 1.15 wrote it, case blind: the one searched in lower-case text, which re
# scans faster, must find a "from" price in the same texts.
FROM_AS_WRITTEN = re.compile(
    r"(?<!\w)(?:from|starting at|as low as|ab|dès|à partir de|desde|vanaf)(?!\w)\D{0,5}\d", re.I
)


@given(
    st.lists(
        st.one_of(
            st.sampled_from(["From", "FROM ", "ab", "Ab ", "dès", "DÈS", "à partir de", "desde",
                             "vanaf", "starting at", "As low as", "x", " ", "$", "€", "9", ".5"]),
            st.text(st.characters(max_codepoint=0x17E), max_size=6),
        ),
        max_size=8,
    ).map("".join)
)  # fmt: skip
def test_the_from_test_finds_what_the_case_blind_one_finds(text: str) -> None:
    written = FROM_AS_WRITTEN.search(text) is not None
    assert written == (price_reader._FROM.search(text.lower()) is not None), text
