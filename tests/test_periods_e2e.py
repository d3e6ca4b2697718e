"""End to end (issue 43): a plan switched from monthly to yearly billing is told as a change
of period, not as a 10x rise, through a real worker, the Temporal dev server, real Postgres,
a page server and real webhook and SMTP receivers; `prices` shows each period and `--per
month` the amounts a month."""

import json
from typing import Any

import asyncpg
import httpx
import pytest

from activities.notify import SmtpSettings
from pricewatch import views
from tests.conftest import MailSink, PageServer, WebhookReceiver
from tests.helpers import cli, serve_process, worker_process
from tests.waits import wait_for

pytestmark = pytest.mark.e2e

INTERVAL_SECONDS = 2


def plans(pro: str) -> str:
    return (
        "<table><tr class=plan><th>Pro</th><td>EUR " + pro + "</td></tr>"
        "<tr class=plan><th>Team</th><td>EUR 240</td><td>per user, billed annually</td></tr>"
        "</table>"
    )


def mail_text(sink: MailSink) -> str:
    texts = []
    for message in sink.messages:
        for part in message.walk():
            payload = part.get_payload(decode=True)
            if part.get_content_type() == "text/plain" and isinstance(payload, bytes):
                texts.append(payload.decode())
    return "\n".join(texts)


async def test_a_switch_from_monthly_to_yearly_billing_is_told_as_a_change_of_period(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer,
    webhook_receiver: WebhookReceiver, smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    sink, smtp = smtp_server
    env = {**env, "PRICEWATCH_SMTP_HOST": smtp.host, "PRICEWATCH_SMTP_PORT": str(smtp.port)}
    page_server.set("/billing", plans("10 / month"))
    async with worker_process(env):
        for target, rules in (("e2e-period", []), ("e2e-period-rise", ["--notify-on", "rise"])):
            code, _, err = await cli(
                env, "add", target, page_server.url("/billing"), "--every",
                f"{INTERVAL_SECONDS}s", "--price-selector", "tr.plan", "--price-name", "th",
                "--webhook", webhook_receiver.url, "--email", "ops@example.com", *rules,
            )  # fmt: skip
            assert code == 0, err
        await wait_for(
            pool, "SELECT count(DISTINCT target_id) - 1 FROM source_checks WHERE prices IS NOT NULL"
        )
        page_server.set("/billing", plans("100 / year"))
        await wait_for(pool, "SELECT count(DISTINCT target_id) - 1 FROM source_checks"
                             " WHERE status = 'changed'")  # fmt: skip
        await wait_for(pool, "SELECT count(*) - 1 FROM deliveries WHERE status = 'sent'")
        code, table, err = await cli(env, "prices", "e2e-period")
        assert code == 0, err
        code, monthly, err = await cli(env, "prices", "e2e-period", "--per", "month", "--json")
        assert code == 0, err
        async with serve_process(env) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
            dashboard = (await http.get("/", params={"state": "prices"})).text
            api = (await http.get("/api/v1/targets/e2e-period/prices")).json()
            api_monthly = await http.get("/api/v1/targets/e2e-period/prices?per=month")
            unknown_per = await http.get("/api/v1/targets/e2e-period/prices?per=fortnight")
        told = await pool.fetch(
            "SELECT c.target_id, c.price_moves, c.notify FROM source_checks c"
            " WHERE c.status = 'changed' ORDER BY c.target_id"
        )
        for target in ("e2e-period", "e2e-period-rise"):
            assert (await cli(env, "remove", target))[0] == 0

    assert "10 EUR/month" in table and "100 EUR/year" in table, table
    assert "240 EUR/user/year" in table, table
    assert "100 EUR/year" in dashboard and "240 EUR/user/year" in dashboard
    assert [(p["name"], p["period"], p["per"]) for p in api[-1]["prices"]] == [
        ("Pro", "year", None), ("Team", "year", "user"),
    ]  # fmt: skip
    rows: list[views.PricesRow] = views.OUTPUTS["prices"].validate_json(monthly)  # type: ignore[assignment]
    assert [(p.name, str(p.amount), p.period) for p in rows[-1].prices] == [
        ("Pro", "8.33", "month"), ("Team", "20.00", "month"),
    ]  # fmt: skip
    told_monthly = json.loads(monthly)  # the API's, oldest first, has the checks since too
    assert api_monthly.status_code == 200
    assert api_monthly.json()[: len(told_monthly)] == told_monthly
    assert unknown_per.status_code == 422 and "month" in unknown_per.text, unknown_per.text
    assert [(row["target_id"], row["notify"]) for row in told] == [
        ("e2e-period", True), ("e2e-period-rise", False),
    ], "a rise rule does not fire on a change of period"  # fmt: skip
    [webhook] = [dict[str, Any](payload) for _, payload in webhook_receiver.received]
    views.PAYLOADS["notice"].validate_python(webhook)
    moves: list[dict[str, Any]] = webhook["prices"]
    [move] = moves
    assert move["name"] == "Pro" and (move["old"], move["new"]) == ("10", "100")
    assert (move["previous_period"], move["period"]) == ("month", "year")
    assert (move["change"], move["change_percent"]) == (None, None), "not a 10x rise"
    assert move["rules"] == ["price-change"]
    assert len(sink.messages) == 1
    text = mail_text(sink)
    assert "Pro: 10 EUR/month -> 100 EUR/year (billing period changed) [price-change]" in text
    stored: list[dict[str, Any]] = json.loads(told[1]["price_moves"])
    assert stored[0]["rules"] == [], "recorded for the rise target, told to nobody"
