"""Spans inside a check (claim, fetch, commit) under the activity's own span, which Temporal's
`TracingInterceptor` opens when tracing is on (`PRICEWATCH_TRACING=true`, with the
`pricewatch[otel]` extra). Without OpenTelemetry installed, or with no tracer provider set,
these cost nothing."""

import contextlib
from collections.abc import Iterator

try:
    from opentelemetry import trace
except ImportError:  # the extra is not installed
    trace = None  # type: ignore[assignment]


@contextlib.contextmanager
def span(name: str, **attributes: str | int) -> Iterator[None]:
    if trace is None:
        yield
        return
    with trace.get_tracer("pricewatch").start_as_current_span(name, attributes=attributes):
        yield
