"""Schedule health (issue 48): the window's due slots counted from constructed rows in real
Postgres (on time, late, skipped by cause, failed, pending; the window's edges; targets
unchecked for N slots named), and the view on every surface."""

import asyncio
import itertools
import os
import signal
import socket
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import cast

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markupsafe import escape

import activities.health
from activities.health import (
    SharedSchedule,
    schedule_health,
    worker_beat,
    worker_beats,
    worker_gone,
)
from pricewatch.health import (
    ANSWER_BOUND,
    HEARTBEAT_SILENT,
    ON_TIME_FLOOR,
    Health,
    ScheduleHealth,
    ServiceHealth,
    parse_window,
    unwell,
    workers_health,
)
from tests.conftest import PageServer
from tests.helpers import cli, serve_process, worker_process
from tests.waits import eventually, wait_for

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
RAW = ["<script", "<img", "onerror=1>", "\"'&"]  # as tests/test_escaping.py marks fields


def tags(field: str) -> str:
    return f"<i>{field}</i><script>x</script><img src=x onerror=1>"


def mark(field: str) -> str:
    return f"{tags(field)}\"'&"


FINAL = "not checked: came due before t:2026-12-04T19:30:43Z was final: "
NAMES = (f"t{n}" for n in itertools.count())


async def add_target(
    pool: asyncpg.Pool, interval: int = 60, next_in: timedelta = HOUR, enabled: bool = True
) -> str:
    """A target whose next slot is `next_in` from Postgres's now (negative: overdue)."""
    target_id = next(NAMES)
    await pool.execute(
        "INSERT INTO monitor_targets (id, url, interval_seconds, next_slot, anchor, enabled)"
        " VALUES ($1, 'https://example.com/', $2, now() + $3::interval,"
        "         now() + $3::interval, $4)",
        target_id, interval, next_in, enabled,
    )  # fmt: skip
    return target_id


async def add_row(
    pool: asyncpg.Pool,
    target_id: str,
    ago: timedelta,
    status: str,
    late: timedelta = timedelta(seconds=1),
    message: str | None = None,
    kind: str = "scheduled",
) -> None:
    """A row for the slot `ago` before Postgres's now, recorded `late` after it."""
    hashed = status in ("unchanged", "changed")
    await pool.execute(
        "INSERT INTO source_checks (work_id, target_id, scheduled_for, kind, checked_at, status,"
        "                           result_hash, previous_hash, error_message)"
        " VALUES ($1 || ':' || (now() - $2::interval)::text || $4, $1, now() - $2::interval, $4,"
        "         now() - $2::interval + $3::interval, $5, $6, $7, $8)",
        target_id, ago, late, kind, status, "h" if hashed else None,
        "p" if status == "changed" else None, message,
    )  # fmt: skip


async def test_counts_each_slot_by_what_became_of_it(pool: asyncpg.Pool) -> None:
    target = await add_target(pool, interval=60)
    minute = timedelta(minutes=1)
    await add_row(pool, target, 50 * minute, "unchanged", late=timedelta(seconds=3))
    await add_row(pool, target, 49 * minute, "changed", late=ON_TIME_FLOOR)  # at the bound
    await add_row(pool, target, 48 * minute, "unchanged", late=timedelta(seconds=30))
    await add_row(
        pool,
        target,
        47 * minute,
        "skipped",
        message=FINAL + "its check began 52 s after the slot (the workflow woke late)",
    )
    await add_row(pool, target, 46 * minute, "skipped",
                  message=FINAL + "its check needed 2 attempts, the last began 21 s after the "
                  "slot; Postgres was unreachable for 3 min 20 s")  # fmt: skip
    await add_row(
        pool,
        target,
        45 * minute,
        "skipped",
        message=FINAL + "its check began 7 s after the slot (the workflow woke late)",
    )
    await add_row(
        pool, target, 44 * minute, "skipped", message="not checked: the schedule was behind"
    )
    await add_row(pool, target, 43 * minute, "failed", message="HTTP 404")
    await add_row(pool, target, 42 * minute, "retrying", message="HTTP 503")
    await add_row(pool, target, 30 * minute, "unchanged", kind="manual")  # not a slot
    await add_row(pool, target, 2 * HOUR, "skipped", message=FINAL + "cause unknown")  # before

    health = await schedule_health(pool, HOUR)

    [row] = health.targets
    assert (row.on_time, row.late, row.skipped, row.failed, row.retrying, row.pending) == (
        2, 1, 4, 1, 1, 0,
    )  # fmt: skip
    assert row.due == 9
    assert row.on_time_rate == pytest.approx(2 / 8)
    assert row.skip_causes == {
        "its check began … after the slot (the workflow woke late)": 2,
        "its check needed N attempts, the last began … after the slot": 1,
        "Postgres was unreachable for …": 1,
        "cause not recorded": 1,
    }
    assert row.lateness_p50_seconds == pytest.approx(10)
    assert 29 < (row.lateness_p99_seconds or 0) <= 30
    assert health.deployment.skip_causes == row.skip_causes
    assert health.deployment.due == 9
    assert health.unchecked == []


async def test_a_server_reads_the_window_once_for_every_request_at_once(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty requests at once run the query once; within its reuse time the reading is
    reused; past it the last good reading is shown while one new reading runs, and a later
    request sees that one."""
    ran: list[timedelta] = []

    async def counted(pool: asyncpg.Pool, window: timedelta) -> ScheduleHealth:
        ran.append(window)
        return await schedule_health(pool, window)

    monkeypatch.setattr(activities.health, "schedule_health", counted)
    await add_row(pool, await add_target(pool), 2 * HOUR, "unchanged")
    shared = SharedSchedule(reuse_seconds=0.5)
    first = await asyncio.gather(*(shared.read(pool, DAY) for _ in range(20)))
    assert ran == [DAY] and all(reading is first[0] for reading in first)
    assert first[0].deployment.on_time == 1
    assert await shared.read(pool, DAY) is first[0] and ran == [DAY]  # reused
    await shared.read(pool, HOUR)
    assert ran == [DAY, HOUR]  # each window its own
    await add_row(pool, await add_target(pool), 3 * HOUR, "failed")
    await asyncio.sleep(0.6)
    assert await shared.read(pool, DAY) is first[0]  # stale: shown while the next one reads

    async def read_anew() -> bool:
        return (await shared.read(pool, DAY)).deployment.failed == 1

    await eventually(read_anew, what="the new reading shown")
    assert ran[:3] == [DAY, HOUR, DAY]
    shared.close()


async def test_a_server_keeps_few_windows_however_many_are_asked(pool: asyncpg.Pool) -> None:
    shared = SharedSchedule(reuse_seconds=60)
    for minutes in range(1, 40):  # `?window=` is the user's: any duration up to a week
        await shared.read(pool, timedelta(minutes=minutes))
    assert len(shared._readings) <= activities.health.WINDOWS_KEPT
    shared.close()


async def test_a_failed_reading_is_not_reused(pool: asyncpg.Pool) -> None:
    shared = SharedSchedule(reuse_seconds=60)
    await pool.execute("ALTER TABLE source_checks RENAME TO held_back")
    try:
        with pytest.raises(asyncpg.UndefinedTableError):
            await shared.read(pool, DAY)
    finally:
        await pool.execute("ALTER TABLE held_back RENAME TO source_checks")
    assert (await shared.read(pool, DAY)).deployment.due == 0  # asked again, not reused
    shared.close()


async def test_the_window_ends_at_postgres_now_and_starts_a_window_before(
    pool: asyncpg.Pool,
) -> None:
    target = await add_target(pool, interval=60)
    await add_row(pool, target, HOUR - timedelta(seconds=5), "unchanged")  # inside
    await add_row(pool, target, HOUR + timedelta(seconds=5), "unchanged")  # outside
    await add_row(pool, target, -timedelta(minutes=5), "skipped")  # not due yet: outside
    health = await schedule_health(pool, HOUR)
    assert health.deployment.due == 1
    assert health.window_seconds == 3600
    assert await pool.fetchval("SELECT now() - $1::timestamptz", health.at) >= timedelta(0)


async def test_a_schedule_that_does_not_move_is_pending_and_named_unchecked(
    pool: asyncpg.Pool,
) -> None:
    """Slots due with no row count as pending; a target whose newest 3 due slots went
    unchecked (skipped, or due with no row) is named, a paused one never."""
    stuck = await add_target(pool, interval=60, next_in=-timedelta(seconds=150))  # 3 due
    in_flight = await add_target(pool, interval=60, next_in=-timedelta(seconds=2))  # 1 due
    skipping = await add_target(pool, interval=60)
    await add_row(pool, skipping, timedelta(minutes=4), "unchanged")
    for minutes in (3, 2, 1):
        await add_row(pool, skipping, timedelta(minutes=minutes), "skipped")
    paused = await add_target(pool, interval=60, next_in=-HOUR, enabled=False)
    await add_row(pool, paused, timedelta(minutes=61), "unchanged")
    health = await schedule_health(pool, HOUR)
    by_id = {t.target_id: t for t in health.targets}
    assert by_id[stuck].pending == 3 and by_id[stuck].unchecked_slots == 3
    assert by_id[in_flight].pending == 1 and by_id[in_flight].unchecked_slots == 1
    assert by_id[skipping].unchecked_slots == 3 and by_id[skipping].skipped == 3
    assert paused not in by_id  # nothing due in the window, and paused
    assert health.unchecked == [stuck, skipping]
    assert health.deployment.pending == 4
    # Fewer than 3 in a row: not named. A window that starts after the stuck slot's first
    # due slot counts only the pending ones in it.
    assert (await schedule_health(pool, HOUR, unchecked_after=4)).unchecked == []
    assert (await schedule_health(pool, timedelta(seconds=100))).deployment.pending == 3


async def test_a_slot_being_retried_is_retrying_not_also_pending(pool: asyncpg.Pool) -> None:
    """The schedule stays on a slot while its check retries: that slot has its row, so it
    is counted once, as retrying, and is not unchecked; the slots due after it are."""
    retrying = await add_target(pool, interval=60, next_in=-timedelta(seconds=2))
    behind = await add_target(pool, interval=60, next_in=-timedelta(seconds=130))  # 3 due
    await pool.execute(
        "INSERT INTO source_checks (work_id, target_id, scheduled_for, kind, checked_at,"
        "                           status, error_message)"
        " SELECT id || ':' || next_slot::text, id, next_slot, 'scheduled', now(), 'retrying',"
        "        'HTTP 503' FROM monitor_targets"
    )
    health = await schedule_health(pool, HOUR)
    by_id = {t.target_id: t for t in health.targets}
    assert (by_id[retrying].retrying, by_id[retrying].pending) == (1, 0)
    assert by_id[retrying].unchecked_slots == 0 and by_id[retrying].due == 1
    assert (by_id[behind].retrying, by_id[behind].pending) == (1, 2)
    assert by_id[behind].unchecked_slots == 2
    assert health.deployment.pending == 2


async def test_a_calendar_target_counts_its_own_slots_due(pool: asyncpg.Pool) -> None:
    """Every minute by a calendar in UTC: its overdue slots are the calendar's."""
    target = await add_target(pool, interval=60)
    await pool.execute(
        "UPDATE monitor_targets SET time_zone = 'UTC', calendar_times = ARRAY(SELECT"
        " generate_series(0, 1439)), calendar_days = ARRAY(SELECT generate_series(1, 31)),"
        " calendar_months = ARRAY(SELECT generate_series(1, 12)), calendar_weekdays ="
        " ARRAY(SELECT generate_series(0, 6)), calendar_days_or = false,"
        " next_slot = date_trunc('minute', now()) - interval '4 minutes' WHERE id = $1",
        target,
    )
    [row] = (await schedule_health(pool, HOUR)).targets
    assert row.pending == 5 and row.unchecked_slots == 5


statuses = st.sampled_from(["unchanged", "changed", "skipped", "failed", "retrying"])
slot_rows = st.lists(
    # Seconds late: any, and at the on-time bound's edges (10 s; 15 s at a 150 s interval).
    st.tuples(statuses, st.integers(0, 120), st.integers(0, 90) | st.sampled_from([10, 11, 15])),
    max_size=30,
    unique_by=lambda row: row[1],
)  # fmt: skip


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=slot_rows, interval=st.integers(1, 900) | st.just(150), window=st.integers(1, 100))
async def test_every_due_slot_counts_once(
    pool: asyncpg.Pool, rows: list[tuple[str, int, int]], interval: int, window: int
) -> None:
    """Generated slots (minutes ago, seconds late): each in the window is counted once, as
    what became of it, on time exactly when recorded within the stated bound."""
    await pool.execute("DELETE FROM monitor_targets")
    target = await add_target(pool, interval=interval)
    for status, minutes, late in rows:
        ago, after = timedelta(minutes=minutes, seconds=30), timedelta(seconds=late)
        await add_row(pool, target, ago, status, after, message="not checked: cause unknown")
    health = await schedule_health(pool, timedelta(minutes=window))
    inside = [(s, late) for s, minutes, late in rows if minutes < window]
    bound = max(ON_TIME_FLOOR.total_seconds(), interval * 0.1)
    recorded = [late for s, late in inside if s in ("unchanged", "changed")]
    counts = health.deployment
    assert counts.on_time == sum(late <= bound for late in recorded)
    assert counts.late == sum(late > bound for late in recorded)
    for status in ("skipped", "failed", "retrying"):
        assert getattr(counts, status) == sum(s == status for s, _ in inside)
    assert counts.due == len(inside) and counts.pending == 0
    assert counts.skip_causes == ({"cause unknown": counts.skipped} if counts.skipped else {})
    if recorded:
        assert counts.lateness_p50_seconds == pytest.approx(statistics.median(recorded))
    else:
        assert counts.lateness_p50_seconds is None


@given(text=st.text(max_size=12) | st.from_regex(r"[0-9]{1,4}[smhd]", fullmatch=True))
def test_a_window_is_a_duration_from_a_minute_to_a_week(text: str) -> None:
    try:
        window = parse_window(text)
    except ValueError as err:
        assert str(err).startswith("window: ") and "\n" not in str(err)
    else:
        assert timedelta(minutes=1) <= window <= timedelta(days=7)
    assert parse_window("1h") == HOUR and parse_window(" 7d ") == timedelta(days=7)


async def test_worker_heartbeats_are_kept_by_the_database_clock(pool: asyncpg.Pool) -> None:
    await worker_beat(pool, "1@host", ["pricewatch", "pricewatch-render"], 0.25)
    await worker_beat(pool, "1@host", ["pricewatch", "pricewatch-render"], 0.5)
    await pool.execute(
        "INSERT INTO workers (identity, task_queue, last_seen) VALUES"
        " ('gone@host', 'pricewatch', now() - interval '61 minutes')"
    )
    await worker_beat(pool, "2@host", ["pricewatch"], 0.0)  # forgets the one unseen for 1 h
    beats = await worker_beats(pool)
    assert [(b["identity"], b["task_queue"]) for b in beats] == [
        ("1@host", "pricewatch"), ("2@host", "pricewatch"), ("1@host", "pricewatch-render"),
    ]  # fmt: skip
    assert beats[0]["loop_lag_seconds"] == 0.5 and beats[0]["silent_seconds"] < 5
    await worker_gone(pool, "1@host")
    assert [b["identity"] for b in await worker_beats(pool)] == ["2@host"]


async def health_json(env: dict[str, str], *args: str) -> tuple[int, Health]:
    code, out, err = await cli(env, "health", "--json", *args)
    assert code in (0, 1), err
    return code, Health.model_validate_json(out)


@pytest.mark.long
@pytest.mark.e2e
@pytest.mark.timeout(240)
async def test_a_frozen_worker_is_named_not_polling_while_frozen(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer
) -> None:
    """Two real workers on a dev server; one stopped (SIGSTOP): within HEARTBEAT_SILENT and
    a beat, `health` exits 1 naming it not polling since its last heartbeat, the other
    still polling; continued (SIGCONT), it is polling again and health is 0."""
    page_server.set("/p", "price 10")
    async with worker_process(env) as steady, worker_process(env) as frozen:
        code, _, err = await cli(env, "add", "health", page_server.url("/p"), "--every", "2s")
        assert code == 0, err
        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE target_id = 'health'")
        identities = {p.pid: f"{p.pid}@{socket.gethostname()}" for p in (steady, frozen)}

        async def healthy() -> Health | None:
            code, report = await health_json(env, "--window", "1h")
            polling = {w.identity for w in report.workers if not w.not_polling_since}
            return report if code == 0 and set(identities.values()) <= polling else None

        report = await eventually(healthy, within=60, what="both workers polling")
        assert report and report.problems == [] and report.schedule is not None
        assert report.schedule.deployment.due >= 1
        assert {s.name: s.reachable for s in report.services} == {
            "Postgres": True, "Temporal": True,
        }  # fmt: skip
        worker = next(w for w in report.workers if w.identity == identities[frozen.pid])
        assert worker.polls == ["workflow", "activity"] and worker.loop_lag_seconds is not None

        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic()

            async def named() -> Health | None:
                code, report = await health_json(env)
                silent = [w.identity for w in report.workers if w.not_polling_since]
                return report if code == 1 and silent else None

            report = await eventually(named, within=40, what="the frozen worker named")
            took = time.monotonic() - stopped
            assert report is not None
            assert took < HEARTBEAT_SILENT.total_seconds() + 10, took
            by_identity = {w.identity: w for w in report.workers}
            assert by_identity[identities[frozen.pid]].not_polling_since is not None
            assert by_identity[identities[steady.pid]].not_polling_since is None
            # The check it held may leave the target a few slots unchecked meanwhile.
            [problem] = [p for p in report.problems if p.startswith("worker ")]
            assert problem.startswith(f"worker {identities[frozen.pid]} on ")
            assert "not polling since" in problem
            code, out, _ = await cli(env, "health")
            print(out)  # as docs/web.md shows it
            assert code == 1 and "not polling since" in out, out
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        report = await eventually(healthy, within=30, what="the thawed worker polling again")
        assert report is not None
        thawed = next(w for w in report.workers if w.identity == identities[frozen.pid])
        assert (thawed.loop_lag_seconds or 0) < 5  # the freeze is not the loop's lag
        assert (await cli(env, "remove", "health"))[0] == 0


async def test_a_service_that_does_not_answer_is_said_beside_the_others_part(
    env: dict[str, str], pool: asyncpg.Pool
) -> None:
    """A Temporal that accepts connections and answers nothing (as a frozen one does):
    health answers within its bound with the Postgres part, names Temporal, exits 1; and
    the other way round."""
    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never answers
    try:
        port = silent.getsockname()[1]
        # The process's own start (seconds on a loaded machine) is not the bound's to keep:
        # the same call against a Temporal that refuses at once measures it.
        started = time.monotonic()
        await health_json({**env, "TEMPORAL_ADDRESS": "127.0.0.1:1"})
        own_start = time.monotonic() - started
        started = time.monotonic()
        code, report = await health_json({**env, "TEMPORAL_ADDRESS": f"127.0.0.1:{port}"})
        assert time.monotonic() - started < own_start + ANSWER_BOUND.total_seconds() + 5
        assert code == 1 and report.schedule is not None
        temporal = next(s for s in report.services if s.name == "Temporal")
        assert not temporal.reachable and temporal.answered_at is None
        assert report.problems[0].startswith(f"cannot reach Temporal at 127.0.0.1:{port}")
        url = f"postgresql://u:secret@127.0.0.1:{port}/db"
        code, report = await health_json({**env, "PRICEWATCH_DATABASE_URL": url})
        assert code == 1 and report.schedule is None
        assert report.problems[0].startswith(f"cannot reach Postgres at 127.0.0.1:{port}")
        assert "secret" not in report.model_dump_json()
    finally:
        silent.close()


@pytest.mark.parametrize("window", ["1w", "", "0s", "8d", "30s", "1d;1h"])
async def test_a_bad_window_is_one_line_exit_2(window: str) -> None:
    """Refused before anything is asked: no Temporal, no Postgres here."""
    code, out, err = await cli(dict(os.environ), "health", "--window", window)
    assert (code, out) == (2, "") and err.startswith("pricewatch: window: "), err
    assert err.count("\n") == 1


@pytest.mark.e2e
async def test_the_health_page_shows_outside_text_escaped(
    env: dict[str, str], pool: asyncpg.Pool
) -> None:
    """The dashboard's /health (linked from every page's nav): a skip cause, a worker's
    identity and task queue (any Temporal client names its own) are escaped; a bad window
    is the one line, 400."""
    target = await add_target(pool, interval=60)
    await add_row(pool, target, timedelta(minutes=5), "skipped", message=FINAL + mark("cause"))
    await pool.execute(
        "INSERT INTO workers (identity, task_queue) VALUES ($1, $2)",
        mark("identity"), mark("queue"),
    )  # fmt: skip
    async with serve_process(env) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        page = (await http.get("/health", params={"window": "1h"})).text
        bad = await http.get("/health", params={"window": "1w"})
        api = await http.get("/api/v1/health", params={"window": "1w"})
        assert 'href="/health"' in (await http.get("/failures")).text
    assert [raw for raw in RAW if raw in page.lower()] == []
    for field in ("identity", "queue"):
        assert str(escape(tags(field))) in page, field
    assert str(escape(tags("cause").replace("1", "N"))) in page  # a cause's numbers blanked
    assert ">1h<" in page and "Skipped slots, by cause" in page
    assert bad.status_code == 400 and "window: invalid duration" in bad.text
    assert api.status_code == 400 and api.json()["error"].startswith("window: invalid duration")


def test_a_worker_is_silent_from_its_older_sign_and_health_says_each_problem() -> None:
    """By Postgres's clock: a heartbeat older than HEARTBEAT_SILENT or a poll older than
    POLL_SILENT is not polling, since the later of the silent signs; unwell lines name the
    worker, a queue nobody polls for a task kind, and the unchecked targets."""
    now = datetime(2026, 12, 4, 12, tzinfo=UTC)
    beat = {"identity": "a@h", "task_queue": "q", "started_at": now - HOUR,
            "loop_lag_seconds": 0.01}  # fmt: skip
    # As asyncpg's rows read: by column name.
    fresh = cast(asyncpg.Record, {**beat, "last_seen": now, "silent_seconds": 1.0})
    stale = cast(
        asyncpg.Record, {**beat, "last_seen": now - timedelta(seconds=20), "silent_seconds": 20.0}
    )
    polled = {("a@h", "q"): (["workflow", "activity"], now - timedelta(seconds=5))}
    old_poll = {("a@h", "q"): (["workflow", "activity"], now - timedelta(seconds=100))}
    [ok] = workers_health(polled, [fresh], now)
    assert ok.not_polling_since is None and ok.loop_lag_seconds == 0.01
    [frozen] = workers_health(polled, [stale], now)
    assert frozen.not_polling_since == now - timedelta(seconds=20)
    [gone] = workers_health(old_poll, [stale], now)
    assert gone.not_polling_since == now - timedelta(seconds=20)  # the later sign
    [untold] = workers_health(old_poll, [], now)  # no heartbeat row: Temporal's view alone
    assert untold.not_polling_since == now - timedelta(seconds=100)
    [beat_only] = workers_health(None, [fresh], now)  # Temporal away: the heartbeat alone
    assert beat_only.polls == [] and beat_only.not_polling_since is None

    up = ServiceHealth(name="Temporal", address="t:1", reachable=True, answered_at=now, error=None)
    assert unwell(None, [ok], "q", [up]) == []
    assert unwell(None, [frozen], "q", [up]) == [
        "worker a@h on 'q' not polling since 2026-12-04T11:59:40Z",
        "no worker polls task queue 'q' for workflow tasks",
        "no worker polls task queue 'q' for activity tasks",
    ]
    away = up.model_copy(update={"reachable": False, "error": "cannot reach Temporal at t:1"})
    assert unwell(None, [beat_only], "q", [away]) == ["cannot reach Temporal at t:1"]
