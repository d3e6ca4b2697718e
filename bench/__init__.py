"""The benchmark: pricewatch beside Temporal Schedules, a plain Postgres poller and the bare
Temporal loop (the ceiling of this stack).

`python -m bench --targets N --interval S --seconds W` starts its own stack on 127.0.0.1 in a
temporary directory and runs each design in turn on the same workload (see
docs/performance.md).
"""
