"""The named statements of `sql/queries.sql`, loaded once.

Each block starts with `-- name: <name>`; parameters are written `:name` and bound by
keyword, so a call names what it passes (asyncpg itself only numbers them: `$1`).
"""

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

Executor = asyncpg.Pool | asyncpg.Connection | PoolConnectionProxy

# `:name`, but not the second colon of a `::type` cast nor `HH24:MI` inside a format.
PARAMETER = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")
BLOCK = re.compile(r"^-- name: (\w+)\n", re.MULTILINE)
COMMENT = re.compile(r"--[^\n]*")


@dataclass(frozen=True)
class Query:
    name: str
    sql: str
    """With `$n` placeholders, ready for asyncpg."""
    parameters: tuple[str, ...]

    def args(self, values: dict[str, Any]) -> list[Any]:
        if missing := set(self.parameters) - set(values):
            raise TypeError(f"query {self.name} needs {sorted(missing)}")
        if extra := set(values) - set(self.parameters):
            raise TypeError(f"query {self.name} takes no {sorted(extra)}")
        return [values[name] for name in self.parameters]

    async def fetch(self, db: Executor, **values: Any) -> list[asyncpg.Record]:
        return list(await db.fetch(self.sql, *self.args(values)))

    async def fetchrow(self, db: Executor, **values: Any) -> asyncpg.Record | None:
        return await db.fetchrow(self.sql, *self.args(values))

    async def fetchval(self, db: Executor, **values: Any) -> Any:
        return await db.fetchval(self.sql, *self.args(values))

    async def execute(self, db: Executor, **values: Any) -> str:
        return str(await db.execute(self.sql, *self.args(values)))


def parse(text: str) -> dict[str, Query]:
    parts = BLOCK.split(text)[1:]
    return {name: _query(name, body) for name, body in zip(parts[::2], parts[1::2], strict=True)}


def _query(name: str, body: str) -> Query:
    """`:name` parameters become `$n`, numbered in order of first use."""
    parameters: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in parameters:
            parameters.append(match[1])
        return f"${parameters.index(match[1]) + 1}"

    sql = PARAMETER.sub(number, COMMENT.sub("", body).strip().removesuffix(";"))
    return Query(name=name, sql=sql, parameters=tuple(parameters))


QUERIES = parse((resources.files("activities") / "sql" / "queries.sql").read_text())
