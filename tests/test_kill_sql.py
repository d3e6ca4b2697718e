"""Precise tests for the SQL that `make mutants-sql` (mutation/sql.py) showed missing: each
kills SQL mutants no other test noticed."""

import asyncpg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

shared_pool = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
runs = st.sampled_from(["run-a", "run-b"])
numbers = st.integers(1, 3)
# `<run id>/<activity seq>/<attempt>`, and `/local-<random>` for a local attempt.
tokens = st.tuples(runs, numbers, numbers, st.sampled_from(["", "/local-x", "/local-y"]))


@shared_pool
@given(claimant=tokens, holder=tokens)
async def test_a_later_attempt_of_the_same_run_supersedes_and_nothing_else_does(
    pool: asyncpg.Pool,
    claimant: tuple[str, int, int, str],
    holder: tuple[str, int, int, str],
) -> None:
    """0013's `supersedes`, against its rule in Python: the same run, and a later activity
    or a later attempt of it; never another run, an earlier one, or the same attempt (a
    local one run again after a crash)."""
    expected = claimant[0] == holder[0] and claimant[1:3] > holder[1:3]
    as_token = "{}/{}/{}{}".format
    got = await pool.fetchval("SELECT supersedes($1, $2)", as_token(*claimant), as_token(*holder))
    assert got is expected, (claimant, holder)
