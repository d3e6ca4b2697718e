"""The typed client: the CLI, scripts and tests start, steer and read targets through it.

Temporal is asked for what the workflow owns (its schedule, pause state, extra checks);
Postgres for what was recorded (checks, channels, deliveries). Both connections open on
first use, so a read of the history never needs Temporal, and bad input is refused before
anything is contacted.
"""

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

import asyncpg
from pydantic import ValidationError
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.envconfig import ClientConfig
from temporalio.service import RPCError, RPCStatusCode

from activities import health, services, store
from activities.notify import NotifyActivities, SmtpSettings
from activities.outages import postgres_address
from activities.retention import Expired, Retention, expired_summary, prune_pass
from client import channels, manifest, trying
from client.inputs import (
    BadInput,
    Unknown,
    moment,
    storable,
    texts,
    unreachable_database,
    valid_id,
    valid_tag,
)
from client.manifest import Located, ManifestError
from client.plans import Action, Added, Step, changes
from client.recent import Recent
from client.temporal import connect, start_monitor, workflow_id
from fetchers import Fetcher
from fetchers.guard import AddressPolicy, BlockedAddress, check_host, check_url
from fetchers.http import new_client
from pricewatch import placement
from pricewatch.calendar import (
    Calendar,
    describe,
)
from pricewatch.durations import format_duration
from pricewatch.health import (
    ANSWER_BOUND,
    DEFAULT_WINDOW,
    QUERY_BOUND,
    Health,
    Pollers,
    ScheduleHealth,
    ServiceHealth,
    parse_window,
    unwell,
    workers_health,
)
from pricewatch.models import (
    Channel,
    ChannelKind,
    CheckResult,
    CheckStatus,
    MonitorState,
    MonitorStatus,
    PruneProgress,
    RetryRequest,
    TargetConfig,
)
from pricewatch.names import WORKFLOW_TYPE, Query, Signal, Update, render_queue
from pricewatch.placement import Sites
from pricewatch.settings import Settings
from pricewatch.slots import spread_anchor
from pricewatch.urls import as_typed
from pricewatch.views import (
    ChangeView,
    ChannelView,
    DeliveryView,
    PricesRow,
    StatusView,
    TargetSort,
    TargetsPage,
    TargetState,
    TargetSummary,
    TryView,
)
from readers.normalise import Extraction, validate_extraction
from readers.price_reader import validate_price_settings
from readers.snapshots import decompress, unified_diff

REMOVE_WAIT = timedelta(seconds=120)
# A check-now or retry: a worker takes it within UPDATE_TAKEN_BOUND or none is there to;
# its answer waits CHECK_WAIT for the check to be final, no longer.
UPDATE_TAKEN_BOUND = timedelta(seconds=10)
CHECK_WAIT = timedelta(seconds=30)
# A worker that polled this recently is polling.
POLLED_LATELY = timedelta(minutes=2)
# A task queue's partitions (Temporal's default, `matching.numTaskqueueReadPartitions`): a
# worker polls any of them, and each lists only its own pollers, so health asks every one.
PARTITIONS = 4
DATABASE_AWAY = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


# Starts, updates and queries in flight at once when many targets are applied or read.
CONCURRENCY = 32


class StillChecking(Exception):
    """A check-now or retry a worker took and did not finish within CHECK_WAIT: it goes on
    in the workflow (a page failing transiently is retried for minutes), and `history`
    shows it once final (the API's 202)."""


class NotTaken(TimeoutError):
    """No worker took a check-now or retry within UPDATE_TAKEN_BOUND (a service fault)."""


class Pricewatch:
    """`async with Pricewatch() as pw: await pw.add(config)`. Settings come from the
    environment unless given; the Temporal client from Temporal's own convention unless
    given (`temporalio.envconfig`, with pricewatch's data converter)."""

    def __init__(
        self, settings: Settings | None = None, temporal: Client | None = None, pool_size: int = 1
    ) -> None:
        self.settings = settings or Settings()
        self._temporal = temporal
        self._pool: asyncpg.Pool | None = None
        self._pool_size = pool_size  # a server's: requests at once
        self._connecting = asyncio.Lock()  # each connection opened once, by one request
        self._pooling = asyncio.Lock()
        self._answered: dict[str, datetime] = {}  # service: when it last answered `health`
        self._schedule = health.SharedSchedule()
        self._recent = Recent()

    async def __aenter__(self) -> "Pricewatch":
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._schedule.close()
        if self._pool is not None:
            await self._pool.close()

    # Connections -------------------------------------------------------------------------

    async def temporal(self) -> Client:
        if self._temporal is not None:
            return self._temporal
        async with self._connecting:  # requests at once share one connection
            if self._temporal is None:
                self._temporal = await connect(tracing=self.settings.tracing)
        return self._temporal

    async def pool(self) -> asyncpg.Pool:
        if self._pool is not None:
            return self._pool
        async with self._pooling:  # Postgres answers while Temporal is away, and so on
            if self._pool is None:
                url = self.settings.resolved_database_url()
                try:
                    self._pool = await store.create_pool(
                        url,
                        max_size=self._pool_size,
                        statement_timeout=store.CLI_STATEMENT_TIMEOUT,
                    )
                except (OSError, TimeoutError) as err:
                    raise unreachable_database(url, err) from err
        return self._pool

    async def workflow(self, target_id: str) -> WorkflowHandle[Any, Any]:
        """The target's open workflow, or BadInput if there is none."""
        name = workflow_id(valid_id(target_id))  # refused before connecting
        handle = (await self.temporal()).get_workflow_handle(name)
        try:
            description = await handle.describe()
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise Unknown(f"unknown target {target_id!r}") from err
            raise
        if description.status is not WorkflowExecutionStatus.RUNNING:
            raise Unknown(f"unknown target {target_id!r} (its workflow is no longer running)")
        return handle

    async def _acted_on(self, target_id: str) -> WorkflowHandle[Any, Any]:
        """The workflow an action goes to: what this server last read of the target (its
        status, its charts: `client.recent`) is read anew after it."""
        self._recent.forget(target_id)
        return await self.workflow(target_id)

    def ui_link(self, target_id: str) -> str:
        namespace = self._temporal.namespace if self._temporal else "default"
        workflows = f"{self.settings.resolved_ui_url()}/namespaces/{namespace}/workflows"
        return f"{workflows}/{workflow_id(target_id)}"

    # Steering (Temporal) -------------------------------------------------------------------

    async def add(self, config: TargetConfig, start_at: datetime | None = None) -> Added:
        """Start watching a target; the same settings again change nothing, other settings
        reconfigure the running workflow. The grid's anchor is decided here, once: the
        first registration records it and every later start or reset adopts the recorded
        one."""
        if start_at is not None:
            start_at = moment("start_at", start_at)
        await self.validate(config)
        async with self._stored(config) as config:
            try:
                handle = await self._acted_on(config.target_id)
            except BadInput:
                config, anchor = self.placed(config, await self.site_slots())
                await self._start(config, start_at or anchor, paused=False)
                return Added.ADDED
            status = await handle.query(Query.STATUS, result_type=MonitorStatus)
            if config.calendar is not None:
                config = self.kept(status.config, config, await self.site_slots())
            if status.config == config:
                return Added.UNCHANGED
            await handle.execute_update(Update.RECONFIGURE, config, result_type=MonitorStatus)
            return Added.RECONFIGURED

    @contextlib.asynccontextmanager
    async def _stored(self, config: TargetConfig) -> AsyncIterator[TargetConfig]:
        """The config with its Apprise URLs stored (`channels.with_refs`) for what follows
        to start or reconfigure with; if that fails, the URLs stored for it are deleted again
        (unless a channel uses one by then): an add that failed leaves nothing behind. Not
        one transaction: the worker copies a stored URL into its channel's row at once."""
        pool = await self.pool()
        new = {c.url for c in config.channels if c.url is not None}
        new -= {url for url in new if await store.find_notify_url(pool, url) is not None}
        stored = await channels.with_refs(pool, config, keep=True)
        try:
            yield stored
        except Exception:
            written = zip(config.channels, stored.channels, strict=True)
            refs = [after.ref for before, after in written if before.url in new and after.ref]
            if refs:
                await store.forget_unused_notify_urls(pool, refs)
            raise

    async def validate(self, config: TargetConfig) -> None:
        """BadInput (or BlockedAddress) for what the workflow or the fetch would refuse."""
        for name, text in texts(config.model_dump()):
            storable(name, text)
        for channel in config.channels:
            storable("notify", channel.url or "")
        rules = Extraction(
            selector=config.selector, ignore=config.ignore, json_pointer=config.json_pointer
        )
        validate_extraction(rules)
        if config.price_mode is not None:
            validate_price_settings(config.price_mode)
        minimum = self.settings.min_interval
        if config.interval < minimum:
            what = "interval" if config.calendar is None else f"{config.schedule}: spacing"
            raise BadInput(
                f"{what} {format_duration(config.interval)} is below the minimum "
                f"{format_duration(minimum)} (PRICEWATCH_MIN_INTERVAL)"
            )
        policy = AddressPolicy.allowing(self.settings.resolved_allow_networks().split(","))
        webhooks = [c.destination for c in config.channels if c.kind is ChannelKind.WEBHOOK]
        for url in [config.url, *webhooks]:
            await check_url(policy, url)
        for channel in config.channels:
            if channel.kind is ChannelKind.APPRISE:
                await self._validate_service(policy, channel)

    async def _validate_service(self, policy: AddressPolicy, channel: Channel) -> None:
        """A stored ref must be stored here; a self-hosted service's host must be allowed
        (if it resolves now: every send checks again, on the address it connects to)."""
        if channel.url is None:
            try:
                await channels.resolved(await self.pool(), channel, keep=False)
            except ValueError as err:
                raise BadInput(str(err)) from err
            return
        service = services.parse(channel.url)
        if service.host is not None:
            with contextlib.suppress(OSError):  # not resolvable here: the send decides
                await check_host(policy, service.host, 443)

    async def try_page(
        self, config: TargetConfig, fetcher: Fetcher | None = None, screenshot: bool = False
    ) -> tuple[TryView, bytes | None]:
        """`config` validated, then one check's reading of its page (client.trying): nothing is
        written and neither Temporal nor Postgres is asked."""
        await self.validate(config)
        policy = AddressPolicy.allowing(self.settings.resolved_allow_networks().split(","))
        return await trying.try_page(policy, config, fetcher, screenshot)

    async def site_slots(self) -> Sites:
        """Where the targets of each site fall due, by grid (pricewatch.placement)."""
        rows = await store.list_targets(await self.pool(), trend=0)
        return placement.sites_of(rows, self.settings.site_gap)

    def placed(self, config: TargetConfig, sites: Sites) -> tuple[TargetConfig, datetime]:
        return placement.placed(config, sites, self.settings.site_gap, datetime.now(UTC))

    def kept(self, had: TargetConfig, config: TargetConfig, sites: Sites) -> TargetConfig:
        return placement.kept(had, config, sites, self.settings.site_gap, datetime.now(UTC))

    async def _start(self, config: TargetConfig, start_at: datetime | None, paused: bool) -> None:
        anchor = start_at or spread_anchor(config.target_id, datetime.now(UTC))
        minimum = int(self.settings.min_interval.total_seconds())
        state = MonitorState(
            config=config, start_at=anchor, paused=paused, min_interval_seconds=minimum
        )
        await start_monitor(await self.temporal(), state, self.settings.task_queue)

    # Targets as a file ---------------------------------------------------------------------

    async def running(self) -> set[str]:
        """The targets whose workflow runs on this deployment's task queue (Temporal's
        visibility: a second or so behind a start)."""
        query = (
            f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
            f"AND TaskQueue = '{self.settings.task_queue}'"
        )
        temporal = await self.temporal()
        return {
            execution.id.removeprefix(workflow_id(""))
            async for execution in temporal.list_workflows(query)
        }

    async def current(self) -> dict[str, tuple[TargetConfig, bool]]:
        """Each running target's config and whether it is paused: the mirror's, or its
        workflow's where the mirror has none yet."""
        running = await self.running()
        mirrored = await store.target_configs(await self.pool())
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(target_id: str) -> tuple[TargetConfig, bool]:
            config, enabled = mirrored.get(target_id, (None, True))
            if config is not None:
                return config, not enabled
            async with gate:
                status = await self.status(target_id)
            return status.config, status.paused

        ids = sorted(running)
        found = await asyncio.gather(*(one(target_id) for target_id in ids))
        return dict(zip(ids, found, strict=True))

    async def plan(self, entries: list[Located], prune: bool) -> list[Step]:
        """What `apply` would do, target by target, without doing it. Every entry is
        validated first (URLs resolved CONCURRENCY at a time): the first bad one, in file
        order, is a ManifestError naming its line."""
        gate = asyncio.Semaphore(CONCURRENCY)

        async def problem(located: Located) -> ManifestError | None:
            async with gate:
                try:
                    await self.validate(located.config)
                except (BadInput, BlockedAddress, ValueError) as err:
                    return located.error(str(err).splitlines()[0])
            return None

        problems = await asyncio.gather(*(problem(located) for located in entries))
        if first := next((p for p in problems if p is not None), None):
            raise first
        current = await self.current()
        taken = await self.site_slots()
        steps = []
        for located in entries:
            # An Apprise URL already stored compares by its ref; a new one is a change.
            config = await channels.with_refs(await self.pool(), located.config, keep=False)
            paused = located.entry.paused
            if config.target_id not in current:
                config, anchor = self.placed(config, taken)
                located = dataclasses.replace(located, config=config)
                start_at = located.entry.start_at or anchor
                steps.append(Step(Action.ADD, config.target_id, located, start_at=start_at))
                continue
            had, was_paused = current[config.target_id]
            config = self.kept(had, config, taken)
            located = dataclasses.replace(located, config=config)
            changed = changes(had, config)
            if changed:
                steps.append(Step(Action.RECONFIGURE, config.target_id, located, changed))
            if paused != was_paused:
                action = Action.PAUSE if paused else Action.RESUME
                steps.append(Step(action, config.target_id, located))
            if not changed and paused == was_paused:
                steps.append(Step(Action.UNCHANGED, config.target_id, located))
        if prune:
            wanted = {located.config.target_id for located in entries}
            steps += [Step(Action.REMOVE, t) for t in sorted(set(current) - wanted)]
        return steps

    async def apply(self, steps: list[Step], done: Callable[[Step], None]) -> None:
        """Carry the plan out, CONCURRENCY targets at a time; `done` after each step. New
        `--every` targets are spread again, from now (the plan is minutes old); calendar
        offsets do not age, so the plan's stand (placed with every other step of it)."""
        gate = asyncio.Semaphore(CONCURRENCY)
        taken = await self.site_slots()
        steps = [
            self._placed_again(step, taken)
            if step.action is Action.ADD
            and step.located
            and step.located.config.calendar is None
            and not step.located.entry.start_at
            else step
            for step in steps
        ]

        async def one(step: Step) -> None:
            async with gate:
                await self._apply(step)
            done(step)

        await asyncio.gather(*(one(step) for step in steps))

    def _placed_again(self, step: Step, sites: Sites) -> Step:
        assert step.located is not None
        config, anchor = self.placed(step.located.config, sites)
        located = dataclasses.replace(step.located, config=config)
        return dataclasses.replace(step, located=located, start_at=anchor)

    async def _apply(self, step: Step) -> None:
        located = step.located
        if step.action is Action.ADD and located is not None:
            async with self._stored(located.config) as config:
                await self._start(config, step.start_at, located.entry.paused)
        elif step.action is Action.RECONFIGURE and located is not None:
            async with self._stored(located.config) as config:
                handle = await self._acted_on(step.target_id)
                await handle.execute_update(Update.RECONFIGURE, config, result_type=MonitorStatus)
        elif step.action is Action.PAUSE:
            await self.pause(step.target_id)
        elif step.action is Action.RESUME:
            await self.resume(step.target_id)
        elif step.action is Action.REMOVE:
            await self.remove(step.target_id)

    async def status(self, target_id: str) -> MonitorStatus:
        handle = await self.workflow(target_id)  # describe first: a frozen Temporal is said
        status: MonitorStatus = await handle.query(Query.STATUS, result_type=MonitorStatus)
        return status

    async def status_view(self, target_id: str) -> StatusView:
        """`status`: the workflow's view, the slots being retried, its Temporal UI link;
        reused for a second (`client.recent`)."""

        async def read() -> StatusView:
            status = await self.status(target_id)
            retrying = await self.retrying(target_id)
            return StatusView(status=status, retrying=retrying, history_url=self.ui_link(target_id))

        return await self._recent.get(target_id, "status", read)

    async def put(self, entry: manifest.Entry, where: str) -> list[Step]:
        """One targets-file entry made true, as `apply` does for it (never a removal): what
        was done, or `unchanged`. `where` names the entry in errors (a form's: nothing)."""
        try:
            # Off the loop: a channel's template is tried on the largest notice (up to 1 s
            # in a child process), and a server's loop answers other requests meanwhile.
            located = Located(entry, await asyncio.to_thread(entry.config), where)
        except ValidationError as err:  # `url: ...`, as `apply` names the field
            raise BadInput(manifest.field_error(err)) from err
        except ValueError as err:
            raise BadInput(str(err).splitlines()[0]) from err
        steps = await self.plan([located], prune=False)
        todo = [step for step in steps if step.action is not Action.UNCHANGED]
        await self.apply(todo, lambda _: None)
        return steps

    async def pause(self, target_id: str) -> None:
        await (await self._acted_on(target_id)).signal(Signal.PAUSE)

    async def resume(self, target_id: str) -> None:
        await (await self._acted_on(target_id)).signal(Signal.RESUME)

    async def check_now(self, target_id: str) -> CheckResult:
        handle = await self._acted_on(target_id)
        what = f"the check of {target_id}"
        return await self._checked(handle, Update.CHECK_NOW, None, what, target_id)

    async def retry(self, work_id: str) -> CheckResult:
        """Re-run one failed slot through its workflow, on its own row."""
        pool = await self.pool()
        stored = await store.stored_check(pool, storable("work_id", work_id))
        target_id = await store.check_target(pool, work_id)
        if stored is None or target_id is None:
            raise Unknown(f"unknown work id {work_id!r}")
        handle = await self._acted_on(target_id)
        request = RetryRequest(slot=stored.slot, kind=stored.kind)
        what = f"the retry of {work_id}"
        return await self._checked(handle, Update.RETRY_SLOT, request, what, target_id)

    async def _checked(
        self,
        handle: WorkflowHandle[Any, Any],
        update: Update,
        arg: object,
        what: str,
        target_id: str,
    ) -> CheckResult:
        """An update that runs a check, its result within the bounds: NotTaken when no
        worker took it, StillChecking when one did and the check is not final in time."""
        args = [] if arg is None else [arg]
        try:
            taken = await handle.start_update(
                update, args=args, wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                result_type=CheckResult, rpc_timeout=UPDATE_TAKEN_BOUND,
            )  # fmt: skip
        except WorkflowUpdateRPCTimeoutOrCancelledError as err:
            raise await self._not_taken(what) from err
        # asyncio.wait, not a timeout: the SDK turns the cancelled poll into its own error.
        polling = asyncio.create_task(taken.result())
        polling.add_done_callback(lambda task: task.cancelled() or task.exception())
        try:
            await asyncio.wait([polling], timeout=CHECK_WAIT.total_seconds())
        finally:
            polling.cancel()  # the check goes on in the workflow: only this wait ends
        if polling.done() and not polling.cancelled():
            result: CheckResult = polling.result()
            return result
        raise StillChecking(
            f"{what} is not final after {format_duration(CHECK_WAIT)}: it goes on (a page "
            f"that fails for a while is retried), and `pricewatch history {target_id}` "
            "shows it once it is"
        )

    async def _not_taken(self, what: str) -> Exception:
        """Why no worker took an update in time, as Temporal tells it: none polls the task
        queue, or those that poll are busy; or Temporal itself did not answer."""
        pollers, temporal = await self._temporal_health()
        if pollers is None:
            return ConnectionError(temporal.error or "cannot reach Temporal")
        queue = self.settings.task_queue
        since = datetime.now(UTC) - POLLED_LATELY
        polling = [
            who for (who, polled), (kinds, last) in pollers.items()
            if polled == queue and "workflow" in kinds and last >= since
        ]  # fmt: skip
        waited = format_duration(UPDATE_TAKEN_BOUND)
        if not polling:
            why = f"no worker is polling task queue {queue!r}: start one (`pricewatch worker`)"
        else:
            why = f"{len(polling)} worker(s) poll task queue {queue!r} but none answered"
        return NotTaken(f"{what} was not taken by a worker in {waited}: {why}")

    async def remove(self, target_id: str, wait: timedelta = REMOVE_WAIT) -> None:
        """Stop watching and delete the target's rows; waits for the workflow to finish."""
        handle = await self._acted_on(target_id)
        await handle.signal(Signal.REMOVE)
        try:
            await asyncio.wait_for(handle.result(), timeout=wait.total_seconds())
        except TimeoutError as err:
            raise TimeoutError(
                f"{target_id} will be removed when a worker picks it up (none did in "
                f"{format_duration(wait)})"
            ) from err

    # Reading the record (Postgres) ---------------------------------------------------------

    async def targets(
        self,
        search: str | None = None,
        state: TargetState | None = None,
        limit: int | None = None,
        offset: int = 0,
        tag: str | None = None,
        sort: TargetSort = "id",
        descending: bool = False,
    ) -> TargetsPage:
        """Targets in `sort`'s order (id breaks ties): those whose id or URL holds `search`,
        in `state`, tagged `tag`; `limit` of them from `offset` on, and how many match."""
        if search:
            storable("search", search)
        if tag is not None:
            valid_tag(tag)
        search = search or None
        rows = await store.list_targets(
            await self.pool(), search=search, state=state, tag=tag, limit=limit, offset=offset,
            sort=sort, descending=descending,
        )  # fmt: skip
        # as_typed: a row mirrored before 1.2 holds the URL percent-encoded.
        targets = [
            TargetSummary(
                **{k: v for k, v in row.items() if k not in ("calendar", "url", "total")},
                url=as_typed(str(row["url"])),
                schedule=schedule(row),
            )
            for row in rows
        ]
        if not rows and offset:  # past the end: the count is still wanted
            rows = await store.list_targets(await self.pool(), 0, search, state, 1, tag=tag)
        total = int(str(rows[0]["total"])) if rows else 0
        return TargetsPage(targets=targets, total=total)

    async def known(self, target_id: str) -> None:
        """BadInput (`unknown target`, as every command words it) unless the target exists:
        asked when a read of the record came back empty. Postgres first; a target added but
        not yet registered by a worker is known to Temporal only; or its page just read its
        workflow (`status_view`)."""
        if self._recent.knows(target_id) or await store.target_exists(await self.pool(), target_id):
            return
        try:
            await self.workflow(target_id)
        except (ConnectionError, RPCError):  # Temporal away: the record is all there is
            raise Unknown(f"unknown target {target_id!r}") from None

    async def history(
        self,
        target_id: str,
        limit: int,
        before: datetime | None = None,
        changes_only: bool = False,
    ) -> list[CheckResult]:
        """Newest slot first; `before`: the slots before that one (the next page);
        `changes_only`: the slots that recorded a change or failed, nothing else."""
        if before is not None:
            before = moment("before", before)
        pool = await self.pool()
        results = await store.check_history(pool, valid_id(target_id), limit, before, changes_only)
        if not results:
            await self.known(target_id)
        return results

    async def failures(self, target_id: str | None, limit: int) -> list[CheckResult]:
        """Dead letters and slots still being retried, newest first."""
        if target_id is not None:
            valid_id(target_id)
        results = await store.failed_checks(await self.pool(), target_id, limit)
        if not results and target_id is not None:
            await self.known(target_id)
        return results

    async def retrying(self, target_id: str) -> list[CheckResult]:
        """Its slots being retried: asked once its workflow answered, so no `known`."""
        unsettled = await store.failed_checks(await self.pool(), target_id, 10)
        return [r for r in unsettled if r.status is CheckStatus.RETRYING]

    async def channels(self, target_id: str) -> list[ChannelView]:
        rows = await store.target_channels(await self.pool(), valid_id(target_id))
        if not rows:
            await self.known(target_id)
        return [ChannelView(**row) for row in rows]

    async def notify_test(
        self, target_id: str, channel_id: str | None = None
    ) -> list[tuple[ChannelView, str | None]]:
        """A test notice to each channel (or one) now: each with None if it was accepted,
        else the error. Writes nothing: no change, no delivery row."""
        rows = await store.channels_to_test(await self.pool(), valid_id(target_id))
        if not rows:
            await self.known(target_id)
            raise BadInput(f"no channels for {target_id!r}: add them with --notify, --webhook "
                           "or --email")  # fmt: skip
        if channel_id is not None:
            rows = [row for row in rows if row["channel_id"] == channel_id]
            if not rows:
                raise BadInput(f"{target_id!r} has no channel {channel_id!r} (see: channels)")
        policy = AddressPolicy.allowing(self.settings.resolved_allow_networks().split(","))
        async with new_client(policy) as http:
            sender = NotifyActivities(
                await self.pool(), http, SmtpSettings.of(self.settings), policy
            )
            errors = await asyncio.gather(*(sender.send_test(target_id, row) for row in rows))
        views = [ChannelView(**{k: row[k] for k in ChannelView.model_fields}) for row in rows]
        return list(zip(views, errors, strict=True))

    async def deliveries(self, target_id: str, limit: int) -> list[DeliveryView]:
        rows = await store.target_deliveries(await self.pool(), valid_id(target_id), limit)
        if not rows:
            await self.known(target_id)
        return [DeliveryView(**row) for row in rows]

    async def prices(self, target_id: str, since: datetime, limit: int) -> list[PricesRow]:
        """The prices each check read (price mode), oldest first."""
        since = moment("since", since)
        rows = await store.price_history(await self.pool(), valid_id(target_id), since, limit)
        if not rows:
            await self.known(target_id)
            raise BadInput(
                f"no prices recorded for {target_id!r} since {since:%Y-%m-%d %H:%M} UTC "
                "(price mode is on with --prices or --price-selector)"
            )
        return [PricesRow(**row) for row in rows]

    async def price_lines(self, target_id: str, limit: int) -> list[store.PriceLine]:
        """The target page's charts: each named price over the newest `limit` price slots;
        reused for a second (`client.recent`: they are most of the page's Postgres time)."""
        pool, valid = await self.pool(), valid_id(target_id)
        read = functools.partial(store.price_lines, pool, limit, target_id=valid)
        return await self._recent.get(target_id, ("price_lines", limit), read)

    async def group_lines(self, tag: str, limit: int, targets: int) -> list[store.PriceLine]:
        """A group's chart: each named price of the first `targets` price-mode targets
        tagged `tag` (by id), side by side."""
        return await store.price_lines(
            await self.pool(), limit, tag=valid_tag(tag), targets=targets
        )

    async def group_changes(self, tag: str, limit: int) -> list[dict[str, object]]:
        """The newest changes of the targets tagged `tag`, newest first."""
        return await store.group_changes(await self.pool(), valid_tag(tag), limit)

    async def screenshot(self, work_id: str) -> bytes:
        """A rendered check's screenshot (PNG): kept for a new state (the baseline, a change)
        and pruned with its snapshot."""
        found, shot = await store.screenshot(await self.pool(), storable("work_id", work_id))
        if not found:
            raise Unknown(f"no recorded check {work_id!r}")
        if shot is None:
            raise BadInput(
                f"{work_id} has no screenshot: only a rendered page's baseline and changes "
                "keep one, until pruned with their snapshot"
            )
        return bytes(shot)

    async def change(self, target_id: str, work_id: str | None = None) -> ChangeView:
        """A change (default: the newest) against the snapshot before it."""
        if work_id is not None:
            storable("work_id", work_id)
        row = await store.snapshots_for_diff(await self.pool(), valid_id(target_id), work_id)
        if row is None:
            await self.known(target_id)
            if work_id:  # a check asked for by name and not found: the API's 404
                raise Unknown(f"no recorded change {work_id!r} with a snapshot for {target_id!r}")
            raise BadInput(f"no recorded change with a snapshot for {target_id!r}")
        if row["previous_snapshot"] is None:
            raise BadInput(f"no snapshot before {row['work_id']} (pruned by the retention setting)")
        diff = unified_diff(
            decompress(row["previous_snapshot"]),
            decompress(row["snapshot"]),
            row["previous_work_id"],
            row["work_id"],
        )
        return ChangeView(
            work_id=row["work_id"], previous_work_id=row["previous_work_id"], diff=diff
        )

    async def health(self, window: str = DEFAULT_WINDOW) -> Health:
        """Schedule health over the window (`1h`, `1d`, `7d`, up to a week) ending at
        Postgres's now(), the workers polling the deployment's task queues, and whether
        Temporal and Postgres answered: each asked with ANSWER_BOUND, so one that does not
        answer is said as such beside the other's part."""
        try:
            span = parse_window(window)
        except ValueError as err:
            raise BadInput(str(err)) from None
        (schedule, beats, postgres), (pollers, temporal) = await asyncio.gather(
            self._postgres_health(span), self._temporal_health()
        )
        now = schedule.at if schedule else datetime.now(UTC)
        workers = workers_health(pollers, beats, now)
        return Health(
            healthy=not (problems := unwell(
                schedule, workers, self.settings.task_queue, [postgres, temporal]
            )),
            problems=problems, schedule=schedule, workers=workers, services=[postgres, temporal],
        )  # fmt: skip

    async def _postgres_health(
        self, window: timedelta
    ) -> tuple[ScheduleHealth | None, list[asyncpg.Record], ServiceHealth]:
        """Postgres reached within ANSWER_BOUND, then the window's query within
        QUERY_BOUND: a week of a big deployment's rows takes seconds, which is not an
        outage."""
        address = postgres_address(self.settings.resolved_database_url())
        try:
            async with asyncio.timeout(ANSWER_BOUND.total_seconds()):
                pool = await self.pool()
                beats = await health.worker_beats(pool)
        except (*DATABASE_AWAY, ConnectionError) as err:
            said = _unanswered(err, "Postgres", address)
            return None, [], self._service("Postgres", address, said)
        answered = self._service("Postgres", address, None)
        try:
            async with asyncio.timeout(QUERY_BOUND.total_seconds()):
                schedule = await self._schedule.read(pool, window)
        except (*DATABASE_AWAY, ConnectionError) as err:
            late = isinstance(err, TimeoutError)
            why = f"no answer within {QUERY_BOUND.seconds} s" if late else err
            said = f"Postgres at {address} answers, but the window's slots did not come: {why}"
            return None, beats, answered.model_copy(update={"error": said})
        return schedule, beats, answered

    async def _temporal_health(self) -> tuple[Pollers | None, ServiceHealth]:
        """The pollers of the deployment's task queue and its render queue, each for
        workflow and activity tasks on each partition, as Temporal lists them; None if it
        did not answer."""
        address = ClientConfig.load_client_connect_config().get("target_host", "localhost:7233")
        queues = [self.settings.task_queue, render_queue(self.settings.task_queue)]
        kinds = {"workflow": TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                 "activity": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY}  # fmt: skip
        try:
            async with asyncio.timeout(ANSWER_BOUND.total_seconds()):
                client = await self.temporal()
                address = client.service_client.config.target_host
                asked = [(q, kind, n) for q in queues for kind in kinds for n in range(PARTITIONS)]
                answers = await asyncio.gather(*(
                    client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
                        namespace=client.namespace,
                        task_queue=TaskQueue(name=f"/_sys/{queue}/{n}" if n else queue),
                        task_queue_type=kinds[kind],
                    ), timeout=ANSWER_BOUND)
                    for queue, kind, n in asked
                ))  # fmt: skip
        except (ConnectionError, RPCError, TimeoutError) as err:
            said = _unanswered(err, "Temporal", address)
            return None, self._service("Temporal", address, said)
        pollers: Pollers = {}
        for (queue, kind, _), answer in zip(asked, answers, strict=True):
            for poller in answer.pollers:
                kinds_seen, last = pollers.get((poller.identity, queue), ([], None))
                at = poller.last_access_time.ToDatetime(UTC)
                seen = kinds_seen if kind in kinds_seen else [*kinds_seen, kind]
                pollers[poller.identity, queue] = seen, max(at, last or at)
        return pollers, self._service("Temporal", address, None)

    def _service(self, name: str, address: str, error: str | None) -> ServiceHealth:
        """What this process knows of a service: whether it answered now, and when it
        last did (this process's clock)."""
        if error is None:
            self._answered[name] = datetime.now(UTC)
        return ServiceHealth(
            name=name, address=address, reachable=error is None,
            answered_at=self._answered.get(name), error=error,
        )  # fmt: skip

    def retention(self) -> Retention:
        return Retention(self.settings.check_retention, self.settings.change_retention)

    async def expired(self) -> list[Expired]:
        """What retention would delete now, by status."""
        return await expired_summary(await self.pool(), self.retention())

    async def prune(self) -> int:
        """One retention pass now, as the hourly Schedule runs it; the rows deleted."""
        pool = await self.pool()
        done = await prune_pass(pool, self.retention(), PruneProgress())
        return done.deleted


def _unanswered(err: BaseException, name: str, address: str) -> str:
    """One line for a service that did not answer a health call in time, or failed it."""
    if isinstance(err, TimeoutError):
        return f"cannot reach {name} at {address}: no answer within {ANSWER_BOUND.seconds} s"
    said = str(err).splitlines()[0] if str(err) else type(err).__name__
    return said if said.startswith("cannot reach") else f"{name} at {address}: {said}"


def schedule(row: dict[str, Any]) -> str:
    """A `list` row's schedule as written: its calendar (the mirrored config's), else every
    interval."""
    if row["calendar"]:
        return describe(Calendar.model_validate(row["calendar"]))
    return f"every {format_duration(timedelta(seconds=row['interval_seconds']))}"
