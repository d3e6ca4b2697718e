"""Tags and groups (issue 44): a target carries short-slug tags from every edge (`add --tag`,
`tags:` in a targets file, the API's entry), the list filters and sorts by what happened, and
`/groups/TAG` draws every named price of the group's targets on one chart. The pages here
read Postgres only, so they are served in process (no Temporal: the bulk actions' calls are
the browser tests', tests/test_dashboard_browser.py)."""

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import escape
from pathlib import Path

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from client import manifest
from client.manifest import Entry, ManifestError
from client.pricewatch import Pricewatch
from pricewatch.models import MAX_TAGS, TAG_PATTERN, TARGET_ID_PATTERN, TargetConfig
from pricewatch.settings import Settings
from surfaces import charts, dashboard, web
from surfaces.dashboard import ago

PRICEWATCH = Path(sys.executable).parent / "pricewatch"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
TAGS = st.from_regex(TAG_PATTERN, fullmatch=True)
NOT_TAGS = st.text(max_size=40).filter(lambda text: not TAG_PATTERN.fullmatch(text))


def config(**fields: object) -> TargetConfig:
    return TargetConfig(target_id="t", url="https://example.com/", interval_seconds=60, **fields)


@given(st.lists(TAGS, max_size=MAX_TAGS))
def test_tags_are_kept_sorted_once_and_round_trip_a_targets_file(tags: list[str]) -> None:
    kept = config(tags=tags).tags
    assert kept == sorted(set(tags))
    written = manifest.entry(config(tags=tags))
    assert written.get("tags", []) == kept  # left out when empty: files stay as they were
    assert Entry.model_validate(written).config() == config(tags=tags)


@given(NOT_TAGS)
def test_a_bad_tag_is_one_line_naming_the_field(tag: str) -> None:
    with pytest.raises(ValidationError) as caught:
        config(tags=["ok", tag])
    line = manifest.field_error(caught.value)
    assert line.startswith("tags: ") and "is not a tag" in line and "\n" not in line


def test_too_many_tags_and_one_written_alone(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="at most 10 tags"):
        config(tags=[f"t{n}" for n in range(MAX_TAGS + 1)])
    assert Entry(id="t", url="https://example.com/", tags="solo").config().tags == ["solo"]
    path = tmp_path / "targets.yaml"
    path.write_text("targets:\n  - id: t\n    url: https://example.com/\n    tags: [Cloud]\n")
    with pytest.raises(ManifestError) as caught:
        manifest.load(path)
    assert str(caught.value).startswith(f"{path}:4: tags: 'Cloud' is not a tag")


def test_a_config_recorded_before_tags_reads_untagged() -> None:
    recorded = {"target_id": "t", "url": "https://example.com/", "interval_seconds": 60}
    assert TargetConfig.model_validate(recorded).tags == []


@pytest.mark.parametrize(
    "args",
    [["add", "t", "https://example.com/", "--tag", "No Caps"], ["list", "--tag", "<b>"]],
)
def test_cli_refuses_a_bad_tag_in_one_line(args: list[str], tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PRICEWATCH_"))}
    env |= {"TEMPORAL_ADDRESS": "127.0.0.1:1", "PRICEWATCH_DATA_DIR": str(tmp_path)}
    env |= {"PRICEWATCH_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    done = subprocess.run(
        [str(PRICEWATCH), *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "is not a tag" in done.stderr, done.stderr


@given(st.integers(min_value=-(10**8), max_value=10**8))
def test_ago_is_one_short_phrase_either_way(seconds: int) -> None:
    said = ago(NOW - timedelta(seconds=seconds), NOW)
    pattern = r"just now|[1-9][0-9]*[dhm] ago|in [1-9][0-9]*[dhm]"
    assert re.fullmatch(pattern, said), said
    assert (said == "just now") == (abs(seconds) < 60)
    assert said.startswith("in ") == (seconds <= -60)


def test_ago_says_the_largest_whole_unit() -> None:
    assert ago(None) == "-"
    assert ago(NOW - timedelta(seconds=30), NOW) == "just now"
    assert ago(NOW - timedelta(minutes=5, seconds=59), NOW) == "5m ago"
    assert ago(NOW - timedelta(hours=3, minutes=1), NOW) == "3h ago"
    assert ago(NOW - timedelta(days=12), NOW) == "12d ago"
    assert ago(NOW + timedelta(minutes=4, seconds=1), NOW) == "in 4m"


@given(st.lists(st.decimals(min_value=-1000, max_value=1000, places=2), max_size=5))
def test_moved_is_the_change_since_the_previous_slot(amounts: list[Decimal]) -> None:
    assert charts.moved(amounts) == (amounts[-1] - amounts[-2] if len(amounts) > 1 else None)


@given(
    st.floats(min_value=0, max_value=4e9),
    st.floats(min_value=0, max_value=4e8),
)
def test_time_ticks_start_at_the_first_slot_and_never_repeat(first: float, span: float) -> None:
    ticks = charts._time_ticks(first, first + span)
    assert ticks[0][0] == first and 1 <= len(ticks) <= 5
    labels = [label for _, label in ticks]
    assert len(set(labels)) == len(labels), labels


@given(
    st.lists(st.sampled_from([Decimal("9.00"), Decimal("12.50"), Decimal("12.5")]), max_size=60),
    st.text(max_size=20),
)
def test_a_chart_has_a_dot_per_slot_and_each_run_says_its_amount(
    amounts: list[Decimal], name: str
) -> None:
    points = [(NOW + timedelta(hours=i), amount) for i, amount in enumerate(amounts)]
    svg = str(charts.price_chart(name, points))
    runs = re.findall(r'<path class="point" d="([^"]*)"><title>([^<]*)</title></path>', svg)
    said = [title.rsplit(": ", 1)[1] for marks, title in runs for _ in range(marks.count("h0"))]
    assert said == [str(amount) for amount in amounts]  # slot by slot, 12.5 not 12.50
    assert all(title.startswith(escape(name) + ": ") for _, title in runs)


# Postgres-backed pages ----------------------------------------------------------------


async def add_target(
    pool: asyncpg.Pool, target_id: str, tags: list[str], prices: bool = True, **more: object
) -> None:
    written: dict[str, object] = {"target_id": target_id, "url": f"https://{target_id}.example/"}
    written["tags"] = tags
    written |= {"prices": {}} if prices else {}
    await pool.execute(
        "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot, config, "
        "failure_streak) VALUES ($1, $2, 3600, $3, $3, $4::jsonb, $5)",
        target_id, written["url"], NOW, json.dumps(written), more.get("streak", 0),
    )  # fmt: skip


async def add_check(
    pool: asyncpg.Pool,
    target_id: str,
    hours: int,
    status: str = "unchanged",
    plans: dict[str, str] | None = None,
    error: str | None = None,
) -> None:
    slot = NOW + timedelta(hours=hours)
    prices = None
    if plans is not None:
        prices = json.dumps(
            [
                {"name": n, "amount": a, "currency": "EUR", "period": "month"}
                for n, a in plans.items()
            ]
        )
    await pool.execute(
        "INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status,"
        " result_hash, previous_hash, prices, error_message) VALUES ($1, $2, $3, $3, $4,"
        " CASE WHEN $4 IN ('failed', 'retrying') THEN NULL ELSE 'h' END, 'g', $5::jsonb, $6)",
        f"{target_id}:{hours}", target_id, slot, status, prices, error,
    )  # fmt: skip


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The dashboard in process over this test's database (Temporal never reached)."""
    settings = Settings(database_url=database_url)
    served = web.create_app(settings)
    async with Pricewatch(settings) as pricewatch:
        served.state.pricewatch = pricewatch
        transport = httpx.ASGITransport(app=served)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8090") as c:
            yield c


def ids_listed(html: str) -> list[str]:
    return re.findall(r'<tr id="row-([a-z0-9-]+)">', html)


async def test_the_list_says_what_happened_and_filters_and_sorts(
    pool: asyncpg.Pool, app: httpx.AsyncClient
) -> None:
    await add_target(pool, "acme", ["cloud"])
    await add_target(pool, "bolt", ["cloud", "eu"], streak=3)
    await add_target(pool, "calm", [], prices=False)
    await add_check(pool, "acme", 0, "changed", {"Basic": "5.00", "Pro": "9.90"})
    await add_check(pool, "acme", 1, "unchanged", {"Basic": "5.00", "Pro": "12.50"})
    await add_check(pool, "bolt", 0, "changed", {"Pro": "20"})
    await add_check(pool, "bolt", 2, "failed", error="<b>HTTP 503</b> from bolt")
    await add_check(pool, "calm", 0)

    listed = (await app.get("/")).text
    assert ids_listed(listed) == ["acme", "bolt", "calm"]
    acme = listed[listed.index('id="row-acme"') : listed.index('id="row-bolt"')]
    assert "Basic</span>: 5.00 EUR" in acme and "Pro</span>: 12.50 EUR" in acme  # every price
    assert '<span class="move up" title="since the previous slot">+2.60</span>' in acme
    assert acme.count('<svg class="spark"') == 2
    assert 'title="2026-03-01 12:00:00 UTC"' in acme  # last changed, exact on hover
    assert "&lt;b&gt;HTTP 503&lt;/b&gt; from bolt" in listed and "<b>HTTP" not in listed

    assert ids_listed((await app.get("/?tag=cloud")).text) == ["acme", "bolt"]
    assert ids_listed((await app.get("/?tag=eu")).text) == ["bolt"]
    assert ids_listed((await app.get("/?sort=checked&desc=1")).text) == ["bolt", "acme", "calm"]
    assert ids_listed((await app.get("/?sort=changed")).text) == ["acme", "bolt", "calm"]
    # ties go by id the same way round
    assert ids_listed((await app.get("/?sort=streak&desc=1")).text) == ["bolt", "calm", "acme"]
    assert ids_listed((await app.get("/?sort=id&desc=1")).text) == ["calm", "bolt", "acme"]
    by_checked = (await app.get("/?sort=checked")).text
    assert 'href="/?sort=checked&amp;desc=1"' in by_checked  # its header turns it round
    assert 'href="/?sort=changed"' in by_checked and 'href="/"' in by_checked

    bad = await app.get("/?tag=%3Cscript%3E")
    assert bad.status_code == 400 and "tag: &#39;&lt;script&gt;&#39; is not a tag" in bad.text
    api = await app.get("/api/v1/targets?tag=eu")
    assert [t["id"] for t in api.json()] == ["bolt"] and api.json()[0]["tags"] == ["cloud", "eu"]
    assert api.json()[0]["error"] == "<b>HTTP 503</b> from bolt"


async def test_a_group_charts_every_plan_of_its_targets_on_one_axis(
    pool: asyncpg.Pool, app: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add_target(pool, "acme", ["cloud"])
    await add_target(pool, "bolt", ["cloud"])
    await add_target(pool, "calm", ["other"])
    for hours, (basic, pro) in enumerate([("5", "9.90"), ("6", "9.90"), ("6", "11")]):
        await add_check(pool, "acme", hours * 24, "changed", {"Basic": basic, "Pro": pro})
        await add_check(pool, "bolt", hours * 24 + 1, "unchanged", {"<i>Pro</i>": "8"})
    await add_check(pool, "calm", 0, "changed", {"Pro": "1"})
    await add_check(pool, "bolt", 99, "changed", {"<i>Pro</i>": "1E+999999"})  # left out

    shown = await app.get("/groups/cloud")
    assert shown.status_code == 200, shown.text
    html = shown.text
    chart = html[html.index('<svg class="chart lines"') : html.index("</svg>")]
    lines = re.findall(r'<g class="line" data-line="([^"]+)">', chart)
    assert lines == ["acme · Basic", "acme · Pro", "bolt · &lt;i&gt;Pro&lt;/i&gt;"]
    assert chart.count('class="time"') == 5 and "2026-03-01" in chart  # a labelled time axis
    assert re.findall(r'class="amount"[^>]*>([^<]+)<', chart) == ["11", "8", "5"]
    assert "<i>Pro</i>" not in html  # escaped in the legend too
    legend = html[html.index('<ul class="legend">') :]
    assert "<strong>11</strong> EUR / month" in legend and "<strong>8</strong> EUR" in legend
    changes = html[html.index('id="changes"') :]
    assert re.findall(r"<tr><td><a href=\"/targets/([a-z]+)\"", changes) == [
        "bolt", "acme", "acme", "acme",
    ]  # fmt: skip

    monkeypatch.setattr(dashboard, "GROUP_CHART_TARGETS", 1)  # the chart's cap, by id
    capped = (await app.get("/groups/cloud")).text
    assert re.findall(r'<g class="line" data-line="([^"]+)">', capped) == [
        "acme · Basic", "acme · Pro",
    ]  # fmt: skip
    assert "The first 1 targets with prices, by id." in capped

    unknown = await app.get("/groups/nothing")
    assert unknown.status_code == 404 and "no target has the tag &#39;nothing&#39;" in unknown.text
    assert (await app.get("/groups/Bad%20Tag")).status_code == 400


async def test_bulk_asks_before_removing_and_refuses_no_selection(
    pool: asyncpg.Pool, app: httpx.AsyncClient
) -> None:
    await add_target(pool, "acme", [])
    await add_target(pool, "bolt", [])
    csrf = CSRF.findall((await app.get("/")).text)[0]
    none = await app.post("/bulk", data={"csrf": csrf, "action": "pause"})
    assert none.status_code == 400 and "id: select at least one target" in none.text
    forged = await app.post("/bulk", data={"csrf": "x", "action": "pause", "id": "acme"})
    assert forged.status_code == 403
    odd = await app.post("/bulk", data={"csrf": csrf, "action": "explode", "id": "acme"})
    assert odd.status_code == 400 and "action:" in odd.text
    asked = await app.post(
        "/bulk", data={"csrf": csrf, "action": "remove", "id": ["acme", "bolt"], "back": "/?q=a"}
    )
    assert asked.status_code == 200 and "Remove 2 targets?" in asked.text
    assert 'name="confirmed" value="true"' in asked.text and 'href="/?q=a"' in asked.text
    assert await pool.fetchval("SELECT count(*) FROM monitor_targets") == 2  # nothing removed


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
@given(ids=st.lists(st.text(max_size=70), min_size=1, max_size=4))
async def test_bulk_refuses_any_selection_holding_a_non_id(
    app: httpx.AsyncClient, ids: list[str]
) -> None:
    """Checked before any call is made: one line naming the field, nothing done."""
    if all(TARGET_ID_PATTERN.fullmatch(i.strip()) for i in ids):
        ids = [*ids, "Not An Id"]
    csrf = CSRF.findall((await app.get("/login")).text)[0]
    answer = await app.post("/bulk", data={"csrf": csrf, "action": "pause", "id": ids})
    assert answer.status_code == 400, answer.text
    line = re.findall(r'<p class="error"[^>]*>(.*?)</p>', answer.text, re.S)
    assert line and line[0].startswith("pricewatch: id: "), answer.text
