"""The real `pricewatch` console script: bad input is one line on stderr and exit 2,
an unreachable Temporal is one line and exit 1, never a traceback."""

import asyncio
import importlib
import importlib.metadata
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from activities import store
from pricewatch.health import ON_TIME_FLOOR, ON_TIME_SHARE
from surfaces.cli import app
from tests.helpers import cli, serve_process

PRICEWATCH = Path(sys.executable).parent / "pricewatch"
COMMANDS = [
    "add",
    "list",
    "status",
    "history",
    "pause",
    "resume",
    "check-now",
    "remove",
    "migrate",
    "worker",
    "notify-test",
    "dev",
    "serve",
]


def run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the console script with nothing to talk to: Temporal on a closed port, no
    database, no inherited TEMPORAL_* or PRICEWATCH_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PRICEWATCH_"))}
    env |= {
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
        "TEMPORAL_CONFIG_FILE": str(tmp_path / "no-temporal.toml"),
        "PRICEWATCH_DATA_DIR": str(tmp_path / "data"),
        "COLUMNS": "120",
    }
    return subprocess.run(
        [str(PRICEWATCH), *args], env=env, capture_output=True, text=True, timeout=60
    )


def assert_one_error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pricewatch: ")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        (["add", "Bad_Id", "https://example.com"], "target id must be a slug"),
        (["add", "acme", "ftp://example.com/prices"], "url"),
        (["add", "acme", "https://example.com", "--every", "1m"], "below the minimum 15m"),
        (["add", "acme", "https://example.com", "--every", "1x"], "invalid duration '1x'"),
        (["add", "acme", "https://example.com", "--every", ""], "invalid duration ''"),
        (["add", "acme", "https://example.com", "--tz", ""], "tz"),
        (["add", "acme", "https://example.com", "--start-at", "0001-01-01T00:00:00Z"], "start"),
        (["add", "acme", "https://example.com", "--start-at", "tomorrow"], "--start-at"),
        *(
            (["add", "acme", "https://example.com", "--timeout", value], said)
            for value, said in [
                ("3s", "--timeout: must be from 5s to 120s, not 3s"),
                ("200s", "--timeout: must be from 5s to 120s, not 200s"),
                ("garbage", "--timeout: invalid duration 'garbage'"),
                ("0s", "--timeout: must be from 5s to 120s, not 0s"),
                ("2m1s", "--timeout: must be from 5s to 120s, not 121s"),
            ]
        ),
        (["add", "a", "https://example.com", "--max-attempts", "0"], "--max-attempts:"),
        (["add", "a", "https://example.com", "--below", "x"], "--below: write an amount"),
        (["add", "a", "https://example.com", "--webhook", "ftp://h/"], "--webhook: "),
        (["add", "a", "https://example.com", "--step", "click a"], "--step run in the browser"),
        (["add", "a", "https://example.com", "--cron", "@daily", "--at", "08:00"], "--cron and"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], mentions: str, tmp_path: Path) -> None:
    """Bad input is refused before anything is contacted: Temporal is unreachable here, so
    exit 2 (not 1) proves validation came first."""
    line = assert_one_error_line(run(*args, tmp_path=tmp_path), 2)

    assert mentions in line


def test_absurd_interval_is_bad_input_not_a_traceback(tmp_path: Path) -> None:
    """An interval too large for a timedelta is still just bad input."""
    args = ["add", "acme", "https://example.com", "--every", "99999999999d"]

    assert_one_error_line(run(*args, tmp_path=tmp_path), 2)


@pytest.mark.parametrize("command", ["status", "pause", "resume", "check-now", "remove"])
def test_invalid_id_is_refused_before_connecting(command: str, tmp_path: Path) -> None:
    """A malformed id is the user's mistake whether or not Temporal is up: exit 2, as `add`
    and `history` do, not a misleading "cannot reach Temporal"."""
    line = assert_one_error_line(run(command, "Bad_Id", tmp_path=tmp_path), 2)

    assert "target id must be a slug" in line


def test_help_lists_every_command(tmp_path: Path) -> None:
    """`--help` works without any service and shows the whole command set."""
    result = run("--help", tmp_path=tmp_path)

    assert result.returncode == 0, result.stderr
    listed = {line.strip(" │").split(" ")[0] for line in result.stdout.splitlines()}
    assert set(COMMANDS) <= listed


def test_each_command_is_listed_with_a_one_line_summary() -> None:
    """The command list prints a docstring's first paragraph with its line breaks (a
    sentence broken mid-list), so that paragraph is one line; the rest follows a blank line."""
    for command in app.registered_commands:
        summary = (inspect.getdoc(command.callback) or "").split("\n\n")[0]
        assert summary and "\n" not in summary, summary


def test_unreachable_temporal_exits_1_with_one_line(tmp_path: Path) -> None:
    """A down server is not the user's mistake: exit 1, and say where we looked."""
    line = assert_one_error_line(run("status", "some-id", tmp_path=tmp_path), 1)

    assert "127.0.0.1:1" in line


@pytest.mark.parametrize(
    "module",
    [
        "surfaces.cli",
        "workers.worker",
        "workers.dev",
        "workers.embedded",
        "workflows.monitor",
        "activities.checks",
    ],
)
def test_entry_point_modules_import(module: str) -> None:
    """Every entry point at least imports (catches a broken import before a deploy does)."""
    assert importlib.import_module(module) is not None


def test_config_prints_the_effective_settings_with_secrets_masked() -> None:
    env = {
        **os.environ,
        "PRICEWATCH_SMTP_PASSWORD": "hunter2-secret",
        "PRICEWATCH_DATABASE_URL": "postgresql://pw:db-secret@db:5432/pricewatch",
        "PRICEWATCH_MIN_INTERVAL": "900",
        "TEMPORAL_API_KEY": "api-secret",
    }
    done = subprocess.run(
        [str(PRICEWATCH), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "secret" not in done.stdout
    assert "PRICEWATCH_MIN_INTERVAL" in done.stdout and "15m" in done.stdout
    assert "postgresql://pw:********@db:5432/pricewatch" in done.stdout


def test_version(tmp_path: Path) -> None:
    result = run("--version", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"pricewatch {importlib.metadata.version('pricewatch')}"


async def test_a_reader_that_leaves_early_ends_the_output_quietly(
    database_url: str, tmp_path: Path
) -> None:
    """`pricewatch failures | head`: no BrokenPipeError, no traceback, nothing on stderr."""
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot) "
            "VALUES ('acme', 'https://example.com/', 3600, now(), now())"
        )
        await conn.execute(
            "INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status, "
            "error_message) SELECT 'acme:' || n, 'acme', now() - make_interval(hours => n), "
            "now(), 'failed', repeat('HTTP 503 Service Unavailable ', 4) "
            "FROM generate_series(1, 5000) n"
        )
    finally:
        await conn.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PRICEWATCH_"))}
    env["PRICEWATCH_DATABASE_URL"] = database_url
    errors = tmp_path / "stderr"
    pipeline = await asyncio.create_subprocess_exec(
        "bash", "-c",
        f'"{PRICEWATCH}" failures --limit 5000 2>"{errors}" | head -1; echo "${{PIPESTATUS[0]}}"',
        env=env, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(pipeline.communicate(), timeout=60)
    first, status = out.decode().splitlines()
    assert first.split()[:2] == ["WORK", "ID"]
    assert errors.read_text() == ""
    assert status in ("0", "1"), status  # click's quiet exit, or rich's own


def test_shell_completion_is_on(tmp_path: Path) -> None:
    result = run("--show-completion", "bash", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "complete" in result.stdout and "pricewatch" in result.stdout


async def test_list_marks_next_slots_past_the_on_time_bound_overdue(
    database_url: str, tmp_path: Path
) -> None:
    """`list` (table and --json) calls a next slot overdue once it is further in the past,
    by Postgres's clock, than the on-time bound (max(10 s, 10% of the interval)); a paused
    target is never overdue. It reads Postgres only: Temporal is away here."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot, enabled) "
            "VALUES ('late', 'https://example.com/a', 3600, now(), now() - interval '7 min', "
            "        true),"
            "       ('due', 'https://example.com/b', 3600, now(), now() - interval '5 min', true),"
            "       ('ahead', 'https://example.com/c', 60, now(), now() + interval '1 min', true),"
            "       ('paused', 'https://example.com/d', 60, now(), now() - interval '1 day', "
            "        false)"
        )
    finally:
        await conn.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PRICEWATCH_"))}
    env |= {"PRICEWATCH_DATABASE_URL": database_url, "TEMPORAL_ADDRESS": "127.0.0.1:1",
            "COLUMNS": "200"}  # fmt: skip
    code, out, err = await cli(env, "list", "--json")
    assert (code, err) == (0, "")
    overdue = {row["id"]: row["overdue"] for row in json.loads(out)}
    assert overdue == {"ahead": False, "due": False, "late": True, "paused": False}
    code, out, err = await cli(env, "list")
    assert (code, err) == (0, "")
    marked = {line.split()[0] for line in out.splitlines() if " overdue " in line}
    assert marked == {"late"}, out
    async with serve_process(env) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        api = (await http.get("/api/v1/targets")).json()
        html = (await http.get("/")).text
    assert {row["id"]: row["overdue"] for row in api} == overdue
    rows = html.split("<tr")  # the dashboard's targets page: a badge in late's row only
    assert [row.count(">overdue</span>") for row in rows if "/targets/" in row] == [0, 0, 1, 0]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    interval=st.integers(min_value=1, max_value=366 * 24 * 3600),
    behind=st.floats(min_value=-1e6, max_value=1e7, allow_nan=False),
)
async def test_overdue_is_past_the_on_time_bound(
    pool: asyncpg.Pool, interval: int, behind: float
) -> None:
    """Any interval, any next slot: overdue exactly when the slot is more than the bound
    behind Postgres's now() (a second either side of the bound is left out: the clock
    moves between the update and the read)."""
    bound = max(ON_TIME_FLOOR.total_seconds(), interval * ON_TIME_SHARE)
    if abs(behind - bound) < 1:
        behind = bound + (1 if behind >= bound else -1) * 2
    await pool.execute(
        "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot) "
        "VALUES ('t', 'https://example.com/', $1, now(), now() - make_interval(secs => $2)) "
        "ON CONFLICT (id) DO UPDATE SET interval_seconds = excluded.interval_seconds, "
        "next_slot = excluded.next_slot",
        interval,
        behind,
    )
    [row] = await store.list_targets(pool)
    assert row["overdue"] is (behind > bound)
