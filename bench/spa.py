"""The rendering regime's page (issue 30): one script-rendered pricing page on 127.0.0.1.

The HTML is a shell of about 3 KiB whose plan table is empty until a small script file,
loaded after it, writes the prices 100 ms after load: a reader that does not run scripts
sees no price. The same bytes on every request (each check is an unchanged check); the path
after `/pricing/` names the target, so every target has a URL of its own.
"""

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from workers.embedded import free_port

PRICE_SELECTOR = "td.price"
STEP = f"wait {PRICE_SELECTOR}"
PLANS = [("Starter", "4.49"), ("Team", "17.99"), ("Business", "49.00"), ("Scale", "129.00")]
FEATURES = "".join(
    f"<li>Feature {n}: included storage, support hours and API calls per month, "
    f"described at some length as real pricing pages do.</li>"
    for n in range(1, 21)
)
SHELL = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Bench SPA pricing</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:.3em 1em}}</style></head>
<body><h1>Bench SPA Cloud</h1><p id="status">loading prices...</p>
<table id="plans"><thead><tr><th>plan</th><th>price</th></tr></thead><tbody></tbody></table>
<h2>Every plan includes</h2><ul>{FEATURES}</ul>
<script src="/app.js"></script></body></html>
""".encode()
SCRIPT = (
    "const PLANS = "
    + repr([list(plan) for plan in PLANS]).replace("'", '"')
    + """;
window.addEventListener("load", () => setTimeout(() => {
  const body = document.querySelector("#plans tbody");
  for (const [name, price] of PLANS) {
    const row = document.createElement("tr");
    row.innerHTML = `<th>${name}</th><td class="price">EUR ${price}</td>`;
    body.appendChild(row);
  }
  document.getElementById("status").textContent = "prices per month";
}, 100));
"""
).encode()


async def _shell(request: web.Request) -> web.Response:
    return web.Response(body=SHELL, content_type="text/html")


async def _script(request: web.Request) -> web.Response:
    return web.Response(body=SCRIPT, content_type="application/javascript")


@contextlib.asynccontextmanager
async def serve_spa() -> AsyncIterator[str]:
    """The page server; yields its base URL (`{base}/pricing/{target}`)."""
    app = web.Application()
    app.router.add_get("/pricing/{target}", _shell)
    app.router.add_get("/app.js", _script)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
