"""The HTTP heads the browser's proxy (fetchers/browser_proxy.py) reads and writes: a
request head parsed strictly (what a proxy and an origin could read differently is refused),
the head an origin gets, a response head made to close, and the proxy's own answers. Pure
code, no sockets: the proxy's I/O stays in browser_proxy.py."""

from dataclasses import dataclass
from urllib.parse import urlsplit

# Headers that describe the connection to the proxy, not the request, and Host (set from the
# URL): never forwarded. Transfer-Encoding stays: the body is relayed as it was framed.
NOT_FORWARDED = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
     "proxy-authenticate", "te", "trailer", "upgrade", "host"}
)  # fmt: skip
REASONS = {
    200: "OK", 400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required",
    431: "Request Header Fields Too Large", 502: "Bad Gateway", 503: "Service Unavailable",
    504: "Gateway Timeout", 505: "HTTP Version Not Supported",
}  # fmt: skip
CONTROLS = frozenset("\r\n\0")
TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


class Reply(Exception):
    """A request answered by the proxy itself, with this status and text."""

    def __init__(self, status: int, text: str, *, headers: tuple[str, ...] = ()) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers


@dataclass(frozen=True)
class Request:
    """A request head as the client sent it (names keep their case; `header` ignores it)."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        return next((v for n, v in self.headers if n.lower() == name), None)


def parse_head(head: bytes) -> Request:
    lines = head.decode("latin-1").split("\r\n")[:-2]
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0] or not set(parts[0]) <= TOKEN_CHARS:
        raise Reply(400, "not an HTTP request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise Reply(505, "HTTP/1.0 and HTTP/1.1 only")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        # No folded lines, no space before the colon: what a proxy and an origin could
        # read differently is refused rather than guessed.
        if not colon or not name or not set(name) <= TOKEN_CHARS or set(value) & CONTROLS:
            raise Reply(400, f"malformed header line {line[:40]!r}")
        headers.append((name, value.strip(" \t")))
    return Request(method, target, version, headers)


def parse_authority(target: str) -> tuple[str, int, str]:
    """CONNECT's `host:port` (IPv6 in brackets)."""
    try:
        parts = urlsplit(f"//{target}")
        port = parts.port
    except ValueError as err:
        raise Reply(400, f"CONNECT to {target[:80]!r}: not host:port") from err
    if not parts.hostname or port is None or parts.path or parts.query or parts.fragment:
        raise Reply(400, f"CONNECT to {target[:80]!r}: not host:port")
    if "@" in parts.netloc:
        raise Reply(400, "no credentials in the authority")
    return valid(parts.hostname, port)


def parse_absolute(target: str) -> tuple[str, int, str, str]:
    """An absolute http:// URL: host, port, the authority for Host, and the origin form."""
    if not target.lower().startswith("http://"):
        raise Reply(400, f"only CONNECT and absolute http:// URLs are proxied, not {target[:80]!r}")
    try:
        parts = urlsplit(target)
        port = parts.port or 80
    except ValueError as err:
        raise Reply(400, f"not a URL: {target[:80]!r}") from err
    if not parts.hostname or "@" in parts.netloc:
        raise Reply(400, f"no host (or credentials in it) in {target[:80]!r}")
    host, port, authority = valid(parts.hostname, port)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return host, port, authority, path


def valid(host: str, port: int) -> tuple[str, int, str]:
    """Host, port and the authority the refusals name (always with its port)."""
    if not 0 < port < 65536:
        raise Reply(400, f"port {port} is out of range")
    return host, port, f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def origin_head(request: Request, path: str, authority: str) -> bytes:
    """The request as the origin gets it: origin form, its own Host, no hop-by-hop headers,
    and `Connection: close` (or `Upgrade` for a WebSocket handshake)."""
    connection = {t.strip().lower() for n, v in request.headers if n.lower() == "connection"
                  for t in v.split(",")}  # fmt: skip
    upgrade = request.header("upgrade")
    drop = NOT_FORWARDED | connection
    host = authority.removesuffix(":80")
    lines = [f"{request.method} {path} {request.version}", f"Host: {host}"]
    lines += [f"{n}: {v}" for n, v in request.headers if n.lower() not in drop]
    if upgrade is not None and "upgrade" in connection:
        lines += [f"Upgrade: {upgrade}", "Connection: Upgrade"]
    else:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def closing_head(head: bytes) -> tuple[int, bytes]:
    """The response head's status, and the head with `Connection: close` (1xx unchanged)."""
    lines = head.split(b"\r\n")
    fields = lines[0].split(b" ", 2)
    try:
        status = int(fields[1])
    except (IndexError, ValueError):
        return 0, head
    if 100 <= status < 200 or not head.endswith(b"\r\n\r\n"):
        return status, head
    named = {b"connection", b"keep-alive", b"proxy-connection"}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"connection":
            named |= {t.strip().lower() for t in value.split(b",")}
    kept = [line for line in lines[1:-2] if line.partition(b":")[0].strip().lower() not in named]
    return status, b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""])


def response(status: int, text: str, headers: tuple[str, ...] = ()) -> bytes:
    body = (text + "\n").encode()
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}", *headers,
             "Content-Type: text/plain; charset=utf-8", f"Content-Length: {len(body)}",
             "Connection: close"]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
