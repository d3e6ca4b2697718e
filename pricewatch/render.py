"""How the CLI shows what the client returns: one line per record, plain text."""

from datetime import timedelta

from pricewatch.durations import format_duration
from pricewatch.models import CheckResult, MonitorStatus
from pricewatch.slots import format_slot
from pricewatch.views import ChannelView, DeliveryView, TargetSummary


def check(result: CheckResult) -> str:
    """One line per check; a slot still being retried says so, and when it tries again."""
    line = f"{result.work_id}  {result.status.value:<9} attempts={result.attempt_count}"
    if result.result_hash:
        line += f"  sha256={result.result_hash[:12]}"
    if result.next_attempt_at:
        line += f"  next attempt not before {format_slot(result.next_attempt_at)}"
    if result.error_message:
        line += f"  error={result.error_message}"
    return line


def status(status: MonitorStatus, retrying: list[CheckResult], link: str) -> list[str]:
    config = status.config
    health = f"unhealthy ({status.failure_streak} failed slots in a row)"
    lines = [
        f"target:     {config.target_id}",
        f"url:        {config.url}",
        f"every:      {format_duration(config.interval)}",
        f"state:      {'paused' if status.paused else 'active'}",
        f"health:     {health if status.unhealthy else 'healthy'}",
        f"next slot:  {format_slot(status.next_slot) if status.next_slot else '-'}",
        f"checks:     {status.checks_completed}",
    ]
    if status.checking:
        lines.append(f"checking:   {format_slot(status.checking)} (in flight)")
    lines += [f"now:        {check(result)}" for result in retrying]
    last = check(status.last_result) if status.last_result else "(no check yet)"
    return [*lines, f"last:       {last}", f"history:    {link}"]


def target(row: TargetSummary) -> str:
    state = ("active" if row.enabled else "paused") + (",unhealthy" if row.unhealthy else "")
    every = format_duration(timedelta(seconds=row.interval_seconds))
    last = row.last_status or "-"
    return (
        f"{row.id:<24} {state:<16} every {every:<8} next {format_slot(row.next_slot)}"
        f"  last {last:<9} {row.url}"
    )


def masked(channel: ChannelView) -> ChannelView:
    """The channel as shown without --reveal: the secret's prefix only."""
    if channel.secret is None:
        return channel
    return channel.model_copy(update={"secret": "whsec_" + "*" * 8})


def channel(row: ChannelView) -> str:
    line = f"{row.channel_id:<18} {row.kind:<8} {row.destination}"
    if row.secret:
        line += f"  secret={row.secret}"
    if row.disabled_reason:
        line += f"  DISABLED ({row.disabled_reason})"
    return line


def delivery(row: DeliveryView) -> str:
    line = (
        f"{row.work_id}  {row.notice:<9} {row.channel_id:<18} "
        f"{row.status:<7} attempts={row.attempt_count}"
    )
    if row.last_error and row.status != "sent":
        line += f"  error={row.last_error}"
    return line
