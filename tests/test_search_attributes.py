"""A worker registers the search attributes a namespace lacks: a cluster that ran an older
pricewatch has no PricewatchPaused, and a workflow that sets an unregistered attribute
fails its task until someone adds it."""

import subprocess
from collections.abc import Iterator

import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from client.temporal import SEARCH_ATTRIBUTES, missing_search_attributes
from tests.waits import eventually
from workers.embedded import find_binary, free_port, stop_process, wait_for_port


@pytest.fixture
def bare_dev_server() -> Iterator[str]:
    """A dev server started without pricewatch's search attributes (in memory, headless)."""
    port = free_port()
    server = subprocess.Popen(
        [find_binary("temporal"), "server", "start-dev", "--headless", "--ip", "127.0.0.1",
         "--port", str(port), "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port("127.0.0.1", port, server, timeout=60)
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(server)


async def test_missing_search_attributes_are_registered(bare_dev_server: str) -> None:
    async def connected() -> Client | None:
        try:  # its port opens before its frontend answers
            return await Client.connect(bare_dev_server)
        except RuntimeError:
            return None

    client = await eventually(connected, what="the dev server answering")
    assert client is not None

    async def registered() -> set[str]:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
        return set(listed.custom_attributes) & set(SEARCH_ATTRIBUTES)

    assert await registered() == set()
    assert await missing_search_attributes(client) == []
    assert await registered() == set(SEARCH_ATTRIBUTES)
    assert await missing_search_attributes(client) == []  # a second worker: nothing to add
