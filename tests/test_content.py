"""What is hashed, against real Postgres and a real page server: normalised text, selector,
ignore rule, conditional requests, snapshots, excerpts and `pricewatch diff`."""

import asyncio
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from activities import store
from activities.notify import NotifyActivities, SmtpSettings
from pricewatch.deliveries import DeliveryInput, Notice
from pricewatch.models import Channel, ChannelKind, TargetConfig
from tests.conftest import MailSink, Site, WebhookReceiver
from tests.helpers import SLOT, Checker

HOUR = timedelta(hours=1)


def page(price: str, token: str = "t0", footer: str = "2026") -> str:
    return (
        f"<html><head><script>var csrf='{token}';</script></head><body>"
        f"<div id=plans><p>Pro plan</p><p>{price} EUR / month</p></div>"
        f"<footer>Updated {footer}</footer></body></html>"
    )


async def checker(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site, **options: str
) -> Checker:
    config = TargetConfig(target_id="acme", url=site.url, interval_seconds=3600, **options)
    await store.sync_target(pool, config, next_slot=SLOT, enabled=True)
    return Checker(pool, http, config)


async def test_markup_noise_is_unchanged_and_a_price_change_is_changed_once(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site
) -> None:
    checks = await checker(pool, http, site)
    site.html = page("12.00", token="a1")
    assert (await checks.check()).status == "unchanged"  # the baseline
    site.html = page("12.00", token="b2").replace("<p>", "<p class=x>\n    ")
    assert (await checks.check()).status == "unchanged", "a rotating token is not a change"
    site.html = page("14.00", token="c3")
    changed = await checks.check()
    assert changed.status == "changed"
    excerpt = await pool.fetchval("SELECT excerpt FROM source_checks WHERE status = 'changed'")
    assert excerpt == "-12.00 EUR / month\n+14.00 EUR / month"


async def test_only_the_selected_text_counts(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site
) -> None:
    checks = await checker(pool, http, site, selector="#plans")
    site.html = page("12.00", footer="Monday")
    await checks.check()
    site.html = page("12.00", footer="Tuesday")
    assert (await checks.check()).status == "unchanged", "outside the selector"
    site.html = page("13.00", footer="Tuesday")
    assert (await checks.check()).status == "changed", "inside the selector"


async def test_the_ignore_rule_removes_what_rotates(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site
) -> None:
    checks = await checker(pool, http, site, ignore=r"Updated \w+")
    site.html = page("12.00", footer="Monday")
    await checks.check()
    site.html = page("12.00", footer="Tuesday")
    assert (await checks.check()).status == "unchanged"


async def test_a_304_is_unchanged_with_no_body(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site
) -> None:
    checks = await checker(pool, http, site)
    site.html, site.etag = page("12.00"), '"v1"'
    first = await checks.check()
    second = await checks.check()
    assert site.conditional_hits == 1
    assert (second.status, second.result_hash) == ("unchanged", first.result_hash)
    row = await pool.fetchrow("SELECT * FROM source_checks WHERE work_id = $1", second.work_id)
    assert row is not None
    assert (row["http_status"], row["body_bytes"], row["etag"]) == (304, 0, '"v1"')


async def test_snapshots_are_kept_for_new_states_and_pruned_to_the_retention(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site
) -> None:
    checks = await checker(pool, http, site)  # keeps 2 snapshots
    for price in ["10", "10", "11", "12"]:
        site.html = page(price)
        await checks.check()
    rows = await pool.fetch(
        "SELECT status, snapshot IS NOT NULL AS kept FROM source_checks"
        " WHERE status <> 'skipped' ORDER BY scheduled_for"  # the months since SLOT
    )
    assert [(r["status"], r["kept"]) for r in rows] == [
        ("unchanged", False),  # the baseline's snapshot, pruned
        ("unchanged", False),
        ("changed", True),
        ("changed", True),
    ]


async def test_diff_prints_the_change_against_the_snapshot_before_it(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site, database_url: str
) -> None:
    checks = await checker(pool, http, site)
    site.html = page("12.00")
    baseline = await checks.check()
    site.html = page("14.00")
    change = await checks.check()
    env = {**os.environ, "PRICEWATCH_DATABASE_URL": database_url}
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "pricewatch"), "diff", "acme",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err
    assert out.decode().splitlines() == [
        f"--- {baseline.work_id}",
        f"+++ {change.work_id}",
        "@@ -1,3 +1,3 @@",
        " Pro plan",
        "-12.00 EUR / month",
        "+14.00 EUR / month",
        " Updated 2026",
    ]


async def test_a_change_notice_carries_the_excerpt(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site,
    webhook_receiver: WebhookReceiver, smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    checks = await checker(pool, http, site)
    webhook = Channel(kind=ChannelKind.WEBHOOK, destination=webhook_receiver.url)
    config = checks.config.model_copy(update={"channels": [webhook]})
    await store.sync_target(pool, config, next_slot=SLOT, enabled=True)
    site.html = page("12.00")
    await checks.check()
    site.html = page("14.00")
    change = await checks.check()
    notice = DeliveryInput(
        notice=Notice.CHANGED, channel_id=webhook.channel_id, target_id="acme",
        url=site.url, result=change,
    )  # fmt: skip
    notify = NotifyActivities(pool, http, smtp_server[1])
    await ActivityEnvironment().run(notify.deliver_notice, notice)
    [(_, payload)] = webhook_receiver.received
    assert payload["excerpt"] == "-12.00 EUR / month\n+14.00 EUR / month"


@pytest.mark.parametrize(
    "option", [["--selector", "p[["], ["--ignore", "(unclosed"], ["--json-pointer", "no-slash"]]
)
def test_bad_extraction_rules_are_refused_at_add_time(option: list[str]) -> None:
    env = {**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "pricewatch"), "add", "acme",
         "https://example.com/", "--every", "1h", *option],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


async def test_new_extraction_rules_start_a_new_baseline_instead_of_a_change(
    pool: asyncpg.Pool, http: httpx.AsyncClient, site: Site
) -> None:
    """Switching on a selector changes the text hashed, not the page: no `changed` for it,
    and no conditional request answered with the old rules' version."""
    checks = await checker(pool, http, site)
    site.html, site.etag = page("12.00"), '"v1"'
    await checks.check()
    checks.config = checks.config.model_copy(update={"selector": "#plans"})
    rebased = await checks.check()
    assert (rebased.status, rebased.previous_hash) == ("unchanged", None)
    assert site.conditional_hits == 0, "validators from the old rules must not be sent"
    site.html, site.etag = page("13.00"), '"v2"'
    assert (await checks.check()).status == "changed"
