"""One way in (issue 45): what `pricewatch add`'s options, the dashboard's add form and the
API's PUT body say of one target is one targets-file entry, and the one client path
(`client.plans`: validate, plan, apply) plans the same steps for it."""

from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from client import plans
from client.manifest import Entry, Located
from client.pricewatch import Pricewatch
from pricewatch.settings import Settings
from surfaces import options
from surfaces.add import AddForm

# One target each, as the three surfaces take it: add's options (by parameter), the form's
# fields (strings, one list item a line) and the API's JSON.
CASES: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    (
        {"every": "6h", "webhook": ["http://127.0.0.1:9/hook"], "tag": ["cloud", "eu"],
         "price_selector": "tr.plan", "price_name": "th", "below": "9.50"},
        {"every": "6h", "webhooks": "http://127.0.0.1:9/hook", "tags": "cloud, eu",
         "prices": True, "price_selector": "tr.plan", "price_name": "th", "below": "9.50"},
        {"every": "6h", "webhooks": ["http://127.0.0.1:9/hook"], "tags": ["cloud", "eu"],
         "prices": {"selector": "tr.plan", "name": "th", "below": "9.50"}},
    ),
    (
        {"at": ["08:00", "18:00"], "on": "mon-fri", "tz": "Europe/Berlin", "jitter": "10m",
         "email": ["ops@example.com"], "selector": "#pricing", "fetch_timeout": "30s"},
        {"schedule": "calendar", "at": "08:00 18:00", "on": "mon-fri", "tz": "Europe/Berlin",
         "jitter": "10m", "emails": "ops@example.com", "selector": "#pricing", "timeout": "30s"},
        {"at": ["08:00", "18:00"], "on": "mon-fri", "tz": "Europe/Berlin", "jitter": "10m",
         "emails": ["ops@example.com"], "selector": "#pricing", "timeout": "30s"},
    ),
    (
        {"cron": "0 8 * * 1-5", "rendered": True, "step": ["click #monthly", "wait 2s"],
         "prices": True},
        {"schedule": "calendar", "cron": "0 8 * * 1-5", "render": True,
         "steps": "click #monthly\nwait 2s", "prices": True},
        {"cron": "0 8 * * 1-5", "render": True, "steps": ["click #monthly", "wait 2s"],
         "prices": {}},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "form", "body"), CASES)
async def test_add_the_form_and_put_plan_the_same_steps(
    flags: dict[str, Any],
    form: dict[str, Any],
    body: dict[str, Any],
    database_url: str,
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "http://127.0.0.1:9/pricing"
    said = {
        "add": options.entry_of("acme", url, flags),
        "form": AddForm.model_validate({"id": "acme", "url": url, **form}).entry(),
        "put": Entry.model_validate({"id": "acme", "url": url, **body}),
    }
    assert said["add"] == said["form"] == said["put"]

    async def nothing_runs(*args: Any) -> dict[str, Any]:
        return {}  # no Temporal here: what runs is asked of it alone

    monkeypatch.setattr(plans, "current", nothing_runs)
    settings = Settings(database_url=database_url, allow_networks="127.0.0.1/32")
    async with Pricewatch(settings) as client:
        planned = {
            surface: await plans.plan(client, [Located(entry, entry.config(), "")], False)
            for surface, entry in said.items()
        }
    steps = [[(s.action, s.target_id, s.located and s.located.config) for s in p]
             for p in planned.values()]  # fmt: skip
    assert steps[0][0][0] is plans.Action.ADD
    assert steps[0] == steps[1] == steps[2]


def test_a_new_apprise_url_is_a_change_said_masked() -> None:
    """A plan compares before the URL is stored (it has no ref yet): `add --notify` or a
    file's new `notify:` on a running target is a reconfigure, and the credential is not
    what it prints."""
    had = Entry(id="shop", url="http://127.0.0.1:9/", every=timedelta(hours=1)).config()
    new = Entry(
        id="shop", url="http://127.0.0.1:9/", every=timedelta(hours=1),
        notify=["json://user:secret@hooks.example.com/x"],
    ).config()  # fmt: skip
    said = plans.changes(had, new)
    assert len(said) == 1 and said[0].startswith("notify: none -> "), said
    assert "secret" not in said[0]
