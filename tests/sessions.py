"""Signing in to `serve` in process: the app behind an httpx client, with no lifespan (nothing
here reaches Temporal or Postgres)."""

import re

import httpx

from pricewatch.settings import Settings
from surfaces import web

TOKEN = "k7Qz-R2mX_9vLp4a-Hc8Wn3e"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def app_client(token: str | None, **fields: object) -> httpx.AsyncClient:
    """The app (no lifespan: nothing here reaches Temporal or Postgres) behind a client on
    its own cookie jar."""
    chosen = Settings(api_token=token, **fields)  # type: ignore[arg-type]
    return served(web.create_app(chosen))


def served(app: object, base_url: str = "http://127.0.0.1:8090") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url)  # type: ignore[arg-type]


async def signed_in(app: httpx.AsyncClient, given: str) -> bool:
    """Sign in with `given`; whether a private page is then served (a 404 for a page that
    does not exist, not the 303 to /login)."""
    csrf = CSRF.findall((await app.get("/login")).text)[0]
    answer = await app.post("/login", data={"csrf": csrf, "token": given})
    assert answer.status_code in (303, 401), answer.text
    private = await app.get("/nothing")
    assert (answer.status_code == 303) == (private.status_code == 404)
    return answer.status_code == 303
