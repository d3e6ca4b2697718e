"""What every surface says when a call fails: one line, and whose fault it is. The CLI turns
it into an exit code (2: the input; 1: a service), the HTTP API into a status."""

from dataclasses import dataclass
from enum import Enum

import asyncpg
from pydantic import ValidationError
from temporalio.client import (
    RPCTimeoutOrCancelledError,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import FailureError
from temporalio.service import RPCError, RPCStatusCode

from client.inputs import BadInput, Unknown
from client.pricewatch import StillChecking
from client.temporal import TIMED_OUT, QueryUnanswered, address
from fetchers.guard import BlockedAddress
from workers.chromium import ChromiumMissing
from workers.embedded import EmbeddedPostgresFailed


class Fault(Enum):
    INPUT = "input"
    """The request can be fixed by its sender: nothing was changed."""
    UNKNOWN = "unknown"
    """No such target, work id or check."""
    SERVICE = "service"
    """Temporal, Postgres or a page is away or failing: the same request may work later."""
    PENDING = "pending"
    """A check was started and is not final yet: it goes on without the caller."""


@dataclass(frozen=True)
class Failure:
    fault: Fault
    line: str


SERVICES = (
    RPCError, RPCTimeoutOrCancelledError, OSError, LookupError, TimeoutError,
    asyncpg.PostgresError, ChromiumMissing, EmbeddedPostgresFailed,
)  # fmt: skip
# Every exception `failure` has a line for.
EXPECTED = (
    BadInput, ValidationError, ValueError, BlockedAddress, *SERVICES,
    WorkflowFailureError, WorkflowUpdateFailedError, StillChecking,
)  # fmt: skip


def failure(err: BaseException) -> Failure | None:
    """The one line for an expected failure; None for a bug (let it raise)."""
    if isinstance(err, Unknown):
        return Failure(Fault.UNKNOWN, one_line(err))
    if isinstance(err, StillChecking):
        return Failure(Fault.PENDING, one_line(err))
    if isinstance(err, BadInput | ValidationError | ValueError | BlockedAddress):
        return Failure(Fault.INPUT, one_line(err))
    if isinstance(err, SERVICES):
        return Failure(Fault.SERVICE, unavailable(err))
    if isinstance(err, WorkflowFailureError):
        return Failure(Fault.SERVICE, f"the workflow failed: {one_line(err.cause)}")
    if isinstance(err, WorkflowUpdateFailedError):  # the workflow's validator refused it
        return Failure(Fault.INPUT, f"refused by the workflow: {one_line(err.cause)}")
    return None


def one_line(err: BaseException | None) -> str:
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        return f"{where}: {message}" if where else message
    # A Temporal failure's own message: its str() begins with the error type.
    text = "" if err is None else err.message if isinstance(err, FailureError) else str(err)
    if not text:
        return "timed out" if isinstance(err, TimeoutError) else "failed without a message"
    return text.splitlines()[0]


def unavailable(err: BaseException) -> str:
    """What an unreachable or failing service said, with which service it was (our own
    errors say so already): never the exception's class name. Temporal away or frozen is
    said as Postgres's case is: `cannot reach Temporal at ADDRESS: no answer in time`."""
    if isinstance(err, QueryUnanswered):
        return f"{one_line(err)} (from Temporal at {address()}, or the worker it asked)"
    if isinstance(err, RPCTimeoutOrCancelledError) or (
        isinstance(err, RPCError) and err.status in TIMED_OUT
    ):
        return f"cannot reach Temporal at {address()}: no answer in time"
    if isinstance(err, RPCError) and err.status is RPCStatusCode.UNAVAILABLE:
        return f"cannot reach Temporal at {address()}: {one_line(err)}"
    if isinstance(err, RPCError):
        return f"Temporal: {one_line(err)}"
    if isinstance(err, asyncpg.PostgresError):
        return f"Postgres: {one_line(err)}"
    return one_line(err)
