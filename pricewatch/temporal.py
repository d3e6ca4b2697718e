"""Temporal names and the one client factory used by the CLI, the worker and the tests."""

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig

# Names recorded in histories: never derive them from Python identifiers.
WORKFLOW_TYPE = "MonitorTarget"
TARGET_SEARCH_ATTRIBUTE = SearchAttributeKey.for_keyword("PricewatchTarget")


def workflow_id(target_id: str) -> str:
    return f"pricewatch-{target_id}"


async def register_search_attributes(client: Client) -> None:
    """Make the target search attribute filterable (the dev launcher passes it at start)."""
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={
                TARGET_SEARCH_ATTRIBUTE.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
            },
        )
    )


async def connect() -> Client:
    """Connect using Temporal's environment convention, with the pydantic converter."""
    connect_config = ClientConfig.load_client_connect_config()
    connect_config.setdefault("target_host", "localhost:7233")
    return await Client.connect(**connect_config, data_converter=pydantic_data_converter)
