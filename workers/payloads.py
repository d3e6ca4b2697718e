"""Skip the SDK's payload walks when they cannot change a payload.

temporalio 1.35 walks every workflow activation three times on the way in and every
completion three times on the way out (`temporalio.bridge.worker.decode_activation` and
`encode_completion`): for a payload codec, for external storage, and for codec-encoded
storage references. With neither a codec nor external storage configured, as pricewatch's
data converter has, every walk hands each payload to a function that returns it unchanged.
The walks were a fifth of the worker's CPU to replay a history (issue 16), and a cache
miss replays the whole run. Only the data converter decides whether a walk has an effect (the
SDK has the same test, unused so far: `DataConverter._decode_payload_has_effect`), so a
converter with a codec or external storage is walked as before.

What the skip gives up: the SDK's own error for a payload stored externally when this worker
has no external storage (TMPRL1105); such a payload then fails to decode instead, also
failing the workflow task. pricewatch never writes one.
"""

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import temporalio.bridge.worker
from temporalio.converter import DataConverter
from temporalio.converter._extstore import StorageOperationMetrics

Walk = Callable[..., Awaitable[StorageOperationMetrics]]


def idle(data_converter: DataConverter) -> bool:
    """True if no walk can change a payload: no codec, no external storage."""
    return data_converter.payload_codec is None and data_converter.external_storage is None


def _skipping(walk: Walk) -> Walk:
    @functools.wraps(walk)
    async def maybe_walk(
        message: Any, data_converter: DataConverter, /, **options: Any
    ) -> StorageOperationMetrics:
        if idle(data_converter):
            return StorageOperationMetrics()
        return await walk(message, data_converter, **options)

    maybe_walk.__wrapped_walk__ = walk  # type: ignore[attr-defined]
    return maybe_walk


def skip_idle_payload_walks() -> None:
    """Install the skip in this process (`build_worker` does; installing twice changes nothing)."""
    bridge = temporalio.bridge.worker
    for name in ("decode_activation", "encode_completion"):
        # An SDK that renamed them runs as it is (tests/test_payloads.py then fails).
        walk = getattr(bridge, name, None)
        if walk is not None and not hasattr(walk, "__wrapped_walk__"):
            setattr(bridge, name, _skipping(walk))
