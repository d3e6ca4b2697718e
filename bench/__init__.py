"""The benchmark: pricewatch beside Temporal Schedules and a plain Postgres poller.

`python -m bench --targets N --interval S --seconds W` starts its own stack on 127.0.0.1 in a
temporary directory and runs each design in turn on the same workload (see
docs/performance.md).
"""
