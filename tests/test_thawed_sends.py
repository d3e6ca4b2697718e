"""A notice sent twice by a thawed worker (issue 41): a worker frozen (SIGSTOP, a paused VM)
between claiming a delivery and sending it wakes believing no time has passed, while its
sending lease lapsed and another attempt sent the notice. Apprise services have no
idempotency key, so only the lease stands between that and a second message: right before
the send, the attempt renews its lease or, finding it gone, gives up without sending.

The real-worker test freezes a `pricewatch worker` process at that point (this module, run
as a program, is such a worker: it stops itself once, right after its first claim)."""

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import freezes, services, store
from activities import notify as notify_module
from activities.freezes import SUMMARY_AFTER, Stalls
from activities.notify import SEND_DEADLINE, NotifyActivities
from client import channels
from client.channels import apprise_channel
from pricewatch import notices
from pricewatch.deliveries import DeliveryInput
from pricewatch.models import ChannelKind, TargetConfig
from pricewatch.policy import TRANSIENT_DELIVERY_ERROR
from tests.conftest import LOOPBACK, Held, PageServer, Services
from tests.helpers import NO_SMTP, SLOT, cli, delivery, read_until, terminated, worker_process
from tests.waits import eventually


async def synced(pool: asyncpg.Pool, url: str) -> TargetConfig:
    config = TargetConfig(
        target_id="acme", url="https://example.com/pricing", interval_seconds=3600,
        channels=[apprise_channel(url)],
    )  # fmt: skip
    config = await channels.with_refs(pool, config, keep=True)
    await store.sync_target(pool, config, next_slot=SLOT, enabled=True)
    return config


def stall_now(seconds: float) -> None:
    """The process-wide tracker learns of a freeze that just ended."""
    now = time.monotonic()
    freezes.STALLS.beat(now=now - seconds, cpu=time.process_time())
    freezes.STALLS.beat(now=now, cpu=time.process_time())


async def first_attempt_claims(
    notify: NotifyActivities, notice: DeliveryInput, claimed: threading.Event
) -> "asyncio.Task[Any]":
    first = asyncio.create_task(ActivityEnvironment().run(notify.deliver_notice, notice))
    await asyncio.to_thread(claimed.wait, 30)
    assert claimed.is_set()
    return first


async def test_a_thawed_attempt_whose_lease_was_taken_over_sends_nothing(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services,
    held_after_the_claim: Held, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Frozen past its lease: the next attempt takes the lapsed lease and sends; the thawed
    one then finds the row is not its own and sends nothing. One message, one attempt."""
    caplog.set_level(logging.DEBUG, "pricewatch.notify")
    claimed, thaw = held_after_the_claim
    config = await synced(pool, services_app.urls()["json"])
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    notice = delivery(config, ChannelKind.APPRISE)
    first = await first_attempt_claims(notify, notice, claimed)
    await pool.execute("UPDATE deliveries SET sending_until = now() - interval '1 s'")  # lapsed
    second = await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert (second.status, second.attempt_count) == ("sent", 1)
    stall_now(20)  # the first attempt's worker was away all that while
    thaw.set()
    with pytest.raises(ApplicationError) as gave_up:
        await first
    assert gave_up.value.type == TRANSIENT_DELIVERY_ERROR
    assert "sending lease was taken over" in gave_up.value.message
    assert len(services_app.received) == 1, "the thawed attempt sent it again"
    row = await pool.fetchrow("SELECT status, attempt_count FROM deliveries")
    assert row is not None and (row["status"], row["attempt_count"]) == ("sent", 1)
    [line] = [r for r in caplog.records if r.name == "pricewatch.notify"]
    assert line.levelno == logging.DEBUG and "stalled for 20 s" in line.getMessage()
    assert "acme" in freezes.STALLS.notices_given_up


async def test_a_lapsed_lease_nobody_took_is_renewed_and_sent_once(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services,
    held_after_the_claim: Held, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Lapsed, but still the lease this attempt's claim set (a slow render on a loaded
    machine, and nobody else came): no other attempt can have sent, so it is renewed and
    the notice sent, once. (Here with a lease of 1 s.)"""
    claimed, thaw = held_after_the_claim
    monkeypatch.setattr(notify_module, "SENDING_LEASE", timedelta(seconds=1))
    config = await synced(pool, services_app.urls()["json"])
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    notice = delivery(config, ChannelKind.APPRISE)
    first = await first_attempt_claims(notify, notice, claimed)
    await asyncio.sleep(1.5)
    assert await pool.fetchval("SELECT sending_until < now() FROM deliveries"), "lapsed"
    thaw.set()
    sent = await first
    assert (sent.status, sent.attempt_count, len(services_app.received)) == ("sent", 1, 1)


async def test_the_send_starts_with_a_full_lease_ahead_of_it(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """However long the render took, the lease is renewed right before the send: the
    send's own deadline (9 s, 10 with its watchdog) ends inside it. Here with a lease
    of 11 s, 2 of which the render takes."""
    config = await synced(pool, services_app.urls()["json"])
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    loop = asyncio.get_running_loop()
    ahead: list[float] = []
    real_send = services.send

    def send(*args: Any) -> services.Outcome:
        query = "SELECT extract(epoch FROM sending_until - now()) FROM deliveries"
        ahead.append(float(asyncio.run_coroutine_threadsafe(pool.fetchval(query), loop).result()))
        return real_send(*args)

    def slow_render(*args: Any) -> notices.Message:
        time.sleep(2)  # a costly template: 2 of the lease's 11 s gone before the send
        return real_render(*args)

    real_render = notices.render
    monkeypatch.setattr(notices, "render", slow_render)
    monkeypatch.setattr(services, "send", send)
    monkeypatch.setattr(notify_module, "SENDING_LEASE", timedelta(seconds=11))
    notice = delivery(config, ChannelKind.APPRISE)
    assert (await ActivityEnvironment().run(notify.deliver_notice, notice)).status == "sent"
    [seconds] = ahead
    assert seconds > SEND_DEADLINE.total_seconds() + 1, seconds


def test_the_freeze_summary_names_the_notices_it_left(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "pricewatch.outages")
    stalls = Stalls()
    t = time.monotonic() - 200  # the attempts report at the real time, after the thaw
    stalls.beat(now=t, cpu=0.0)
    stalls.beat(now=t + 30, cpu=0.0)  # 30 s with no CPU time spent: frozen
    stalls.gave_up("a")
    stalls.gave_up("b", notice=True)
    stalls.gave_up("c", notice=True)
    for step in range(1, int(SUMMARY_AFTER * 10) + 5):
        stalls.beat(now=t + 30 + step * 0.1, cpu=0.0)
    assert [r.getMessage() for r in caplog.records][1:] == [
        "after the freeze: 1 check it held was taken over or retried (a); "
        "2 notices it was sending were left to another attempt (b, c)"
    ]


# A real worker, frozen between its claim and its send -----------------------------------

FROZEN = "PRICEWATCH_TEST_FREEZE_ONCE"
ROOT = Path(__file__).resolve().parent.parent


def freezing_worker() -> None:
    """`pricewatch worker` that stops itself (SIGSTOP) the first time it is about to send an
    Apprise notice, its delivery claimed: the file named by $PRICEWATCH_TEST_FREEZE_ONCE
    says it did (the test continues it)."""
    real = NotifyActivities._notify_service

    flag = os.environ[FROZEN]

    async def notify_service(self: NotifyActivities, *args: Any, **kwargs: Any) -> None:
        with contextlib.suppress(FileExistsError):
            os.close(os.open(flag, os.O_CREAT | os.O_EXCL))  # only the first time
            os.kill(os.getpid(), signal.SIGSTOP)
        await real(self, *args, **kwargs)

    NotifyActivities._notify_service = notify_service  # type: ignore[method-assign]
    logging.getLogger("pricewatch.notify").setLevel(logging.DEBUG)  # the test reads its line
    from surfaces.cli import main

    sys.argv = ["pricewatch", "worker"]
    main()


@asynccontextmanager
async def frozen_worker(
    env: dict[str, str], output: list[bytes]
) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.test_thawed_sends", env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    drain = None
    try:
        await read_until(process, b"polling", [])
        drain = asyncio.create_task(lines_into(process.stdout, output))
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)
        await terminated(process, grace=40)
        if drain is not None:
            await drain


async def lines_into(stream: asyncio.StreamReader, output: list[bytes]) -> None:
    """The process's lines as they come: a test can wait for one."""
    while line := await stream.readline():
        output.append(line)


SUMMED_UP = b"1 notice it was sending was left to another attempt (thaw)"


@pytest.mark.long
@pytest.mark.e2e
@pytest.mark.timeout(400)
async def test_a_worker_frozen_between_its_claim_and_its_send_does_not_send_again(
    env: dict[str, str], pool: asyncpg.Pool, services_app: Services, page_server: PageServer,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Worker A claims the delivery and is stopped before its send; its attempt times out,
    worker B takes the retry once the lease lapsed and sends; then A is continued. The
    service gets the message once, and the row says `sent`, 1 attempt."""
    flag = tmp_path / "frozen"
    page_server.set("/thaw", "price 10")
    output: list[bytes] = []
    async with frozen_worker({**env, FROZEN: str(flag)}, output) as first:
        code, _, err = await cli(
            env, "add", "thaw", page_server.url("/thaw"), "--every", "2s",
            "--notify", services_app.urls()["json"],
        )  # fmt: skip
        assert code == 0, err

        async def baseline() -> bool:
            query = "SELECT count(*) > 0 FROM source_checks WHERE status = 'unchanged'"
            return bool(await pool.fetchval(query))

        await eventually(baseline, within=60, what="the baseline and an unchanged slot")
        page_server.set("/thaw", "price 12")

        async def frozen() -> bool:
            return flag.exists()

        await eventually(frozen, within=60, what="worker A frozen after its claim")
        assert await pool.fetchval("SELECT status FROM deliveries") == "pending"
        async with worker_process(env):

            async def sent() -> bool:
                return bool(await pool.fetchval("SELECT status = 'sent' FROM deliveries"))

            # The server may hand a retry to A's poll, still open while A is stopped: that
            # attempt times out too, and the next (backoff 10, 20, 40 s) may go to B.
            await eventually(sent, within=200, what="the delivery sent by worker B")
            assert len(services_app.received) == 1
            os.kill(first.pid, signal.SIGCONT)  # A renders, and would send now

            async def summed_up() -> bool:  # A's freeze, SUMMARY_AFTER after it noticed
                return SUMMED_UP in b"".join(output)

            await eventually(summed_up, within=120, what="worker A's freeze summed up")
            row = await pool.fetchrow("SELECT status, attempt_count FROM deliveries")
            assert (await cli(env, "remove", "thaw"))[0] == 0
    log = b"".join(output).decode(errors="replace")
    print(log)
    texts = services_app.texts("json")
    assert len(texts) == 1, texts
    assert row is not None and (row["status"], row["attempt_count"]) == ("sent", 1)
    assert "its sending lease was taken over (this worker was stalled for" in log, log
    assert SUMMED_UP.decode() in log, log


if __name__ == "__main__":
    freezing_worker()
