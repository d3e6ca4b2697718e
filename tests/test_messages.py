"""What a user reads speaks the product's language, not Python's: stored errors, CLI errors,
durations, the wording for an unknown target, `--help` and URLs (issue 27, points 4 and 6).
Through the CLI's real output wherever a user would read it."""

import asyncio
import base64
import contextlib
import ipaddress
import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiohttp import web
from pydantic import AnyHttpUrl
from temporalio.client import WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from typer.testing import CliRunner

from client.temporal import DATA_CONVERTER
from fetchers import guard
from fetchers.guard import AddressPolicy, BlockedAddress
from pricewatch.models import MonitorState, TargetConfig
from pricewatch.urls import as_sent
from surfaces.cli import app
from surfaces.errors import one_line
from tests.chaos.stack import serve
from tests.conftest import PageServer, Start
from tests.helpers import HOUR, cli, new_target, rows, running_worker, worker_process
from tests.waits import wait_for
from workflows.monitor import MonitorTarget

PRICEWATCH = Path(sys.executable).parent / "pricewatch"
PYTHON_NAMES = ("Error:", "PermanentFetchError", "TransientFetchError", "ApplicationError")
CLASS_NAME = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception)\b")


async def test_a_dead_letter_reads_like_the_attempts_before_it(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """A 404 page's failed row and a 503 page's row, retrying and then given up, read
    `HTTP <status> <reason>`: no error type of ours or the SDK's before it."""
    client = time_skipping_env.client
    gone, busy = new_target(page_server), new_target(page_server)
    busy = busy.model_copy(update={"max_attempts": 2})
    page_server.set(f"/{gone.target_id}", "gone", status=404)
    page_server.set(f"/{busy.target_id}", "busy", status=503)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        await start(gone, start_at=anchor)
        await start(busy, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=1, seconds=10))
        retrying = (await rows(pool, busy.target_id))[0]
        await time_skipping_env.sleep(timedelta(minutes=10))
    dead_404 = (await rows(pool, gone.target_id))[0]
    dead_503 = (await rows(pool, busy.target_id))[0]
    assert retrying["status"] == "retrying"
    assert retrying["error_message"] == "HTTP 503 Service Unavailable"
    assert (dead_503["status"], dead_503["error_message"]) == ("failed", retrying["error_message"])
    assert (dead_404["status"], dead_404["error_message"]) == ("failed", "HTTP 404 Not Found")


def run(*args: str, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """The console script with nothing to talk to unless `extra` says (see test_cli.run)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PRICEWATCH_"))}
    base |= {
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
        "TEMPORAL_CONFIG_FILE": str(tmp_path / "no-temporal.toml"),
        "PRICEWATCH_DATA_DIR": str(tmp_path / "data"),
        "COLUMNS": "120",
    }
    return subprocess.run(
        [str(PRICEWATCH), *args], env=base | extra, capture_output=True, text=True, timeout=60
    )


def assert_plain(text: str) -> None:
    """No Python class name (`LookupError`, `ConnectionRefusedError`, `RPCError`)."""
    assert not CLASS_NAME.search(text), text
    assert not any(name in text for name in PYTHON_NAMES), text


@pytest.mark.parametrize(
    ("args", "settings", "says"),
    [
        (["status", "acme"], {}, "cannot reach Temporal at 127.0.0.1:1 (start `pricewatch dev`"),
        (["history", "acme"], {}, "no database: set PRICEWATCH_DATABASE_URL or start"),
        (
            ["history", "acme"],
            {"PRICEWATCH_DATABASE_URL": "postgresql://pw:secret@127.0.0.1:1/pricewatch"},
            "cannot reach Postgres at 127.0.0.1:1: Connect call failed",
        ),
        (
            ["migrate"],
            {"PRICEWATCH_DATABASE_URL": "postgresql://pw:secret@127.0.0.1:1/pricewatch"},
            "cannot reach Postgres at 127.0.0.1:1: Connect call failed",
        ),
    ],
)
def test_an_unreachable_dependency_is_named_in_plain_words(
    args: list[str], settings: dict[str, str], says: str, tmp_path: Path
) -> None:
    """One line, exit 1, what is away and where: not the exception's class name."""
    done = run(*args, tmp_path=tmp_path, **settings)

    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"pricewatch: {says}"), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "secret" not in done.stderr
    assert_plain(done.stderr)


def test_a_refusal_from_the_workflow_reads_as_its_message() -> None:
    """A validator's ValueError reaches the CLI as an ApplicationError whose str() begins
    with `ValueError: `: the line shows the message alone."""
    refused = ApplicationError("only slots that already fell due can be retried", type="ValueError")

    assert one_line(refused) == "only slots that already fell due can be retried"


def test_config_prints_durations_as_they_are_typed(tmp_path: Path) -> None:
    """`90d` and `5s` in, `90d` and `5s` out (not `P90D`, `PT5S`); unset is `-` and a switch
    `true`/`false`, as the variables take them (not `None`, `True`)."""
    done = run("config", tmp_path=tmp_path, PRICEWATCH_MIN_INTERVAL="5s",
               PRICEWATCH_CHECK_RETENTION="90d", PRICEWATCH_CHANGE_RETENTION="1d12h")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = (line.partition(" ") for line in done.stdout.splitlines())
    shown = {key: value.strip() for key, _, value in lines}
    assert shown["PRICEWATCH_MIN_INTERVAL"] == "5s"
    assert shown["PRICEWATCH_CHECK_RETENTION"] == "90d"
    assert shown["PRICEWATCH_CHANGE_RETENTION"] == "1d12h"
    assert shown["PRICEWATCH_DATABASE_URL"] == "-"
    assert shown["PRICEWATCH_MIGRATE"] == "true"
    assert not re.search(r"\bP(T\d|\d)", done.stdout), done.stdout
    assert not re.search(r"\b(None|True|False)\b", done.stdout), done.stdout

    as_json = json.loads(
        run("config", "--json", tmp_path=tmp_path, PRICEWATCH_MIN_INTERVAL="5s").stdout
    )
    assert as_json["settings"]["min_interval"] == "5s"
    assert as_json["settings"]["check_retention"] == "90d"


ID_COMMANDS = [
    ["history"], ["prices"], ["diff"], ["deliveries"], ["channels"], ["failures"],
    ["status"], ["pause"], ["resume"], ["check-now"], ["remove"],
]  # fmt: skip


async def test_every_command_words_an_unknown_target_alike(
    time_skipping_env: WorkflowEnvironment, database_url: str, tmp_path: Path
) -> None:
    """Whether the command reads Postgres or asks Temporal: `unknown target 'nope'`, exit 2.
    A target that exists without rows still says it has none."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot) "
            "VALUES ('acme', 'https://example.com/', 3600, now(), now())"
        )
    finally:
        await conn.close()
    stack = {
        "TEMPORAL_ADDRESS": time_skipping_env.client.service_client.config.target_host,
        "PRICEWATCH_DATABASE_URL": database_url,
    }
    for command in ID_COMMANDS:
        done = await asyncio.to_thread(run, *command, "nope", tmp_path=tmp_path, **stack)
        assert (done.returncode, done.stderr) == (2, "pricewatch: unknown target 'nope'\n"), command
    done = await asyncio.to_thread(run, "history", "acme", tmp_path=tmp_path, **stack)
    assert (done.returncode, done.stderr) == (2, "pricewatch: no recorded checks for 'acme'\n")
    done = await asyncio.to_thread(run, "channels", "acme", tmp_path=tmp_path, **stack)
    assert done.returncode == 0 and "no channels for 'acme'" in done.stdout


@pytest.mark.parametrize("command", [[], ["add"], ["list"], ["apply"], ["channels"], ["dev"]])
def test_help_shows_no_value_after_a_flag(command: list[str], tmp_path: Path) -> None:
    """`--json`, `--prices`, `--dry-run`, `--help` take no value: nothing beside them in the
    type column, and no Python type (`<list[str]>`) anywhere."""
    done = run(*command, "--help", tmp_path=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "--help" in done.stdout
    assert "<bool>" not in done.stdout and "list[" not in done.stdout, done.stdout


def test_no_command_shows_a_type_after_a_flag() -> None:
    for command in app.registered_commands:
        name = command.name or (command.callback.__name__ if command.callback else "")
        shown = CliRunner().invoke(app, [name.replace("_", "-"), "--help"], env={"COLUMNS": "120"})
        assert shown.exit_code == 0, (name, shown.output)
        assert "<bool>" not in shown.output and "list[" not in shown.output, shown.output


@pytest.mark.parametrize(
    ("typed", "shown", "sent"),
    [
        (
            "http://host/preis/größe?q=ü",
            "http://host/preis/größe?q=ü",
            "http://host/preis/gr%C3%B6%C3%9Fe?q=%C3%BC",
        ),
        # Typed encoded: the same URL, the same string (equal URLs compare equal).
        (
            "http://host/preis/gr%c3%b6%C3%9Fe?q=%C3%BC",
            "http://host/preis/größe?q=ü",
            "http://host/preis/gr%C3%B6%C3%9Fe?q=%C3%BC",
        ),
        ("HTTP://Bücher.Example:80/ä", "http://bücher.example/ä", "http://xn--bcher-kva.example/%C3%A4"),
        ("http://xn--bcher-kva.example", "http://bücher.example/", "http://xn--bcher-kva.example/"),
        # ASCII escapes, invisible characters and broken UTF-8 stay escaped.
        ("http://host/a b?x=%2f&y=%E2%80%AE%C2%A0%FF", "http://host/a%20b?x=%2f&y=%E2%80%AE%C2%A0%FF",
         "http://host/a%20b?x=%2f&y=%E2%80%AE%C2%A0%FF"),
        ("https://www.hetzner.com", "https://www.hetzner.com/", "https://www.hetzner.com/"),
    ],
)  # fmt: skip
def test_a_url_is_kept_as_typed_and_sent_encoded(typed: str, shown: str, sent: str) -> None:
    config = TargetConfig(target_id="c6", url=typed, interval_seconds=3600)

    assert config.url == shown
    assert TargetConfig.model_validate(config.model_dump()).url == shown, "decodes to itself"
    assert as_sent(config.url) == sent
    if typed.isascii() and "%C3" not in typed.upper() and "xn--" not in typed:
        assert shown == str(AnyHttpUrl(typed)), "an ASCII URL reads as it did up to 1.1"


async def test_the_guard_checks_the_host_that_is_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    """`straße.example` is fetched as `xn--strae-oqa.example` (IDNA 2008, as httpx and the
    URL standard encode it); the resolver, given the Unicode name, would ask for
    `strasse.example` (IDNA 2003): the guard resolves the punycode host."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[ipaddress.IPv4Address]:
        asked.append(host)
        return [ipaddress.IPv4Address("127.0.0.1")]

    monkeypatch.setattr(guard, "resolve", resolve)
    with pytest.raises(BlockedAddress, match=r"refused xn--strae-oqa\.example: .* 127\.0\.0\.1"):
        await guard.check_url(AddressPolicy.allowing([]), "http://straße.example/größe")
    assert asked == ["xn--strae-oqa.example"]


@pytest.mark.e2e
async def test_add_list_and_export_show_the_url_typed_and_the_page_is_asked_encoded(
    env: dict[str, str],
    pool: asyncpg.Pool,
    tmp_path: Path,
) -> None:
    """`add c6 "http://host/preis/größe?q=ü"` answers, lists and exports that URL; the page
    server receives `/preis/gr%C3%B6%C3%9Fe?q=%C3%BC`. The exported file applies as a no-op,
    and the URL typed encoded is the same target's URL (nothing changed)."""
    received: list[str] = []

    async def page(request: web.Request) -> web.Response:
        received.append(request.raw_path)
        return web.Response(text="<p>EUR 4</p>", content_type="text/html")

    env = {**env, "COLUMNS": "200"}
    async with serve([web.get("/{tail:.*}", page)]) as base, worker_process(env):
        typed = f"{base}/preis/größe?q=ü"
        code, out, err = await cli(env, "add", "c6", typed, "--every", "1h")
        assert code == 0, err
        assert out.splitlines()[0] == f"added c6: {typed} every 1h, first check now"
        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE status = 'unchanged'")
        assert received == ["/preis/gr%C3%B6%C3%9Fe?q=%C3%BC"]

        code, out, _ = await cli(env, "list")
        assert code == 0 and typed in out and "%C3" not in out, out
        code, exported, _ = await cli(env, "export")
        assert code == 0 and f"url: {typed}\n" in exported, exported
        targets = tmp_path / "targets.yaml"
        targets.write_text(exported)
        code, out, _ = await cli(env, "apply", str(targets))
        assert out.strip() == "plan: nothing to do (1 unchanged)"
        encoded = f"{base}/preis/gr%C3%B6%C3%9Fe?q=%C3%BC"
        code, out, _ = await cli(env, "add", "c6", encoded, "--every", "1h")
        assert code == 0 and "c6 already watched with these settings: nothing changed" in out
        assert (await cli(env, "remove", "c6"))[0] == 0


async def test_a_target_stored_encoded_lists_as_typed(database_url: str, tmp_path: Path) -> None:
    """A row mirrored before 1.2 holds the percent-encoded URL; `list` shows it readable,
    as `status` and `export` show the workflow's config (which decodes to that form)."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot) VALUES "
            "('c6', 'http://host/preis/gr%C3%B6%C3%9Fe?q=%C3%BC', 3600, now(), now())"
        )
    finally:
        await conn.close()
    done = await asyncio.to_thread(
        run, "list", tmp_path=tmp_path, PRICEWATCH_DATABASE_URL=database_url, COLUMNS="200"
    )
    assert done.returncode == 0, done.stderr
    assert "http://host/preis/größe?q=ü" in done.stdout and "%C3" not in done.stdout


RECORDED = Path(__file__).parent / "histories" / "1.1.0"


def _encoded_url(node: Any, old: bytes, new: bytes) -> Any:
    """The history with every payload's `"url":` `old` replaced by `new`."""
    if isinstance(node, list):
        return [_encoded_url(item, old, new) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _encoded_url(value, old, new) for key, value in node.items()}
    if isinstance(node.get("data"), str):
        with contextlib.suppress(ValueError):
            raw = base64.b64decode(node["data"], validate=True)
            if old in raw:
                out["data"] = base64.b64encode(raw.replace(old, new)).decode()
    return out


@pytest.mark.parametrize("name", sorted(p.name for p in RECORDED.glob("monitor_target_*.json")))
async def test_a_history_recorded_with_an_encoded_url_decodes_as_typed_and_replays(
    name: str,
) -> None:
    """Up to 1.1 the workflow input and every check carried the URL percent-encoded: such a
    history (1.1's, its URL made non-ASCII) decodes to the typed form and still replays
    (checks now carry the typed URL; replay compares commands, not their arguments)."""
    recorded = json.loads((RECORDED / name).read_text())
    start = recorded["events"][0]["workflowExecutionStartedEventAttributes"]["input"]
    base = json.loads(base64.b64decode(start["payloads"][0]["data"]))["config"]["url"]
    old, new = f'"url":"{base}"', f'"url":"{base}preis/gr%C3%B6%C3%9Fe?q=%C3%BC"'
    history = _encoded_url(recorded, old.encode(), new.encode())
    assert json.dumps(history) != json.dumps(recorded)

    replayed = WorkflowHistory.from_json("encoded", history)
    payload = replayed.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    state = DATA_CONVERTER.payload_converter.from_payload(payload, MonitorState)
    assert state.config.url == f"{base}preis/größe?q=ü"
    await Replayer(workflows=[MonitorTarget], data_converter=DATA_CONVERTER).replay_workflow(
        replayed
    )
