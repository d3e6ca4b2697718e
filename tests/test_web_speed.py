"""A reused connection answers as fast as a new one: the listener's TCP_NODELAY (issue 44).

Without it every answer uvicorn writes in two parts (the head, then the body) on a kept-alive
connection waits for the client's delayed ACK, about 40 ms on Linux."""

import asyncio
import socket
import statistics
import time

import httpx
import pytest
import uvicorn

from pricewatch.settings import Settings
from surfaces import api, web


async def two_writes(scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
    """A bare ASGI app answering as a page does: the head, then the body, apart."""
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"x" * 2000})  # type: ignore[operator]


def test_an_accepted_connection_has_nodelay() -> None:
    with web.listen("127.0.0.1", 0) as bound, socket.create_connection(bound.getsockname()):
        accepted, _ = bound.accept()
        with accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


async def test_a_kept_alive_connection_does_not_wait_for_a_delayed_ack() -> None:
    bound = web.listen("127.0.0.1", 0)
    port = bound.getsockname()[1]
    config = uvicorn.Config(two_writes, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[bound]))
    try:
        while not server.started:  # noqa: ASYNC110 (uvicorn says so by a flag only)
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            took = []
            for _ in range(15):
                began = time.perf_counter()
                assert (await http.get("/")).status_code == 200
                took.append(time.perf_counter() - began)
        # Nagle's stall is ~40 ms a request; an answer here takes about 1 ms.
        assert statistics.median(took[1:]) < 0.02, took
    finally:
        server.should_exit = True
        await serving
        bound.close()


def test_the_openapi_document_is_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    real = api.openapi

    def counted(routes: list[object]) -> dict[str, object]:
        built.append(1)
        return real(routes)

    monkeypatch.setattr(api, "openapi", counted)
    app = web.create_app(Settings())
    assert app.openapi() == app.openapi()
    assert len(built) == 1
