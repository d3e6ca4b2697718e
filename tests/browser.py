"""What the browser tests share: a page whose console errors and dialogs are kept, and a
wait until the worker has mirrored the targets a test added."""

import httpx
from playwright.async_api import Browser, ConsoleMessage, Page

from tests.waits import eventually


class Watched:
    """A page whose console errors (a CSP violation among them) and dialogs are kept."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda err: self.errors.append(str(err)))
        page.on("dialog", self._dialog)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.errors.append(message.text)

    async def _dialog(self, dialog: object) -> None:
        self.dialogs.append(str(getattr(dialog, "message", dialog)))
        await dialog.dismiss()  # type: ignore[attr-defined]


async def watched(browser: Browser, base: str) -> Watched:
    context = await browser.new_context(base_url=base)
    return Watched(await context.new_page())


async def registered(http: httpx.AsyncClient, *ids: str) -> None:
    """Until the worker has mirrored each target (the targets page reads the mirror)."""

    async def listed() -> bool:
        found = {t["id"] for t in (await http.get("/api/v1/targets")).json()}
        return found >= set(ids)

    await eventually(listed, what=f"{ids} listed")
