"""`pricewatch try`: one fetch through the same guard and rules a check uses, what the check
would record printed, nothing written, and no service asked (Temporal and Postgres point
nowhere here)."""

import json
import os
from pathlib import Path

from tests.conftest import Site
from tests.helpers import cli

SALE = """<html><head><title>Kettle</title>
<meta property="og:price:amount" content="59.00">
<script type="application/ld+json">{"@type": "Product", "name": "Kettle", "offers":
 {"@type": "Offer", "price": "79.00", "priceCurrency": "EUR",
  "availability": "https://schema.org/InStock",}}</script></head>
<body><p class="price"><del>79,00 €</del> <ins>59,00 €</ins></p>
<ul><li class="plan">Basic $5/mo</li><li class="plan">Pro: call for price</li>
<li class="plan" hidden>Yearly $50</li></ul></body></html>"""


def nowhere(tmp_path: Path, allow: str = "127.0.0.1/32") -> dict[str, str]:
    """A CLI environment whose Temporal and Postgres do not exist."""
    return {
        **os.environ,
        "PRICEWATCH_DATA_DIR": str(tmp_path),
        "PRICEWATCH_ALLOW_NETWORKS": allow,
        "PRICEWATCH_DATABASE_URL": "postgresql://pricewatch@127.0.0.1:9/none",
        "TEMPORAL_ADDRESS": "127.0.0.1:9",
    }


async def test_try_prints_the_prices_where_each_was_read_and_what_was_skipped(
    site: Site, tmp_path: Path
) -> None:
    site.html = SALE
    code, out, err = await cli(nowhere(tmp_path), "try", site.url, "--prices")
    assert code == 0, err
    assert "Kettle  59 EUR  79   in stock  OpenGraph price" in out, out
    assert "skipped: JSON-LD 79.00: the struck-out price; OpenGraph is read" in out
    assert "(nothing was written)" in out
    code, out, err = await cli(nowhere(tmp_path), "try", site.url, "--price-selector", "li.plan")
    assert code == 0, err
    assert "price 1  5 $" in out and "match 1" in out, out
    assert "skipped: price selector 'li.plan': no price in match 2 'Pro: call for price'" in out
    assert "skipped: match 3 'Yearly $50': hidden" in out


async def test_try_json_is_what_a_check_would_record(site: Site, tmp_path: Path) -> None:
    site.html = SALE
    code, out, err = await cli(
        nowhere(tmp_path), "try", site.url, "--price-selector", "p.price", "--json"
    )
    assert code == 0, err
    tried = json.loads(out)
    assert tried["text"] == "price 1: 59 EUR", "the listing that is hashed"
    assert [(p["amount"], p["regular"]) for p in tried["prices"]] == [("59.00", "79.00")]
    code, plain, err = await cli(nowhere(tmp_path), "try", site.url, "--selector", "ins")
    assert code == 0, err
    assert "text that is hashed (1 lines):\n  59,00 €" in plain


async def test_a_page_a_check_would_fail_on_is_one_line_and_exit_1(
    site: Site, tmp_path: Path
) -> None:
    site.html = "<p>no prices here</p>"
    code, out, err = await cli(nowhere(tmp_path), "try", site.url, "--prices")
    assert (code, out) == (1, "")
    assert err.startswith("pricewatch: a check would fail (permanent): extraction rule failed:")
    assert len(err.splitlines()) == 1
    code, _, err = await cli(nowhere(tmp_path), "try", site.url, "--price-selector", "[[[")
    assert code == 2 and "invalid CSS selector" in err
    code, _, err = await cli(nowhere(tmp_path, allow=""), "try", site.url, "--prices")
    assert code == 2 and "not a public address" in err, "the same guard as a check"


PLANS = """<html><body><table>
<tr class="plan"><th>Monthly</th><td>€10</td><td>per user / month</td></tr>
<tr class="plan"><th>Yearly</th><td>€100</td><td>per user, billed annually</td></tr>
</table></body></html>"""


async def test_try_shows_the_period_and_per_of_each_plan(site: Site, tmp_path: Path) -> None:
    site.html = PLANS
    options = ("--price-selector", "tr.plan", "--price-name", "th")
    code, out, err = await cli(nowhere(tmp_path), "try", site.url, *options, "--json")
    assert code == 0, err
    tried = json.loads(out)
    assert [(p["name"], p["amount"], p["period"], p["per"]) for p in tried["prices"]] == [
        ("Monthly", "10", "month", "user"), ("Yearly", "100", "year", "user"),
    ]  # fmt: skip
    assert tried["text"] == "Monthly: 10 EUR/user/month\nYearly: 100 EUR/user/year"
    code, out, err = await cli(nowhere(tmp_path), "try", site.url, *options)
    assert code == 0, err
    assert "Monthly  10 EUR/user/month" in out and "Yearly   100 EUR/user/year" in out, out
