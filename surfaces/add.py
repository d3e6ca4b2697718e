"""The dashboard's add form: what `pricewatch add` takes (an interval or a calendar, render and
steps, channels, tags, price mode and its rules), made into one targets-file entry
(`manifest.Entry`) and validated by it, so a bad field is the line `apply` and the API say
(issue 44).

Blank fields are left out, as options not given are: the entry's own defaults apply. Lists
(steps, webhooks, emails, Apprise URLs) are one per line; tags and calendar times may also be
comma-separated."""

from typing import Annotated, Literal

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, Field, ValidationError

from client import plans
from client.inputs import BadInput
from client.manifest import Entry, field_error
from client.trying import id_for
from fetchers.http import FetchError
from surfaces import api
from surfaces.auth import check_csrf
from surfaces.dashboard import page

router = APIRouter(include_in_schema=False)
Short = Annotated[str, Field(max_length=500)]
Lines = Annotated[str, Field(max_length=20_000)]  # a list, one a line


class AddForm(BaseModel):
    """The form's fields, as posted (every one a string, blank when not filled in)."""

    id: Annotated[str, Field(max_length=63)] = ""  # blank: `find` names it from the host
    url: Annotated[str, Field(max_length=2000)]
    schedule: Literal["interval", "calendar"] = "interval"
    every: Short = ""
    cron: Short = ""
    at: Short = ""
    on: Short = ""
    tz: Short = ""
    jitter: Short = ""
    selector: Short = ""
    ignore: Short = ""
    timeout: Short = ""
    render: bool = False
    steps: Lines = ""
    webhooks: Lines = ""
    emails: Lines = ""
    notify: Lines = ""
    tags: Short = ""
    prices: bool = False
    price_selector: Short = ""
    price_name: Short = ""
    below: Short = ""
    above: Short = ""
    min_change_percent: Short = ""
    csrf: str = ""

    def found_on_the_page(self) -> Entry:
        """The entry `find` reads the page by: the URL as fetched, no selector of either kind
        (so that every price the page shows is listed), the form's id if given."""
        if self.render:
            raise BadInput(
                "finding prices reads the page as fetched: for a rendered page, run "
                "`pricewatch try URL --render` (with its steps), which prints the same list"
            )
        target_id = self.id.strip() or "find"
        try:
            return Entry.model_validate({"id": target_id, "url": self.url.strip()})
        except ValidationError as err:
            raise BadInput(field_error(err)) from err

    def hidden(self) -> dict[str, str]:
        """The filled-in fields but id and price mode's selectors, to post again as they were
        with a suggestion's selectors."""
        kept = self.model_dump(exclude={"id", "csrf", "prices", "price_selector", "price_name"})
        return {k: "true" if v is True else v for k, v in kept.items() if v not in ("", False)}

    def entry(self) -> Entry:
        """The entry this form asks for; BadInput with `apply`'s line for a bad field."""
        if not self.id.strip():
            raise BadInput("id: Field required")
        data: dict[str, object] = {"id": self.id.strip(), "url": self.url.strip()}
        given = {k: v.strip() for k, v in self if isinstance(v, str) and v.strip()}
        calendar = [k for k in ("cron", "at", "on", "tz", "jitter") if k in given]
        if self.schedule == "calendar":
            data |= {k: given[k] for k in calendar if k != "at"}
            if times := words(self.at):
                data["at"] = times
        elif calendar:  # said, not dropped: the form's "every" is filled in by default
            raise BadInput(f"{calendar[0]}: a calendar field; choose the calendar schedule")
        elif "every" in given:
            data["every"] = given["every"]
        data |= {k: given[k] for k in ("selector", "ignore", "timeout") if k in given}
        listed = {
            "steps": lines(self.steps), "webhooks": lines(self.webhooks),
            "emails": lines(self.emails), "notify": lines(self.notify), "tags": words(self.tags),
        }  # fmt: skip
        data |= {k: found for k, found in listed.items() if found}
        if self.render:
            data["render"] = True
        if self.prices:
            rules = ("price_selector", "price_name", "below", "above", "min_change_percent")
            data["prices"] = {k.removeprefix("price_"): given[k] for k in rules if k in given}
        try:
            return Entry.model_validate(data)
        except ValidationError as err:
            raise BadInput(field_error(err)) from err


def lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def words(text: str) -> list[str]:
    """Comma- or space-separated (`cloud, eu`; `08:00 18:00`)."""
    return text.replace(",", " ").split()


@router.post("/targets")
async def add(request: Request, form: Annotated[AddForm, Form()]) -> Response:
    check_csrf(request, form.csrf)
    entry = form.entry()
    done = await plans.put(api.client(request), entry)
    request.session["said"] = f"{', '.join(s.action.value for s in done)} {entry.id}"
    return RedirectResponse(f"/targets/{entry.id}", status_code=303)


@router.post("/targets/find")
async def find(request: Request, form: Annotated[AddForm, Form()]) -> Response:
    """The prices the page shows, each set with the selectors that read it (as `try` lists
    them), and a button each to add the target with them: the form's other fields kept."""
    check_csrf(request, form.csrf)
    entry = form.found_on_the_page()
    error, suggestions = None, []
    try:
        view, _ = await api.client(request).try_page(entry.config())
        suggestions = view.suggestions
    except FetchError as err:
        kind = "transient" if err.transient else "permanent"
        error = f"the page could not be read ({kind}): {err}"
    return page(
        request, "find.html", url=entry.url, target_id=form.id.strip() or id_for(entry.url),
        error=error,
        suggestions=suggestions, fields=form.hidden(),
    )  # fmt: skip
