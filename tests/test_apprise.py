"""Apprise channels (issue 32): any Apprise URL through the same outbox, guard and one
delivery row per (change, channel), against real local servers for the kinds whose host can
be set: json://, form://, ntfy://, gotify:// and mmost:// (Mattermost), all served by one
aiohttp app on 127.0.0.1."""

import asyncio
import re
import socket
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from aiohttp import web
from apprise.plugins.discord import USER_ROLE_DETECTION_RE
from apprise.plugins.slack import NotifySlack
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities import services, store
from activities.notify import NotifyActivities
from client import channels
from client.channels import apprise_channel
from fetchers.guard import AddressPolicy
from pricewatch import isolated, notices
from pricewatch.models import ChannelKind, PriceSettings, TargetConfig
from pricewatch.policy import PERMANENT_DELIVERY_ERROR, TRANSIENT_DELIVERY_ERROR
from tests.chaos.stack import serve
from tests.conftest import GOTIFY_TOKEN, LOOPBACK, MATTERMOST_TOKEN, PageServer, Services, Start
from tests.helpers import (
    CHANGED,
    NO_SMTP,
    SLOT,
    anchor_of,
    cli,
    delivery,
    dies_at_the_record,
    rows,
    running_worker,
    worker_process,
)
from tests.waits import eventually


async def stored(pool: asyncpg.Pool, config: TargetConfig) -> TargetConfig:
    """As the client does it before a start: the URLs into Postgres, refs into the config."""
    return await channels.with_refs(pool, config, keep=True)


def target(page_server: PageServer, urls: list[str], **config: Any) -> TargetConfig:
    target_id = f"t-{uuid.uuid4().hex[:8]}"
    page_server.set(f"/{target_id}", "<p>price 10</p>")
    return TargetConfig(
        target_id=target_id, url=page_server.url(f"/{target_id}"), interval_seconds=3600,
        channels=[apprise_channel(url) for url in urls], **config,
    )  # fmt: skip


# Parsing, templates ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("foo://example.com/x", "not an Apprise URL (foo://...): unknown service or malformed"),
        ("slack://only-one-token", "not a usable Apprise URL (slack://...)"),
        ("mailto://user:pw@example.com", "E-Mail does not send over HTTP"),
        ("rsyslog://127.0.0.1", "does not send over HTTP"),
        ("nostr://" + "a" * 64 + "/npub1abc", "does not send over HTTP"),
        ("not a url", "not an Apprise URL (it)"),
    ],
)
def test_a_url_apprise_cannot_use_is_one_line(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)) as caught:
        apprise_channel(url)
    assert "\n" not in str(caught.value)
    assert "pw" not in str(caught.value) and "only-one-token" not in str(caught.value)


def test_a_service_is_shown_as_apprise_masks_it() -> None:
    channel = apprise_channel("tgram://123456789:abcdefghijklmnop/12315544")
    assert channel.destination == "tgram://1...p/12315544/"
    assert "abcdefghijklmnop" not in channel.model_dump_json(), "the URL is never serialized"
    assert services.parse("ntfy://ntfy.internal:8080/prices").host == "ntfy.internal"
    assert services.parse("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ").host is None


@pytest.mark.parametrize(
    ("title", "body", "says"),
    [
        (None, "{{ target }} {{ nope }}", "the body template does not render: 'nope' is undefined"),
        ("{{ price }}", None, "the title template does not render: 'price' is undefined"),
        (None, "{% for move in prices %}", "the body template does not render (line 1)"),
        (None, "{{ ''.__class__.__mro__ }}", "the body template does not render"),
        (None, "{{ url.__class__ }}", "the body template does not render"),
        (None, "{{ 1 / 0 }}", "the body template does not render: division by zero"),
    ],
)
def test_a_template_that_does_not_render_is_refused(
    title: str | None, body: str | None, says: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        apprise_channel("json://127.0.0.1:9/x", title, body)


def test_the_default_message_reads_well_for_every_notice() -> None:
    page, price, failing, recovered = (notices.variables(s) for s in notices.SAMPLES[:4])
    message = notices.render(None, None, page)
    assert message.title == "pricewatch: acme-pricing page changed"
    assert "```\n- Pro 12 EUR\n+ Pro 13 EUR\n```" in message.body
    assert "work id acme-pricing:2026-12-01T08:00:00Z" in message.body
    price_body = notices.render(None, None, price).body
    assert "- Pro: 12.00 -> 13.00 EUR (+1.00, +8.33%) [price-change]" in price_body
    assert "Error: HTTP 503 (failed slots in a row: 3)" in notices.render(None, None, failing).body
    assert notices.render(None, None, recovered).title.endswith("recovered")
    test = notices.render(None, None, notices.variables(notices.SAMPLE, test=True))
    assert test.body.startswith("This is a test notice from pricewatch")
    listing = "{% for m in prices %}{{ m.name }} {{ m.new }}{% endfor %}"
    custom = notices.render("{{ target }}: {{ headline }}", listing, price)
    assert (custom.title, custom.body) == ("acme-pricing: price changed", "Pro 13.00")


# The outbox, one activity at a time -----------------------------------------------------


async def synced(pool: asyncpg.Pool, urls: list[str], **channel: str) -> TargetConfig:
    config = TargetConfig(
        target_id="acme", url="https://example.com/pricing", interval_seconds=3600,
        channels=[apprise_channel(url, **channel) for url in urls],
    )  # fmt: skip
    config = await stored(pool, config)
    await store.sync_target(pool, config, next_slot=SLOT, enabled=True)
    return config


async def test_each_kind_receives_a_change_once_and_never_again(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services
) -> None:
    urls = services_app.urls()
    config = await synced(pool, list(urls.values()))
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    for channel in config.channels:
        notice = delivery(config.model_copy(update={"channels": [channel]}), ChannelKind.APPRISE)
        first = await ActivityEnvironment().run(notify.deliver_notice, notice)
        again = await ActivityEnvironment().run(notify.deliver_notice, notice)
        assert (first.status, first.attempt_count, again.already_sent) == ("sent", 1, True)
    assert sorted(kind for kind, _ in services_app.received) == sorted(urls)
    for kind in urls:
        [text] = services_app.texts(kind)
        assert "pricewatch: acme page changed" in text, (kind, text)
        assert f"work id {CHANGED.work_id}" in text, (kind, text)
    [(_, ntfy)] = [r for r in services_app.received if r[0] == "ntfy"]
    assert ntfy["topic"] == "prices"


async def test_templates_shape_the_message(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services
) -> None:
    config = await synced(
        pool, [services_app.urls()["json"]], title="[{{ status }}] {{ target }}",
        body="{{ headline }} at {{ url }} ({{ work_id }})",
    )  # fmt: skip
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    await ActivityEnvironment().run(notify.deliver_notice, delivery(config, ChannelKind.APPRISE))
    [(_, body)] = services_app.received
    assert body["title"] == "[changed] acme"
    assert body["message"] == f"page changed at https://example.com/pricing ({CHANGED.work_id})"


@pytest.mark.parametrize(
    ("answer", "error", "disabled"),
    [
        (401, PERMANENT_DELIVERY_ERROR, "JSON answered HTTP 401"),
        (410, PERMANENT_DELIVERY_ERROR, "JSON answered HTTP 410"),
        (400, PERMANENT_DELIVERY_ERROR, None),
        (503, TRANSIENT_DELIVERY_ERROR, None),
        (429, TRANSIENT_DELIVERY_ERROR, None),
    ],
)
async def test_a_services_answer_is_classified(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services,
    answer: int, error: str, disabled: str | None,
) -> None:  # fmt: skip
    """Bad credentials or a gone destination disable the channel as a webhook's 410 does;
    another refusal fails this delivery; "later" and the network are retried."""
    config = await synced(pool, [services_app.urls()["json"]])
    services_app.answers["json"] = [answer]
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    notice = delivery(config, ChannelKind.APPRISE)
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert caught.value.type == error
    assert f"HTTP {answer}" in str(caught.value)
    reason = await pool.fetchval("SELECT disabled_reason FROM channels")
    assert (reason or None) == (f'{disabled}: {{"error": "invalid token"}}' if disabled else None)
    status = await pool.fetchval("SELECT status FROM deliveries")
    assert status == ("pending" if error == TRANSIENT_DELIVERY_ERROR else "failed")
    if disabled:  # the next change is not even tried
        later = notice.model_copy(update={"result": CHANGED.model_copy(update={"work_id": "w2"})})
        with pytest.raises(ApplicationError, match="channel disabled"):
            await ActivityEnvironment().run(notify.deliver_notice, later)
        assert len(services_app.received) == 1


async def test_a_template_that_overruns_at_send_fails_its_message_and_is_not_retried(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services
) -> None:
    """Cheap on every sample `add` tries (their target is `acme-pricing`), a billion steps
    for this target: stopped at the deadline, named, permanent; nothing is sent."""
    slow = (
        '{% if target == "acme" %}{% for i in range(10**5) %}{% for j in range(10**4) %}'
        "{% endfor %}{% endfor %}{% endif %}{{ headline }}"
    )
    config = await synced(pool, [services_app.urls()["json"]], body=slow)
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    started = time.monotonic()
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(
            notify.deliver_notice, delivery(config, ChannelKind.APPRISE)
        )
    assert time.monotonic() - started < isolated.WALL_SECONDS + 5  # its CPU is bounded: 2 s
    assert caught.value.type == PERMANENT_DELIVERY_ERROR and caught.value.non_retryable
    said = "the message template failed: the body template took longer than 2 s"
    assert caught.value.message == said
    assert await pool.fetchval("SELECT status FROM deliveries") == "failed"
    assert services_app.received == []


async def test_a_message_the_machine_starved_stays_owed_and_is_retried(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The soak under load: a worker stopped while its child rendered read as a template
    over its deadline, and the notice was failed for good. The machine's fault is retried."""

    def starved(*args: object, **kwargs: object) -> None:
        raise isolated.Unfinished("the body template had 0.1 s of CPU in 30 s: the machine is busy")

    config = await synced(pool, [services_app.urls()["json"]])
    monkeypatch.setattr(isolated, "run", starved)
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(
            notify.deliver_notice, delivery(config, ChannelKind.APPRISE)
        )
    assert caught.value.type == TRANSIENT_DELIVERY_ERROR and not caught.value.non_retryable
    assert caught.value.message.startswith("the message was not rendered: the body template had")
    assert await pool.fetchval("SELECT status FROM deliveries") == "pending"
    assert services_app.received == []


async def test_a_service_that_hangs_is_given_up_within_the_deadline(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services
) -> None:
    config = await synced(pool, [services_app.urls()["json"]])
    services_app.hold = asyncio.Event()  # never set: the service never answers
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    started = asyncio.get_running_loop().time()
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(
            notify.deliver_notice, delivery(config, ChannelKind.APPRISE)
        )
    took = asyncio.get_running_loop().time() - started
    assert caught.value.type == TRANSIENT_DELIVERY_ERROR, caught.value
    assert "JSON unreachable: no answer in time" in str(caught.value)
    assert took < 10, "inside the 9 s send deadline (the lease is 15 s)"
    services_app.hold.set()


async def test_a_service_that_trickles_its_answer_is_cut_at_the_deadline() -> None:
    """A read timeout bounds each read, not the answer: 200 and its headers, then a byte
    every 2 s would hold a send for half a minute. The watchdog ends it at the deadline."""

    async def trickle(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Length": "20"})
        await response.prepare(request)
        for _ in range(20):
            await response.write(b"x")
            await asyncio.sleep(2)
        return response

    async with serve([web.post("/json", trickle)]) as base:
        url = f"json://{base.removeprefix('http://')}/json"
        started = asyncio.get_running_loop().time()
        outcome = await asyncio.to_thread(services.send, url, "t", "b", LOOPBACK, 4.0)
        took = asyncio.get_running_loop().time() - started
    assert (outcome.sent, outcome.transient) == (False, True), outcome
    assert outcome.error == "JSON unreachable: no answer in time"
    assert took < 5.5, took


async def test_a_crash_after_the_service_accepted_sends_it_once_more_and_no_more(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The attempt dies after the service took the message but before `sent` was recorded:
    the next attempt (once the sending lease lapsed) sends it once more. A chat service has
    no idempotency key, so that is the one duplicate; the worker-kill version is below."""
    config = await synced(pool, [services_app.urls()["json"]])
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    notice = delivery(config, ChannelKind.APPRISE)
    monkeypatch.setattr(notify, "_record", dies_at_the_record)
    with pytest.raises(ConnectionResetError):
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    monkeypatch.undo()
    assert len(services_app.received) == 1
    assert await pool.fetchval("SELECT status FROM deliveries") == "pending"
    with pytest.raises(ApplicationError, match="another attempt is sending"):  # its lease
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    await pool.execute("UPDATE deliveries SET sending_until = now() - interval '1 s'")
    resent = await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert resent.status == "sent"
    assert (await ActivityEnvironment().run(notify.deliver_notice, notice)).already_sent
    assert len(services_app.received) == 2, "one duplicate, and only one"


# The guard ------------------------------------------------------------------------------


async def test_a_private_service_is_refused_unless_allowed(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services
) -> None:
    config = await synced(pool, [services_app.urls()["ntfy"]])
    public_only = NotifyActivities(pool, http, NO_SMTP, AddressPolicy())
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(
            public_only.deliver_notice, delivery(config, ChannelKind.APPRISE)
        )
    assert caught.value.type == PERMANENT_DELIVERY_ERROR
    assert "refused 127.0.0.1: it resolves to 127.0.0.1, not a public address" in str(caught.value)
    assert services_app.received == []


async def test_apprise_connects_to_the_address_it_checked(
    services_app: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebinding name: first 127.0.0.1 (allowed), then 10.9.9.9 (not). The guard resolves
    once and connects to the address it checked; a second lookup (urllib3's own) would go
    to 10.9.9.9 and fail. And a name that resolves to a private address is refused."""
    real = socket.getaddrinfo
    lookups: list[str] = []
    port = int(services_app.base.rsplit(":", 1)[1])

    def rebinding(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "prices.rebind.test":
            lookups.append(host)
            address = "127.0.0.1" if len(lookups) == 1 else "10.9.9.9"
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    url = f"json://prices.rebind.test:{port}/json"
    sent = await asyncio.to_thread(services.send, url, "t", "b", LOOPBACK, 9.0)
    assert sent.sent, sent
    assert lookups == ["prices.rebind.test"], "resolved once"
    assert len(services_app.received) == 1
    refused = await asyncio.to_thread(services.send, url, "t", "b", AddressPolicy(), 9.0)
    assert refused.error == (
        "refused prices.rebind.test: it resolves to 10.9.9.9, not a public address "
        "(allow it with PRICEWATCH_ALLOW_NETWORKS)"
    )
    assert len(services_app.received) == 1


# Through the workflow: a page change and a price change to every kind ------------------


async def test_a_page_change_and_a_price_change_reach_every_kind_once(
    time_skipping_env: WorkflowEnvironment, pool: asyncpg.Pool, page_server: PageServer,
    services_app: Services, start: Start, task_queue: str,
) -> None:  # fmt: skip
    env = time_skipping_env
    urls = list(services_app.urls().values())
    page = await stored(pool, target(page_server, urls))
    price = await stored(pool, target(page_server, urls, price_mode=PriceSettings(selector="p")))
    async with running_worker(env.client, task_queue, pool):
        anchor = await anchor_of(env)
        handles = [await start(config, start_at=anchor) for config in (page, price)]
        await env.sleep(timedelta(hours=1, minutes=30))  # the baselines: silence
        assert services_app.received == []
        page_server.set(f"/{page.target_id}", "<p>price 12</p>")
        page_server.set(f"/{price.target_id}", "<p>price 12</p>")
        await env.sleep(timedelta(hours=2))
        histories = [(await h.fetch_history()).to_json() for h in handles]
    for config, says in ((page, "page changed"), (price, "price changed")):
        [change] = [r for r in await rows(pool, config.target_id) if r["status"] == "changed"]
        for kind in services_app.urls():
            texts = [t for t in services_app.texts(kind) if config.target_id in t]
            assert len(texts) == 1, (kind, texts)
            assert says in texts[0] and change["work_id"] in texts[0], (kind, texts[0])
    for kind in services_app.urls():
        price_text = next(t for t in services_app.texts(kind) if price.target_id in t)
        assert "1: 10 -> 12" in price_text, price_text  # the move, as move_line writes it
        page_text = next(t for t in services_app.texts(kind) if page.target_id in t)
        assert "price 12" in page_text, page_text  # the excerpt
    sent = await pool.fetch("SELECT status FROM deliveries")
    assert [r["status"] for r in sent] == ["sent"] * 10
    for history in histories:
        assert GOTIFY_TOKEN not in history and MATTERMOST_TOKEN not in history


async def test_what_a_page_says_arrives_inert_at_every_kind(
    time_skipping_env: WorkflowEnvironment, pool: asyncpg.Pool, page_server: PageServer,
    services_app: Services, start: Start, task_queue: str,
) -> None:  # fmt: skip
    """Issue 40: a page line holding `<!channel>`, `@everyone`, a disguised link and a
    fence reaches each real receiver escaped, and no service would read a mention, a link
    or the end of the code block in it (Apprise's Slack conversion, Discord's detection)."""
    env = time_skipping_env
    page = await stored(pool, target(page_server, list(services_app.urls().values())))
    async with running_worker(env.client, task_queue, pool):
        await start(page, start_at=await anchor_of(env))
        await env.sleep(timedelta(hours=1, minutes=30))
        hostile = "&lt;!channel&gt; @everyone [free](http://evil.example) ```"
        page_server.set(f"/{page.target_id}", f"<p>price 12 {hostile}</p>")
        await env.sleep(timedelta(hours=2))
    for kind in services_app.urls():
        [text] = [t for t in services_app.texts(kind) if page.target_id in t]
        assert "+price 12 <!channel> @\u200beveryone [free](http://evil.example) ```" in text, text
        assert "````\n" in text, text  # a fence longer than the page's backticks
        assert "@everyone" not in text and not USER_ROLE_DETECTION_RE.search(text), text
        slack = NotifySlack._commonmark_to_slack(text)  # type: ignore[no-untyped-call]
        assert "<!channel>" not in slack and "<http://evil.example|" not in slack, slack


# End to end: the CLI, a real worker, a kill --------------------------------------------


async def test_secrets_stay_in_postgres_and_notify_test_reports_each_channel(
    env: dict[str, str], pool: asyncpg.Pool, temporal_address: str, services_app: Services,
    page_server: PageServer, tmp_path: Path,
) -> None:  # fmt: skip
    """`--notify` with credentials in the URL: they appear in no output but
    `channels --reveal` (not in list, status, --json, export, the history or the worker's
    log); `notify-test` says sent or the service's error per channel, records nothing and
    disables nothing; `export` applies back unchanged."""
    secret = "s3cr3t-pass"
    host = services_app.base.removeprefix("http://")
    working = f"json://user:{secret}@{host}/json"
    refusing = f"gotify://{host}/{GOTIFY_TOKEN}"
    services_app.answers["gotify"] = [401]
    page_server.set("/e2e-notify", "price 10")
    logged: list[bytes] = []
    async with worker_process(env, logged):
        code, out, err = await cli(
            env, "add", "e2e-notify", page_server.url("/e2e-notify"), "--every", "1h",
            "--notify", working, "--notify", refusing, "--notify-title", "{{ target }} moved",
        )  # fmt: skip
        assert code == 0, err

        async def synced() -> bool:
            return bool(await pool.fetchval("SELECT count(*) = 2 FROM channels"))

        await eventually(synced, within=60, what="the channels mirrored")
        shown = [await cli(env, *args) for args in (
            ("channels", "e2e-notify"), ("channels", "e2e-notify", "--json"), ("list",),
            ("list", "--json"), ("status", "e2e-notify"), ("status", "e2e-notify", "--json"),
            ("export",),
        )]  # fmt: skip
        for code, out, err in shown:
            assert code == 0, err
            assert secret not in out + err and GOTIFY_TOKEN not in out + err, out
        assert "json://user:****@" in shown[0][1]
        code, revealed, _ = await cli(env, "channels", "e2e-notify", "--reveal")
        assert secret in revealed and GOTIFY_TOKEN in revealed

        code, out, err = await cli(env, "notify-test", "e2e-notify")
        assert code == 1, (out, err)
        lines = sorted(out.splitlines(), key=lambda line: "json://" in line)  # gotify first
        assert re.fullmatch(r"apprise-\w{12} \(apprise, gotify://.*\): failed: Gotify answered "
                            r"HTTP 401: .*invalid token.*", lines[0]), lines  # fmt: skip
        assert re.fullmatch(r"apprise-\w{12} \(apprise, json://user:\*\*\*\*@.*\): sent", lines[1])
        [(_, test)] = [r for r in services_app.received if r[0] == "json"]
        assert test["title"] == "e2e-notify moved"
        assert "This is a test notice from pricewatch" in test["message"]
        assert await pool.fetchval("SELECT count(*) FROM deliveries") == 0
        assert (
            await pool.fetchval("SELECT count(*) FROM channels WHERE disabled_reason IS NOT NULL")
            == 0
        )
        json_channel = re.match(r"(apprise-\w{12})", lines[1])
        assert json_channel is not None
        code, out, _ = await cli(env, "notify-test", "e2e-notify", "--channel", json_channel[1])
        assert code == 0 and out.count("sent") == 1

        exported = tmp_path / "targets.yaml"
        exported.write_text(shown[-1][1])
        code, out, err = await cli(env, "apply", str(exported))
        assert code == 0, err
        assert "unchanged" in out and "reconfigure" not in out, out
        client = await Client.connect(temporal_address)
        history = await client.get_workflow_handle("pricewatch-e2e-notify").fetch_history()
        assert secret not in history.to_json() and GOTIFY_TOKEN not in history.to_json()
        assert (await cli(env, "remove", "e2e-notify"))[0] == 0
    assert secret.encode() not in b"".join(logged) and GOTIFY_TOKEN.encode() not in b"".join(logged)


# Cheap on a 26-character excerpt, hours on one at its cap (issue 40: it hung `add`).
NESTED_LOOPS = (
    "{% for a in excerpt or '' %}{% for b in excerpt or '' %}{% for c in excerpt or '' %}"
    "{% endfor %}{% endfor %}{% endfor %}{{ target }}"
)


async def test_bad_notify_options_are_one_line_and_start_nothing(
    env: dict[str, str], temporal_address: str
) -> None:
    cases = [
        (["--notify", "foo://x"], "not an Apprise URL (foo://...)"),
        (["--notify", "mailto://a:b@example.com"], "E-Mail does not send over HTTP"),
        (["--notify", "json://10.1.2.3/x"], "refused 10.1.2.3: it resolves to 10.1.2.3"),
        (
            ["--notify", "json://127.0.0.1:9/x", "--notify-body", "{{ nope }}"],
            "'nope' is undefined",
        ),
        (
            ["--notify", "json://127.0.0.1:9/x", "--notify-body", '{{ "x" * 10**9 }}'],
            "repeats a value to more than 64000 items",
        ),
        (
            ["--notify", "json://127.0.0.1:9/x", "--notify-body", NESTED_LOOPS],
            "on a page change with the largest excerpt, took longer than 1 s: make it cheaper",
        ),
        (["--notify-title", "x"], "--notify-title and --notify-body shape the --notify channels"),
        (
            ["--notify", "apprise-0123456789ab"],
            "apprise-0123456789ab is not stored in this database",
        ),
    ]
    for options, says in cases:
        code, out, err = await cli(env, "add", "bad-notify", "http://127.0.0.1:9/", *options)
        assert code == 2, (options, out, err)
        assert says in err and len(err.strip().splitlines()) == 1, (options, err)
    client = await Client.connect(temporal_address)
    listed = [w async for w in client.list_workflows("WorkflowId = 'pricewatch-bad-notify'")]
    assert listed == []


@pytest.mark.long
async def test_a_worker_killed_after_the_service_accepted_sends_one_duplicate(
    env: dict[str, str], pool: asyncpg.Pool, services_app: Services, page_server: PageServer
) -> None:
    """SIGKILL of the worker while the service holds the message it has read: the delivery
    row is not `sent`, so another worker sends it again once the lease lapses. People see
    it twice; never three times, and the row ends `sent`."""
    page_server.set("/kill-notify", "price 10")
    async with worker_process(env) as doomed:
        code, _, err = await cli(
            env, "add", "kill-notify", page_server.url("/kill-notify"), "--every", "2s",
            "--notify", services_app.urls()["json"],
        )  # fmt: skip
        assert code == 0, err

        async def baseline() -> bool:
            query = "SELECT count(*) > 0 FROM source_checks WHERE status = 'unchanged'"
            return bool(await pool.fetchval(query))

        await eventually(baseline, within=60, what="the baseline and an unchanged slot")
        services_app.hold = asyncio.Event()
        page_server.set("/kill-notify", "price 12")
        await asyncio.wait_for(services_app.arrived.wait(), timeout=60)
        doomed.kill()
        await doomed.wait()
    services_app.hold.set()
    services_app.hold = None
    assert await pool.fetchval("SELECT status FROM deliveries") == "pending"
    async with worker_process(env):

        async def sent() -> bool:
            return bool(await pool.fetchval("SELECT status = 'sent' FROM deliveries"))

        await eventually(sent, within=120, what="the delivery sent by the second worker")
        await asyncio.sleep(3)  # nothing more comes
        [work_id] = [r["work_id"] for r in await pool.fetch("SELECT work_id FROM deliveries")]
        texts = services_app.texts("json")
        assert len(texts) == 2 and all(work_id in t for t in texts), texts
        assert (await cli(env, "remove", "kill-notify"))[0] == 0
