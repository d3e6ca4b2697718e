"""What a check tells a channel: the notice (changed, failing, recovered) and the delivery
activity's input and result, one per (work id, channel, notice). Side-effect free, like
models.py, so the workflow sandbox can import it."""

import hashlib
from enum import StrEnum

from pricewatch.models import CheckResult, Model


class Notice(StrEnum):
    CHANGED = "changed"
    FAILING = "failing"
    RECOVERED = "recovered"


class DeliveryInput(Model):
    """One notice for one channel: a digest of the check, never the page or a secret."""

    notice: Notice
    channel_id: str
    target_id: str
    url: str
    result: CheckResult
    failure_streak: int = 0

    @property
    def delivery_id(self) -> str:
        """Stable across every re-send: the receiver's idempotency key."""
        key = f"{self.result.work_id}|{self.channel_id}|{self.notice.value}"
        return hashlib.sha256(key.encode()).hexdigest()[:32]


class DeliveryResult(Model):
    channel_id: str
    notice: Notice
    status: str
    attempt_count: int
    already_sent: bool = False


class DeliveryFailureInput(Model):
    delivery: DeliveryInput
    error_message: str
