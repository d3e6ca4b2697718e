"""Run one design for a fixed window and measure it: throughput, missed slots and lateness
from the check rows, history from Temporal, round trips on the wire, CPU and memory from
/proc, storage from the dev server's SQLite files, the workflow cache from the workers'
Prometheus counters, the database's rows and size at the window's end.

`--aged K` is built by running: the window opens only once every loop's current run holds
K checks, each run by its own timer at the workload's interval, so the warm-up lasts K
intervals or more (it prints how long). The other ways are faster but not the thing
measured: a shorter warm-up interval needs a reconfigure Update in each run's history (and
the bare loop has no such handler), and would offer more checks per second than the
window, which at thousands of targets the machine cannot hold; a test-only start carrying
K checks would be a run no real target has. The sampled histories prove it: the checks each
run held at its first wake-up of the window are reported, and a run short of K is named.
"""

import asyncio
import math
import re
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError

from bench import bare, procs
from bench.designs import DESIGNS, SETUP_RATE, Running, Workload, schedule_id
from bench.scheduled import WORKFLOW_NAME
from bench.stack import Stack
from client.temporal import local_activity_type, workflow_id

ROLES = ("server", "worker", "postgres")
# Histories read per design: enough for a stable average whatever the fleet (a stride over
# the targets, so their phases spread over the interval), cheap to fetch.
HISTORY_SAMPLE = 100
# Reading a tree's PSS makes the kernel walk its page tables: a cost (and lock) the
# measured processes share, so sampled sparingly.
MEMORY_SAMPLE_EVERY = 5.0
WARMUP_INTERVALS = 3
# The loop designs: each target's workflow id, and the activity that is its check.
LOOPS = {
    "pricewatch": (workflow_id, "check_slot"),
    "pricewatch-calendar": (workflow_id, "check_slot"),
    "bare": (bare.workflow_id, bare.CHECK_ACTIVITY),
}
# The SDK's workflow-cache counters (a workflow task for a run in the cache, or not: then
# the worker fetches and replays the run's whole history).
CACHE_HIT, CACHE_MISS = "temporal_sticky_cache_hit", "temporal_sticky_cache_miss"
GC_SECONDS = "pricewatch_gc_pause_seconds_sum"  # the product's worker only
DATABASE_SIZE = """
SELECT (SELECT count(*) FROM source_checks) AS rows,
       pg_total_relation_size('source_checks') AS table_bytes,
       pg_database_size(current_database()) AS database_bytes
"""

# Lateness is commit time minus due slot: an upper bound on start minus due (the fetch of
# a local page takes milliseconds). A slot due in the window that was not checked by the
# time the window plus one interval has passed counts as missed: no row, or a `skipped`
# row (the product records the slots it fell too far behind to check).
WINDOW_ROWS = """
WITH due AS (
    SELECT extract(epoch FROM checked_at - scheduled_for)::float8 AS late
      FROM source_checks WHERE kind = 'scheduled' AND scheduled_for >= $1 AND scheduled_for < $2
       AND status <> 'skipped'
)
SELECT (SELECT count(*) FROM source_checks
         WHERE checked_at >= $3 AND checked_at < $4 AND status <> 'skipped') AS completed,
       (SELECT count(*) FROM due) AS recorded,
       (SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY late) FROM due)
           AS lateness,
       (SELECT max(late) FROM due) AS worst
"""

# p99 lateness per interval of due slots, counted from the window's start (negative: the
# warm-up from the first slot on), to tell a set-up backlog still draining from queueing.
TIMELINE_ROWS = """
SELECT floor(extract(epoch FROM scheduled_for - $2) / $4)::int AS bucket,
       percentile_cont(0.99) WITHIN GROUP (
           ORDER BY extract(epoch FROM checked_at - scheduled_for)::float8) AS p99
  FROM source_checks WHERE kind = 'scheduled' AND scheduled_for >= $1 AND scheduled_for < $3
   AND status <> 'skipped'
 GROUP BY 1 ORDER BY 1
"""


@dataclass
class Result:
    design: str
    offered_per_s: float
    checks_per_s: float
    slots_missed: int
    lateness_p50_s: float | None
    lateness_p95_s: float | None
    lateness_p99_s: float | None
    lateness_max_s: float | None
    history_events_per_check: float | None
    workflow_tasks_per_check: float | None
    sql_round_trips_per_check: float | None
    storage_bytes_per_check: float | None
    lateness_p99_per_interval_s: dict[str, list[float | None]]
    lateness_p99_by_stage_s: dict[str, float | None]
    cpu_seconds_per_check: dict[str, float | None] = field(default_factory=dict)
    peak_rss_mib: dict[str, float | None] = field(default_factory=dict)
    worker_peak_mib_first_fifth: float | None = None
    worker_peak_mib_last_fifth: float | None = None
    """The worker's peak in the window's first and last fifth (sampled as peak_rss_mib)."""
    registration_s: float | None = None
    """From the first start (or row) to every target registered."""
    warm_up_s: float | None = None
    """From registration to the window's start."""
    worker_gc_seconds_per_check: float | None = None
    """The worker's garbage-collection pauses (part of its CPU), per check."""
    cache_hits_per_check: float | None = None
    cache_misses_per_check: float | None = None
    checks_per_run_at_window_start: float | None = None
    run_events_at_wake_up: float | None = None
    """Events the current run held when its timer woke it: what a cache miss replays."""
    events_replayed_per_wake_up: float | None = None
    """run_events_at_wake_up times the share of workflow tasks that missed the cache."""
    database_rows: int | None = None
    source_checks_mib: float | None = None
    database_mib: float | None = None


@dataclass(frozen=True)
class Snapshot:
    """What the counters held at `at`: the checks recorded between two snapshots are what
    their differences are divided by (on a loaded machine a snapshot is taken late, and the
    window's own bounds would count checks whose round trips and CPU it missed)."""

    at: datetime
    cpu: dict[str, float]
    storage: int | None
    round_trips: int


def roots(stack: Stack, running: Running) -> dict[str, list[int]]:
    pids = {"worker": running.worker_pids, "postgres": [stack.postgres_pid]}
    if running.temporal is not None:
        pids["server"] = [running.temporal.process.pid]
    return pids


def snapshot(stack: Stack, running: Running) -> Snapshot:
    return Snapshot(
        at=datetime.now(UTC),
        cpu=procs.cpu_seconds(roots(stack, running)),
        storage=running.temporal.storage_bytes() if running.temporal else None,
        round_trips=stack.wire.round_trips,
    )


async def sleep_until(moment: datetime) -> None:
    await asyncio.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))


@dataclass(frozen=True)
class Memory:
    peaks: dict[str, int]
    """Per process, the window's peak."""
    worker_fifths: list[int]
    """The worker's peak in each fifth of the window: flat once its cache is full?"""


async def peak_memory(stack: Stack, running: Running, until: datetime) -> Memory:
    """Sample the processes' memory until `until`, the last sample at or after it: every
    fifth of the window gets at least the sample that falls in it, and the last fifth
    always one (on a loaded machine a sample can take longer than a fifth)."""
    peaks: dict[str, int] = {}
    start = datetime.now(UTC)
    fifths = [0] * 5
    while True:
        now = datetime.now(UTC)
        # Off the loop, which also serves the pages and the round-trip proxy.
        sizes = await asyncio.to_thread(procs.memory_bytes, roots(stack, running))
        for role, size in sizes.items():
            peaks[role] = max(peaks.get(role, 0), size)
        fifth = min(4, int(5 * (now - start) / (until - start)))
        fifths[fifth] = max(fifths[fifth], sizes.get("worker", 0))
        if now >= until:
            return Memory(peaks, fifths)
        every = min(MEMORY_SAMPLE_EVERY, (until - start).total_seconds() / 5)
        await asyncio.sleep(max(0.0, min(every, (until - datetime.now(UTC)).total_seconds())))


async def wait_registered(pool: asyncpg.Pool, workload: Workload) -> None:
    """Until every target has its row (pricewatch's workflows write their own), at no less
    than a quarter of the rate the lead time assumes."""
    deadline = time.monotonic() + 60 + 4 * workload.targets / SETUP_RATE
    while await pool.fetchval("SELECT count(*) FROM monitor_targets") < workload.targets:
        if time.monotonic() > deadline:
            raise TimeoutError("targets did not register in time")
        await asyncio.sleep(0.2)


def window_opens(workload: Workload, base: datetime, ready: datetime) -> tuple[datetime, int]:
    """When the window opens, and after how many slots of each target. On the grid's base
    plus whole intervals: every target (their phases spread over one interval from the
    base) has then had as many slots. At least WARMUP_INTERVALS after `ready`: the first
    cycles carry one-time costs (each run's registration, the baselines' snapshots), and
    the window measures the steady state. With `--aged K`, after K slots or more, and not
    where the runs have just continued as new with fewer than K."""
    step = timedelta(seconds=workload.interval)
    slots = max(math.ceil((ready - base) / step) + WARMUP_INTERVALS, workload.aged)
    if (held := slots % workload.checks_per_run) < workload.aged:
        slots += workload.aged - held
    return base + slots * step, slots


async def run_design(name: str, stack: Stack, workload: Workload) -> Result:
    database = await stack.database(f"bench_{name.replace('-', '_')}")
    pool = await asyncpg.create_pool(database.direct_url, min_size=1, max_size=8)
    try:
        async with DESIGNS[name](stack, workload, database, pool) as running:
            await wait_registered(pool, workload)
            registration = time.monotonic() - running.setup_started
            now = datetime.now(UTC)
            ahead = (min(running.anchors) - now).total_seconds()
            window_start, slots = window_opens(workload, running.base, max(now, *running.anchors))
            window_end = window_start + timedelta(seconds=workload.seconds)
            warm_up = (window_start - now).total_seconds()
            print(f"  {name}: targets registered in {registration:.1f} s, {ahead:.1f} s "
                  f"before the first slot; warm-up {warm_up:.0f} s (the window opens after "
                  f"{slots} slots of each target)", file=sys.stderr, flush=True)  # fmt: skip
            await sleep_until(window_start)
            before = snapshot(stack, running)
            cache_before = await cache_counts(running.metrics_urls)
            memory = await peak_memory(stack, running, window_end)
            after = snapshot(stack, running)
            cache_after = await cache_counts(running.metrics_urls)
            size = await pool.fetchrow(DATABASE_SIZE)
            await asyncio.sleep(workload.interval)  # late slots of the window may still land
            history = await history_per_check(
                name, running, pool, workload, window_start, window_end
            )
        rows = await pool.fetchrow(WINDOW_ROWS, window_start, window_end, before.at, after.at)
        timeline = await lateness_timeline(
            pool, min(running.anchors), window_start, window_end, workload.interval
        )
    finally:
        await pool.close()
    assert rows is not None and size is not None
    completed = int(rows["completed"])
    lateness = rows["lateness"] or [None, None, None]
    due = workload.slots_due(running.anchors, window_start, window_end)
    if (fewest := history.fewest_checks_at_start) is not None and fewest < workload.aged:
        print(f"  {name}: a sampled run held {fewest} checks at the window's start, fewer "
              f"than --aged {workload.aged}", file=sys.stderr, flush=True)  # fmt: skip

    def per_check(value: float | None) -> float | None:
        return value / completed if value is not None and completed else None

    hits = misses = replayed = gc_seconds = None
    if running.metrics_urls:  # a Temporal design
        hits = cache_after[CACHE_HIT] - cache_before[CACHE_HIT]
        misses = cache_after[CACHE_MISS] - cache_before[CACHE_MISS]
        gc_seconds = (cache_after[GC_SECONDS] - cache_before[GC_SECONDS]) or None
        if history.run_events_at_wake_up is not None and hits + misses:
            replayed = history.run_events_at_wake_up * misses / (hits + misses)

    return Result(
        design=name,
        offered_per_s=workload.offered_per_second,
        checks_per_s=completed / (after.at - before.at).total_seconds(),
        slots_missed=due - int(rows["recorded"]),
        lateness_p50_s=lateness[0],
        lateness_p95_s=lateness[1],
        lateness_p99_s=lateness[2],
        lateness_max_s=rows["worst"],
        history_events_per_check=history.events_per_check,
        workflow_tasks_per_check=history.tasks_per_check,
        lateness_p99_by_stage_s=history.stages,
        sql_round_trips_per_check=per_check(after.round_trips - before.round_trips),
        storage_bytes_per_check=per_check(
            None
            if after.storage is None or before.storage is None
            else after.storage - before.storage
        ),
        lateness_p99_per_interval_s=timeline,
        cpu_seconds_per_check={
            role: per_check(after.cpu[role] - before.cpu[role]) if role in after.cpu else None
            for role in ROLES
        },
        peak_rss_mib={
            role: memory.peaks[role] / 2**20 if role in memory.peaks else None for role in ROLES
        },
        worker_peak_mib_first_fifth=memory.worker_fifths[0] / 2**20 or None,
        worker_peak_mib_last_fifth=memory.worker_fifths[-1] / 2**20 or None,
        registration_s=registration,
        warm_up_s=warm_up,
        worker_gc_seconds_per_check=per_check(gc_seconds),
        cache_hits_per_check=per_check(hits),
        cache_misses_per_check=per_check(misses),
        checks_per_run_at_window_start=history.checks_at_start,
        run_events_at_wake_up=history.run_events_at_wake_up,
        events_replayed_per_wake_up=replayed,
        database_rows=int(size["rows"]),
        source_checks_mib=size["table_bytes"] / 2**20,
        database_mib=size["database_bytes"] / 2**20,
    )


async def cache_counts(urls: list[str]) -> dict[str, float]:
    """The workers' workflow-cache hits and misses, and seconds paused for garbage
    collection, so far, summed over workers."""
    counts = dict.fromkeys((CACHE_HIT, CACHE_MISS, GC_SECONDS), 0.0)
    async with httpx.AsyncClient(trust_env=False) as http:
        for url in urls:
            for line in (await http.get(url)).text.splitlines():
                name = re.split(r"[{ ]", line, maxsplit=1)[0]
                if name in counts:
                    counts[name] += float(line.rsplit(maxsplit=1)[1])
    return counts


async def lateness_timeline(
    pool: asyncpg.Pool, first_slot: datetime, start: datetime, end: datetime, interval: int
) -> dict[str, list[float | None]]:
    """p99 lateness of each interval's due slots: the warm-up's, then the window's."""
    step = timedelta(seconds=interval)
    first, last = math.floor((first_slot - start) / step), math.ceil((end - start) / step)
    rows = await pool.fetch(TIMELINE_ROWS, first_slot, start, end, float(interval))
    p99: dict[int, float] = {row["bucket"]: row["p99"] for row in rows}
    return {
        "warm-up": [p99.get(bucket) for bucket in range(first, 0)],
        "window": [p99.get(bucket) for bucket in range(0, last)],
    }


@dataclass(frozen=True)
class HistoryFigures:
    events_per_check: float | None = None
    tasks_per_check: float | None = None
    stages: dict[str, float | None] = field(default_factory=dict)
    run_events_at_wake_up: float | None = None
    checks_at_start: float | None = None
    """Mean over the sampled targets: checks the run held at its first wake-up in the window."""
    fewest_checks_at_start: int | None = None


async def history_per_check(
    name: str,
    running: Running,
    pool: asyncpg.Pool,
    workload: Workload,
    start: datetime,
    end: datetime,
) -> HistoryFigures:
    """History events and workflow tasks per check, from a sample of real histories."""
    if running.client is None:
        return HistoryFigures()
    sample = workload.target_ids[:: max(1, workload.targets // HISTORY_SAMPLE)]
    if name in LOOPS:
        ids, check = LOOPS[name]
        return await _loop_histories(running.client, [ids(t) for t in sample], check, start, end)
    return await _schedule_histories(running.client, pool, sample, start, end)


def _in_window(
    events: Iterable[HistoryEvent], start: datetime, end: datetime
) -> list[HistoryEvent]:
    return [e for e in events if start <= e.event_time.ToDatetime(tzinfo=UTC) < end]


def _workflow_tasks(events: Iterable[HistoryEvent]) -> int:
    return sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in events)


async def _events(client: Client, workflow: str, run_id: str | None = None) -> list[HistoryEvent]:
    history = await client.get_workflow_handle(workflow, run_id=run_id).fetch_history()
    return list(history.events)


async def _runs(client: Client, workflow: str, start: datetime) -> list[list[HistoryEvent]]:
    """The workflow's runs, oldest first, from the one open at `start` to the latest."""
    runs = [await _events(client, workflow)]
    while True:
        first = runs[0][0]
        previous = first.workflow_execution_started_event_attributes.continued_execution_run_id
        if not previous or first.event_time.ToDatetime(tzinfo=UTC) <= start:
            return runs
        runs.insert(0, await _events(client, workflow, previous))


def _is_check(event: HistoryEvent, activity: str) -> bool:
    """The check's first attempt (a local activity) or a later one (a normal activity)."""
    return local_activity_type(event) == activity or (
        event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == activity
    )


def _wake_ups(
    run: list[HistoryEvent], activity: str, start: datetime, end: datetime
) -> Iterator[tuple[int, int]]:
    """Each timer due in the window: the events and the checks the run held when it fired.
    By due time, not fire time (a slot due just before the window opened belongs to the
    warm-up even when its timer fires a little late): the workflow task's start, which is
    the workflow's now(), plus the timer's length."""
    due: dict[int, datetime] = {}
    now = start
    checks = 0
    for event in run:
        kind, when = event.event_type, event.event_time.ToDatetime(tzinfo=UTC)
        checks += _is_check(event, activity)
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            now = when
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
            timeout = event.timer_started_event_attributes.start_to_fire_timeout
            due[event.event_id] = now + timeout.ToTimedelta()
        elif kind == EventType.EVENT_TYPE_TIMER_FIRED and (
            start <= due[event.timer_fired_event_attributes.started_event_id] < end
        ):
            yield event.event_id - 1, checks


async def _loop_histories(
    client: Client, workflows: list[str], activity: str, start: datetime, end: datetime
) -> HistoryFigures:
    """Each workflow's events in the window (in every run the window saw, the continue-as-new
    included) over its checks in the window: the phases of the sampled targets are spread
    over the interval, so the window's edges average out."""
    events = checks = tasks = 0
    stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
    run_events: list[int] = []
    at_start: list[int] = []
    for workflow in workflows:
        wake_ups: list[tuple[int, int]] = []
        for run in await _runs(client, workflow, start):
            window = _in_window(run, start, end)
            events += len(window)
            tasks += _workflow_tasks(window)
            checks += sum(_is_check(e, activity) for e in window)
            for stage, seconds in _wake_up_stages(run, start, end):
                stages[stage].append(seconds)
            wake_ups += _wake_ups(run, activity, start, end)
        run_events += (held for held, _ in wake_ups)
        if wake_ups:
            at_start.append(wake_ups[0][1])
    if not checks:
        return HistoryFigures()
    return HistoryFigures(
        events / checks,
        tasks / checks,
        {stage: _p99(s) for stage, s in stages.items()},
        statistics.fmean(run_events) if run_events else None,
        statistics.fmean(at_start) if at_start else None,
        min(at_start, default=None),
    )


# Where a slot's lateness goes, from the history: the timer fired after it was due (the
# server's timer queue), the workflow task waited for a worker's poll (matching, a busy
# worker), the task ran (the worker: activations, the local check and its commit).
STAGES = ("timer fired late", "task waited", "task ran")


def _wake_up_stages(
    history: list[HistoryEvent], start: datetime, end: datetime
) -> Iterator[tuple[str, float]]:
    """Each timer that fired in the window, and the workflow task it woke."""
    due: dict[int, datetime] = {}
    late = 0.0
    fired = started = None
    for event in history:
        when = event.event_time.ToDatetime(tzinfo=UTC)
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_TIMER_STARTED:
            timeout = event.timer_started_event_attributes.start_to_fire_timeout
            due[event.event_id] = when + timeout.ToTimedelta()
        elif kind == EventType.EVENT_TYPE_TIMER_FIRED and start <= when < end:
            fired, started = when, None
            late = (when - due[event.timer_fired_event_attributes.started_event_id]).total_seconds()
        elif fired and not started and kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            started = when
        elif fired and started and kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            yield STAGES[0], late
            yield STAGES[1], (started - fired).total_seconds()
            yield STAGES[2], (when - started).total_seconds()
            fired = started = None


def _p99(samples: list[float]) -> float | None:
    return statistics.quantiles(samples, n=100)[98] if len(samples) > 1 else None


async def _schedule_histories(
    client: Client, pool: asyncpg.Pool, targets: list[str], start: datetime, end: datetime
) -> HistoryFigures:
    """Each short workflow's whole history, plus the scheduler's own events in the window
    per action it took (where the server runs the scheduler as a workflow)."""
    query = (
        f"WorkflowType = '{WORKFLOW_NAME}' AND StartTime >= '{start.isoformat()}' "
        f"AND StartTime < '{end.isoformat()}'"
    )
    started = [w.id async for w in client.list_workflows(query, limit=HISTORY_SAMPLE)]
    if not started:
        return HistoryFigures()
    short = [await _events(client, workflow) for workflow in started]
    events = sum(len(h) for h in short) / len(short)
    tasks = sum(_workflow_tasks(h) for h in short) / len(short)
    scheduler_events = scheduler_tasks = actions = 0
    for target_id in targets:
        try:
            history = await _events(client, f"temporal-sys-scheduler:{schedule_id(target_id)}")
        except RPCError:  # no scheduler workflow on this server: its cost is hidden
            return HistoryFigures(events, tasks)
        window = _in_window(history, start, end)
        scheduler_events += len(window)
        scheduler_tasks += _workflow_tasks(window)
        actions += await pool.fetchval(
            "SELECT count(*) FROM source_checks WHERE target_id = $1 "
            "AND scheduled_for >= $2 AND scheduled_for < $3 AND status <> 'skipped'",
            target_id, start, end,
        )  # fmt: skip
    if actions:
        events += scheduler_events / actions
        tasks += scheduler_tasks / actions
    return HistoryFigures(events, tasks)
