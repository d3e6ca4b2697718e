"""The chaos run: a real stack, seeded faults, then the promise checked from the outside.

Faults, at seeded moments between 5 s and half the run: a worker SIGKILLed inside each
window (`worker.py`: mid fetch, after fetch, after commit, after a webhook was sent), a
zombie (a worker frozen between fetch and commit past its heartbeat timeout, sometimes past
its lease, then thawed), the Temporal dev server SIGKILLed and restarted on its file,
Postgres crashed and restarted, duplicate starts, `ResetWorkflowExecution` to before a
completed check and to the first workflow task (which registers the target again), a worker
whose clock runs ten minutes ahead or behind (libfaketime), pause/resume storms, and a starved
CPU: busy processes at nice -10 on every core for seconds (`cpu starved`), a worker or the
Temporal server frozen (SIGSTOP, SIGCONT seconds later: a frozen process is not a dead one).
The run's own slowness must not look like the product's: a target's slots are due from its
workflow's start, not its anchor; a fault is judged only where it hit (a browser kill whose
render read its page first is put back, noted as a miss); and a window never hit fails the
run only if the work that reaches it came while it was armed and its hook never tried. Pages
answer 429/503, trickle or drop the connection; the receiver sometimes answers 500. Every
`apprise_every`-th target (default: all) also has two Apprise channels (`json://`, added
through `client.channels` as a user's are: the URLs stored in Postgres, only their refs in
the workflow): their service hangs (reads the request, never answers) or answers 503 in
windows the run arms, and a worker can be killed after the service accepted a message,
before its delivery row was marked sent (`after_apprise_send`). The workers reach every
other dependency (Postgres, the Temporal frontend, the pages, the webhook receiver, the SMTP
server) through a proxy (`proxy.py`) that adds latency, resets connections, black-holes them
or throttles them at seeded moments; every call a black hole swallows (or the hung Apprise
service holds) must end within its documented bound. At the end of the run pages stop
changing and faults stop; once everything due is final the run checks Postgres, the
receivers' and the mail server's logs and Temporal, and prints a table. Any FAIL makes the
report fail.

One target in ten (`rendered_every`) is rendered: its page (`/render/<target>`) carries the
same text, written by a script half a second after load, so only a render reads it; a render
worker (`PRICEWATCH_RENDER=true`, polling `<queue>-render`, through the same proxies) checks
it. Its faults, in a check's first attempt only (one slot stalls for one fault): the browser
killed (SIGKILL of Chromium's browser process mid-render: a transient error, the worker
relaunches it and lives on), the render worker killed mid-render (started again; its Chromium
must go with it), a hung page (the render hits its 5 s budget and the check retries) and a
heavy page (80 MB of JS arrays: the Chromium's memory peak is reported). After the run no
process of a render worker's Chromium may be left.

`--soak` is the long preset: a thousand faults and more in under half an hour.
"""

import asyncio
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
from aiohttp import web
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.service import RPCError
from temporalio.worker import Replayer

from activities.migrate import migrate
from activities.notify import SEND_DEADLINE
from activities.store import STATEMENT_TIMEOUT
from client import channels
from client.temporal import DATA_CONVERTER, local_activity_type, start_monitor, workflow_id
from fetchers.http import FETCH_DEADLINE
from pricewatch.models import (
    Channel,
    ChannelKind,
    MonitorState,
    MonitorStatus,
    RenderSettings,
    TargetConfig,
)
from pricewatch.names import WORKFLOW_TYPE
from pricewatch.policy import CHECK_RETRY, CHECK_TIMEOUT
from tests.chaos import procs
from tests.chaos.proxy import Hang, Proxy, postgres_upstream, through
from tests.chaos.stack import (
    CHROMIUM_GRACE,
    LEAK_MB,
    AppriseService,
    Mailbox,
    Outages,
    Pages,
    Postgres,
    Receiver,
    TemporalServer,
    Workers,
    serve,
)
from workers.embedded import free_port
from workflows.monitor import MonitorTarget

TASK_QUEUE = "pricewatch-chaos"
CHANNELS = ("a", "b")  # two webhooks per target (and one email): each hears each change once
APPRISE_CHANNELS = ("a", "b")  # and two Apprise channels (`apprise_every`): the same
# Faults per minute of run time (scaled by --faults-per-minute); every kind at least once.
FAULT_RATES = {
    "mid_fetch": 1.0,
    "after_fetch": 1.0,
    "after_commit": 1.5,
    "after_send": 1.0,
    "after_apprise_send": 0.6,
    "zombie": 0.5,
    "temporal restart": 0.4,
    "postgres restart": 0.4,
    "duplicate start": 2.0,
    "reset": 1.0,
    "reset to first task": 0.6,
    "skewed clock (+-10 min)": 0.4,
    "pause storm": 1.0,
    "browser killed": 0.6,
    "render worker killed": 0.4,
    "hung page": 0.5,
    "page leaks memory": 0.4,
    "apprise channel hangs": 0.5,
    "apprise channel refuses": 0.5,
    "cpu starved": 0.6,
    "worker frozen": 0.5,
    "temporal frozen": 0.4,
}
RENDER_WINDOWS = ("browser killed", "render worker killed")  # tests/chaos/worker.py
# A render window takes only a rendered check's first attempt. A short run's early faults can
# hold every rendered target in its retries (30 s, then 60 s of backoff) until the armed
# minute is nearly gone, and the first render window reached then stalls its target again:
# render windows stay armed this much longer (the run waits only while one is left).
RENDER_GRACE = 60
ARMED_WINDOWS = ("mid_fetch", "after_fetch", "after_commit", "after_send",
                 "after_apprise_send", "zombie", *RENDER_WINDOWS)  # fmt: skip
PAGE_FAULTS = ("hung page", "page leaks memory")  # tests/chaos/stack.py, Pages.render
# tests/chaos/stack.py, AppriseService: the kind of window each arms.
APPRISE_FAULTS = {"apprise channel hangs": "hangs", "apprise channel refuses": "refuses"}
# The work that reaches each armed window (`Chaos.check_windows`), and how long before its
# disarming that work must have come to count as a chance it had.
WINDOW_CHANCES = {
    "mid_fetch": "fetch", "after_fetch": "fetch", "zombie": "fetch", "after_commit": "commit",
    "after_send": "webhook send", "after_apprise_send": "Apprise send",
    "browser killed": "render", "render worker killed": "render",
    "apprise channel hangs": "Apprise request", "apprise channel refuses": "Apprise request",
}  # fmt: skip
WINDOW_MARGIN = 2.0
# How long a slot may stay open after the last fault that hit it, by the product's own
# policy: every attempt of a check to its timeout and every backoff between them (30 s
# doubling: 7.5 min for 5 attempts). A long run settles for up to this long; less (300 s
# before) failed a soak on a busy machine whose last faulted check was still in its backoff.
RETRY_CHAIN = (
    sum(
        (min(CHECK_RETRY.initial_interval * CHECK_RETRY.backoff_coefficient**n,
             CHECK_RETRY.maximum_interval or CHECK_RETRY.initial_interval)
         for n in range(CHECK_RETRY.maximum_attempts - 1)),
        CHECK_TIMEOUT * CHECK_RETRY.maximum_attempts,
    )
).total_seconds()  # fmt: skip
# Windows whose hit kills no worker (the rest kill the one that reached them).
SPARING = ("zombie", "browser killed")
# A rendered target's fetch timeout: its render's budget. A hung page hangs past it.
RENDER_BUDGET = 5
HANG_PAST_BUDGET = 3.0
DEPENDENCIES = ("postgres", "temporal", "pages", "webhooks", "smtp")
# The longest a call into each dependency may hang (docs/failures.md, "Bounds on every
# network call"); the run allows HANG_SLACK more for a busy machine.
HANG_BOUNDS = {
    "postgres": 2 * STATEMENT_TIMEOUT.total_seconds(),  # the statement, then its cancel
    "temporal": 45.0,  # the SDK's HTTP/2 keepalive: a ping every 30 s, 15 s for the answer
    "pages": FETCH_DEADLINE.total_seconds(),
    "webhooks": SEND_DEADLINE.total_seconds(),
    "smtp": SEND_DEADLINE.total_seconds(),
    "apprise": SEND_DEADLINE.total_seconds(),  # no proxy: the service itself hangs
}
HANG_SLACK = 5.0
MODE_RATES = {"latency": 0.5, "reset": 0.6, "throttle": 0.4, "blackhole": 0.3}
# Network faults per minute, each mode on each dependency. A black hole lasts past the
# dependency's bound, so a Temporal one (50 s) is rarer.
NETWORK_RATES = {
    f"{mode} {dependency}": rate * (0.3 if (mode, dependency) == ("blackhole", "temporal") else 1)
    for mode, rate in MODE_RATES.items()
    for dependency in DEPENDENCIES
}
ALL_RATES = {**FAULT_RATES, **NETWORK_RATES}
# Registration's head start: seconds, plus seconds per target (the first anchor lies past
# the time it takes to start them all; `lost_slots` counts from each workflow's start anyway).
REGISTER_HEAD_START = 3.0
REGISTER_PER_TARGET = 0.25


@dataclass(frozen=True)
class ChaosOptions:
    targets: int = 100
    minutes: float = 5.0
    interval_seconds: int = 10
    seed: int = 1
    workers: int = 2
    faults_per_minute: float | None = None
    """Per minute of the run, all kinds together, in their proportions (default: ALL_RATES
    as they are)."""
    fault_share: float = 0.5
    """Faults come from 5 s into the run until this share of it; then the run quiets."""
    rendered_every: int = 10
    """Every n-th target (the first included) is rendered."""
    render_workers: int = 1
    apprise_every: int = 1
    """Every n-th target (the first included) also has the Apprise channels. All by
    default: in a one-minute run under faults, changes are few, and the Apprise windows
    need requests to meet."""

    @property
    def seconds(self) -> float:
        return self.minutes * 60

    @property
    def rates(self) -> dict[str, float]:
        scale = (self.faults_per_minute or sum(ALL_RATES.values())) / sum(ALL_RATES.values())
        return {kind: rate * scale for kind, rate in ALL_RATES.items()}


# The soak: 40 targets every 10 s for 23 minutes, 48 faults per minute of it (1,104 in all)
# until 80% of the run, then quiet, settling and the checks: under 30 minutes on two cores,
# the installs of a fresh clone included.
SOAK = ChaosOptions(
    targets=40, minutes=23, interval_seconds=10, faults_per_minute=48, fault_share=0.8
)


@dataclass
class Invariant:
    name: str
    passed: bool
    detail: str


@dataclass
class Report:
    options: ChaosOptions
    injected: Counter[str] = field(default_factory=Counter)
    hit: Counter[str] = field(default_factory=Counter)
    figures: dict[str, object] = field(default_factory=dict)
    invariants: list[Invariant] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.invariants) and all(i.passed for i in self.invariants)

    def check(self, name: str, passed: bool, detail: str) -> None:
        self.invariants.append(Invariant(name, passed, detail))

    def render(self) -> str:
        o = self.options
        lines = [
            f"pricewatch chaos: {o.targets} targets every {o.interval_seconds} s, "
            f"{o.minutes:g} min, {o.workers} workers, seed {o.seed}; one target in "
            f"{o.rendered_every} rendered, {o.render_workers} render worker(s), one in "
            f"{o.apprise_every} with {len(APPRISE_CHANNELS)} Apprise channels",
            "",
            f"{'fault':<34}{'injected':>9}{'window hit':>12}",
        ]
        for kind in ALL_RATES:
            counted = (kind in ARMED_WINDOWS or kind in PAGE_FAULTS or kind in NETWORK_RATES
                       or kind in APPRISE_FAULTS)  # fmt: skip
            hit = str(self.hit[kind]) if counted else "-"
            lines.append(f"{kind:<34}{self.injected[kind]:>9}{hit:>12}")
        kinds = sum(1 for kind in ALL_RATES if self.injected[kind])
        lines.append(f"{'total (' + str(kinds) + ' kinds)':<34}{self.injected.total():>9}")
        lines += ["", "figures"]
        lines += [f"  {name:<56}{value}" for name, value in self.figures.items()]
        lines += ["", "invariants"]
        lines += [
            f"  {'PASS' if i.passed else 'FAIL'}  {i.name}: {i.detail}" for i in self.invariants
        ]
        lines += ["", "PASS" if self.passed else "FAIL"]
        return "\n".join(lines)


@dataclass
class Target:
    config: TargetConfig
    anchor: datetime
    paused_spans: list[tuple[float, float]] = field(default_factory=list)

    @property
    def rendered(self) -> bool:
        return self.config.render is not None

    @property
    def apprise(self) -> bool:
        return any(c.kind is ChannelKind.APPRISE for c in self.config.channels)


@dataclass
class Chaos:
    """One run's moving parts and what happened to them."""

    options: ChaosOptions
    folder: Path
    client: Client
    pool: asyncpg.Pool
    temporal: TemporalServer
    postgres: Postgres
    workers: Workers
    pages: Pages
    receiver: Receiver
    apprise: AppriseService
    mailbox: Mailbox
    proxies: dict[str, Proxy]
    targets: list[Target]
    report: Report
    random: random.Random
    outages: Outages = field(default_factory=Outages)
    network: list[asyncio.Task[None]] = field(default_factory=list)
    zombie_spans: list[tuple[float, float]] = field(default_factory=list)
    resets: dict[str, list[float]] = field(default_factory=dict)
    """When each workflow (by id) was reset: a render in flight then belongs to a run that
    is gone, and the new run passes its slot (a `skipped` row, as for any slot it finds due)."""
    hits: list[dict[str, object]] = field(default_factory=list)
    injected_at: list[tuple[float, str]] = field(default_factory=list)
    holds: dict[str, float] = field(default_factory=dict)
    background: list[asyncio.Task[None]] = field(default_factory=list)
    heavy_peaks: list[tuple[int, int]] = field(default_factory=list)
    """Chromium's PSS as each heavy page was served, and its peak in the 3 s after."""
    started: float = 0.0  # when the fault schedule began
    relaunches: list[tuple[int, float | None]] = field(default_factory=list)
    """(the render worker, seconds until it ran a new browser) per browser kill."""
    disarmed_at: dict[str, float] = field(default_factory=dict)
    """When an armed window of each kind was last removed unreached."""
    burners: list[subprocess.Popen[bytes]] = field(default_factory=list)
    starved: float = 0.0
    """Seconds the busy processes held every core."""
    frozen: dict[str, float] = field(default_factory=lambda: {"worker": 0.0, "Temporal": 0.0})
    """Seconds each kind of process spent frozen (SIGSTOP) by a freeze fault."""
    freeze_spans: list[tuple[float, float]] = field(default_factory=list)
    """When a worker was frozen by a freeze fault (zombies: `zombie_spans`)."""
    slowed: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """When each dependency's proxy held calls back (latency, throttle): a send begun then
    may reach the receiver after its sender's deadline, and the retry sends it again."""

    @property
    def rendered(self) -> list[Target]:
        return [t for t in self.targets if t.rendered]

    # Faults -----------------------------------------------------------------------------

    async def inject(self, kind: str) -> None:
        self.injected_at.append((time.time(), kind))
        if kind in ARMED_WINDOWS:
            name = f"{kind}.{uuid.uuid4().hex[:8]}"
            if kind == "zombie":
                self.holds[name] = self.zombie_hold()
            (self.folder / "faults" / "armed" / name).touch()
        elif kind in NETWORK_RATES:
            mode, dependency = kind.split(" ", 1)
            self.network.append(asyncio.create_task(self.network_fault(mode, dependency)))
            return  # counted when it starts: one fault per proxy at a time
        else:
            await FAULTS[kind](self)
        self.report.injected[kind] += 1

    async def network_fault(self, mode: str, dependency: str) -> None:
        """One mode on one dependency's proxy for a few seconds (a black hole: past the
        dependency's bound; in a short run, every fault stays under a sixth of it)."""
        proxy, kind = self.proxies[dependency], f"{mode} {dependency}"
        seconds = {
            "latency": self.random.uniform(5, 15),
            "reset": self.random.uniform(1, 3),
            "throttle": self.random.uniform(5, 15),
            "blackhole": HANG_BOUNDS[dependency] + self.random.uniform(3, 8),
        }[mode]
        seconds = min(seconds, self.options.seconds / 6)
        async with proxy.lock:
            proxy.latency = self.random.uniform(0.2, 1.0)
            proxy.bytes_per_second = self.random.randint(2048, 8192)
            self.report.injected[kind] += 1
            start = time.time()
            if await proxy.fault(mode, seconds):
                self.report.hit[kind] += 1
            if mode in ("blackhole", "reset") and dependency in ("postgres", "temporal"):
                self.outages.add(f"network {dependency}", start, time.time())
            if mode in ("latency", "throttle"):
                self.slowed.setdefault(dependency, []).append((start, time.time()))

    def zombie_hold(self) -> float:
        """Past the heartbeat timeout (20 s). The first zombie also outlives its lease (45 s)
        and the retry after it (20 s + 30 s backoff), so its late commit must be fenced;
        later ones vary, some finishing before the retry (which then finds the row)."""
        if not self.holds:
            return 58.0
        return self.random.uniform(25, 60)

    async def restart_temporal(self) -> None:
        start = time.time()
        self.temporal.crash()
        await asyncio.sleep(self.random.uniform(1, 4))
        await asyncio.to_thread(self.temporal.start)
        self.outages.add("temporal", start, time.time())

    async def restart_postgres(self) -> None:
        start = time.time()
        await asyncio.to_thread(self.postgres.crash_and_restart, self.random.uniform(1, 4))
        self.outages.add("postgres", start, time.time())

    async def duplicate_start(self) -> None:
        """Start already-running targets again, as a user or a script would."""
        for target in self.random.sample(self.targets, min(5, len(self.targets))):
            handle = self.client.get_workflow_handle(workflow_id(target.config.target_id))
            before = (await handle.describe()).run_id
            state = MonitorState(
                config=target.config, start_at=target.anchor, min_interval_seconds=1
            )
            again = await start_monitor(self.client, state, TASK_QUEUE)
            self.report.figures["duplicate starts absorbed (same run)"] = int(
                str(self.report.figures.get("duplicate starts absorbed (same run)", 0))
            ) + (again.result_run_id == before)

    async def reset_to_first_task(self) -> None:
        """Reset a running target to its run's first workflow task, as `temporal workflow
        reset --type FirstWorkflowTask` does: the run registers the target again."""
        for target in self.random.sample(self.targets, min(2, len(self.targets))):
            workflow, run_id, history = await self.current_run(target)
            first = next(
                (
                    e.event_id
                    for e in history.events
                    if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
                ),
                None,
            )
            if first is not None:
                await self._reset(workflow, run_id, first, "chaos: reset to the first task")
                self._count("resets to the first task done")

    async def skewed_clock(self) -> None:
        """A worker whose clock is ten minutes off joins for a while and takes its share."""
        skew = self.random.choice(["+10m", "-10m"])
        task = asyncio.create_task(self.workers.run_skewed(skew, self.random.uniform(15, 30)))
        self.background.append(task)
        self._count(f"skewed workers ({skew})")

    async def current_run(self, target: Target) -> tuple[str, str, WorkflowHistory]:
        """The target's workflow id, its current run and that run's history."""
        handle = self.client.get_workflow_handle(workflow_id(target.config.target_id))
        run_id = (await handle.describe()).run_id
        history = await self.client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        return handle.id, run_id, history

    def _count(self, figure: str) -> None:
        self.report.figures[figure] = int(str(self.report.figures.get(figure, 0))) + 1

    async def _reset(self, workflow: str, run_id: str, event_id: int, reason: str) -> None:
        self.resets.setdefault(workflow, []).append(time.time())
        await self.client.workflow_service.reset_workflow_execution(
            ResetWorkflowExecutionRequest(
                namespace=self.client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=workflow, run_id=run_id),
                reason=reason,
                workflow_task_finish_event_id=event_id,
                request_id=str(uuid.uuid4()),
            )
        )

    async def reset(self) -> None:
        """Reset a running target to the workflow task before its last completed check."""
        for target in self.random.sample(self.targets, min(2, len(self.targets))):
            workflow, run_id, history = await self.current_run(target)
            scheduled = {
                e.event_id: e.activity_task_scheduled_event_attributes
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            }
            # The workflow task that ran each completed check: its local first attempt, or
            # the one that scheduled the activity that retried it.
            completed_checks = []
            for e in history.events:
                if local_activity_type(e) == "check_slot":
                    marker = e.marker_recorded_event_attributes
                    if not marker.HasField("failure"):
                        completed_checks.append(marker.workflow_task_completed_event_id)
                elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                    done = scheduled[e.activity_task_completed_event_attributes.scheduled_event_id]
                    if done.activity_type.name == "check_slot":
                        completed_checks.append(done.workflow_task_completed_event_id)
            if not completed_checks:
                continue
            await self._reset(
                workflow, run_id, completed_checks[-1], "chaos: reset to before a completed check"
            )
            self._count("resets done")

    async def pause_storm(self) -> None:
        for target in self.random.sample(self.targets, min(5, len(self.targets))):
            handle = self.client.get_workflow_handle(workflow_id(target.config.target_id))
            start = time.time()
            for _ in range(4):
                await handle.signal("pause")
                await handle.signal("resume")
            target.paused_spans.append((start - 1, time.time() + 1))

    async def starve_cpu(self) -> None:
        """Busy processes, one per core, at high priority (nice -10 where allowed: root)
        for a few seconds: every process of the stack, the run's own included, waits for a
        core, as on a shared machine at its worst. Each ends at its own deadline; the run
        stops any left by its PID."""
        seconds = min(self.random.uniform(3, 6), self.options.seconds / 10)
        self.burners += [burner(seconds) for _ in range(os.cpu_count() or 2)]
        self.starved += seconds

    def stop_burners(self) -> None:
        for burner in self.burners:
            if burner.poll() is None:
                burner.kill()
            burner.wait()

    async def freeze(self, process: subprocess.Popen[bytes], kind: str, seconds: float) -> None:
        """SIGSTOP, then SIGCONT `seconds` later (also when the run is cut short): a frozen
        process, not a dead one. It keeps its sockets and wakes believing no time has
        passed. Not thawed if it is gone or is a zombie the run holds (`Workers.frozen`)."""
        os.kill(process.pid, signal.SIGSTOP)
        self.workers.stopped.add(process.pid)
        start = time.time()
        try:
            await asyncio.sleep(seconds)
        finally:
            self.workers.stopped.discard(process.pid)
            if process.poll() is None and process.pid not in self.workers.frozen:
                os.kill(process.pid, signal.SIGCONT)
            self.frozen[kind] += time.time() - start
            if kind == "worker":
                self.freeze_spans.append((start, time.time()))

    async def freeze_worker(self) -> None:
        """A plain worker frozen for 3-8 s (under its activities' heartbeat timeout): its
        work waits for it, or for the other worker."""
        free = [p for p in self.workers.plain if p.poll() is None
                and p.pid not in self.workers.frozen | self.workers.stopped]  # fmt: skip
        if free:
            process = self.random.choice(free)
            seconds = min(self.random.uniform(3, 8), self.options.seconds / 10)
            self.background.append(asyncio.create_task(self.freeze(process, "worker", seconds)))

    async def freeze_temporal(self) -> None:
        """The Temporal server frozen for 2-5 s: the kernel still accepts its connections,
        so it looks slow, not down; every call into it must wait or end at its deadline."""
        process = self.temporal.process
        if process is not None and process.poll() is None:
            seconds = min(self.random.uniform(2, 5), self.options.seconds / 10)
            self.background.append(asyncio.create_task(self.freeze(process, "Temporal", seconds)))

    async def apprise_fault(self, kind: str) -> None:
        """A window of 6-12 s in which the Apprise service hangs or answers 503, from its
        first request on (in a short run, at most a tenth of it: its retries must still be
        sent, and an `after_apprise_send` reached, before the windows are disarmed)."""
        seconds = min(self.random.uniform(6, 12), max(5.0, self.options.seconds / 10))
        self.apprise.arm(APPRISE_FAULTS[kind], seconds)

    async def apprise_hangs(self) -> None:
        await self.apprise_fault("apprise channel hangs")

    async def apprise_refuses(self) -> None:
        await self.apprise_fault("apprise channel refuses")

    async def hung_page(self) -> None:
        """A rendered target's page hangs, once, past its render's budget."""
        self.pages.hangs_pending.append(RENDER_BUDGET + HANG_PAST_BUDGET)

    async def leaky_page(self) -> None:
        """A rendered target's next page allocates 80 MB of JS arrays and holds them; the
        render workers' Chromium is sampled closely while it renders."""
        served = len(self.pages.heavy)
        self.pages.heavy_pending += 1
        self.background.append(asyncio.create_task(self.watch_heavy(served)))

    async def watch_heavy(self, served: int, tries: int = 3) -> None:
        # Until the page is served (or the run ends).
        while len(self.pages.heavy) <= served:  # noqa: ASYNC110 (a counter, not an event)
            await asyncio.sleep(0.05)
        before = peak = await asyncio.to_thread(self.workers.sample_chromium)  # not run yet
        for _ in range(30):  # 3 s: the page's script runs 0.5 s after load, then it closes
            peak = max(peak, await asyncio.to_thread(self.workers.sample_chromium))
            await asyncio.sleep(0.1)
        if peak - before < LEAK_MB * 2**20 / 2 and tries > 1:
            # The arrays never showed (the render was killed under it): serve it again.
            self._count("heavy pages served again (their render cut short)")
            self.pages.heavy_pending += 1
            await self.watch_heavy(len(self.pages.heavy), tries - 1)
            return
        self.heavy_peaks.append((before, peak))

    async def watch_relaunch(self, worker: int, killed: int, within: float = 120.0) -> None:
        """After a browser kill: how long until the same worker runs a new browser (it
        launches one at its next render; None if it never did, or was killed meanwhile)."""
        start = time.monotonic()
        while time.monotonic() - start < within and procs.alive(worker):
            if [b for b in await asyncio.to_thread(procs.browsers_under, worker) if b != killed]:
                self.relaunches.append((worker, time.monotonic() - start))
                return
            await asyncio.sleep(0.5)
        self.relaunches.append((worker, None))

    async def watch_hits(self) -> None:
        """Read the workers' hit log: count windows hit, thaw each zombie after its hold."""
        log = self.folder / "faults" / "hits.jsonl"
        seen = 0
        while True:
            lines = log.read_text().splitlines() if log.exists() else []
            for line in lines[seen:]:
                hit = json.loads(line)
                self.hits.append(hit)
                self.report.hit[str(hit["window"])] += 1
                if hit["window"] == "browser killed":
                    self.background.append(
                        asyncio.create_task(
                            self.watch_relaunch(int(hit["pid"]), int(hit["browser"]))
                        )
                    )
                if hit["window"] == "zombie":
                    pid, at = int(hit["pid"]), float(hit["at"])
                    self.workers.freeze_noted(pid)
                    hold = self.holds.get(str(hit["arm"]), 30.0)
                    asyncio.get_running_loop().call_later(
                        max(0.0, at + hold - time.time()), self.workers.thaw, pid
                    )
                    self.zombie_spans.append((at, at + hold))
            seen = len(lines)
            await asyncio.sleep(0.2)

    # Quiet and checks -------------------------------------------------------------------

    async def disarm(self, deadline: float) -> None:
        """Give windows still armed until `deadline` to be reached (a stalled run may not
        have sent a webhook yet), render windows RENDER_GRACE longer, then remove the rest:
        none fires while settling. The Apprise service's armed windows too (one open then
        runs its course)."""
        armed = self.folder / "faults" / "armed"
        while (now := time.time()) < deadline + RENDER_GRACE:
            if now >= deadline:  # past it, only the render windows wait on
                self._disarm([a for a in armed.iterdir()
                              if a.name.partition(".")[0] not in RENDER_WINDOWS])  # fmt: skip
            if not any(armed.iterdir()) and not self.apprise.pending:
                break
            await asyncio.sleep(0.5)
        self._disarm(list(armed.iterdir()))

    def _disarm(self, arms: list[Path]) -> None:
        """Remove these armed windows and the Apprise service's pending ones, noting when
        each kind was last disarmed unreached (`check_windows` looks for chances it had)."""
        now = time.time()
        for arm in arms:
            arm.unlink(missing_ok=True)
            self.disarmed_at[arm.name.partition(".")[0]] = now
        for window in self.apprise.pending:
            kind = next(k for k, mode in APPRISE_FAULTS.items() if mode == window.kind)
            self.disarmed_at[kind] = now
        self.apprise.pending.clear()

    async def settle(self, fault_window_end: float, patience: float) -> bool:
        """Wait until every slot of the fault window is final, every notice delivered and
        every workflow caught up."""
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            try:
                pending = await self.pool.fetchval(
                    SETTLED, datetime.fromtimestamp(fault_window_end, UTC)
                )
            except (OSError, asyncpg.PostgresError):
                pending = -1
            if pending == 0 and not self.workers.frozen and await self.workflows_caught_up():
                return True
            await asyncio.sleep(1)
        return False

    async def workflows_caught_up(self) -> bool:
        """Every workflow is past its overdue slots (one may still be retrying a check the
        database already has, e.g. after a kill between commit and completion)."""
        now = datetime.now(UTC)
        for target in self.targets:
            handle = self.client.get_workflow_handle(workflow_id(target.config.target_id))
            try:
                status = await handle.query("status", result_type=MonitorStatus)
            except RPCError:  # its worker is frozen or restarting: not caught up yet
                return False
            if status.next_slot is None or status.next_slot <= now:
                return False
        return True

    async def verify(self, fault_window_end: float, settled: bool) -> None:
        r = self.report
        end = datetime.fromtimestamp(fault_window_end, UTC)
        r.check(
            "quiet",
            settled,
            "every slot of the fault window final, every notice settled, workflows caught up",
        )

        duplicates = await self.pool.fetchval(DUPLICATE_SLOTS)
        rows = await self.pool.fetch(SCHEDULED_ROWS)
        by_status = Counter(row["status"] for row in rows)
        r.figures["rows (scheduled slots, faults and settling)"] = len(rows)
        r.figures["  unchanged / changed / failed / skipped"] = " / ".join(
            str(by_status[s]) for s in ("unchanged", "changed", "failed", "skipped")
        )
        r.check("one row per (target, slot)", duplicates == 0, f"{duplicates} slots with 2+ rows")
        await self.check_grid(rows)

        await self.note_pauses_as_processed()
        lost, excused, before = self.lost_slots(rows, end, await self.first_starts())
        r.figures["due slots with no row while down or paused (allowed)"] = excused
        r.figures["anchors passed before their workflow started (no row due)"] = before
        r.check(
            "every slot due while up has a row", lost == [], f"lost slots: {len(lost)} {lost[:3]}"
        )

        abandoned = await self.pool.fetch(ABANDONED_RETRYING)
        named = [f"{r['work_id']} x{r['attempt_count']} ({r['error']})" for r in abandoned[:3]]
        r.check(
            "no slot left retrying once its schedule moved on",
            not abandoned,
            f"{len(abandoned)} rows still 'retrying' behind their target's next slot"
            + (f": {'; '.join(named)}" if named else ""),
        )

        await self.check_deliveries()
        await self.check_apprise()
        await self.check_mail()
        await self.check_workflows()
        await self.check_leases()
        await self.count_executions()
        r.figures["page answers"] = dict(self.pages.answers)
        r.figures["receiver: refused with 500 / forged"] = (
            f"{self.receiver.refused} / {self.receiver.forged}"
        )
        r.figures["worker deaths (each restarted)"] = self.workers.deaths
        r.figures["seconds starved (a busy process per core, nice -10)"] = f"{self.starved:.1f}"
        r.figures["seconds frozen (SIGSTOP): workers / Temporal"] = (
            f"{self.frozen['worker']:.1f} / {self.frozen['Temporal']:.1f}"
        )
        await self.check_rendering(rows)
        self.check_hangs()
        self.check_restarts()
        self.check_memory(end.timestamp())
        await self.check_windows()

    async def check_windows(self) -> None:
        """Every armed window was hit, reached, or had no chance (`judge_windows`)."""
        r = self.report
        kinds = [k for k in (*ARMED_WINDOWS, *APPRISE_FAULTS) if r.injected[k] and not r.hit[k]]
        tries = Counter(str(take["window"]) for take in self.read_log("takes.jsonl"))
        misses: dict[str, Counter[str]] = {}
        for miss in self.read_log("misses.jsonl"):
            misses.setdefault(str(miss["window"]), Counter())[str(miss["reason"])] += 1
        judged = judge_windows(
            kinds, self.injected_at, self.disarmed_at, await self.window_chances(), tries, misses,
            time.time(),
        )  # fmt: skip
        r.figures["armed windows not reached: no chance while armed"] = judged.no_chance or "none"
        r.figures["armed windows reached, never hit (each try)"] = judged.reached or "none"
        r.check(
            "run valid: every armed window was hit, or had no chance",
            not judged.untried,
            f"never tried, though reachable: {judged.untried or 'none'}",
        )

    def read_log(self, name: str) -> list[dict[str, object]]:
        """The lines of a log the fault hooks write (tests/chaos/worker.py)."""
        log = self.folder / "faults" / name
        lines = log.read_text().splitlines() if log.exists() else []
        return [json.loads(line) for line in lines]

    async def window_chances(self) -> dict[str, list[float]]:
        """When each kind of work a window waits on happened (`WINDOW_CHANCES`)."""
        commits = await self.pool.fetch(
            "SELECT checked_at FROM source_checks WHERE status NOT IN ('skipped', 'retrying')"
        )
        return {
            "fetch": self.pages.requested,
            "commit": [row["checked_at"].timestamp() for row in commits],
            "webhook send": [d.at for d in self.receiver.accepted],
            "Apprise send": [m.at for m in self.apprise.accepted],
            "render": self.pages.rendered_first,
            "Apprise request": [m.at for m in self.apprise.accepted],
        }

    async def note_pauses_as_processed(self) -> None:
        """A pause counts from the workflow task that processed it, not from when it was
        sent: a storm's resume can wait for a killed worker's task to time out. A run can
        continue as new while paused: its pause lasts until it closed, and the next run,
        started paused, is paused from its start until its resume."""
        by_id = {workflow_id(t.config.target_id): t for t in self.targets}
        async for execution in self.client.list_workflows(f"WorkflowType = '{WORKFLOW_TYPE}'"):
            history = await self.client.get_workflow_handle(
                execution.id, run_id=execution.run_id
            ).fetch_history()
            paused_at: float | None = None
            pending: list[str] = []  # signals no workflow task has processed yet
            in_flight: list[str] = []  # signals the current workflow task is processing
            started = 0.0
            for event in history.events:
                kind = event.event_type
                if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                    payloads = event.workflow_execution_started_event_attributes.input.payloads
                    (state,) = await DATA_CONVERTER.decode(payloads, [MonitorState])
                    if state.paused:
                        begun = event.event_time.ToDatetime(UTC).timestamp()
                        paused_at = state.paused_at.timestamp() if state.paused_at else begun
                elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                    pending.append(event.workflow_execution_signaled_event_attributes.signal_name)
                elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                    in_flight, pending = in_flight + pending, []
                    started = event.event_time.ToDatetime(UTC).timestamp()
                elif kind in (
                    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
                    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
                ):
                    in_flight, pending = [], in_flight + pending  # processed again later
                elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                    for signal in in_flight:
                        if signal == "pause" and paused_at is None:
                            paused_at = started
                        elif signal == "resume" and paused_at is not None:
                            by_id[execution.id].paused_spans.append((paused_at, started))
                            paused_at = None
                    in_flight = []
            if paused_at is not None:  # paused when the run closed, or paused still
                closed = execution.close_time.timestamp() if execution.close_time else time.time()
                by_id[execution.id].paused_spans.append((paused_at, closed))

    async def first_starts(self) -> dict[str, datetime]:
        """When each target's workflow first started (its earliest run: resets and
        continue-as-new start later ones), from Temporal."""
        starts: dict[str, datetime] = {}
        async for execution in self.client.list_workflows(f"WorkflowType = '{WORKFLOW_TYPE}'"):
            if execution.id not in starts or execution.start_time < starts[execution.id]:
                starts[execution.id] = execution.start_time
        return starts

    def lost_slots(
        self, rows: list[asyncpg.Record], end: datetime, starts: dict[str, datetime]
    ) -> tuple[list[str], int, int]:
        """Slots due while the stack was up with no row. They count from the first grid
        point at or after the workflow's start, as the product's rule has it (a slot that
        passed before its workflow existed gets no row, `due_before_first_task`), not from
        the anchor: a slow machine may start a workflow after its anchor. Returns the lost,
        the excused (down or paused) and the anchors' slots passed before the start."""
        recorded = {(row["target_id"], row["scheduled_for"]) for row in rows}
        lost: list[str] = []
        excused = before = 0
        interval = timedelta(seconds=self.options.interval_seconds)
        for target in self.targets:
            slot = target.anchor
            started = starts.get(workflow_id(target.config.target_id), target.anchor)
            while slot < started:
                slot, before = slot + interval, before + 1
            while slot <= end:
                if (target.config.target_id, slot) not in recorded:
                    moment = slot.timestamp()
                    paused = any(s <= moment <= e for s, e in target.paused_spans)
                    if (
                        paused
                        or self.outages.down_at(moment)
                        or self.workers.outages.down_at(moment)
                    ):
                        excused += 1
                    else:
                        lost.append(f"{target.config.target_id}@{slot:%H:%M:%S.%f}")
                slot += interval
        return lost, excused, before

    async def check_grid(self, rows: list[asyncpg.Record]) -> None:
        """Resets (to the first task too) and skewed clocks never move a target's grid, and
        no slot is skipped before it came due."""
        anchors = {t.config.target_id: t.anchor for t in self.targets}
        interval = timedelta(seconds=self.options.interval_seconds)
        stored = await self.pool.fetch("SELECT id, anchor FROM monitor_targets")
        moments = [(r["target_id"], r["scheduled_for"]) for r in rows]
        moments += [(r["id"], r["anchor"]) for r in stored]
        off_grid = [f"{t}@{m:%H:%M:%S.%f}" for t, m in moments if (m - anchors[t]) % interval]
        resets = self.report.figures.get("resets to the first task done", 0)
        self.report.check(
            "grid unchanged after resets",
            not off_grid,
            f"{len(rows)} rows and {len(stored)} anchors on their grid after {resets} resets "
            f"to the first task; off the grid: {off_grid[:3] or 'none'}",
        )
        future = await self.pool.fetch(FUTURE_SKIPS)
        named = [f"{r['work_id']} {r['ahead']:.1f} s ahead at {r['checked_at']:%H:%M:%S.%f} "
                 f"({r['error_message']})" for r in future[:3]]  # fmt: skip
        self.report.check(
            "no future skipped rows",
            not future,
            f"{len(future)} skipped rows for slots not yet due{': ' if named else ''}"
            + "; ".join(named),
        )

    async def check_deliveries(self) -> None:
        r = self.report
        changed = await self.pool.fetchval(
            "SELECT count(*) FROM source_checks WHERE status = 'changed'"
        )
        unsent = await self.pool.fetchval(CHANGED_NOT_SENT)
        sent_ids = {row["message_id"] for row in await self.pool.fetch(SENT_CHANGE_IDS)}
        accepted = [d for d in self.receiver.accepted if d.kind == "page.changed"]
        times: dict[str, list[float]] = {}
        for delivery in accepted:
            times.setdefault(delivery.webhook_id, []).append(delivery.at)
        r.figures["changed rows x channels"] = f"{changed} x {len(CHANNELS)}"
        r.figures["webhooks accepted (all notices)"] = len(self.receiver.accepted)
        r.check(
            "every changed row: one sent delivery per channel", unsent == 0, f"{unsent} missing"
        )
        r.check(
            "receiver's distinct webhook-ids = changed rows x channels",
            len(times) == changed * len(CHANNELS) and set(times) == sent_ids,
            f"{len(times)} = {changed} x {len(CHANNELS)}",
        )
        senders = self.senders(lambda send: send.get("webhook_id"))
        resent, early, unexplained = self.resends(times, senders, self.slowed.get("webhooks", []))
        r.figures["raw re-sends (same webhook-id accepted twice)"] = resent
        r.figures["  taken after their sender was killed (its request out already)"] = early
        r.check(
            "every re-send explained by a crash between send and record",
            not unexplained,
            f"{resent} re-sends, unexplained: {unexplained[:3] or 'none'}",
        )

    def senders(
        self, key: Callable[[dict[str, Any]], object]
    ) -> dict[object, list[tuple[int, float]]]:
        """The chaos workers' sends (tests/chaos/worker.py `Faults.sending`) by `key`: which
        process began each, and when."""
        log = self.folder / "faults" / "sends.jsonl"
        sends: dict[object, list[tuple[int, float]]] = {}
        for line in log.read_text().splitlines() if log.exists() else []:
            send = json.loads(line)
            if (k := key(send)) is not None:
                sends.setdefault(k, []).append((int(send["pid"]), float(send["at"])))
        return sends

    def resends(
        self, times: dict[Any, list[float]], senders: dict[object, list[tuple[int, float]]],
        slowed: Sequence[tuple[float, float]] = (),
    ) -> tuple[int, int, list[str]]:  # fmt: skip
        """Each copy taken again (`times`: when each was taken, by key), and whether it is
        explained: a kill took down the process whose send was in flight, or Postgres was
        away (a restart, a black hole or a reset on its proxy: the `sent` row's write
        failed and the retry sent again), or a zombie's send outlived its attempt, or the
        first send began while the channel's proxy held calls back (`slowed`: it reached the
        receiver after its deadline). Returns the re-sends, those taken after their sender's
        kill, and the unexplained, named."""
        crashes = self.outages.spans.get("postgres", []) + self.zombie_spans
        crashes += self.outages.spans.get("network postgres", [])
        resent, early, unexplained = 0, 0, []
        for key, moments in times.items():
            began = [at for _, at in senders.get(key, [])]
            for first, again in itertools.pairwise(moments):
                resent += 1
                if (kill := self.sender_kill(senders.get(key, []), again)) is not None:
                    early += kill < first
                elif not any(s <= again and e >= first for s, e in crashes) and not any(
                    s <= at <= min(e, first) for s, e in slowed for at in began
                ):
                    unexplained.append(self.resend(key, first, again, senders))
        return resent, early, unexplained

    def sender_kill(self, sends: list[tuple[int, float]], again: float) -> float | None:
        """When a window's kill took down a process with this notice's send in flight (begun
        before the kill, the kill before the copy taken `again`), if one did. The receiver
        may take the first copy after the kill: the request was out already."""
        kills = [float(str(h["at"])) for pid, began in sends for h in self.hits
                 if h["window"] not in SPARING and int(str(h["pid"])) == pid
                 and began <= float(str(h["at"])) <= again]  # fmt: skip
        return min(kills, default=None)

    def resend(
        self, key: object, first: float, again: float,
        senders: dict[object, list[tuple[int, float]]],
    ) -> str:  # fmt: skip
        """An unexplained re-send as the report names it: when it was taken each time, who
        began its sends, and the faults injected and windows hit from 20 s before (the
        evidence a failed run leaves in CI)."""
        t0 = self.started
        sent = [f"pid {pid} at {at - t0:.1f}" for pid, at in senders.get(key, [])]
        near = [f"{kind} {at - t0:.0f}" for at, kind in self.injected_at
                if first - 20 <= at <= again]  # fmt: skip
        hit = [f"{h['window']} pid {h['pid']} at {float(str(h['at'])) - t0:.1f}"
               for h in self.hits if first - 20 <= float(str(h["at"])) <= again]  # fmt: skip
        return (f"{key} taken at {first - t0:.1f} and {again - t0:.1f} s; sent by "
                f"{', '.join(sent) or 'nobody logged'}; faults from 20 s before: "
                f"{', '.join(near) or 'none'}; windows hit: "
                f"{', '.join(hit) or 'none'}")  # fmt: skip

    async def check_apprise(self) -> None:
        """The Apprise channels: each change of a target with them sent once to each; the
        service's distinct (channel, work id) pairs are those changes x channels; a message
        received twice only across a crash between the service's acceptance and the `sent`
        row."""
        r = self.report
        ids = [t.config.target_id for t in self.targets if t.apprise]
        rows = await self.pool.fetch(APPRISE_CHANGES, ids)
        expected = {(c, row["work_id"]) for row in rows for c in APPRISE_CHANNELS}
        unsent = [row["work_id"] for row in rows if row["sent"] != len(APPRISE_CHANNELS)]
        stored = await self.pool.fetch(APPRISE_CHANNEL_ROWS)
        disabled = [f"{c['target_id']}: {c['disabled_reason']}" for c in stored
                    if c["disabled_reason"]]  # fmt: skip
        synced = Counter(c["target_id"] for c in stored)
        unsynced = [t for t in ids if synced[t] != len(APPRISE_CHANNELS)]
        service = self.apprise
        for kind, mode in APPRISE_FAULTS.items():  # a window is hit once a request opens it
            r.hit[kind] = sum(1 for w in service.windows if w.kind == mode)
        messages = [m for m in service.accepted if m.title.endswith(" changed")]
        times: dict[tuple[str, str], list[float]] = {}
        for message in messages:
            times.setdefault((message.channel, message.work_id), []).append(message.at)
        misrouted = [m.work_id for m in messages if not m.work_id.startswith(f"{m.target}:")]
        r.figures["Apprise channels stored and synced (targets x channels)"] = (
            f"{len(stored)} = {len(ids)} x {len(APPRISE_CHANNELS)}"
        )
        r.figures["Apprise messages accepted (all / changes; distinct)"] = (
            f"{len(service.accepted)} / {len(messages)} ({len(times)})"
        )
        r.figures["Apprise windows opened: requests hung / refused 503"] = (
            f"{len(service.windows)}: {len(service.hung)} / {service.refused}"
        )
        r.check(
            "every changed row of an Apprise target: one sent delivery per Apprise channel",
            not unsent and not disabled and not unsynced,
            f"{len(rows) - len(unsent)}/{len(rows)} rows sent to all {len(APPRISE_CHANNELS)}; "
            f"unsynced {unsynced[:2] or 'none'}, disabled {disabled[:2] or 'none'}, not sent "
            f"{unsent[:3] or 'none'}",
        )
        r.check(
            "the Apprise service's distinct work ids = those changed rows x channels",
            set(times) == expected and not misrouted and not service.malformed,
            f"{len(times)} = {len(rows)} x {len(APPRISE_CHANNELS)}; misrouted "
            f"{len(misrouted)}, malformed {service.malformed}; missing "
            f"{sorted(expected - set(times))[:2] or 'none'}, extra "
            f"{sorted(set(times) - expected)[:2] or 'none'}",
        )
        urls = await self.pool.fetch("SELECT ref, url FROM notify_urls")
        letters = {f"apprise-{u['ref']}": str(u["url"]).rsplit("/", 2)[-2] for u in urls}
        senders = self.senders(
            lambda send: (letters.get(send["channel_id"], "?"), send["work_id"])
            if "channel_id" in send else None
        )  # fmt: skip
        resent, early, unexplained = self.resends(times, senders)
        killed_after = [(letters.get(str(h["channel_id"]), "?"), str(h["work_id"]))
                        for h in self.hits if h["window"] == "after_apprise_send"]  # fmt: skip
        r.figures["raw Apprise re-sends (same message accepted twice)"] = resent
        r.figures["  taken after the sender was killed (the request out already)"] = early
        r.figures["  after_apprise_send hits: accepted 1 / 2 / 3+ times"] = " / ".join(
            str(sum(1 for k in killed_after if len(times.get(k, [])) in n))
            for n in ((0, 1), (2,), range(3, 99))
        )
        r.check(
            "every Apprise re-send explained by a crash between acceptance and record",
            not unexplained,
            f"{resent} re-sends, unexplained: {unexplained[:3] or 'none'}",
        )

    async def check_rendering(self, rows: list[asyncpg.Record]) -> None:
        """The rendered targets' faults: each faulted render's slot retried and recorded (a
        browser kill and a hang: a failed attempt on its row, then a final one); each killed
        browser relaunched by a worker that lived on; no Chromium orphaned."""
        r = self.report
        rendered = {t.config.target_id for t in self.rendered}
        statuses = Counter(row["status"] for row in rows if row["target_id"] in rendered)
        r.figures["rendered targets: rows unchanged / changed / failed / skipped"] = " / ".join(
            str(statuses[s]) for s in ("unchanged", "changed", "failed", "skipped")
        )
        r.figures["render attempts failed, by error"] = dict(self.render_errors()) or "none"
        hung = [h for h in self.pages.hung if h.held >= self.pages.hang_hit_after]
        r.hit["hung page"] = len(hung)
        leak = LEAK_MB * 2**20 / 2  # a heavy page whose arrays showed in Chromium's memory
        r.hit["page leaks memory"] = sum(b - a >= leak for a, b in self.heavy_peaks)
        r.figures["hung pages: seconds each was held (the browser gave up at 5 s)"] = (
            ", ".join(f"{h.held:.1f}" for h in self.pages.hung) or "none"
        )
        killed = {int(str(h["pid"])) for h in self.hits if h["window"] == "render worker killed"}
        faulted = [  # a browser kill's moment is `killed` (its hit is written after)
            (
                str(h["url"]).rsplit("/", 1)[-1],
                float(str(h.get("killed", h["at"]))),
                str(h["window"]),
                int(str(h["pid"])),
            )
            for h in self.hits
            if h["window"] in RENDER_WINDOWS
        ]
        faulted += [(h.target, h.at, "hung page", 0) for h in hung]
        outcomes, bad = Counter[str](), []
        paused = {t.config.target_id: t.paused_spans for t in self.targets}
        for target, at, kind, pid in faulted:
            row = await self.pool.fetchrow(FAULTED_SLOT, target, datetime.fromtimestamp(at, UTC))
            outcome = "no row" if row is None else f"{row['status']} x{row['attempt_count']}"
            outcomes[f"{kind}: {outcome}"] += 1
            # A killed worker's attempt records nothing: its row counts the attempts that did.
            # That holds for a browser kill too when the run then killed the same worker (two
            # renders at once in one worker can take both windows).
            failed_first = kind != "render worker killed" and pid not in killed
            retried = row is not None and (row["attempt_count"] >= 2 or not failed_first)
            if row is not None and row["status"] == "skipped":  # only after a reset or a pause
                resets = self.resets.get(workflow_id(target), [])
                done = row["checked_at"].timestamp()
                retried = any(at <= when <= done for when in resets) or any(
                    s <= done and e >= at for s, e in paused[target]
                )
            if row is None or row["status"] == "retrying" or not retried:
                bad.append(f"{target} {kind} at {datetime.fromtimestamp(at, UTC):%H:%M:%S}: "
                           f"{outcome}")  # fmt: skip
        for target, at in self.pages.heavy:  # not judged: a heavy page may render or not
            row = await self.pool.fetchrow(FAULTED_SLOT, target, datetime.fromtimestamp(at, UTC))
            outcome = "no row" if row is None else f"{row['status']} x{row['attempt_count']}"
            outcomes[f"page leaks memory: {outcome}"] += 1
        r.figures["faulted renders' slots (status x attempts)"] = dict(outcomes)
        r.figures["browser kills put back: render read its page first / no browser"] = (
            " / ".join(str(sum(m["reason"] == reason for m in self.read_log("misses.jsonl")))
                       for reason in ("too late", "no browser"))
        )  # fmt: skip
        r.check(
            "every faulted render's slot retried and recorded",
            not bad,
            f"{len(faulted)} faulted renders; not retried or not final: {bad[:3] or 'none'}",
        )
        unlaunched = [w for w, seconds in self.relaunches if seconds is None and w not in killed]
        r.figures["browser relaunched after a kill (seconds, at the next render)"] = (
            ", ".join("-" if s is None else f"{s:.1f}" for _, s in self.relaunches) or "none"
        )
        r.check(
            "every killed browser relaunched by a worker that lived on",
            len(self.relaunches) == r.hit["browser killed"] and not unlaunched,
            f"{len(self.relaunches)} kills; no new browser in the same worker: "
            f"{len(unlaunched)} (its worker killed by the run meanwhile: excused)",
        )
        mib = 2**20
        pss = sorted(b for _, b in self.workers.chromium_pss if b)
        median = pss[len(pss) // 2] if pss else 0
        r.figures["render workers' Chromium PSS (median / peak; sampled)"] = (
            f"{median / mib:.0f} / {max(pss, default=0) / mib:.0f} MiB"
        )
        r.figures["heavy pages: Chromium PSS as served -> peak 3 s after"] = (
            ", ".join(f"{a / mib:.0f} -> {b / mib:.0f} MiB" if b else "no browser (its worker gone)"
                      for a, b in self.heavy_peaks) or "none"
        )  # fmt: skip
        moments = sorted((at - self.started, kind) for _, at, kind, _ in faulted)
        moments += sorted((at - self.started, "page leaks memory") for _, at in self.pages.heavy)
        r.figures["render faults hit (seconds into the run)"] = (
            ", ".join(f"{kind} {at:.0f}" for at, kind in moments) or "none"
        )
        caught_up = await self.pool.fetch(CAUGHT_UP, datetime.fromtimestamp(self.started, UTC)
                                          + timedelta(seconds=self.options.seconds))  # fmt: skip
        if caught_up:
            last = caught_up[0]
            r.figures["last target past the end (first row after it, s into the run)"] = (
                f"{last['target_id']} at {last['at'].timestamp() - self.started:.0f}"
            )
        orphans = await asyncio.to_thread(self.workers.orphaned_chromium)
        r.check(
            "no Chromium outlived its browser or render worker",
            not orphans,
            f"{len(orphans)} left: {[o.cmdline[:60] for o in orphans[:2]] or 'none'}",
        )

    def render_errors(self) -> Counter[str]:
        """The render workers' failed attempts, by their error (the check's one line)."""
        errors: Counter[str] = Counter()
        for path in self.workers.logs():
            if not path.name.startswith("worker-render-"):
                continue
            for line in path.read_text(errors="replace").splitlines():
                if '"pricewatch.checks"' not in line:
                    continue
                with contextlib.suppress(ValueError):
                    message = str(json.loads(line).get("message", ""))
                    for kind in (" (transient)", " (permanent)"):
                        if kind in message:
                            error = message.split(" ", 1)[1].split(kind)[0]
                            errors[error[:60] + kind] += 1
        return errors

    def check_hangs(self) -> None:
        """Every call a black hole swallowed ended within its dependency's bound."""
        hangs = [hang for proxy in self.proxies.values() for hang in proxy.hangs]
        hangs += self.apprise.hung  # the service itself hung: until the client closed
        over = [
            f"{h.dependency} {h.waited:.1f}s{'' if h.ended else ' (still waiting)'} "
            f"({self.frozen_during(h):.1f}s of it frozen) after {h.first_bytes[:24]!r}"
            for h in hangs
            if h.waited - self.frozen_during(h) > HANG_BOUNDS[h.dependency] + HANG_SLACK
        ]
        for dependency in (*DEPENDENCIES, "apprise"):
            waited = [h.waited for h in hangs if h.dependency == dependency]
            self.report.figures[f"hung calls into {dependency} (longest; bound)"] = (
                f"{len(waited)} ({max(waited, default=0):.1f} s; {HANG_BOUNDS[dependency]:g} s)"
            )
        self.report.check(
            "every hung call ended within its bound",
            not over,
            f"{len(hangs)} calls swallowed by black holes or a hung Apprise service; over the "
            f"bound: {over[:3] or 'none'}",
        )

    def frozen_during(self, hang: Hang) -> float:
        """The longest a worker was frozen (a zombie, or a freeze fault) during `hang`: a
        frozen client's deadline does not run (it wakes believing no time has passed), so
        its call may hang that much longer. Which worker made the call is not known: the
        longest overlap is taken."""
        end = hang.ended or hang.hole_ended
        spans = self.zombie_spans + self.freeze_spans
        return max([min(e, end) - max(s, hang.since) for s, e in spans] + [0.0])

    def check_restarts(self) -> None:
        """The supervisor restarted only workers the run killed (armed windows)."""
        caused = {int(str(h["pid"])) for h in self.hits if h["window"] not in SPARING}
        unexplained = [pid for pid in self.workers.died if pid not in caused]
        self.report.check(
            "no worker needed a restart the run did not cause",
            not unexplained,
            f"{len(self.workers.died)} deaths, {len(unexplained)} not caused by the run "
            f"(pids {unexplained[:3] or 'none'})",
        )

    def check_memory(self, end: float) -> None:
        """Workers' peak memory in the last fifth of the run against the first fifth."""
        start = end - self.options.seconds
        fifth = self.options.seconds / 5
        first = max((b for t, b in self.workers.rss if t <= start + fifth), default=0)
        last = max((b for t, b in self.workers.rss if t >= end - fifth), default=0)
        mib = 2**20
        self.report.check(
            "workers' memory flat (peak RSS, first and last fifth)",
            0 < last <= 1.25 * first + 32 * mib,
            f"{first / mib:.0f} MiB, then {last / mib:.0f} MiB",
        )

    async def check_mail(self) -> None:
        """Each change reached the email channel: one distinct Message-ID per changed row."""
        changed = await self.pool.fetchval(
            "SELECT count(*) FROM source_checks WHERE status = 'changed'"
        )
        # A target's failing and recovered notices are mail too: not changes.
        health = {row["message_id"] for row in await self.pool.fetch(HEALTH_MAIL_IDS)}
        ids = {message_id for message_id, _ in self.mailbox.received}
        self.report.figures["emails accepted (distinct Message-IDs; health notices)"] = (
            f"{len(self.mailbox.received)} ({len(ids)}; {len(ids & health)})"
        )
        self.report.check(
            "the mail server's distinct Message-IDs of changes = changed rows",
            len(ids - health) == changed,
            f"{len(ids - health)} = {changed}",
        )

    async def check_workflows(self) -> None:
        problems = []
        for target in self.targets:
            handle = self.client.get_workflow_handle(workflow_id(target.config.target_id))
            description = await handle.describe()
            # A short cadence beside a slow render leaves its next slot in the future for only a
            # fraction of each interval: a workflow is well if its slot is ahead, or moves on while
            # we look and is at most 30 s behind. A stuck one, or one falling ever further behind
            # (slots not skipped), is not, within 20 s.
            first = None
            for _ in range(20):
                status = await handle.query("status", result_type=MonitorStatus)
                first = first or status.next_slot
                if status.next_slot is not None and (
                    status.next_slot > datetime.now(UTC)
                    or status.next_slot > first > datetime.now(UTC) - timedelta(seconds=30)
                ):
                    break
                await asyncio.sleep(1)
            else:
                problems.append(f"{target.config.target_id}: next slot {status.next_slot}")
            if description.status != WorkflowExecutionStatus.RUNNING or status.paused:
                problems.append(
                    f"{target.config.target_id}: {description.status} paused={status.paused}"
                )
        self.report.check(
            "every workflow running, its next slot ahead or advancing",
            not problems,
            f"{len(self.targets) - len(problems)}/{len(self.targets)} {problems[:2] or ''}",
        )

    async def check_leases(self) -> None:
        """Pause every target: once the last check finishes, no lease may be left held."""
        for target in self.targets:
            await self.client.get_workflow_handle(workflow_id(target.config.target_id)).signal(
                "pause"
            )
        held = -1
        for _ in range(90):
            row = await self.pool.fetchrow(LEASES)
            assert row is not None
            held, enabled = row
            if held == 0 and enabled == 0:
                break
            await asyncio.sleep(1)
        self.report.check("no lease left held", held == 0, f"{held} held once every target paused")

    async def count_executions(self) -> None:
        """Check attempts from every run's history (resets leave old runs), then replay each."""
        replayer = Replayer(workflows=[MonitorTarget], data_converter=DATA_CONVERTER)
        attempts = runs = failures = 0
        async for execution in self.client.list_workflows(f"WorkflowType = '{WORKFLOW_TYPE}'"):
            history = await self.client.get_workflow_handle(
                execution.id, run_id=execution.run_id
            ).fetch_history()
            checks = {
                e.event_id
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and e.activity_task_scheduled_event_attributes.activity_type.name == "check_slot"
            }
            attempts += sum(
                e.activity_task_started_event_attributes.attempt
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                and e.activity_task_started_event_attributes.scheduled_event_id in checks
            ) + sum(local_activity_type(e) == "check_slot" for e in history.events)
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            runs += 1
            failures += result.replay_failure is not None
        logs = "\n".join(path.read_text(errors="replace") for path in self.workers.logs())
        r = self.report
        r.figures["check executions (attempts in Temporal histories)"] = attempts
        r.figures["duplicates absorbed (slot already recorded)"] = logs.count(
            "slot already recorded"
        )
        r.figures["late commits fenced (another attempt recorded first)"] = logs.count(
            "commit fenced"
        ) + logs.count("lost the lease")
        r.figures["claims refused (lease held by another attempt)"] = logs.count(
            "leased by another attempt"
        )
        r.check(
            "every history replays", runs > 0 and failures == 0, f"{runs - failures}/{runs} runs"
        )


FAULTS: dict[str, Callable[[Chaos], Awaitable[None]]] = {
    "temporal restart": Chaos.restart_temporal,
    "postgres restart": Chaos.restart_postgres,
    "duplicate start": Chaos.duplicate_start,
    "reset": Chaos.reset,
    "reset to first task": Chaos.reset_to_first_task,
    "skewed clock (+-10 min)": Chaos.skewed_clock,
    "pause storm": Chaos.pause_storm,
    "hung page": Chaos.hung_page,
    "page leaks memory": Chaos.leaky_page,
    "apprise channel hangs": Chaos.apprise_hangs,
    "apprise channel refuses": Chaos.apprise_refuses,
    "cpu starved": Chaos.starve_cpu,
    "worker frozen": Chaos.freeze_worker,
    "temporal frozen": Chaos.freeze_temporal,
}
# A busy process that ends by itself after argv[1] seconds.
BURN = """import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
"""


@dataclass
class WindowJudgement:
    untried: list[str] = field(default_factory=list)
    """Kinds whose work came while armed and whose hook never took an arm: a broken hook."""
    reached: list[str] = field(default_factory=list)
    """Kinds whose hook took an arm but never hit: it put the arm back (its fault would
    have come too late: a browser kill after the render read its page; or found nothing to
    hit), or its process was killed by another window before it could tell."""
    no_chance: list[str] = field(default_factory=list)
    """Kinds no work reached while armed: a starved machine, not a broken hook."""


def judge_windows(
    kinds: list[str],
    injected_at: list[tuple[float, str]],
    disarmed_at: dict[str, float],
    chances: dict[str, list[float]],
    tries: Counter[str],
    misses: dict[str, Counter[str]],
    now: float,
) -> WindowJudgement:
    """Judge the armed window kinds never hit. A window is reached only by the work it waits
    on (a fetch, a commit, a send, a render), and on a starved machine that work may not come
    while it is armed. A hook that took an arm (`tries`, per kind) reached its window: a
    figure, with what came of each try (`misses`: per kind, the reasons its arms were put
    back). A kind never taken was armed from its first arming to its disarming (`now` if
    never disarmed); work in that span, up to WINDOW_MARGIN before its end, was a chance, and
    a kind with a chance it never took fails the run."""
    judged = WindowJudgement()
    for kind in kinds:
        work = WINDOW_CHANCES[kind]
        if tries[kind]:
            outcomes = Counter(misses.get(kind, Counter()))
            outcomes["its process killed first"] = tries[kind] - outcomes.total()
            told = ", ".join(f"{n} {what}" for what, n in outcomes.items() if n)
            judged.reached.append(f"{kind} (taken {tries[kind]}: {told})")
            continue
        armed = min(at for at, k in injected_at if k == kind)
        until = disarmed_at.get(kind, now) - WINDOW_MARGIN
        met = sum(armed <= at <= until for at in chances[work])
        if met:
            judged.untried.append(f"{kind} ({met} {work} while armed)")
        else:
            judged.no_chance.append(f"{kind} (no {work} while armed)")
    return judged


def burner(seconds: float) -> subprocess.Popen[bytes]:
    """One busy process for `seconds`, at nice -10 where allowed (root; else it competes at
    nice 0)."""
    process = subprocess.Popen([sys.executable, "-c", BURN, str(seconds)], stdin=subprocess.DEVNULL)
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, process.pid, -10)
    return process


# Slots of the fault window not yet final, and changes whose notices are not settled.
SETTLED = """
SELECT (SELECT count(*) FROM monitor_targets
         WHERE next_slot <= $1 OR NOT enabled)
     + (SELECT count(*) FROM source_checks c JOIN channels ch USING (target_id)
          LEFT JOIN deliveries d
            ON d.work_id = c.work_id AND d.channel_id = ch.channel_id AND d.notice = 'changed'
         WHERE c.status = 'changed' AND (d.status IS NULL OR d.status = 'pending'))
     + (SELECT count(*) FROM deliveries WHERE status = 'pending')
"""
DUPLICATE_SLOTS = """
SELECT count(*) FROM (SELECT 1 FROM source_checks WHERE kind = 'scheduled'
                       GROUP BY target_id, scheduled_for HAVING count(*) > 1) d
"""
# A slot's row still 'retrying' although its target's schedule is past it: no attempt of
# it will come (a workflow checks one slot at a time, and moves on only once it is final),
# so the ledger says it is being retried when it never will be (DESIGN.md invariant 8).
ABANDONED_RETRYING = """
SELECT c.work_id, c.attempt_count, left(c.error_message, 60) AS error
  FROM source_checks c JOIN monitor_targets t ON t.id = c.target_id
 WHERE c.kind = 'scheduled' AND c.status = 'retrying' AND c.scheduled_for < t.next_slot
 ORDER BY c.scheduled_for
"""
SCHEDULED_ROWS = """
SELECT target_id, scheduled_for, status FROM source_checks WHERE kind = 'scheduled'
"""
CHANGED_NOT_SENT = """
SELECT count(*) FROM source_checks c JOIN channels ch USING (target_id)
  LEFT JOIN deliveries d
    ON d.work_id = c.work_id AND d.channel_id = ch.channel_id AND d.notice = 'changed'
 WHERE c.status = 'changed' AND d.status IS DISTINCT FROM 'sent'
"""
# The database's clock when each skipped row was written is its checked_at.
FUTURE_SKIPS = """
SELECT work_id, checked_at, extract(epoch FROM scheduled_for - checked_at) AS ahead,
       error_message
  FROM source_checks WHERE status = 'skipped' AND scheduled_for > checked_at
 ORDER BY checked_at
"""
HEALTH_MAIL_IDS = """
SELECT '<' || substring(d.message_id FROM 5) || '@pricewatch>' AS message_id  -- msg_<id>
  FROM deliveries d JOIN channels c USING (target_id, channel_id)
 WHERE d.notice <> 'changed' AND c.kind = 'email'
"""
SENT_CHANGE_IDS = """
SELECT d.message_id FROM deliveries d JOIN channels c USING (target_id, channel_id)
 WHERE d.notice = 'changed' AND d.status = 'sent' AND c.kind = 'webhook'
"""
# Each target's first final row for a slot after the end of the run, latest first.
CAUGHT_UP = """
SELECT target_id, min(checked_at) AS at FROM source_checks
 WHERE scheduled_for > $1 AND status NOT IN ('skipped', 'retrying')
 GROUP BY target_id ORDER BY at DESC
"""
# The slot a faulted render was checking: the target's earliest slot due by then whose row
# was written after it (checks run in slot order; rows written before were not in flight).
# Not the last slot due: on a slow machine a render can begin after its next slot came due.
# A `skipped` row only where no other is: the render's run was reset, and the new run passed
# the slot (within a minute of the fault, so it is that slot, not one skipped much later).
FAULTED_SLOT = """
SELECT status, attempt_count, checked_at FROM source_checks
 WHERE target_id = $1 AND kind = 'scheduled' AND scheduled_for <= $2 AND checked_at >= $2
   AND (status <> 'skipped' OR scheduled_for > $2 - interval '1 minute')
 ORDER BY status = 'skipped', scheduled_for LIMIT 1
"""
# Each changed row of the targets named, and how many Apprise channels it was sent to.
APPRISE_CHANGES = """
SELECT c.work_id,
       (SELECT count(*) FROM deliveries d JOIN channels ch USING (target_id, channel_id)
         WHERE d.work_id = c.work_id AND d.target_id = c.target_id AND ch.kind = 'apprise'
           AND d.notice = 'changed' AND d.status = 'sent') AS sent
  FROM source_checks c
 WHERE c.status = 'changed' AND c.target_id = ANY($1::text[])
"""
APPRISE_CHANNEL_ROWS = """
SELECT target_id, disabled_reason FROM channels WHERE kind = 'apprise'
"""
LEASES = """
SELECT count(*) FILTER (WHERE lease_token IS NOT NULL), count(*) FILTER (WHERE enabled)
  FROM monitor_targets
"""


def fault_schedule(
    options: ChaosOptions, rng: random.Random, start: float
) -> list[tuple[float, str]]:
    """Seeded moments from 5 s to `fault_share` of the run, every kind at least once. Armed
    windows stay armed until reached, or a minute past the end of the run (render windows:
    two; see `Chaos.disarm`)."""
    window = (start + 5, start + options.fault_share * options.seconds)
    events = [
        (rng.uniform(*window), kind)
        for kind, rate in options.rates.items()
        for _ in range(max(1, round(rate * options.minutes)))
    ]
    return sorted(events)


async def run_chaos(options: ChaosOptions) -> Report:
    """Run once. The data folder (logs, databases, hits) is deleted on PASS, kept on FAIL."""
    report = Report(options)
    rng = random.Random(options.seed)
    folder = Path(tempfile.mkdtemp(prefix="pricewatch-chaos-"))
    for sub in ("faults/armed", "faults/taken"):
        (folder / sub).mkdir(parents=True)
    try:
        postgres = await asyncio.to_thread(Postgres, folder)
        temporal = TemporalServer(folder, free_port())
        try:
            await asyncio.to_thread(temporal.start)
            pool = await asyncpg.create_pool(postgres.url, min_size=0, max_size=4)
            try:
                async with pool.acquire() as conn:
                    await migrate(conn)
                await _run(options, report, rng, folder, pool, temporal, postgres)
            finally:
                await pool.close()
        finally:
            temporal.stop()
            postgres.stop()
    except (asyncio.CancelledError, KeyboardInterrupt):  # Ctrl-C: nothing to inspect
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if report.passed:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        report.figures["data kept for inspection"] = str(folder)
    return report


async def _run(
    options: ChaosOptions,
    report: Report,
    rng: random.Random,
    folder: Path,
    pool: asyncpg.Pool,
    temporal: TemporalServer,
    postgres: Postgres,
) -> None:
    began = time.time()
    pages = Pages(options.seed, change_every=3 * options.interval_seconds)
    pages.hang_hit_after = RENDER_BUDGET - 0.5
    receiver = Receiver(options.seed, pool)
    apprise = AppriseService()
    mailbox = Mailbox(free_port())
    mailbox.controller.start()
    async with (
        serve(
            [web.get("/page/{target}", pages.handle), web.get("/render/{target}", pages.render)]
        ) as page_url,  # fmt: skip
        serve([web.post("/hook/{channel}/{target}", receiver.handle)]) as hook_url,
        serve([web.post("/apprise/{channel}/{target}", apprise.handle)]) as apprise_url,
        _proxies(temporal, postgres, page_url, hook_url, mailbox) as proxies,
    ):
        client = await Client.connect(temporal.address, data_converter=DATA_CONVERTER)
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": proxies["temporal"].address,
            "PRICEWATCH_DATABASE_URL": through(postgres.url, proxies["postgres"]),
            "PRICEWATCH_SMTP_HOST": "127.0.0.1",
            "PRICEWATCH_SMTP_PORT": str(proxies["smtp"].port),
            "PRICEWATCH_TASK_QUEUE": TASK_QUEUE,
            "PRICEWATCH_MIN_INTERVAL": "1s",  # test-only: seconds, not the 15 min minimum
            # The run's pages and receivers (the Apprise guard holds its sends to it too).
            "PRICEWATCH_ALLOW_NETWORKS": "127.0.0.1/32",
            "PRICEWATCH_LOG_FORMAT": "json",
            "PRICEWATCH_SHUTDOWN_GRACE_SECONDS": "2",
            "PRICEWATCH_CHAOS_DIR": str(folder / "faults"),
        }
        workers = Workers(options.workers, env, folder, render=options.render_workers)
        targets = await _register(
            options, client, pool, f"http://{proxies['pages'].address}",
            f"http://{proxies['webhooks'].address}",
            apprise_url.replace("http://", "json://", 1),
        )  # fmt: skip
        chaos = Chaos(
            options, folder, client, pool, temporal, postgres, workers, pages, receiver,
            apprise, mailbox, proxies, targets=targets, report=report, random=rng,
        )  # fmt: skip
        background = [
            asyncio.create_task(workers.supervise()),
            asyncio.create_task(chaos.watch_hits()),
        ]
        try:
            start = chaos.started = time.time()
            for at, kind in fault_schedule(options, rng, start):
                await asyncio.sleep(max(0.0, at - time.time()))
                try:
                    await chaos.inject(kind)
                except RPCError as err:  # e.g. the server is restarting: counted, not fatal
                    report.figures[f"{kind}: refused by the server"] = str(err)[:60]
            end = start + options.seconds
            await asyncio.sleep(max(0.0, end - time.time()))
            await asyncio.gather(*chaos.network)  # each ends on its own, well before `end`
            pages.frozen_at, pages.faulty, receiver.faulty = time.time(), False, False
            marks = [time.time()]
            await chaos.disarm(deadline=end + 60)
            marks.append(time.time())
            settled = await chaos.settle(
                end, patience=max(180.0, min(options.seconds, RETRY_CHAIN))
            )
            marks.append(time.time())
            await chaos.verify(end, settled)
            marks.append(time.time())
            report.figures["seconds: set-up / faults / armed windows / settling / checks"] = (
                " / ".join(f"{b - a:.0f}" for a, b in itertools.pairwise([began, start, *marks]))
            )
        finally:
            for task in background + chaos.background + chaos.network:
                task.cancel()
            await asyncio.gather(*chaos.background, return_exceptions=True)  # frozen: thawed
            chaos.stop_burners()
            strays = await asyncio.to_thread(workers.stop)
            mailbox.controller.stop()
            report.check(
                "no Chromium left once the render workers stopped",
                not strays,
                f"{len(strays)} still running {CHROMIUM_GRACE:g} s after (killed): "
                f"{[s.cmdline[:60] for s in strays[:2]] or 'none'}",
            )


@contextlib.asynccontextmanager
async def _proxies(
    temporal: TemporalServer, postgres: Postgres, page_url: str, hook_url: str, mailbox: Mailbox
) -> AsyncIterator[dict[str, Proxy]]:
    """One proxy per dependency, between the workers and it (the run itself goes direct)."""

    def host_port(address: str) -> tuple[str, int]:
        host, _, port = address.removeprefix("http://").rpartition(":")
        return host, int(port)

    proxies = {
        "postgres": Proxy("postgres", postgres_upstream(postgres.url)),
        "temporal": Proxy("temporal", host_port(temporal.address)),
        "pages": Proxy("pages", host_port(page_url)),
        "webhooks": Proxy("webhooks", host_port(hook_url)),
        "smtp": Proxy("smtp", ("127.0.0.1", mailbox.port)),
    }
    for proxy in proxies.values():
        await proxy.start()
    try:
        yield proxies
    finally:
        for proxy in proxies.values():
            await proxy.stop()


async def _register(
    options: ChaosOptions,
    client: Client,
    pool: asyncpg.Pool,
    page_url: str,
    hook_url: str,
    apprise_url: str,
) -> list[Target]:
    """Targets due at staggered milliseconds (many due on one instant queue up), from a head
    start that grows with the fleet (registering one takes a few hundred ms on a busy
    machine). An Apprise channel goes the client's way (`client.channels`): its URL stored,
    its ref in the config the workflow gets."""
    head_start = REGISTER_HEAD_START + REGISTER_PER_TARGET * options.targets
    base = datetime.fromtimestamp(int(time.time() + head_start), UTC)
    spread = timedelta(seconds=options.interval_seconds) / options.targets
    targets = []
    for index in range(options.targets):
        target_id = f"chaos-{index:04d}"
        rendered = options.rendered_every > 0 and index % options.rendered_every == 0
        config = TargetConfig(
            target_id=target_id,
            url=f"{page_url}/{'render' if rendered else 'page'}/{target_id}",
            interval_seconds=options.interval_seconds,
            render=RenderSettings(steps=["wait p.ready"]) if rendered else None,
            timeout_seconds=RENDER_BUDGET if rendered else None,
            channels=[
                Channel(kind=ChannelKind.WEBHOOK, destination=f"{hook_url}/hook/{c}/{target_id}")
                for c in CHANNELS
            ]
            + [Channel(kind=ChannelKind.EMAIL, destination=f"{target_id}@chaos.test")]
            + [
                channels.apprise_channel(f"{apprise_url}/apprise/{c}/{target_id}")
                for c in APPRISE_CHANNELS
                if index % options.apprise_every == 0
            ],
        )
        config = await channels.with_refs(pool, config, keep=True)
        anchor = base + index * spread
        anchor = anchor.replace(microsecond=anchor.microsecond // 1000 * 1000)
        state = MonitorState(config=config, start_at=anchor, min_interval_seconds=1)
        await start_monitor(client, state, TASK_QUEUE)
        targets.append(Target(config, anchor))
    return targets
