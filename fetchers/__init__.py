"""The fetchers: every way a check gets a page, and the address guard each connection goes
through. `http` fetches with httpx (the plain worker); `browser` renders in Chromium (the
render worker) through `browser_proxy`; both read the body with the readers (`readers/`)."""

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # names for the alias only: importing `fetchers.guard` needs no httpx stack
    from fetchers.http import Page, Request

# How a check gets its page: httpx (`http.fetch_page`) unless the worker hands
# `CheckActivities` another way (`browser.BrowserFetcher` on a render worker).
Fetcher = Callable[["Request"], Coroutine[Any, Any, "Page"]]
