"""The `--json` outputs keep their documented shape: docs/schemas/ is what the views say
(regenerate with `python -m pricewatch.views` after a deliberate change, which scripts
will notice). Each output is parsed against its view end to end in tests/test_e2e.py."""

import json
from pathlib import Path

import pytest

from pricewatch import views


@pytest.mark.parametrize("command", [*views.OUTPUTS, *views.PAYLOADS])
def test_the_committed_schema_is_the_views_schema(command: str) -> None:
    committed = views.SCHEMAS / f"{command}.json"
    assert committed.exists(), "run `python -m pricewatch.views`"
    assert committed.read_text() == views.schema(command), (
        f"{command}'s --json shape changed: if on purpose, run `python -m pricewatch.views`"
    )


def test_every_command_with_json_has_a_schema_and_nothing_else_does() -> None:
    files = {path.stem for path in Path(views.SCHEMAS).glob("*.json")}
    assert files == set(views.OUTPUTS) | set(views.PAYLOADS)


def test_a_schema_describes_the_fields_scripts_read() -> None:
    listed = json.loads(views.schema("list"))
    target = listed["$defs"]["TargetSummary"]
    assert {"id", "url", "interval_seconds", "next_slot", "last_status"} <= set(
        target["properties"]
    )
