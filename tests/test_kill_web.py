"""Who gets into `pricewatch serve` and what it answers, in process (issue 49's mutation run
over surfaces/auth.py and surfaces/web.py, docs/testing.md#mutation-testing): the Origin
rule without a token, the pages a session guards, sign-in starting a fresh session, the CSRF
check on a session that has no token yet, the way back after signing in, the session's key,
the guard's headers and body limit as plain ASGI, the error shapes, the bind and the server.

The app runs without its lifespan (as in test_signin.py) over a stand-in for the client that
answers only what a test asks of it."""

import hmac
import html
import json
import signal
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.types import Message, Receive, Scope, Send
from temporalio.service import RPCError, RPCStatusCode

from client.inputs import BadInput, Unknown
from client.temporal import address as temporal_address
from pricewatch.settings import Settings
from pricewatch.views import ChannelView
from surfaces import api, auth, web
from tests.sessions import CSRF, TOKEN, app_client, served, signed_in

ORIGIN = "http://evil.example"
WEBHOOK_SECRET = "whsec_c2VjcmV0LXBsYW50ZWQtaW4tdGhlLWFwaQ=="
APPRISE_URL = "json://ops:planted-password@h.example/"


class Stand:
    """The client as far as the routes here call it: pause and resume work, a target's
    status raises what `raising` holds."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.raising: BaseException | None = None

    async def pause(self, target_id: str) -> None:
        self.calls.append(f"pause {target_id}")

    async def resume(self, target_id: str) -> None:
        self.calls.append(f"resume {target_id}")

    async def channels(self, target_id: str) -> list[ChannelView]:
        return [
            ChannelView(channel_id="hook", kind="webhook", destination="https://h.example/",
                        secret=WEBHOOK_SECRET, disabled_reason=None),
            ChannelView(channel_id="chat", kind="apprise", destination="json://h.example/",
                        secret=APPRISE_URL, disabled_reason=None),
        ]  # fmt: skip

    async def status_view(self, target_id: str) -> object:
        assert self.raising is not None
        raise self.raising


def standing(token: str | None = None, **fields: object) -> tuple[httpx.AsyncClient, Stand]:
    client = app_client(token, **fields)
    stand = Stand()
    client._transport.app.state.pricewatch = stand  # type: ignore[attr-defined]
    return client, stand


# The Origin rule (no token, loopback only) ------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_a_change_from_another_site_is_refused_in_one_line(method: str) -> None:
    app, stand = standing()
    async with app:
        answer = await app.request(method, "/api/v1/targets/acme/pause", headers={"Origin": ORIGIN})
    assert answer.status_code == 403
    assert answer.json() == {"error": f"a change from another site ({ORIGIN}) is refused"}
    assert stand.calls == []


async def test_a_change_from_this_site_or_no_browser_and_any_read_are_let_through() -> None:
    app, stand = standing()
    async with app:
        same = {"Origin": "http://127.0.0.1:8090"}
        assert (await app.post("/api/v1/targets/acme/pause", headers=same)).status_code == 204
        assert (await app.post("/api/v1/targets/acme/resume")).status_code == 204
        stand.raising = Unknown("no target named 'acme'")
        for method, status in [("GET", 404), ("HEAD", 405)]:  # past the guard, to the router
            read = await app.request(method, "/api/v1/targets/acme", headers={"Origin": ORIGIN})
            assert read.status_code == status, method
    assert stand.calls == ["pause acme", "resume acme"]


async def test_with_a_token_the_bearer_decides_whatever_the_origin() -> None:
    app, stand = standing(TOKEN)
    async with app:
        headers = {"Origin": ORIGIN, "Authorization": f"Bearer {TOKEN}"}
        assert (await app.post("/api/v1/targets/acme/pause", headers=headers)).status_code == 204
    assert stand.calls == ["pause acme"]


async def test_a_token_with_spaces_is_the_rest_of_the_header() -> None:
    """The scheme ends at the first space; whatever the setting holds, spaces too, follows."""
    spaced = "correct horse battery staple"
    async with app_client(spaced) as app:
        headers = {"Authorization": f"Bearer {spaced}"}
        assert (await app.get("/api/v1/openapi.json", headers=headers)).status_code == 200


def test_the_token_is_matched_whole() -> None:
    assert auth.matches(TOKEN, TOKEN)
    assert not auth.matches(TOKEN[:-1], TOKEN)
    assert not auth.matches("", TOKEN)


# The pages a session guards ---------------------------------------------------------------


async def test_without_a_session_only_the_sign_in_and_the_static_files_are_served() -> None:
    async with app_client(TOKEN) as app:
        assert (await app.get("/login")).status_code == 200
        assert (await app.get("/static/style.css")).status_code == 200
        for path in ["/", "/login/", "/loginx", "/static", "/targets/acme", "/failures"]:
            answer = await app.get(path)
            assert answer.status_code == 303, path
            assert answer.headers["location"].startswith("/login?next="), path


# Sign-in and CSRF -------------------------------------------------------------------------


async def csrf(app: httpx.AsyncClient) -> str:
    found: str = CSRF.findall((await app.get("/login")).text)[0]
    return found


async def test_the_csrf_token_is_the_session_s_until_sign_in_starts_a_new_one() -> None:
    async with app_client(TOKEN) as app:
        before = await csrf(app)
        assert await csrf(app) == before  # made once, kept
        assert len(before) >= 43  # 32 random bytes, base64
        assert await signed_in(app, TOKEN)
        assert await csrf(app) != before


async def test_without_a_token_there_is_nothing_to_sign_in_with() -> None:
    async with app_client(None) as app:
        answer = await app.post("/login", data={"csrf": await csrf(app), "token": "anything"})
    assert answer.status_code == 401 and "wrong token" in answer.text


@pytest.mark.parametrize("given_token", ["", "None", "x"])
async def test_a_session_without_a_csrf_token_matches_no_form(given_token: str) -> None:
    async with app_client(None) as app:  # no page seen: the session has no CSRF token yet
        answer = await app.post("/logout", data={"csrf": given_token})
    assert answer.status_code == 403
    line = "the form's CSRF token is wrong or missing: reload the page"
    assert f">pricewatch: {line}</p>" in html.unescape(answer.text)


async def test_a_wrong_csrf_token_is_refused_and_the_right_one_signs_out() -> None:
    async with app_client(TOKEN) as app:
        assert await signed_in(app, TOKEN)
        right = await csrf(app)
        for wrong in ["", right[:-1], right + "x"]:
            assert (await app.post("/logout", data={"csrf": wrong})).status_code == 403
        out = await app.post("/logout", data={"csrf": right})
        assert (out.status_code, out.headers["location"]) == (303, "/login")
        assert (await app.get("/nothing")).status_code == 303


@given(st.text(st.sampled_from("/\\:.@ax"), max_size=8))
def test_the_way_back_is_a_path_on_this_server(path: str) -> None:
    back = auth.local(path)
    assert back in (path, "/")
    assert back.startswith("/") and not back.startswith("//") and "\\" not in back


@pytest.mark.parametrize(
    ("next_", "back"),
    [("/targets/acme?q=1", "/targets/acme?q=1"), ("//evil.example", "/"),
     ("https://evil.example/", "/"), ("/\\evil.example", "/"), ("targets", "/")],
)  # fmt: skip
async def test_sign_in_goes_back_only_to_this_server(next_: str, back: str) -> None:
    async with app_client(TOKEN) as app:
        form = {"csrf": await csrf(app), "token": TOKEN, "next": next_}
        answer = await app.post("/login", data=form)
    assert (answer.status_code, answer.headers["location"]) == (303, back)


def test_the_session_key_comes_from_the_token_or_is_new_each_start() -> None:
    """From the token: a session outlives a restart and an upgrade (the derivation is part
    of the cookie's format) and is none on a deployment with another token."""
    derived = hmac.new(TOKEN.encode(), b"pricewatch session", "sha256").hexdigest()
    assert auth.session_key(TOKEN) == derived
    assert auth.session_key(TOKEN[::-1]) != derived
    fresh = auth.session_key(None)
    assert len(fresh) >= 64 and fresh != auth.session_key(None)
    int(fresh, 16)


async def test_the_session_lasts_a_week() -> None:
    async with app_client(None) as app:
        cookie = (await app.get("/login")).headers["set-cookie"]
    assert "max-age=604800" in cookie.lower()


# The guard as plain ASGI ------------------------------------------------------------------


def scope(path: str = "/api/v1/x", headers: dict[str, str] | None = None) -> Scope:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return {"type": "http", "method": "PUT", "path": path, "raw_path": path.encode(),
            "query_string": b"", "headers": raw, "scheme": "http", "server": ("127.0.0.1", 8090),
            "root_path": "", "http_version": "1.1"}  # fmt: skip


async def guarded(
    chunks: list[bytes],
    headers: dict[str, str] | None = None,
    path: str = "/api/v1/x",
    ended: bool = True,
    hosts: set[str] | None = None,
) -> tuple[list[Message], list[Message]]:
    """What the app behind the guard received (all it asked for, the disconnect included),
    and what was sent back. `ended=False`: the client goes before its last chunk."""
    incoming: list[Message] = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1 or not ended}
        for i, chunk in enumerate(chunks)
    ]
    incoming.append({"type": "http.disconnect"})
    got: list[Message] = []
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            got.append(await receive())
            if got[-1]["type"] == "http.disconnect":
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    await web.Guard(app, token=None, hosts=hosts)(scope(path, headers), receive, send)
    return got, sent


def headers_of(sent: list[Message]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in sent[0]["headers"]}


async def test_the_body_is_handed_on_whole_then_the_disconnect() -> None:
    got, sent = await guarded([b"ab", b"", b"cd"])
    assert [m.get("body") for m in got] == [b"ab", b"", b"cd", None]
    assert got[-1] == {"type": "http.disconnect"}
    assert sent[0]["status"] == 200
    assert headers_of(sent)["cache-control"] == "no-store"


async def test_a_disconnect_before_the_body_ends_is_handed_on() -> None:
    got, sent = await guarded([b"ab"], ended=False)
    assert got == [
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.disconnect"},
    ]
    assert sent[0]["status"] == 200


async def test_a_body_of_exactly_the_limit_is_read_one_byte_more_is_not() -> None:
    limit = web.MAX_BODY
    got, sent = await guarded([b"x" * (limit - 1), b"x"])
    assert sent[0]["status"] == 200 and sum(len(m.get("body", b"")) for m in got) == limit
    got, sent = await guarded([b"x" * limit, b"x"])
    assert sent[0]["status"] == 413 and got == []
    declared = {"Content-Length": str(limit)}
    assert (await guarded([b"x" * limit], declared))[1][0]["status"] == 200
    declared = {"Content-Length": str(limit + 1)}
    got, sent = await guarded([b"x"], declared)
    assert sent[0]["status"] == 413 and got == []  # refused before a byte is read


async def test_static_files_may_be_cached_and_every_answer_has_the_headers() -> None:
    _, sent = await guarded([b""], path="/static/style.css")
    headers = headers_of(sent)
    assert "cache-control" not in headers
    for header, value in web.HEADERS.items():
        assert headers[header.lower()] == value


async def test_other_scopes_pass_the_guard_untouched() -> None:
    seen: list[object] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)
        seen.append(await receive())
        await send({"type": "lifespan.startup.complete"})

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        seen.append(message)

    await web.Guard(app, token=TOKEN, hosts=set())({"type": "lifespan"}, receive, send)
    assert seen == [
        {"type": "lifespan"}, {"type": "lifespan.startup"}, {"type": "lifespan.startup.complete"}
    ]  # fmt: skip


async def test_a_request_without_a_host_is_refused_as_no_name() -> None:
    got, sent = await guarded([b""], hosts=web.LOOPBACK_HOSTS)
    assert got == [] and sent[0]["status"] == 400
    assert json.loads(sent[1]["body"]) == {"error": "this server does not answer to the host ''"}


@pytest.mark.parametrize("host", ["[bad", ""])
async def test_an_unreadable_host_is_refused_as_no_name(host: str) -> None:
    async with app_client(None) as app:
        answer = await app.get("/api/v1/targets", headers={"Host": host})
    assert answer.status_code == 400
    assert answer.json() == {"error": "this server does not answer to the host ''"}


# Errors, the document, the bind -----------------------------------------------------------


@pytest.mark.parametrize(
    ("raised", "status", "line"),
    [
        (Unknown("no target named 'acme'"), 404, "no target named 'acme'"),
        (BadInput("bad\nsecond line"), 400, "bad"),
        (
            RPCError("down", RPCStatusCode.UNAVAILABLE, b""),
            503,
            "cannot reach Temporal at {address}: down",
        ),
    ],
)
async def test_an_expected_failure_is_its_one_line_and_status(
    raised: BaseException, status: int, line: str
) -> None:
    line = line.format(address=temporal_address())
    app, stand = standing()
    stand.raising = raised
    async with app:
        answer = await app.get("/api/v1/targets/acme")
        page = await app.get("/targets/acme/remove")
    assert (answer.status_code, answer.json()) == (status, {"error": line})
    assert page.status_code == status and f"pricewatch: {line}" in html.unescape(page.text)


async def test_a_malformed_request_names_its_field() -> None:
    app, _ = standing()
    async with app:
        api_answer = await app.get("/api/v1/targets?limit=0")
        page = await app.get("/?page=0")
        body = await app.put("/api/v1/targets/acme", json={"id": "acme"})
        duration = await app.put(
            "/api/v1/targets/acme", json={"id": "acme", "url": "https://a.example/", "every": "x"}
        )
        shapeless = await app.put("/api/v1/targets/acme", json=[])
    assert api_answer.status_code == 422
    assert api_answer.json() == {"error": "limit: Input should be greater than or equal to 1"}
    assert page.status_code == 400
    assert "pricewatch: page: Input should be greater than or equal to 1" in page.text
    assert (body.status_code, body.json()) == (422, {"error": "url: Field required"})
    said = duration.json()["error"]
    assert said.startswith("every: ") and "Value error" not in said, said
    assert shapeless.status_code == 422 and not shapeless.json()["error"].startswith(":")


async def test_an_unknown_page_says_its_path() -> None:
    async with app_client(None) as app:
        api_answer = await app.get("/api/v1/nothing")
        page = await app.get("/nothing")
        docs = [await app.get(path) for path in ["/docs", "/redoc"]]
    assert api_answer.json() == {"error": "no such page: /api/v1/nothing"}
    assert page.status_code == 404 and "pricewatch: no such page: /nothing" in page.text
    assert [d.status_code for d in docs] == [404, 404]  # Swagger and ReDoc load from a CDN


async def test_the_document_served_is_the_committed_one() -> None:
    async with app_client(None) as app:
        served = await app.get("/api/v1/openapi.json")
    assert served.json() == json.loads(api.DOCUMENT.read_text())


async def test_the_lifespan_opens_the_client_and_closes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[Any] = []

    class Opened:
        def __init__(self, settings: Settings, pool_size: int) -> None:
            opened.append(self)
            self.closed = False

        async def __aenter__(self) -> "Opened":
            return self

        async def __aexit__(self, *exc: object) -> None:
            self.closed = True

    monkeypatch.setattr(web, "Pricewatch", Opened)
    app = web.create_app(Settings())
    async with app.router.lifespan_context(app):
        assert app.state.pricewatch is opened[0] and not opened[0].closed
    assert opened[0].closed


@pytest.mark.parametrize(
    ("host", "loop"),
    [("localhost", True), ("127.0.0.2", True), ("::1", True), ("0.0.0.0", False),
     ("192.0.2.1", False), ("localhost.example", False), ("LOCALHOST", False)],
)  # fmt: skip
def test_loopback_is_what_only_this_machine_reaches(host: str, loop: bool) -> None:
    assert web.loopback(host) is loop


def test_an_open_bind_without_a_token_is_refused_in_one_line() -> None:
    with pytest.raises(BadInput) as refused:
        web.refuse_open_bind("0.0.0.0", Settings())
    assert str(refused.value) == (
        "listening on 0.0.0.0 lets other machines in: set PRICEWATCH_API_TOKEN "
        "(or listen on 127.0.0.1)"
    )
    web.refuse_open_bind("0.0.0.0", Settings(api_token=TOKEN))
    web.refuse_open_bind("127.0.0.1", Settings())


def test_a_port_in_use_is_one_line() -> None:
    with web.listen("127.0.0.1", 0) as first:
        port = first.getsockname()[1]
        assert first.family is socket.AF_INET
        with pytest.raises(OSError) as taken:
            web.listen("127.0.0.1", port)
    assert str(taken.value) == f"cannot listen on 127.0.0.1:{port}: Address already in use"
    with web.listen("::1", 0) as six:
        assert six.family is socket.AF_INET6


async def test_the_default_port_names_the_cookie() -> None:
    async with served(web.create_app(Settings())) as app:
        assert (await app.get("/login")).headers["set-cookie"].startswith("pricewatch_8090=")


async def test_the_server_says_little_and_an_embedded_one_leaves_the_signals_alone() -> None:
    alone = web.server(Settings(), "localhost", 8093)
    config = alone.config
    assert (config.host, config.port, config.lifespan) == ("localhost", 8093, "on")
    async with served(config.app) as app:  # the app for that port
        assert (await app.get("/login")).headers["set-cookie"].startswith("pricewatch_8093=")
    assert (config.access_log, config.server_header, config.log_level) == (False, False, "warning")
    assert type(alone) is not web._Embedded
    embedded = web.server(Settings(), "127.0.0.1", 8093, embedded=True)
    assert isinstance(embedded, web._Embedded) and embedded.config.port == 8093
    before = signal.getsignal(signal.SIGINT)
    with embedded.capture_signals():
        assert signal.getsignal(signal.SIGINT) is before


def test_the_static_directory_is_the_package_s() -> None:
    assert (web.HERE / "static" / "style.css").is_file()
    assert Path(web.__file__).parent == web.HERE


async def test_a_malformed_path_names_its_parameter() -> None:
    app, _ = standing()
    async with app:
        answer = await app.get("/api/v1/targets/Not_an_id")
    assert answer.status_code == 422
    assert answer.json()["error"].startswith("target_id: String should match pattern")


async def test_the_api_never_hands_out_a_channel_s_secret() -> None:
    """Issue 49's first hole: the API's channel listing is masked as the CLI's is."""
    app, _ = standing()
    async with app:
        answer = await app.get("/api/v1/targets/acme/channels")
    assert answer.status_code == 200
    assert [c["secret"] for c in answer.json()] == ["whsec_********", "********"]
    assert "planted" not in answer.text and "c2VjcmV0" not in answer.text
