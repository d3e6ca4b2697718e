"""The typed client: the CLI, scripts and tests start, steer and read targets through it.

Temporal is asked for what the workflow owns (its schedule, pause state, extra checks);
Postgres for what was recorded (checks, channels, deliveries). Both connections open on
first use, so a read of the history never needs Temporal, and bad input is refused before
anything is contacted.
"""

import asyncio
import contextlib
import functools
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

import asyncpg
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode

from activities import health, store
from activities.retention import Expired, Retention, expired_summary, prune_pass
from client import channels
from client.health import checkup, temporal_pollers
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
from client.recent import Recent
from client.temporal import connect, workflow_id
from fetchers import Fetcher
from fetchers.guard import AddressPolicy, check_host, check_url
from pricewatch.calendar import (
    Calendar,
    describe,
)
from pricewatch.durations import format_duration
from pricewatch.health import (
    DEFAULT_WINDOW,
    Health,
)
from pricewatch.models import (
    Channel,
    ChannelKind,
    CheckResult,
    CheckStatus,
    MonitorStatus,
    PruneProgress,
    RetryRequest,
    TargetConfig,
)
from pricewatch.names import Query, Signal, Update
from pricewatch.settings import Settings
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
from readers.snapshots import decompress, unified_diff

REMOVE_WAIT = timedelta(seconds=120)
# A check-now or retry: a worker takes it within UPDATE_TAKEN_BOUND or none is there to;
# its answer waits CHECK_WAIT for the check to be final, no longer.
UPDATE_TAKEN_BOUND = timedelta(seconds=10)
CHECK_WAIT = timedelta(seconds=30)
# A worker that polled this recently is polling.
POLLED_LATELY = timedelta(minutes=2)


class StillChecking(Exception):
    """A check-now or retry a worker took and did not finish within CHECK_WAIT: it goes on
    in the workflow (a page failing transiently is retried for minutes), and `history`
    shows it once final (the API's 202)."""


class NotTaken(TimeoutError):
    """No worker took a check-now or retry within UPDATE_TAKEN_BOUND (a service fault)."""


class Pricewatch:
    """`async with Pricewatch() as pw: await pw.pause(target_id)` (a target comes in
    through `client.plans`). Settings come from the
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
        self.answered: dict[str, datetime] = {}  # service: when it last answered `health`
        self.shared_schedule = health.SharedSchedule()
        self._recent = Recent()

    async def __aenter__(self) -> "Pricewatch":
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shared_schedule.close()
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

    async def acted_on(self, target_id: str) -> WorkflowHandle[Any, Any]:
        """The workflow an action goes to: what this server last read of the target (its
        status, its charts: `client.recent`) is read anew after it."""
        self._recent.forget(target_id)
        return await self.workflow(target_id)

    def ui_link(self, target_id: str) -> str:
        namespace = self._temporal.namespace if self._temporal else "default"
        workflows = f"{self.settings.resolved_ui_url()}/namespaces/{namespace}/workflows"
        return f"{workflows}/{workflow_id(target_id)}"

    # Steering (Temporal) -------------------------------------------------------------------

    async def validate(self, config: TargetConfig) -> None:
        """BadInput (or BlockedAddress) for what the workflow or the fetch would refuse."""
        # The readers (selectolax, price-parser) load when a config is checked, not before.
        from readers.normalise import validate_extraction
        from readers.price_reader import validate_price_settings

        for name, text in texts(config.model_dump()):
            storable(name, text)
        for channel in config.channels:
            storable("notify", channel.url or "")
        validate_extraction(config.extraction)
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
        from activities import services  # Apprise: only for an Apprise channel

        service = services.parse(channel.url)
        if service.host is not None:
            with contextlib.suppress(OSError):  # not resolvable here: the send decides
                await check_host(policy, service.host, 443)

    async def try_page(
        self, config: TargetConfig, fetcher: Fetcher | None = None, screenshot: bool = False
    ) -> tuple[TryView, bytes | None]:
        """`config` validated, then one check's reading of its page (client.trying): nothing is
        written and neither Temporal nor Postgres is asked."""
        from client import trying  # the fetch and the readers: only `try` needs them

        await self.validate(config)
        policy = AddressPolicy.allowing(self.settings.resolved_allow_networks().split(","))
        return await trying.try_page(policy, config, fetcher, screenshot)

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

    async def pause(self, target_id: str) -> None:
        await (await self.acted_on(target_id)).signal(Signal.PAUSE)

    async def resume(self, target_id: str) -> None:
        await (await self.acted_on(target_id)).signal(Signal.RESUME)

    async def check_now(self, target_id: str) -> CheckResult:
        handle = await self.acted_on(target_id)
        what = f"the check of {target_id}"
        return await self._checked(handle, Update.CHECK_NOW, None, what, target_id)

    async def retry(self, work_id: str) -> CheckResult:
        """Re-run one failed slot through its workflow, on its own row."""
        pool = await self.pool()
        stored = await store.stored_check(pool, storable("work_id", work_id))
        target_id = await store.check_target(pool, work_id)
        if stored is None or target_id is None:
            raise Unknown(f"unknown work id {work_id!r}")
        handle = await self.acted_on(target_id)
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
        pollers, temporal = await temporal_pollers(self)
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
        handle = await self.acted_on(target_id)
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
        from activities.notify import NotifyActivities, SmtpSettings  # mail, Apprise, httpx
        from fetchers.http import new_client

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
        """Schedule health, workers and services (client.health)."""
        return await checkup(self, window)

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


def schedule(row: dict[str, Any]) -> str:
    """A `list` row's schedule as written: its calendar (the mirrored config's), else every
    interval."""
    if row["calendar"]:
        return describe(Calendar.model_validate(row["calendar"]))
    return f"every {format_duration(timedelta(seconds=row['interval_seconds']))}"
