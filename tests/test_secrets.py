"""Secrets stay where they were put (issue 49): a known secret planted in every kind of
channel (a webhook's signing key, an Apprise URL's password and its token) and in the
settings (the API token, the SMTP password) appears in no output of any surface: the API's
answers and its document, the dashboard's pages, the CLI's commands and their `--json`,
`export`, `config`, error lines, the worker's log and the notices themselves. Only
`channels --reveal` shows one, as it is asked to."""

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import httpx
import pytest
from aiohttp import web

from tests.chaos.stack import serve
from tests.conftest import PageServer
from tests.helpers import cli, serve_process, worker_process
from tests.waits import eventually
from workers.embedded import free_port

pytestmark = pytest.mark.e2e
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
API_TOKEN = "api-token-planted-5f0d9c2e7a41"
SMTP_PASSWORD = "smtp-password-planted-8b1e"
APPRISE_PASSWORD = "apprisepw-planted-c3d7"
GOTIFY_TOKEN = "GotifyPlanted7Q"
WEBHOOK_KEY = b"webhook-key-planted-0123456789ab"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(WEBHOOK_KEY).decode()
SECRETS = [
    API_TOKEN, SMTP_PASSWORD, APPRISE_PASSWORD, GOTIFY_TOKEN, WEBHOOK_SECRET,
    WEBHOOK_SECRET.removeprefix("whsec_"), WEBHOOK_KEY.decode(),
]  # fmt: skip


@dataclass
class Receivers:
    """The webhook's and the Apprise services' endpoints, all failing (500), so that each
    delivery records an error: what they were sent is kept."""

    base: str = ""
    bodies: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.text())
        return web.json_response({"error": "down for maintenance"}, status=500)


@pytest.fixture
async def receivers() -> AsyncIterator[Receivers]:
    got = Receivers()
    async with serve([web.post(p, got.handle) for p in ("/hook", "/json", "/message")]) as base:
        got.base = base
        yield got


def leaks(where: str, text: str) -> list[str]:
    return [f"{where}: {secret}" for secret in SECRETS if secret in text]


async def test_no_surface_shows_a_secret_unless_revealed(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer, receivers: Receivers
) -> None:
    env = {
        **env, "PRICEWATCH_API_TOKEN": API_TOKEN, "PRICEWATCH_SMTP_HOST": "127.0.0.1",
        "PRICEWATCH_SMTP_PORT": str(free_port()), "PRICEWATCH_SMTP_USERNAME": "pricewatch",
        "PRICEWATCH_SMTP_PASSWORD": SMTP_PASSWORD, "PRICEWATCH_LOG_FORMAT": "text",
    }  # fmt: skip
    host = receivers.base.removeprefix("http://")
    apprise = [f"json://ops:{APPRISE_PASSWORD}@{host}/json", f"gotify://{host}/{GOTIFY_TOKEN}"]
    page_server.set("/leaky", "<p>Pro 10 EUR</p>")
    logged: list[bytes] = []
    found: list[str] = []
    async with worker_process(env, logged), serve_process(env) as base:
        code, out, err = await cli(
            env, "add", "leaky", page_server.url("/leaky"), "--every", "1h",
            "--webhook", f"{receivers.base}/hook", "--email", "ops@example.com",
            "--notify", apprise[0], "--notify", apprise[1],
        )  # fmt: skip
        assert code == 0, err
        found += leaks("add", out + err)
        await pool.execute("UPDATE channels SET secret = $1 WHERE kind = 'webhook'", WEBHOOK_SECRET)
        assert (await cli(env, "check-now", "leaky"))[0] == 0
        page_server.set("/leaky", "<p>Pro 12 EUR</p>")
        assert (await cli(env, "check-now", "leaky"))[0] == 0

        async def every_channel_failed_once() -> bool:
            tried = "SELECT count(*) FROM deliveries WHERE last_error IS NOT NULL"
            return bool(await pool.fetchval(tried) == 4)

        await eventually(every_channel_failed_once, what="a failed attempt on each channel")
        # They are where they belong: in Postgres, and shown when revealed.
        assert await pool.fetchval(
            "SELECT count(*) FROM channels WHERE secret = $1", WEBHOOK_SECRET
        )
        code, revealed, _ = await cli(env, "channels", "leaky", "--reveal")
        assert code == 0 and WEBHOOK_SECRET in revealed and APPRISE_PASSWORD in revealed

        commands = [
            [*args, *json_flag]
            for args in [
                ["list"], ["status", "leaky"], ["history", "leaky"], ["channels", "leaky"],
                ["deliveries", "leaky"], ["diff", "leaky"], ["failures"], ["config"],
            ]
            for json_flag in ([], ["--json"])
        ] + [["export"]] + [
            ["add", "leaky-2", page_server.url("/leaky"), "--notify", *bad]
            for bad in [
                [apprise[0], "--selector", "p["],  # refused for the selector
                [f"nosuch://ops:{APPRISE_PASSWORD}@{host}/"],  # refused for the URL itself
            ]
        ]  # fmt: skip
        said = await asyncio.gather(*(cli(env, *command) for command in commands))
        for command, (code, out, err) in zip(commands, said, strict=True):
            assert code == (2 if command[0] == "add" else 0), (command, err)
            found += leaks(" ".join(command), out + err)
        assert "apprise-" in said[commands.index(["export"])][1]

        bearer = {"Authorization": f"Bearer {API_TOKEN}"}
        async with httpx.AsyncClient(base_url=f"{base}/api/v1", headers=bearer, timeout=60) as http:
            for path in [
                "/targets", "/targets/leaky", "/targets/leaky/channels",
                "/targets/leaky/deliveries", "/targets/leaky/history", "/targets/leaky/diff",
                "/failures", "/openapi.json", "/targets/nope",
            ]:  # fmt: skip
                answer = await http.get(path)
                assert answer.status_code in (200, 404), (path, answer.text)
                found += leaks(f"GET {path}", answer.text + json.dumps(dict(answer.headers)))
            for notify in [apprise[0], f"nosuch://ops:{APPRISE_PASSWORD}@{host}/"]:
                entry = {"id": "leaky-2", "url": page_server.url("/x"), "notify": [notify]}
                put = await http.put("/targets/leaky-2", json={**entry, "selector": "p["})
                assert put.status_code in (400, 422), put.text
                found += leaks(f"PUT notify {notify}", put.text)
            channels = (await http.get("/targets/leaky/channels")).json()
            assert {c["kind"] for c in channels} == {"webhook", "email", "apprise"}

        async with httpx.AsyncClient(base_url=base, timeout=60) as browser:
            csrf = CSRF.findall((await browser.get("/login")).text)[0]
            signed = await browser.post("/login", data={"csrf": csrf, "token": API_TOKEN})
            assert signed.status_code == 303
            for path in ["/", "/targets/leaky", "/targets/leaky/remove", "/failures", "/nope"]:
                page = await browser.get(path)
                assert page.status_code in (200, 404), path
                found += leaks(f"page {path}", page.text)
            assert "ops:****@" in (await browser.get("/targets/leaky")).text  # Apprise's mask
    found += leaks("worker log", b"".join(logged).decode(errors="replace"))
    assert receivers.bodies, "the notices were sent"
    found += leaks("a notice", "\n".join(receivers.bodies))
    assert found == []
