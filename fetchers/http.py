"""Fetch a page and hash it, telling transient failures from permanent ones.

Only digests leave this module: the body is streamed under a byte cap and an overall
deadline (httpx's own timeouts are per operation, so a slow drip would never trip them).

The classification (the README has the same table):

| failure                                                            | class     |
| ------------------------------------------------------------------ | --------- |
| connect/read timeout, overall deadline, connection refused/reset,   | transient |
| temporary DNS failure                                               |           |
| HTTP 408, 425, 429, 500, 502, 503, 504 (Retry-After honoured)       | transient |
| any other HTTP 4xx (and 3xx left unfollowed), unknown host          | permanent |
| TLS certificate failure, too many redirects, a non-http(s) redirect | permanent |
| body over the cap, unsupported content type, undecodable body       | permanent |

Transient means "ask again later" (the workflow's retry policy backs off); permanent
means the same request will fail the same way, so the slot is recorded failed at once.
"""

import asyncio
import socket
import ssl
import zlib
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import httpx

from fetchers.guard import AddressPolicy, BlockedAddress, GuardedTransport, ResolveTimeout
from pricewatch import isolated
from pricewatch.models import CheckInput, Extraction, RenderSettings
from pricewatch.policy import MAX_FETCH_TIMEOUT
from pricewatch.prices import Price
from pricewatch.urls import as_sent
from readers.body import read
from readers.normalise import ExtractionError

MAX_BODY_BYTES = 5 * 1024 * 1024
# Work on a page this small (parse, hash, compress, diff) takes well under a millisecond:
# done on the event loop, as a thread hop would cost more than the work.
INLINE_WORK_BYTES = 64 * 1024
FETCH_DEADLINE = timedelta(seconds=30)
MAX_RETRY_AFTER = timedelta(minutes=15)
CONNECT_TIMEOUT = 5.0
HTTP_TIMEOUTS = httpx.Timeout(10.0, connect=CONNECT_TIMEOUT)
MAX_REDIRECTS = 5
USER_AGENT = "pricewatch/0.1 (+page-change monitor)"

# zlib window bits per content coding: 16+ for the gzip wrapper, 32+ autodetects deflate's
# zlib wrapper (servers disagree on whether "deflate" has one; raw deflate is refused).
INFLATE_WBITS = {
    "gzip": 16 + zlib.MAX_WBITS,
    "x-gzip": 16 + zlib.MAX_WBITS,
    "deflate": 32 + zlib.MAX_WBITS,
}
# Statuses worth asking again later; every other 4xx will answer the same next time.
TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
# What a pricing page can be; anything else (images, archives, video) is refused. A
# response without a content type is accepted.
ALLOWED_CONTENT_TYPES = frozenset(
    {"text/html", "application/xhtml+xml", "application/xml", "text/xml", "application/json",
     "text/plain"}
)  # fmt: skip
# getaddrinfo's "this name does not exist" answers, as opposed to EAI_AGAIN ("try later").
UNKNOWN_HOST_ERRORS = frozenset(
    {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
)


class FetchError(Exception):
    """A fetch that produced no page, with the verdict on whether retrying can help."""

    def __init__(self, message: str, *, transient: bool, retry_after: timedelta | None = None):
        super().__init__(message)
        self.transient = transient
        self.retry_after = retry_after


@dataclass(frozen=True)
class Page:
    """What a fetch saw. `text` is the normalised text that was hashed (None for a 304, which
    transfers no body: the page is as it was)."""

    status_code: int
    sha256: str | None
    size: int
    text: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    prices: list[Price] | None = None
    """Price mode: the prices read (`text` is their listing)."""
    skipped: list[str] = field(default_factory=list)
    """Price mode: each value that could not be read, and why (the others were)."""
    refused: list[str] = field(default_factory=list)
    """A rendered page: the requests it made that the guard refused."""
    screenshot: bytes | None = None
    """A rendered page: its viewport as PNG, when it is a new state (or asked for)."""
    waited: str | None = None
    """A rendered page: what the browser waited for before reading it, and how long."""
    body: bytes | None = None
    """The body as read, with its `content_type`, when the request kept it (`try`)."""
    content_type: str = ""

    @property
    def not_modified(self) -> bool:
        return self.status_code == 304


@dataclass(frozen=True)
class Request:
    """One fetch: the URL, the target's extraction rules, and the validators of the last
    good check for a conditional request."""

    url: str
    extraction: Extraction = field(default_factory=Extraction)
    user_agent: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    timeout: timedelta | None = None
    """The target's own timeout: the overall deadline and the limit per read (and per write,
    and for a free connection); the connect limit stays. None: FETCH_DEADLINE and
    HTTP_TIMEOUTS."""
    render: RenderSettings | None = None
    """Load it in a browser first (a render worker's fetcher); a plain fetch refuses it."""
    previous_hash: str | None = None
    """The last observation's hash: a rendered page whose hash differs is screenshot."""
    screenshot: bool = False
    """Screenshot a rendered page whatever its hash (`try --screenshot`)."""
    keep_body: bool = False
    """Keep the body on the Page (`try` reads suggestions from it)."""

    @property
    def deadline(self) -> timedelta:
        return self.timeout or FETCH_DEADLINE

    @property
    def timeouts(self) -> httpx.Timeout:
        if self.timeout is None:
            return HTTP_TIMEOUTS
        return httpx.Timeout(self.timeout.total_seconds(), connect=CONNECT_TIMEOUT)

    def headers(self) -> dict[str, str]:
        headers = {"user-agent": self.user_agent} if self.user_agent else {}
        if self.etag:
            headers["if-none-match"] = self.etag
        if self.last_modified:
            headers["if-modified-since"] = self.last_modified
        return headers


def request_of(
    check: CheckInput,
    etag: str | None = None,
    last_modified: str | None = None,
    previous_hash: str | None = None,
) -> Request:
    """The fetch a check of `check` makes: its URL, rules, User-Agent and timeout, and the
    validators of the last good check for a conditional request."""
    return Request(
        url=check.url,
        extraction=check.extraction,
        user_agent=check.user_agent,
        etag=etag,
        last_modified=last_modified,
        timeout=timedelta(seconds=check.timeout_seconds) if check.timeout_seconds else None,
        render=check.render,
        previous_hash=previous_hash,
    )


def new_client(policy: AddressPolicy) -> httpx.AsyncClient:
    """One client per worker, for pages and webhooks alike: every connection goes through
    the SSRF guard; `trust_env=False` so proxy variables cannot reroute it; redirects are
    followed by hand (`_fetch`), so a redirect's body is never read."""
    return httpx.AsyncClient(
        timeout=HTTP_TIMEOUTS,
        follow_redirects=False,
        trust_env=False,
        # Only encodings `_read_capped` can inflate under its cap.
        headers={"user-agent": USER_AGENT, "accept-encoding": "gzip, deflate"},
        transport=GuardedTransport(policy),
    )


async def fetch_page(client: httpx.AsyncClient, request: Request | str) -> Page:
    if isinstance(request, str):
        request = Request(request)
    if request.render is not None:  # a rendered check reached a worker without a browser
        raise FetchError("this page is rendered: only a render worker checks it", transient=True)
    try:
        async with asyncio.timeout(request.deadline.total_seconds()):
            return await _fetch(client, request)
    except TimeoutError as err:
        raise timed_out(request, None) from err
    except BlockedAddress as err:
        raise FetchError(str(err), transient=False) from err
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as err:
        # Also a redirect to file:, ftp: or another scheme we do not fetch.
        raise FetchError(f"invalid or unsupported URL: {err}", transient=False) from err
    except httpx.DecodingError as err:
        raise FetchError(f"undecodable body: {err}", transient=False) from err
    except httpx.TimeoutException as err:
        raise timed_out(request, err) from err
    except httpx.TransportError as err:
        raise classify_connection_error(err) from err


def timed_out(request: Request, err: httpx.TimeoutException | None) -> FetchError:
    """Which limit ran out, and whether the target's timeout is the setting that raises it
    (`err` None: the overall deadline)."""
    limits = request.timeouts
    if isinstance(err, httpx.ConnectTimeout):
        # The guard's own timeout names the stage and its bound: resolving, not connecting.
        resolving = isinstance(err.__cause__, ResolveTimeout)
        what = str(err) if resolving else f"no connection within {_seconds(limits.connect)}"
        return FetchError(
            f"timed out: {what} (the connect limit, the same for every target)", transient=True
        )
    if isinstance(err, httpx.PoolTimeout):
        return FetchError(
            f"timed out: no free connection on this worker within {_seconds(limits.pool)} "
            "(the worker is overloaded)",
            transient=True,
        )
    if isinstance(err, httpx.ReadTimeout):
        what = f"the page sent nothing for {_seconds(limits.read)}"
    elif isinstance(err, httpx.WriteTimeout):
        what = f"the request could not be sent within {_seconds(limits.write)}"
    else:
        what = f"the page was not complete within {_seconds(request.deadline)}"
    if request.timeout is None:
        why = f"the default limit; raise it with --timeout, up to {_seconds(MAX_FETCH_TIMEOUT)}"
    elif request.timeout < MAX_FETCH_TIMEOUT:
        why = f"the target's timeout; raise it with --timeout, up to {_seconds(MAX_FETCH_TIMEOUT)}"
    else:
        why = "the target's timeout, already the longest allowed"
    return FetchError(f"timed out: {what} ({why})", transient=True)


def _seconds(value: timedelta | float | None) -> str:
    """`10s`, `120s`: a limit as `--timeout` takes it."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value or 0
    return f"{seconds:g}s"


def classify_connection_error(err: httpx.TransportError) -> FetchError:
    """Tell a host that does not exist or a bad certificate (permanent) from a network
    hiccup (transient) by the OS-level error underneath httpx's wrappers."""
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return FetchError(f"TLS certificate failure: {cause.verify_message}", transient=False)
        if isinstance(cause, socket.gaierror):
            if cause.errno in UNKNOWN_HOST_ERRORS:
                return FetchError(f"unknown host: {cause.strerror}", transient=False)
            return FetchError(f"temporary DNS failure: {cause.strerror}", transient=True)
        cause = cause.__cause__ or cause.__context__
    return FetchError(f"connection failed: {err or type(err).__name__}", transient=True)


async def _fetch(client: httpx.AsyncClient, wanted: Request) -> Page:
    # A redirect's request keeps these timeouts (httpx copies the extensions).
    request = client.build_request(
        "GET", as_sent(wanted.url), headers=wanted.headers(), timeout=wanted.timeouts
    )
    for _ in range(MAX_REDIRECTS + 1):
        response = await client.send(request, stream=True)
        try:
            if response.next_request is not None:  # a redirect: follow without reading it
                request = response.next_request
                continue
            return await _read_page(response, wanted)
        finally:
            await response.aclose()
    raise FetchError(f"more than {MAX_REDIRECTS} redirects", transient=False)


async def _read_page(response: httpx.Response, request: Request) -> Page:
    """The body, decompressed under the cap (a gzip bomb stops at the cap, not in memory),
    normalised and hashed."""
    validators = {
        "etag": response.headers.get("etag"),
        "last_modified": response.headers.get("last-modified"),
    }
    if response.status_code == 304:
        return Page(status_code=304, sha256=None, size=0, **validators)
    if response.status_code >= 300:
        raise _status_error(response)
    full_type = response.headers.get("content-type", "")
    content_type = full_type.split(";")[0].strip().lower()
    if content_type and not _allowed(content_type):
        raise FetchError(f"unsupported content type {content_type}", transient=False)
    body = await _read_capped(response)
    page = await read_body(response.status_code, body, full_type, request.extraction, validators)
    return replace(page, body=body, content_type=full_type) if request.keep_body else page


async def read_body(
    status_code: int,
    body: bytes,
    full_type: str,
    extraction: Extraction,
    validators: dict[str, str | None] | None = None,
    hint: str = "",
) -> Page:
    """What a check records of a body, fetched or rendered (`readers.body.read`), as a Page;
    FetchError as the check records a failed read: a rule that cannot be applied is permanent
    (`hint`: what a render waited for), a read the machine did not finish (the ignore
    regex's child process) transient."""
    # Off the event loop when heavy (a big page, a user's regex): heartbeats must not stall.
    inline = len(body) <= INLINE_WORK_BYTES and extraction.ignore is None
    try:
        record = (
            read(body, full_type, extraction)
            if inline
            else await asyncio.to_thread(read, body, full_type, extraction)
        )
    except ExtractionError as err:
        raise FetchError(f"extraction rule failed: {err}{hint}", transient=False) from err
    except isolated.Unfinished as err:  # the ignore regex: the machine's fault, not the rule's
        raise FetchError(f"the page was not read: {err}", transient=True) from err
    return Page(
        status_code=status_code,
        sha256=record.sha256,
        size=len(body),
        text=record.text,
        prices=record.prices,
        skipped=record.skipped,
        etag=(validators or {}).get("etag"),
        last_modified=(validators or {}).get("last_modified"),
    )


async def _read_capped(response: httpx.Response) -> bytes:
    """The decoded body, never more than the cap in memory: the raw stream is inflated here
    with a length limit per chunk (httpx's own decoder inflates a chunk whole, and one small
    compressed chunk can hold megabytes)."""
    codings = [c.strip().lower() for c in response.headers.get("content-encoding", "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if len(codings) > 1:
        raise FetchError(f"stacked content encodings {codings} are refused", transient=False)
    decoder = None
    if codings:
        if codings[0] not in INFLATE_WBITS:
            raise FetchError(f"unsupported content encoding {codings[0]}", transient=False)
        decoder = zlib.decompressobj(INFLATE_WBITS[codings[0]])
    too_big = FetchError(f"body larger than {MAX_BODY_BYTES} bytes", transient=False)
    body = bytearray()
    try:
        async for raw in response.aiter_raw():
            if decoder is None:
                body += raw
            else:
                body += decoder.decompress(raw, MAX_BODY_BYTES + 1 - len(body))
                if decoder.unconsumed_tail:
                    raise too_big
            if len(body) > MAX_BODY_BYTES:
                raise too_big
        if decoder is not None:
            body += decoder.flush()
    except zlib.error as err:
        raise FetchError(f"undecodable body: {err}", transient=False) from err
    if len(body) > MAX_BODY_BYTES:
        raise too_big
    return bytes(body)


def _allowed(content_type: str) -> bool:
    return content_type in ALLOWED_CONTENT_TYPES or content_type.endswith(("+json", "+xml"))


def _status_error(response: httpx.Response) -> FetchError:
    status = response.status_code
    message = f"HTTP {status} {response.reason_phrase}".strip()
    if status in TRANSIENT_STATUSES:
        retry_after = parse_retry_after(response.headers.get("retry-after"), _answered_at(response))
        return FetchError(message, transient=True, retry_after=retry_after)
    return FetchError(message, transient=False)


def _answered_at(response: httpx.Response) -> datetime:
    """The origin's clock when it answered (its Date header): an HTTP-date Retry-After is on
    that clock. Only without a readable Date, the worker's."""
    try:
        said = parsedate_to_datetime(response.headers.get("date", ""))
    except (TypeError, ValueError):
        return datetime.now(UTC)
    return said.replace(tzinfo=said.tzinfo or UTC)


def parse_retry_after(value: str | None, now: datetime) -> timedelta | None:
    """Delta-seconds or an HTTP-date, clamped; garbage or a past date means "no advice"."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        delay = timedelta(seconds=min(int(value), int(MAX_RETRY_AFTER.total_seconds()) + 1))
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        # asctime dates carry no zone; HTTP dates are always GMT.
        delay = when.replace(tzinfo=when.tzinfo or UTC) - now
    if delay <= timedelta(0):
        return None
    return min(delay, MAX_RETRY_AFTER)
