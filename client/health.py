"""`health`: schedule health over a window, the workers polling, and whether Temporal and
Postgres answered, each asked within a bound so that one away is said beside the other's part
(pricewatch.health decides what is unwell)."""

import asyncio
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import asyncpg
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.envconfig import ClientConfig
from temporalio.service import RPCError

from activities import health
from client.inputs import BadInput
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
from pricewatch.names import render_queue

if TYPE_CHECKING:
    from client.pricewatch import Pricewatch

# A task queue's partitions (Temporal's default, `matching.numTaskqueueReadPartitions`): a
# worker polls any of them, and each lists only its own pollers, so health asks every one.
PARTITIONS = 4
DATABASE_AWAY = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


async def checkup(pw: "Pricewatch", window: str = DEFAULT_WINDOW) -> Health:
    """Schedule health over the window (`1h`, `1d`, `7d`, up to a week) ending at
    Postgres's now(), the workers polling the deployment's task queues, and whether
    Temporal and Postgres answered: each asked with ANSWER_BOUND, so one that does not
    answer is said as such beside the other's part."""
    try:
        span = parse_window(window)
    except ValueError as err:
        raise BadInput(str(err)) from None
    (schedule, beats, postgres), (pollers, temporal) = await asyncio.gather(
        _postgres(pw, span), temporal_pollers(pw)
    )
    now = schedule.at if schedule else datetime.now(UTC)
    workers = workers_health(pollers, beats, now)
    return Health(
        healthy=not (problems := unwell(
            schedule, workers, pw.settings.task_queue, [postgres, temporal]
        )),
        problems=problems, schedule=schedule, workers=workers, services=[postgres, temporal],
    )  # fmt: skip


async def _postgres(
    pw: "Pricewatch", window: timedelta
) -> tuple[ScheduleHealth | None, list[asyncpg.Record], ServiceHealth]:
    """Postgres reached within ANSWER_BOUND, then the window's query within
    QUERY_BOUND: a week of a big deployment's rows takes seconds, which is not an
    outage."""
    from activities.outages import postgres_address  # it loads temporalio.worker

    address = postgres_address(pw.settings.resolved_database_url())
    try:
        async with asyncio.timeout(ANSWER_BOUND.total_seconds()):
            pool = await pw.pool()
            beats = await health.worker_beats(pool)
    except (*DATABASE_AWAY, ConnectionError) as err:
        said = _unanswered(err, "Postgres", address)
        return None, [], _service(pw, "Postgres", address, said)
    answered = _service(pw, "Postgres", address, None)
    try:
        async with asyncio.timeout(QUERY_BOUND.total_seconds()):
            schedule = await pw.shared_schedule.read(pool, window)
    except (*DATABASE_AWAY, ConnectionError) as err:
        late = isinstance(err, TimeoutError)
        why = f"no answer within {QUERY_BOUND.seconds} s" if late else err
        said = f"Postgres at {address} answers, but the window's slots did not come: {why}"
        return None, beats, answered.model_copy(update={"error": said})
    return schedule, beats, answered


async def temporal_pollers(pw: "Pricewatch") -> tuple[Pollers | None, ServiceHealth]:
    """The pollers of the deployment's task queue and its render queue, each for
    workflow and activity tasks on each partition, as Temporal lists them; None if it
    did not answer."""
    address = ClientConfig.load_client_connect_config().get("target_host", "localhost:7233")
    queues = [pw.settings.task_queue, render_queue(pw.settings.task_queue)]
    kinds = {"workflow": TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
             "activity": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY}  # fmt: skip
    try:
        async with asyncio.timeout(ANSWER_BOUND.total_seconds()):
            client = await pw.temporal()
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
        return None, _service(pw, "Temporal", address, said)
    pollers: Pollers = {}
    for (queue, kind, _), answer in zip(asked, answers, strict=True):
        for poller in answer.pollers:
            kinds_seen, last = pollers.get((poller.identity, queue), ([], None))
            at = poller.last_access_time.ToDatetime(UTC)
            seen = kinds_seen if kind in kinds_seen else [*kinds_seen, kind]
            pollers[poller.identity, queue] = seen, max(at, last or at)
    return pollers, _service(pw, "Temporal", address, None)


def _service(pw: "Pricewatch", name: str, address: str, error: str | None) -> ServiceHealth:
    """What this process knows of a service: whether it answered now, and when it
    last did (this process's clock)."""
    if error is None:
        pw.answered[name] = datetime.now(UTC)
    return ServiceHealth(
        name=name, address=address, reachable=error is None,
        answered_at=pw.answered.get(name), error=error,
    )  # fmt: skip


def _unanswered(err: BaseException, name: str, address: str) -> str:
    """One line for a service that did not answer a health call in time, or failed it."""
    if isinstance(err, TimeoutError):
        return f"cannot reach {name} at {address}: no answer within {ANSWER_BOUND.seconds} s"
    said = str(err).splitlines()[0] if str(err) else type(err).__name__
    return said if said.startswith("cannot reach") else f"{name} at {address}: {said}"
