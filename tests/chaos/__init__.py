"""The chaos run: prove "at least once delivery, exactly once effect" under faults.

`python -m tests.chaos --help` (or `make chaos`). See `run.py` for what it injects and checks.
"""
