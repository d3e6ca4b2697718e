"""Every `pricewatch` command starts by importing `surfaces.cli` (this suite starts it a few
hundred times): what only a worker, `try`, `notify-test` or a channel's parse needs is
imported in the call that needs it, not at the start of every command."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parent.parent
# What `import surfaces.cli` must leave out: Apprise (with requests) and the mail sender
# (activities.services, activities.notify), the worker's SDK half (activities.outages), the
# fetch (fetchers.http) and the readers with their parsers (client.trying, validation).
NOT_AT_START = [
    "apprise", "requests", "aiosmtplib", "jinja2", "temporalio.worker", "selectolax",
    "price_parser", "activities.notify", "activities.services", "activities.outages",
    "fetchers.http", "client.trying", "readers.body",
]  # fmt: skip


def test_the_cli_starts_without_what_its_commands_load_on_use() -> None:
    shown = subprocess.run(
        [sys.executable, "-c", "import surfaces.cli, sys; print('\\n'.join(sys.modules))"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set(shown.stdout.split())
    assert "surfaces.cli" in loaded
    early = sorted(loaded & set(NOT_AT_START))
    assert not early, f"import surfaces.cli imports {early}: import them where they are used"
