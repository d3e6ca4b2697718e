"""`try`: what one check of a target's settings would record now, nothing written, and with
no price selector what else would read the page's prices (readers.price_suggest)."""

import asyncio
import dataclasses
import functools
import re
import shlex
from datetime import UTC, datetime
from urllib.parse import urlsplit

from fetchers import Fetcher
from fetchers.guard import AddressPolicy
from fetchers.http import FetchError, Page, fetch_page, new_client, read_body, request_of
from pricewatch.models import CheckInput, Extraction, TargetConfig
from pricewatch.views import Suggested, TriedPrice, TryView
from readers.price_suggest import Suggestion, suggest_body


class Unreadable(FetchError):
    """A check of these settings would fail reading the page; `suggestions` would read it."""

    def __init__(self, err: FetchError, suggestions: list[Suggested]) -> None:
        super().__init__(str(err), transient=err.transient)
        self.suggestions = suggestions


async def try_page(
    policy: AddressPolicy, config: TargetConfig, fetcher: Fetcher | None, screenshot: bool
) -> tuple[TryView, bytes | None]:
    """Fetch the page once as a check of `config` would (the same guard, rules, User-Agent
    and timeout; `fetcher`: a browser, for a rendered page) and say what it would record; a
    FetchError is what the check would fail with. With no selector of either kind the body
    is kept and read twice: as the check reads it, and for suggestions."""
    check = CheckInput.of(config, datetime.now(UTC))
    request = dataclasses.replace(request_of(check), screenshot=screenshot)
    suggesting = _suggesting(config)
    if suggesting:
        request = dataclasses.replace(request, extraction=Extraction(), keep_body=True)
    async with new_client(policy) as http:
        page = await (fetcher or functools.partial(fetch_page, http))(request)
    assert page.sha256 is not None and page.text is not None, "no validators: no 304"
    suggestions: list[Suggested] = []
    if suggesting:
        assert page.body is not None  # kept
        found = await asyncio.to_thread(suggest_body, page.body, page.content_type)
        suggestions = [_suggested(suggestion) for suggestion in found]
        try:
            page = await _read_as_checked(page, request_of(check).extraction)
        except FetchError as err:
            raise Unreadable(err, suggestions) from err
    prices = None
    if page.prices is not None:
        prices = [TriedPrice(**vars(price)) for price in page.prices]
    return TryView(
        url=config.url, http_status=page.status_code, body_bytes=page.size,
        result_hash=page.sha256 or "", text=page.text or "", prices=prices,
        skipped_values=page.skipped, refused_requests=page.refused, waited=page.waited,
        suggestions=suggestions,
    ), page.screenshot  # fmt: skip


def _suggesting(config: TargetConfig) -> bool:
    """Whether nothing names what to read: no text selector or JSON pointer, and in price
    mode no price selector."""
    price_mode = config.price_mode
    named = price_mode is not None and price_mode.selector is not None
    return config.selector is None and config.json_pointer is None and not named


async def _read_as_checked(page: Page, extraction: Extraction) -> Page:
    """The kept body read by the target's own rules, as a check reads it."""
    assert page.body is not None
    read = await read_body(page.status_code, page.body, page.content_type, extraction)
    return dataclasses.replace(
        read, refused=page.refused, screenshot=page.screenshot, waited=page.waited
    )


def _suggested(suggestion: Suggestion) -> Suggested:
    options = ["--prices"]
    if suggestion.selector is not None:
        options += ["--price-selector", suggestion.selector]
    if suggestion.name is not None:
        options += ["--price-name", suggestion.name]
    return Suggested(
        price_selector=suggestion.selector,
        price_name=suggestion.name,
        options=shlex.join(options),
        prices=[TriedPrice(**vars(price)) for price in suggestion.prices],
    )


def id_for(url: str) -> str:
    """A target id for a page nobody named yet: its host, as an id is written."""
    host = (urlsplit(url).hostname or "page").removeprefix("www.")
    return re.sub(r"[^a-z0-9]+", "-", host.lower()).strip("-")[:63].strip("-") or "page"
