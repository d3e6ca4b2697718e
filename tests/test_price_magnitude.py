"""An amount no real price has (`1E+999999` in a JSON-LD offer) is a skipped value with its
reason, never a stored amount; one that 1.8 stored cannot take a target's page down, nor
print as a million digits (issue 40 point 5)."""

from datetime import UTC, datetime
from decimal import Decimal

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from activities import store
from pricewatch.models import PriceSettings
from pricewatch.views import PriceView
from readers.price_reader import read_prices
from readers.price_words import (
    MAX_DECIMAL_PLACES,
    MAX_INTEGER_DIGITS,
    Implausible,
    parse_amount,
)
from surfaces import terminal

SLOT = datetime(2026, 12, 1, 8, tzinfo=UTC)


def json_ld(*prices: str) -> str:
    offers = ", ".join(
        f'{{"@type": "Offer", "name": "Plan {n}", "price": "{p}", "priceCurrency": "EUR"}}'
        for n, p in enumerate(prices)
    )
    return (
        '<script type="application/ld+json">'
        f'{{"@type": "Product", "name": "x", "offers": [{offers}]}}</script>'
    )


@pytest.mark.parametrize("written", ["1E+999999", "1e50", "1234567890123456", "0.000000001"])
def test_a_structured_amount_no_price_has_is_skipped_by_name(written: str) -> None:
    reading = read_prices(json_ld("9.90", written), PriceSettings())
    assert [(p.name, p.amount) for p in reading.prices] == [("Plan 0", Decimal("9.90"))]
    assert any("is no price" in why and written in why for why in reading.skipped)


@pytest.mark.parametrize("written", ["NaN", "Infinity", "-Infinity", "1e999999", "1e50"])
def test_a_json_number_no_price_has_is_skipped(written: str) -> None:
    """Unquoted, JSON reads `1e999999` as infinity and `NaN` as not a number: no price either."""
    reading = read_prices(
        json_ld("9.90", written).replace(f'"{written}"', written), PriceSettings()
    )
    assert [p.amount for p in reading.prices] == [Decimal("9.90")]
    assert len(reading.skipped) == 1 and "Plan 1" in reading.skipped[0]


def test_a_selected_amount_no_price_has_is_skipped_with_its_reason() -> None:
    page = '<p class="p">€ 9,90</p><p class="p">€ 99999999999999999999</p>'
    reading = read_prices(page, PriceSettings(selector=".p"))
    assert [p.amount for p in reading.prices] == [Decimal("9.90")]
    assert any("is no price" in why for why in reading.skipped)


@given(
    st.decimals(allow_nan=False, allow_infinity=False).filter(
        lambda d: d != 0 and (d.adjusted() >= MAX_INTEGER_DIGITS
                              or -int(d.normalize().as_tuple().exponent) > MAX_DECIMAL_PLACES)
    )
)  # fmt: skip
def test_every_implausible_amount_is_refused(amount: Decimal) -> None:
    with pytest.raises(Implausible):
        parse_amount(str(amount), "offer 1", structured=True)


@given(st.decimals(min_value=0, max_value=Decimal("999999999999999"), places=2))
def test_every_plausible_amount_is_read_as_written(amount: Decimal) -> None:
    assert parse_amount(str(amount), "offer 1", structured=True)[0] == amount


def test_a_stored_amount_no_price_has_prints_short() -> None:
    shown = terminal.amount(PriceView(name="Pro", amount=Decimal("1E+999999"), currency="EUR"))
    assert shown == "1.000e+999999 EUR"


async def test_a_stored_amount_numeric_cannot_hold_leaves_the_charts_whole(
    pool: asyncpg.Pool,
) -> None:
    """1.8 stored `1E+999999`; the charts' query cast it and failed the page on every load,
    and the sparkline drew it as `nan`."""
    target_id = "magnitude-stored"
    await pool.execute(
        "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot) "
        "VALUES ($1, 'https://example.com/', 3600, now(), now())",
        target_id,
    )
    for hours, amount in [(2, "9.90"), (1, "1E+999999")]:
        await pool.execute(
            "INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status,"
            " result_hash, prices) VALUES ($1, $2, now() - make_interval(hours => $3), now(),"
            " 'unchanged', 'h', $4::jsonb)",
            f"{target_id}:{hours}", target_id, hours,
            f'[{{"name": "Pro", "amount": "{amount}", "currency": "EUR"}}]',
        )  # fmt: skip
    series = await store.price_points(pool, target_id, 10)
    assert [amount for _, amount in series["Pro"]] == [Decimal("9.90")]
    (listed,) = [t for t in await store.list_targets(pool) if t["id"] == target_id]
    assert listed["trend"] == ["9.90"]  # the sparkline's amounts
