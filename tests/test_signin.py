"""Who gets in, in process (the app without its client: every request here is answered by the
guard, the sign-in or the router before Temporal or Postgres would be asked). The token is a
setting that is set or unset, long enough to be a secret, and compared whole in constant
time for the API's bearer and the dashboard's sign-in; a session is this deployment's only.
Also the web edges of issue 40: Allow on 405, the rebinding refusal's headers and shape, the
body limit, the cookie's name and Secure flag."""

import hmac
import html
import os
import string
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from client.inputs import BadInput
from pricewatch.settings import TOKEN_FLOOR, Settings
from surfaces import web
from tests.helpers import cli
from tests.sessions import TOKEN, app_client, served, signed_in

# RFC 6750's b64token characters: what a bearer token may hold.
TOKEN_CHARS = string.ascii_letters + string.digits + "-._~+/"
tokens = st.text(TOKEN_CHARS, min_size=TOKEN_FLOOR, max_size=40)
GUARDING = ["api_token", "session_cookie", "smtp_username", "smtp_password", "database_url"]
blank = st.text(" \t\r\n\f\v", max_size=5)
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def wrong_guesses(token: str) -> Iterator[str]:
    """What a careless comparison would let through: every prefix (the empty one too),
    every suffix, the token and one more character, its case changed."""
    yield from (token[:n] for n in range(len(token)))
    yield from (token[n:] for n in range(1, len(token)))
    yield token + "x"
    yield "x" + token
    if token.swapcase() != token:
        yield token.swapcase()


# Settings ------------------------------------------------------------------------------


@given(field=st.sampled_from(GUARDING), value=blank)
def test_an_empty_or_blank_setting_that_guards_something_is_unset(field: str, value: str) -> None:
    assert getattr(Settings(**{field: value}), field) is None  # type: ignore[arg-type]


def test_empty_is_unset_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRICEWATCH_API_TOKEN", "")
    monkeypatch.setenv("PRICEWATCH_SMTP_PASSWORD", "  ")
    monkeypatch.setenv("PRICEWATCH_SMTP_USERNAME", "")
    chosen = Settings()
    assert (chosen.api_token, chosen.smtp_password, chosen.smtp_username) == (None, None, None)


@given(short=st.text(TOKEN_CHARS, min_size=1, max_size=TOKEN_FLOOR - 1))
def test_a_token_too_short_to_be_a_secret_is_refused_without_echoing_it(short: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(api_token=short)
    error = refused.value.errors()[0]
    assert error["loc"] == ("api_token",) and "too short for a secret" in error["msg"]
    assert "input_value" not in str(refused.value)  # the value is never echoed


@given(token=tokens)
def test_a_token_long_enough_is_kept_as_given(token: str) -> None:
    chosen = Settings(api_token=token)
    assert chosen.api_token is not None and chosen.api_token.get_secret_value() == token


def test_an_empty_token_is_never_taken_for_no_sign_in() -> None:
    """Beyond loopback an empty token is a missing one; one slipped past the settings is
    refused, not read as "no token"."""
    with pytest.raises(BadInput, match="set PRICEWATCH_API_TOKEN"):
        web.create_app(Settings(api_token=""), "0.0.0.0")
    for slipped in ["", "short"]:
        forced = Settings.model_construct(api_token=SecretStr(slipped))
        with pytest.raises(ValueError, match="too short for a secret"):
            web.create_app(forced)


@pytest.mark.parametrize(
    ("token", "args", "says"),
    [
        ("", ["serve", "--host", "0.0.0.0"], "listening on 0.0.0.0 lets other machines in"),
        ("   ", ["serve", "--host", "0.0.0.0"], "listening on 0.0.0.0 lets other machines in"),
        ("short-token", ["serve"], "api_token: 11 characters are too short for a secret"),
        ("short-token", ["dev", "--dashboard-port", "1"], "api_token: 11 characters are too"),
    ],
)
async def test_serve_and_dev_refuse_an_empty_or_short_token_at_start(
    token: str, args: list[str], says: str
) -> None:
    code, out, err = await cli({**os.environ, "PRICEWATCH_API_TOKEN": token}, *args)
    assert (code, out) == (2, "")
    assert err.startswith(f"pricewatch: {says}") and err.count("\n") == 1, err


# The API's bearer token ------------------------------------------------------------------


async def bearer(app: httpx.AsyncClient, header: str | None) -> int:
    headers = {} if header is None else {"Authorization": header}
    return (await app.get("/api/v1/openapi.json", headers=headers)).status_code


@FAST
@given(token=tokens)
@example(token=TOKEN)
async def test_the_bearer_token_is_compared_whole(token: str) -> None:
    async with app_client(token) as app:
        assert await bearer(app, f"Bearer {token}") == 200
        for guess in wrong_guesses(token):
            assert await bearer(app, f"Bearer {guess}") == 401, guess
        assert await bearer(app, None) == 401
        assert await bearer(app, "Bearer") == 401
        assert await bearer(app, token) == 401  # no scheme
        for scheme in ["Basic", "Token", "Bearer:", "Bearer\t"]:
            assert await bearer(app, f"{scheme} {token}") == 401, scheme


async def test_the_scheme_is_case_insensitive_and_one_space_apart() -> None:
    """RFC 7235: the scheme's case does not matter. The token's does, and it is the rest of
    the header after one space (a second space is part of what is compared)."""
    async with app_client(TOKEN) as app:
        for scheme in ["Bearer", "bearer", "BEARER"]:
            assert await bearer(app, f"{scheme} {TOKEN}") == 200
        assert await bearer(app, f"Bearer  {TOKEN}") == 401
        assert await bearer(app, f"Bearer {TOKEN} ") == 401


async def test_a_refusal_says_what_is_needed_in_one_line() -> None:
    async with app_client(TOKEN) as app:
        refused = await app.get("/api/v1/targets", headers={"Authorization": "Bearer x"})
    assert refused.status_code == 401
    assert refused.json() == {
        "error": "a bearer token is needed: Authorization: Bearer $PRICEWATCH_API_TOKEN"
    }
    for header, value in web.HEADERS.items():
        assert refused.headers[header] == value


def spied(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, bytes]]:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    return compared


async def test_the_tokens_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """hmac.compare_digest takes as long whatever the first differing byte: a comparison
    that stops early tells a guesser how much of a guess was right."""
    compared = spied(monkeypatch)
    async with app_client(TOKEN) as app:
        assert await bearer(app, "Bearer k7Qz") == 401
        assert (b"k7Qz", TOKEN.encode()) in compared
        compared.clear()
        assert not await signed_in(app, "k7Qz")
        assert (b"k7Qz", TOKEN.encode()) in compared


# The dashboard's sign-in -----------------------------------------------------------------


@FAST
@given(token=tokens)
@example(token=TOKEN)
async def test_the_sign_in_compares_the_token_whole(token: str) -> None:
    async with app_client(token) as app:
        for guess in [*wrong_guesses(token), " " + token, token + "\n"]:
            assert not await signed_in(app, guess), guess
        assert await signed_in(app, token)


async def test_a_session_from_another_deployment_is_refused() -> None:
    """Two servers under one cookie name (set so, or one host's port behind a proxy): a
    session begun on one is no session on the other, whose key comes from its own token."""
    name = {"session_cookie": "pricewatch_shared"}
    async with app_client(TOKEN[::-1], **name) as there:
        assert await signed_in(there, TOKEN[::-1])
        cookie = there.cookies["pricewatch_shared"]
    async with app_client(TOKEN, **name) as here:
        here.cookies.set("pricewatch_shared", cookie)
        answer = await here.get("/nothing")
    assert (answer.status_code, answer.headers["location"]) == (303, "/login?next=%2Fnothing")
    async with app_client(TOKEN[::-1], **name) as same:  # that deployment, restarted
        same.cookies.set("pricewatch_shared", cookie)
        assert (await same.get("/nothing")).status_code == 404


# The cookie, 405, rebinding, body size ------------------------------------------------------


async def set_cookie(app: httpx.AsyncClient) -> str:
    async with app:
        return (await app.get("/login")).headers["set-cookie"]


async def test_the_cookie_is_named_for_the_port_or_the_setting() -> None:
    for port in [8091, 8092]:
        cookie = await set_cookie(served(web.create_app(Settings(), port=port)))
        assert cookie.startswith(f"pricewatch_{port}=")
    named = await set_cookie(app_client(None, session_cookie="ops_dashboard"))
    assert named.startswith("ops_dashboard=")
    with pytest.raises(ValidationError):
        Settings(session_cookie="a b;")


async def test_a_secure_cookie_is_a_setting() -> None:
    cookie = (await set_cookie(app_client(None))).lower()
    assert "secure" not in cookie and "httponly" in cookie and "samesite=lax" in cookie
    secure = (await set_cookie(app_client(None, cookie_secure=True))).lower()
    assert "; secure" in secure


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", "/api/v1/failures", "GET"),
        ("PATCH", "/api/v1/targets/acme", "GET, PUT, DELETE"),
        ("GET", "/targets/acme/pause", "POST"),
        ("DELETE", "/", "GET"),
        ("PUT", "/failures", "GET"),
    ],
)
async def test_a_405_says_what_is_allowed(method: str, path: str, allow: str) -> None:
    async with app_client(None) as app:
        answer = await app.request(method, path)
    assert answer.status_code == 405
    assert answer.headers["allow"] == allow
    if path.startswith("/api/"):
        assert answer.json() == {"error": "Method Not Allowed"}
    else:
        assert "pricewatch: Method Not Allowed" in answer.text


@pytest.mark.parametrize("path", ["/api/v1/targets", "/"])
async def test_a_rebound_host_name_gets_the_one_line_error_and_every_header(path: str) -> None:
    async with app_client(None) as app:
        answer = await app.get(path, headers={"Host": "evil.example:8090"})
    assert answer.status_code == 400
    line = "this server does not answer to the host 'evil.example'"
    if path.startswith("/api/"):
        assert answer.json() == {"error": line}
    else:
        assert f"pricewatch: {line}" in html.unescape(answer.text)
    for header, value in web.HEADERS.items():
        assert answer.headers[header] == value
    assert answer.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("host", ["127.0.0.1:8090", "localhost", "LOCALHOST:1", "[::1]:8090"])
async def test_loopback_names_are_answered(host: str) -> None:
    async with app_client(None) as app:
        assert (await app.get("/login", headers={"Host": host})).status_code == 200


async def test_beyond_loopback_any_host_name_is_answered() -> None:
    chosen = Settings(api_token=TOKEN)
    async with served(web.create_app(chosen, "0.0.0.0")) as app:
        answer = await app.get("/login", headers={"Host": "pricewatch.example.com"})
    assert answer.status_code == 200


async def test_a_body_over_the_limit_is_refused_before_it_is_read() -> None:
    big = b'{"id": "a", "url": "' + b"x" * (10 * 2**20) + b'"}'

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        for _ in range(17):
            yield b"x" * 2**16

    async with app_client(None) as app:
        answer = await app.put("/api/v1/targets/a", content=big)
        assert answer.status_code == 413
        assert answer.json() == {"error": "the request body is over the limit of 1 MiB"}
        for header, value in web.HEADERS.items():
            assert answer.headers[header] == value
        streamed = await app.put("/api/v1/targets/a", content=chunks())
        assert streamed.status_code == 413
        form = await app.post("/targets", data={"id": "a", "url": "x" * (web.MAX_BODY + 1)})
        assert form.status_code == 413 and "over the limit of 1 MiB" in form.text


async def test_a_body_within_the_limit_reaches_the_app() -> None:
    """Just under the limit it is parsed (and refused for what it says, not its size)."""
    async with app_client(None) as app:
        form = await app.post("/targets", data={"id": "a", "url": "x" * (web.MAX_BODY - 20)})
    assert form.status_code == 400
    assert "url: String should have at most 2000 characters" in form.text
