"""pricewatch's own metrics, recorded through the SDK's meter so they share the worker's one
Prometheus endpoint with Temporal's (and are no-ops where no meter is configured)."""

from temporalio import activity


def count(name: str, description: str, **labels: str) -> None:
    activity.metric_meter().create_counter(name, description).add(1, labels)


def observe_seconds(name: str, description: str, seconds: float, **labels: str) -> None:
    meter = activity.metric_meter()
    meter.create_histogram_float(name, description, unit="s").record(max(seconds, 0.0), labels)
