"""The add form covers what `pricewatch add` does (an interval or a calendar, render and
steps, channels, tags, price mode and its rules) through the same model as a targets file
(`manifest.Entry`), with its one-line errors (issue 44)."""

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from playwright.async_api import Browser
from pydantic import ValidationError

from client.inputs import BadInput
from client.manifest import Entry, field_error
from surfaces.add import AddForm
from tests.browser import watched
from tests.conftest import PageServer
from tests.helpers import serve_process, worker_process

FIELDS = [name for name, f in AddForm.model_fields.items() if f.annotation is str]


def test_a_full_form_is_the_entry_a_targets_file_would_write() -> None:
    form = AddForm(
        id="acme", url="https://acme.example/pricing", schedule="calendar", every="6h",
        at="08:00, 18:00", on="mon-fri", tz="Europe/Berlin", jitter="10m", render=True,
        steps="click #yearly\n\n wait .price ", webhooks="https://hooks.example.com/p",
        emails="ops@example.com", tags="cloud, eu", prices=True, price_selector="tr.plan",
        price_name="th", below="10", min_change_percent="5",
    )  # fmt: skip
    assert form.entry() == Entry.model_validate(
        {
            "id": "acme",
            "url": "https://acme.example/pricing",
            "at": ["08:00", "18:00"],
            "on": "mon-fri",
            "tz": "Europe/Berlin",
            "jitter": "10m",
            "render": True,
            "steps": ["click #yearly", "wait .price"],
            "webhooks": ["https://hooks.example.com/p"],
            "emails": ["ops@example.com"],
            "tags": ["cloud", "eu"],
            "prices": {
                "selector": "tr.plan",
                "name": "th",
                "below": "10",
                "min_change_percent": "5",
            },
        }
    )
    # The interval (the default) takes `every` alone, as `add --every` does.
    assert AddForm(id="acme", url="https://acme.example", every="6h").entry().every is not None


def test_a_calendar_field_under_the_interval_schedule_is_said_not_dropped() -> None:
    form = AddForm(id="acme", url="https://acme.example", every="24h", on="mon-fri")
    with pytest.raises(BadInput, match=r"^on: a calendar field; choose the calendar schedule$"):
        form.entry()


def test_a_bad_field_is_apply_s_one_line() -> None:
    form = AddForm(id="acme", url="https://acme.example", prices=True, below="ten")
    with pytest.raises(BadInput) as said:
        form.entry()
    assert str(said.value) == "prices.below: write an amount like 9.50, not 'ten'"


@given(st.fixed_dictionaries({}, optional={n: st.text(max_size=30) for n in FIELDS}),
       st.booleans(), st.booleans(), st.sampled_from(["interval", "calendar"]))  # fmt: skip
def test_any_form_is_an_entry_or_one_line(
    fields: dict[str, str], render: bool, prices: bool, schedule: str
) -> None:
    form = AddForm.model_validate(
        {
            "id": "x",
            "url": "https://x.example",
            **fields,
            "render": render,
            "prices": prices,
            "schedule": schedule,
        }
    )
    try:
        form.entry()
    except BadInput as err:
        assert str(err) and "\n" not in str(err)


async def test_the_full_form_adds_what_it_says(
    env: dict[str, str],
    page_server: PageServer,
    browser: Browser,
) -> None:
    page_server.set("/plans", "<table><tr class=plan><th>Pro</th><td>10 EUR</td></tr></table>")
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        seen = await watched(browser, base)
        page = seen.page
        await page.goto("/")
        form = page.locator("form#add")
        await form.get_by_label("Id", exact=True).fill("acme")
        await form.get_by_label("URL", exact=True).fill(page_server.url("/plans"))
        await form.locator("input[name=schedule][value=calendar]").check()
        await form.get_by_label("At", exact=True).fill("08:00, 18:00")
        await form.get_by_label("On", exact=True).fill("mon-fri")
        await form.get_by_label("Time zone", exact=True).fill("Europe/Berlin")
        await form.get_by_label("Tags", exact=True).fill("cloud eu")
        for summary in await form.locator("summary").all():
            await summary.click()
        await form.get_by_label("Render (load the page in Chromium first)", exact=True).check()
        await form.get_by_label("Steps, one a line", exact=True).fill("click #yearly\nwait .price")
        await form.get_by_label("Webhooks, one a line", exact=True).fill(page_server.url("/hook"))
        await form.get_by_label("Emails, one a line", exact=True).fill("ops@example.com")
        await form.locator("input[name=prices]").check()
        await form.get_by_label("Price selector", exact=True).fill("tr.plan")
        await form.get_by_label("Name selector", exact=True).fill("th")
        await form.get_by_label("Tell when below", exact=True).fill("9.50")
        await form.get_by_role("button", name="Add").click()
        await page.wait_for_load_state()
        assert page.url.endswith("/targets/acme"), await page.locator("main").inner_text()
        assert "add acme" in await page.locator(".said").inner_text()
        config = (await http.get("/api/v1/targets/acme")).json()["status"]["config"]
        assert config["calendar"]["times"] == [8 * 60, 18 * 60]  # minutes of the day
        assert config["render"]["steps"] == ["click #yearly", "wait .price"]
        assert {c["kind"] for c in config["channels"]} == {"webhook", "email"}
        assert config["price_mode"]["selector"] == "tr.plan"
        assert config["price_mode"]["below"] == "9.50" and config["tags"] == ["cloud", "eu"]

        await page.goto("/")
        await page.locator("form#add").get_by_label("Id", exact=True).fill("bad")
        await (
            page.locator("form#add").get_by_label("URL", exact=True).fill(page_server.url("/plans"))
        )
        await page.locator("form#add input[name=every]").fill("soon")
        await page.get_by_role("button", name="Add").click()
        shown = await page.locator(".error").inner_text()
        with pytest.raises(ValidationError) as apply_says:  # what `apply` says of it
            Entry.model_validate({"id": "bad", "url": "https://x.example", "every": "soon"})
        assert f"pricewatch: {field_error(apply_says.value)}" in shown, shown
        assert (await http.get("/api/v1/targets/bad")).status_code == 404
        assert [e for e in seen.errors if "400" not in e] == [] and seen.dialogs == []


PLANS = (
    '<div class="plan"><h3>Starter</h3><p class="price">$9/mo</p><p>5 users</p></div>'
    '<div class="plan"><h3>Pro</h3><p class="price">$29/mo</p><p>50 users</p></div>'
)


async def test_the_form_finds_the_prices_on_the_page_and_adds_the_one_chosen(
    env: dict[str, str], page_server: PageServer, browser: Browser
) -> None:
    """`Find the prices on the page` lists what `try` lists, each with a button that adds
    the target with its selectors and the form's other fields as they were filled in."""
    page_server.set("/plans", PLANS)
    async with worker_process(env), serve_process(env) as base, httpx.AsyncClient(
        base_url=base, timeout=60
    ) as http:  # fmt: skip
        seen = await watched(browser, base)
        page = seen.page
        await page.goto("/")
        form = page.locator("form#add")
        await form.get_by_label("URL", exact=True).fill(page_server.url("/plans"))
        await form.get_by_label("Tags", exact=True).fill("cloud")
        await form.locator("input[name=every]").fill("6h")
        await form.get_by_role("button", name="Find the prices on the page").click()
        await page.wait_for_load_state()
        main = await page.locator("main").inner_text()
        first = page.locator("section.suggestion").first
        assert await first.count(), main
        listed = await first.inner_text()
        assert ".plan named by h3 (2)" in listed and "Starter" in listed, listed
        assert "$9" not in listed and "9 $/month" in listed, listed
        assert await first.get_by_label("Id", exact=True).input_value() == "127-0-0-1"
        await first.get_by_label("Id", exact=True).fill("found")
        await first.get_by_role("button", name="Add with these prices").click()
        await page.wait_for_load_state()
        assert page.url.endswith("/targets/found"), await page.locator("main").inner_text()
        config = (await http.get("/api/v1/targets/found")).json()["status"]["config"]
        assert config["price_mode"]["selector"] == ".plan"
        assert config["price_mode"]["name"] == "h3"
        assert config["tags"] == ["cloud"] and config["interval_seconds"] == 6 * 3600, config

        # Without the session's CSRF token nothing is fetched; a rendered page is said.
        refused = await http.post(
            "/targets/find", data={"id": "", "url": page_server.url("/plans")}
        )
        assert refused.status_code == 403, refused.text
        await page.goto("/")
        form = page.locator("form#add")
        await form.get_by_label("URL", exact=True).fill(page_server.url("/plans"))
        for summary in await form.locator("summary").all():
            await summary.click()
        await form.get_by_label("Render (load the page in Chromium first)", exact=True).check()
        await form.get_by_role("button", name="Find the prices on the page").click()
        shown = await page.locator(".error").inner_text()
        assert "pricewatch try URL --render" in shown, shown
        # The fetch goes through the address guard, as a check's does.
        await page.goto("/")
        form = page.locator("form#add")
        await form.get_by_label("URL", exact=True).fill("http://169.254.169.254/latest")
        await form.get_by_role("button", name="Find the prices on the page").click()
        shown = await page.locator(".error").inner_text()
        assert "not a public address" in shown, shown
        assert seen.dialogs == []
