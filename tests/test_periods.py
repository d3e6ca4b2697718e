"""The period of a price and what it is counted per (pricewatch.periods): pages' words in
several languages, schema.org's codes, properties of the reading, the reader carrying them,
and stored prices of rows written before them still loading."""

import html
import re
from datetime import UTC, datetime
from decimal import Decimal
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricewatch import periods, views
from pricewatch.models import NotifyOn, PriceSettings
from pricewatch.prices import Price, listing, move_line, moves, tells
from readers.price_reader import read_prices
from surfaces import terminal


@pytest.mark.parametrize(
    ("text", "period", "per"),
    [
        ("€4.49/mo", "month", None),
        ("$99 per user per year", "year", "user"),
        ("$99 / user / month", "month", "user"),
        ("billed annually", "year", None),
        ("$120 billed yearly", "year", None),
        ("$10/mo, billed annually", "month", None),  # ten a month, paid once a year
        ("Billed annually: $10 per month", "month", None),
        ("9,99 € pro Monat", "month", None),
        ("4,51 € im Monat", "month", None),
        ("99 € /Jahr, jährlich", "year", None),
        ("12 € je Nutzer/Monat", "month", "user"),
        ("29 € einmalig", "one-time", None),
        ("10 € par mois", "month", None),
        ("100 € par an HT", "year", None),
        ("5 € par utilisateur / mois", "month", "user"),
        ("9 € al mes", "month", None),
        ("9 € al mese", "month", None),
        ("€ 9 per maand", "month", None),
        ("$49 one-time", "one-time", None),
        ("$199 lifetime deal", "one-time", None),
        ("$0.10 per GB", None, "GB"),
        ("$5/seat/month", "month", "seat"),
        ("$3 a day", "day", None),
        ("€2/week", "week", None),
        ("weekly", "week", None),
        ("$12", None, None),
        ("12 months free, then $5", None, None),  # a month count is no period
        ("per an hour", None, None),
        ("$0.007/h", "hour", None),
        ("0,007 € / h", "hour", None),
        ("$0.10 per hour", "hour", None),
        ("€0,05 pro Stunde", "hour", None),
        ("$0.20/hr per node", "hour", "node"),
        ("billed hourly", "hour", None),
        ("10 h of support", None, None),  # a duration, not a rate
        ("Plan A y B $5", None, None),
        ("$3 per m", None, None),
    ],
)
def test_the_period_pages_write(text: str, period: str | None, per: str | None) -> None:
    assert periods.read(text) == (period, per)


@pytest.mark.parametrize(
    ("spec", "period", "per"),
    [
        ({"unitCode": "MON"}, "month", None),
        ({"unitCode": "ANN"}, "year", None),
        ({"unitCode": "DAY"}, "day", None),
        ({"unitCode": "WEE"}, "week", None),
        ({"billingDuration": "P1M"}, "month", None),
        ({"billingDuration": "P1Y"}, "year", None),
        ({"billingDuration": {"value": 1, "unitCode": "ANN"}}, "year", None),
        ({"billingDuration": 1, "unitCode": "MON"}, "month", None),
        ({"unitText": "month"}, "month", None),
        ({"unitText": "per user / year"}, "year", "user"),
        ({"unitCode": "MON", "referenceQuantity": {"unitCode": "E34"}}, "month", "GB"),
        ({"unitCode": "HUR"}, "hour", None),
        ({"billingDuration": "PT1H"}, "hour", None),
        ({"billingDuration": "P3M"}, None, None),  # a quarter is none of the six
        ({"price": "10"}, None, None),
    ],
)
def test_schema_org_unit_codes_and_billing_durations(
    spec: dict[str, object], period: str | None, per: str | None
) -> None:
    assert periods.from_structured(spec) == (period, per)


def test_structured_data_wins_then_the_own_text_then_the_nearest_neighbour() -> None:
    assert periods.read("$10/mo", spec={"unitCode": "ANN"}) == ("year", None)
    assert periods.read("$10/mo", ["billed annually"]) == ("month", None)
    assert periods.read("$10", ["per user", "billed annually", "/day"]) == ("year", "user")


WORDS = st.text(st.characters(codec="utf-8"), max_size=60)


@given(WORDS)
def test_any_text_reads_as_one_of_the_periods_or_none(text: str) -> None:
    period, per = periods.read(text)
    assert period is None or period in periods.PERIODS
    assert per is None or isinstance(per, str)


@given(WORDS, st.sampled_from(["/mo", " per month", " pro Monat", " par mois", " monthly"]))
def test_a_unit_written_on_the_amount_is_read_whatever_comes_before(before: str, unit: str) -> None:
    text = f"$12{unit}"
    assert periods.period_in(text) == "month"
    # Words before it that say no unit of their own leave it the period.
    if periods.period_in(before) is None:
        assert periods.period_in(f"{before} {text}") == "month"


@given(
    st.decimals(min_value=0, max_value=10**6, places=2, allow_nan=False),
    st.sampled_from(["hour", "day", "week", "month", "year"]),
)
def test_per_month_is_the_amount_in_months_and_back(amount: Decimal, period: str) -> None:
    monthly = periods.per_month(amount, period)
    assert monthly is not None
    months = {
        "hour": 1 / Decimal(730), "day": Decimal(12) / 365, "week": Decimal(12) / 52,
        "month": Decimal(1),
    }  # fmt: skip
    back = months.get(period, Decimal(12))
    assert abs(monthly * back - amount) <= Decimal("0.01") * back + Decimal("0.000001")


def test_per_month_converts_known_periods_only() -> None:
    assert periods.per_month(Decimal("120"), "year") == Decimal("10.00")
    assert periods.per_month(Decimal("4.49"), "month") == Decimal("4.49")
    assert periods.per_month(Decimal("0.007"), "day") == Decimal("0.213")
    assert periods.per_month(Decimal("0.0075"), "hour") == Decimal("5.4750")  # 730 hours
    assert periods.per_month(Decimal("49"), "one-time") is None
    assert periods.per_month(Decimal("49"), None) is None


def test_the_unit_as_written_after_an_amount() -> None:
    assert periods.unit("month", "user") == "/user/month"
    assert periods.unit("year", None) == "/year"
    assert periods.unit(None, "GB") == "/GB"
    assert periods.unit("one-time", None) == " one-time"
    assert periods.unit(None, None) == ""


PLANS = """<html><body><div class="plans">
<div class="plan"><h3>Basic</h3><span class="amount">€4.49</span><span>/mo</span></div>
<div class="plan"><h3>Team</h3><span class="amount">$99</span>
  <p>per user per year</p></div>
<div class="plan"><h3>Lifetime</h3><span class="amount">$299</span><small>one-time</small></div>
<div class="plan"><h3>Free</h3><span class="amount">$0</span></div>
</div><p>All plans billed monthly unless said.</p></body></html>"""


def test_a_selector_reads_each_plans_period_beside_its_amount_not_the_pages() -> None:
    found = read_prices(PLANS, PriceSettings(selector=".plan", name="h3")).prices
    assert [(p.name, p.period, p.per) for p in found] == [
        ("Basic", "month", None), ("Team", "year", "user"), ("Lifetime", "one-time", None),
        ("Free", None, None),
    ]  # fmt: skip
    found = read_prices(PLANS, PriceSettings(selector=".amount")).prices
    assert [p.period for p in found] == ["month", "year", "one-time", None]


JSON_LD = """<script type="application/ld+json">{"@type": "Product", "name": "App",
"offers": [
 {"@type": "Offer", "name": "Monthly", "price": "10", "priceCurrency": "EUR",
  "priceSpecification": {"@type": "UnitPriceSpecification", "price": "10",
   "priceCurrency": "EUR", "unitCode": "MON"}},
 {"@type": "Offer", "name": "Yearly", "price": "100", "priceCurrency": "EUR",
  "priceSpecification": {"@type": "UnitPriceSpecification", "billingDuration": "P1Y",
   "referenceQuantity": {"unitCode": "E34"}}}]}</script>"""
MICRODATA = """<div itemscope itemtype="https://schema.org/Offer"><span itemprop="name">Pro</span>
<div itemprop="priceSpecification" itemscope itemtype="https://schema.org/UnitPriceSpecification">
<span itemprop="price" content="12">12 €</span><meta itemprop="unitCode" content="ANN">
</div></div>"""


def test_structured_data_reads_unit_codes_and_billing_durations() -> None:
    found = read_prices(JSON_LD, PriceSettings()).prices
    assert [(p.name, p.amount, p.period, p.per) for p in found] == [
        ("Monthly", Decimal("10"), "month", None),
        ("Yearly", Decimal("100"), "year", "GB"),
    ]
    found = read_prices(MICRODATA, PriceSettings()).prices
    assert [(p.name, p.period) for p in found] == [("Pro", "year")]


def test_the_listing_says_the_period_and_a_stored_price_without_one_still_loads() -> None:
    prices = [
        Price("Basic", Decimal("4.49"), "EUR", period="month"),
        Price("Team", Decimal("99"), "$", period="year", per="user"),
        Price("Box", Decimal("5"), "EUR"),
    ]
    assert listing(prices) == "Basic: 4.49 EUR/month\nTeam: 99 $/user/year\nBox: 5 EUR"
    assert [Price.from_json(p.as_json()) for p in prices] == prices
    assert "period" not in prices[2].as_json(), "a price without one is stored as 1.11 stored it"
    old = {"name": "Pro", "amount": "12.00", "currency": "EUR", "availability": "InStock"}
    loaded = Price.from_json(old)  # type: ignore[arg-type]
    assert (loaded.period, loaded.per, loaded.amount) == (None, None, Decimal("12.00"))


def test_a_switch_of_billing_period_is_a_change_of_period_not_a_rise() -> None:
    before = [Price("Pro", Decimal("10"), "EUR", period="month")]
    after = [Price("Pro", Decimal("100"), "EUR", period="year")]
    [move] = moves(before, after, PriceSettings())
    assert (move.change, move.change_percent, move.rules) == (None, None, ("price-change",))
    line = move_line(move.as_json())
    assert line == "Pro: 10 EUR/month -> 100 EUR/year (billing period changed) [price-change]"
    assert move.as_json()["previous_period"] == "month"
    for rise in (
        PriceSettings(notify_on=[NotifyOn.RISE]),
        PriceSettings(notify_on=[NotifyOn.DROP]),
        PriceSettings(above=Decimal("50")),
        PriceSettings(below=Decimal("50")),
        PriceSettings(min_change_percent=Decimal("5")),
    ):
        assert not tells(moves(before, after, rise)), rise
    assert tells(moves(before, after, PriceSettings(notify_on=[NotifyOn.ANY_CHANGE])))
    per_user = [Price("Pro", Decimal("10"), "EUR", period="month", per="user")]
    [move] = moves(before, per_user, PriceSettings())
    assert move_line(move.as_json()).startswith(
        "Pro: 10 EUR/month -> 10 EUR/user/month (billing unit changed)"
    )


def test_a_move_within_one_period_is_compared_and_says_its_period() -> None:
    before = [Price("Pro", Decimal("10"), "EUR", period="month")]
    after = [Price("Pro", Decimal("12"), "EUR", period="month")]
    [move] = moves(before, after, PriceSettings(notify_on=[NotifyOn.RISE]))
    assert move_line(move.as_json()) == "Pro: 10 -> 12 EUR/month (+2, +20.00%) [rise]"
    assert moves(before, before, PriceSettings()) == []
    # A move stored before 1.12 (no period keys) reads as it did.
    old: dict[str, object] = {"name": "Pro", "old": "10", "new": "12", "currency": "EUR"}
    old |= {"previous_currency": "EUR", "change": "2", "change_percent": "20.00", "rules": []}
    assert move_line(old) == "Pro: 10 -> 12 EUR (+2, +20.00%)"


AMOUNTS = st.decimals(min_value=0, max_value=1000, places=2, allow_nan=False)
KNOWN = st.sampled_from(periods.PERIODS)


@given(AMOUNTS, AMOUNTS, KNOWN, KNOWN, st.sampled_from(list(NotifyOn)))
def test_no_change_of_period_is_ever_a_drop_a_rise_or_a_crossing(
    old: Decimal, new: Decimal, was: str, now: str, rule: NotifyOn
) -> None:
    before = [Price("Pro", old, "EUR", period=was)]
    after = [Price("Pro", new, "EUR", period=now)]
    for settings in (
        PriceSettings(notify_on=[rule]),
        PriceSettings(notify_on=[rule], above=Decimal(500)),
        PriceSettings(notify_on=[rule], min_change_percent=Decimal(1)),
    ):
        for move in moves(before, after, settings):
            if was != now:
                assert move.change is None and "billing period changed" in move_line(move.as_json())
                assert not {"drop", "rise"} & set(move.rules)
                assert not any(r.startswith(("above", "change >=")) for r in move.rules)


def test_prices_per_month_converts_each_amount_whose_period_is_known(
    capsys: pytest.CaptureFixture[str],
) -> None:
    row = views.PricesRow(
        work_id="t:2026-12-05T10:00:00Z", slot=datetime(2026, 12, 5, 10, tzinfo=UTC),
        status="changed",
        prices=[
            views.PriceView(name="Monthly", amount=Decimal("10"), currency="EUR", period="month"),
            views.PriceView(name="Yearly", amount=Decimal("100"), currency="EUR", period="year",
                            per="user"),
            views.PriceView(name="Setup", amount=Decimal("49"), currency="EUR",
                            period="one-time"),
            views.PriceView(name="Box", amount=Decimal("5"), currency="EUR"),
        ],
    )  # fmt: skip
    monthly = row.per_month()
    assert [(p.amount, p.period, p.per) for p in monthly.prices] == [
        (Decimal("10"), "month", None), (Decimal("8.33"), "month", "user"),
        (Decimal("49"), "one-time", None), (Decimal("5"), None, None),
    ]  # fmt: skip
    terminal.prices([monthly])
    out = capsys.readouterr().out
    for shown in ("10 EUR/month", "8.33 EUR/user/month", "49 EUR one-time", "5 EUR"):
        assert shown in out, out
    terminal.prices([row])
    assert "100 EUR/user/year" in capsys.readouterr().out


@given(WORDS, st.lists(WORDS, max_size=3))
def test_the_one_scan_shortcut_reads_as_asking_each_text(text: str, around: list[str]) -> None:
    nested = [text]
    for words in around:
        nested.append(f"{nested[-1]} {words}")
    for texts in (nested, [text, *around]):
        slow: tuple[str | None, str | None] = (None, None)
        for words in texts:
            slow = (slow[0] or periods.period_in(words), slow[1] or periods.per_in(words))
        assert periods.read(texts[0], texts[1:]) == slow


SPOKEN = st.sampled_from(
    ["/mo", " per month", " pro Monat", "monthly", "billed annually", "Jährlich", "one-time",
     "ONE OFF", "onetime", "pay once", "Lifetime", "einmalig", "paiement unique", "pago único",
     "una tantum", "por hora", "all'ora", "per uur", "Stündlich", "hourly", "a day", "each week",
     "je Nutzer", "im Monat", "par an", "al mes", "Täglich", "QUOTIDIENNE", "/h", "per seat",
     "/each", "/EA", "/ GB", "per CPU", "Día", "\u017f", "\u212a"]
)  # fmt: skip
SAID = st.lists(
    st.one_of(SPOKEN, st.text(max_size=12), st.text(st.characters(max_codepoint=127))),
    max_size=6,
).map(" ".join)


@given(SAID)
def test_may_say_misses_nothing_the_patterns_find(text: str) -> None:
    period_said, per_said = periods.may_say(text)
    assert period_said or periods.period_in(text) is None, text
    assert per_said or periods.per_in(text) is None, text


@given(SAID)
def test_may_say_any_is_either_answer_of_may_say(text: str) -> None:
    assert periods.may_say_any(text) == any(periods.may_say(text)), text


@given(WORDS)
def test_a_text_that_may_say_nothing_reads_as_nothing(text: str) -> None:
    period_said, per_said = periods.may_say(text)
    if not period_said:
        assert periods.read("$12", [text])[0] is None and periods.period_in(text) is None
    if not per_said:
        assert periods.read("$12", [text])[1] is None and periods.per_in(text) is None


# The unit pattern as 1.12 wrote it, each period's words behind `_ON` of their own and case
# blind: the one that factors `_ON` out, searched in case-folded text, finds the same unit.
UNITS_AS_WRITTEN = re.compile(
    "|".join(
        rf"{periods._ON}\s*(?P<{period}>{'|'.join(words)})(?![\w-])"
        rf"|(?P<{period}_short>{periods._SHORT[period]})(?![\w-])"
        for period, words in periods._UNITS.items()
    ),
    re.I,
)
UNIT_TEXTS = st.lists(
    st.one_of(
        SPOKEN, st.sampled_from(["/", " ", "per ", "/ h", "/d", "an", "mo"]), st.text(max_size=8)
    ),
    max_size=8,
).map("".join)


@given(UNIT_TEXTS)
def test_the_unit_pattern_finds_what_it_found_before_it_was_factored(text: str) -> None:
    before, now = UNITS_AS_WRITTEN.search(text), periods._UNIT_PATTERN.search(text.casefold())
    assert (before and before.lastgroup) == (now and now.lastgroup)


@given(UNIT_TEXTS)
def test_a_search_from_the_first_words_finds_what_a_plain_search_finds(text: str) -> None:
    text = text.casefold()
    for pattern, starts in (
        (periods._UNIT_PATTERN, periods._UNIT_STARTS),
        (periods._ALONE_PATTERN, periods._ALONE_STARTS),
        (periods._PER_PATTERN, periods._PER_STARTS),
    ):
        plain, first = pattern.search(text), periods._first(pattern, starts, text)
        assert (plain and (plain.span(), plain.lastgroup)) == (
            first and (first.span(), first.lastgroup)
        )


CARD_WORDS = st.lists(
    st.one_of(
        SPOKEN, st.sampled_from(["Pro", "x", "an", "d", " ", "/", "per"]), st.text(max_size=6)
    ),
    max_size=4,
).map(" ".join)


@given(st.lists(st.tuples(CARD_WORDS, st.sampled_from(["$12", "9,99 €", "$5/mo"]), CARD_WORDS),
                min_size=1, max_size=4))  # fmt: skip
def test_a_page_that_says_no_period_reads_as_asking_each_price(
    cards: list[tuple[str, str, str]],
) -> None:
    """The page-wide test (`selected`) skips every price's own reading only where that reading
    would find nothing: the same periods as a reader that asks each price."""
    page = "".join(
        f'<div class="card">{html.escape(before)}<span class="price">{html.escape(amount)}'
        f"</span><i>{html.escape(after)}</i></div>"
        for before, amount, after in cards
    )
    settings = PriceSettings(selector=".price")
    shortcut = [(p.period, p.per) for p in read_prices(page, settings).prices]
    with mock.patch.object(periods, "may_say", lambda text: (True, True)):
        asked = [(p.period, p.per) for p in read_prices(page, settings).prices]
    assert shortcut == asked
