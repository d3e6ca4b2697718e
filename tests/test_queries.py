"""The named statements: `:name` parameters become asyncpg's `$n`, and a call must name
exactly the parameters its statement uses."""

import pytest

from activities.queries import QUERIES, parse

SQL = """
-- a file header, before any statement
-- name: one
-- :not_a_parameter in a comment
SELECT :a::text, to_char(now(), 'HH24:MI:SS'), :b, :a  -- trailing :comment
 WHERE x = :b;

-- name: two
SELECT 1;
"""


def test_parameters_are_numbered_by_first_use_and_casts_and_comments_are_left_alone() -> None:
    queries = parse(SQL)
    assert list(queries) == ["one", "two"]
    one = queries["one"]
    assert one.parameters == ("a", "b")
    assert one.sql == "SELECT $1::text, to_char(now(), 'HH24:MI:SS'), $2, $1  \n WHERE x = $2"
    assert one.args({"b": 2, "a": 1}) == [1, 2]
    assert queries["two"].parameters == ()


def test_a_call_must_name_exactly_what_the_statement_uses() -> None:
    one = parse(SQL)["one"]
    with pytest.raises(TypeError, match=r"needs \['b'\]"):
        one.args({"a": 1})
    with pytest.raises(TypeError, match=r"takes no \['c'\]"):
        one.args({"a": 1, "b": 2, "c": 3})


def test_every_shipped_statement_parses() -> None:
    assert {"claim", "commit", "record_failed", "register_target"} <= set(QUERIES)
    assert all(q.sql and not q.sql.endswith(";") for q in QUERIES.values())
