"""The schema, one way to build it: the numbered migrations, applied in order, end at exactly
what `activities/sql/schema.sql` (the file to read) says, and a database a development build
created before 1.0 reaches that same schema through `sql/legacy/`. Each test builds its own
databases and compares their catalogs."""

from importlib import resources

import asyncpg

from activities.migrate import CREATE_LEDGER, migrate, migration_files
from tests.helpers import built

SCHEMA_FILE = resources.files("activities") / "sql" / "schema.sql"

# The schema as the catalogs see it, one line per thing, each with its whole definition:
# tables (and views, sequences, types) with each column's place, type, nullability and
# default; constraints (by definition: PG 18 names the NOT NULL ones after the column they
# were made for, so those are read as the columns' nullability); indexes; functions (their
# whole text, attributes included); triggers; views; enums and domains; extensions.
CATALOG = """
SELECT 'relation' AS what, c.relname || ' ' || c.relkind::text || ' ' || c.relpersistence::text
       AS def
  FROM pg_class c
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind NOT IN ('i', 'I', 't')
UNION ALL
SELECT 'column', c.relname || '.' || a.attname
       || ' #' || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum)
       || ' ' || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
       || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
       || CASE WHEN a.attgenerated <> '' THEN ' GENERATED ' || a.attgenerated::text ELSE '' END
       || CASE WHEN a.attidentity <> '' THEN ' IDENTITY ' || a.attidentity::text ELSE '' END
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind NOT IN ('i', 'I', 't', 'S')
   AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint', coalesce(conrelid::regclass::text, contypid::regtype::text) || ' '
       || conname || ' ' || pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = 'public'::regnamespace AND contype <> 'n'
UNION ALL
SELECT 'index', indexdef FROM pg_indexes WHERE schemaname = 'public'
UNION ALL
SELECT 'function', CASE WHEN prokind = 'a' THEN 'aggregate ' || oid::regprocedure::text
                        ELSE pg_get_functiondef(oid) END
  FROM pg_proc WHERE pronamespace = 'public'::regnamespace
UNION ALL
SELECT 'trigger', pg_get_triggerdef(t.oid)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal
UNION ALL
SELECT 'view', viewname || ' ' || definition FROM pg_views WHERE schemaname = 'public'
UNION ALL
SELECT 'type', t.typname || ' ' || t.typtype::text || ' '
       || coalesce((SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder) FROM pg_enum
                     WHERE enumtypid = t.oid), format_type(t.typbasetype, t.typtypmod))
  FROM pg_type t
 WHERE t.typnamespace = 'public'::regnamespace AND t.typtype IN ('e', 'd')
UNION ALL
SELECT 'extension', extname FROM pg_extension WHERE extname <> 'plpgsql'
ORDER BY 1, 2
"""


async def catalog(conn: asyncpg.Connection) -> list[tuple[str, str]]:
    return [(r["what"], r["def"]) for r in await conn.fetch(CATALOG)]


def differences(ours: list[tuple[str, str]], theirs: list[tuple[str, str]]) -> list[str]:
    """What one catalog has and the other lacks, as lines to read in a failure."""
    return [f"- {w} {d}" for w, d in sorted(set(ours) - set(theirs))] + [
        f"+ {w} {d}" for w, d in sorted(set(theirs) - set(ours))
    ]


async def from_schema_file(conn: asyncpg.Connection) -> None:
    await conn.execute(SCHEMA_FILE.read_text())
    await conn.execute(CREATE_LEDGER)  # the migrator's, not the schema's


async def test_schema_sql_is_what_the_migrations_build(postgres_server_url: str) -> None:
    """Every migration applied in order (how a fresh database is built) ends at exactly the
    schema `schema.sql` says: a migration added without changing schema.sql, or schema.sql
    edited without a migration, fails here and names what differs (`-` only the migrations
    have it, `+` only schema.sql)."""
    async with (
        built(postgres_server_url, migrate) as migrated,
        built(postgres_server_url, from_schema_file) as from_file,
    ):
        ours, theirs = await catalog(migrated), await catalog(from_file)
    assert len(ours) > 60
    assert not (missing := differences(ours, theirs)), "\n".join(missing)
    assert ours == theirs  # and nothing twice


async def test_the_one_schema_file_is_what_the_pre_1_0_steps_built(
    postgres_server_url: str,
) -> None:
    """A database a development build created before 1.0 (here: after its first step) is
    brought up through the old steps it lacks and ends with exactly the schema a new
    database gets from the migrations; both ledgers then agree on what comes next."""

    async def from_first_legacy_step(conn: asyncpg.Connection) -> None:
        first, sql = migration_files("sql/legacy")[0]
        await conn.execute(sql)
        await conn.execute(CREATE_LEDGER)
        await conn.execute("INSERT INTO schema_migrations VALUES ($1)", first)
        await migrate(conn)

    ledger = "SELECT version FROM schema_migrations"
    async with (
        built(postgres_server_url, migrate) as fresh,
        built(postgres_server_url, from_first_legacy_step) as legacy,
    ):
        assert await migrate(fresh) == [] and await migrate(legacy) == []
        ours, theirs = await catalog(fresh), await catalog(legacy)
        ledgers = [{r[0] for r in await conn.fetch(ledger)} for conn in (fresh, legacy)]
    assert len(ours) > 60
    assert not (missing := differences(ours, theirs)), "\n".join(missing)
    assert "0001_schema" in ledgers[0] & ledgers[1]
