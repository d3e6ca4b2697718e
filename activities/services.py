"""Apprise channels: any of Apprise's services (Slack, Teams, Discord, Telegram, ntfy,
Matrix, Gotify, Mattermost, `json://`, ...) behind the same guard and outbox as webhooks.

Apprise's plugins make their own requests, with `requests` (urllib3 underneath), in the
calling thread. While `send` runs, two hooks hold them to pricewatch's rules:

- **The guard on the address actually connected to.** urllib3 opens every connection
  through `urllib3.util.connection.create_connection`; the hook resolves the host once,
  refuses it if any address is outside the policy, and connects to the address it checked
  (no DNS rebinding between the check and the connection). TLS still verifies the name.
- **One deadline.** Each request gets at most the time left (connect and read), none starts
  after it, and at the deadline a watchdog shuts the call's sockets (a read timeout bounds
  each read, not a response that trickles in), so a send never outlives the delivery's lease.

The hooks act only inside `send` (a context variable says which call is running), so other
users of `requests` in the process are untouched. Plugins that do not speak HTTP (mail,
MQTT, syslog, IRC, desktop notifications, ...) cannot be held to the policy and are refused
when the channel is added: `--email` is pricewatch's mail channel.
"""

import contextlib
import contextvars
import ipaddress
import logging
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import apprise
import requests.adapters
import urllib3.util.connection

from fetchers.guard import AddressPolicy

# Apprise plugin modules that do not send over HTTP(S), so the guard cannot see them.
NOT_HTTP = {
    "amqp", "aprs", "blink1", "dbus", "deltachat", "email", "glib", "gnome", "growl", "irc",
    "macosx", "mqtt", "nostr", "rsyslog", "smpp", "syslog", "windows", "xmpp",
}  # fmt: skip
# A service's answer that says this channel will never work: bad credentials, gone.
DISABLING = {401, 403, 404, 410}
# A service's answer that says "later".
TRANSIENT = {408, 425, 429, 500, 502, 503, 504}
CONNECT_SECONDS = 3.0
READ_SECONDS = 5.0


@dataclass(frozen=True)
class Service:
    """An Apprise URL as parsed: the service's name and the URL as Apprise masks it."""

    name: str
    masked: str
    host: str | None
    """The host the user named (self-hosted services), or None (the service's own)."""


def parse(url: str) -> Service:
    """The service this URL names; ValueError with one line if Apprise cannot use it."""
    shown = url.split("://", 1)[0] + "://..." if "://" in url else "it"
    try:
        plugin = apprise.Apprise.instantiate(url.strip(), suppress_exceptions=False)
    except Exception as err:  # Apprise raises TypeError/its own errors, message for people
        raise ValueError(f"not a usable Apprise URL ({shown}): {_unsaid(str(err), url)}") from err
    if plugin is None:
        raise ValueError(
            f"not an Apprise URL ({shown}): unknown service or malformed "
            "(see https://github.com/caronc/apprise/wiki for each service's form)"
        )
    module = type(plugin).__module__.removeprefix("apprise.plugins.").split(".")[0]
    if module in NOT_HTTP:
        raise ValueError(
            f"{plugin.service_name} does not send over HTTP, so pricewatch cannot hold it to "
            "its address policy: use an HTTP service (or --email for mail)"
        )
    templates: tuple[str, ...] = tuple(plugin.templates)
    names_host = any("{host}" in template for template in templates)
    host = str(plugin.host) if names_host and getattr(plugin, "host", None) else None
    masked = str(plugin.url(privacy=True)).split("?", 1)[0]  # type: ignore[no-untyped-call]
    return Service(name=str(plugin.service_name), masked=masked, host=host)


def _unsaid(message: str, url: str) -> str:
    """Apprise's message without the URL's parts (its errors quote the bad token)."""
    for part in sorted(re.split(r"[/:@?&=#]+", url.split("://", 1)[-1]), key=len, reverse=True):
        if len(part) >= 3:
            message = message.replace(part, "***")
    return message


@dataclass
class Call:
    """What one `send` saw: the guard's refusal, the service's last answer, its errors."""

    policy: AddressPolicy
    deadline: float
    blocked: str | None = None
    status: int | None = None
    answer: str = ""
    transport_error: str | None = None
    logged: list[str] = field(default_factory=list)
    sockets: list[socket.socket] = field(default_factory=list)
    expired: bool = False

    def expire(self) -> None:
        """The deadline passed: cut every connection of this call (a read timeout bounds
        each read, not a response that trickles in), so the send ends now."""
        self.expired = True
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("apprise_call", default=None)


@dataclass(frozen=True)
class Outcome:
    sent: bool
    error: str | None = None
    transient: bool = False
    disable: bool = False
    """The service refused the credentials or the destination is gone."""


def send(url: str, title: str, body: str, policy: AddressPolicy, seconds: float) -> Outcome:
    """Send one message now, in this thread (blocking), within `seconds`."""
    plugin = apprise.Apprise.instantiate(url.strip())
    if plugin is None:
        return Outcome(sent=False, error="the stored Apprise URL no longer parses")
    plugin.socket_connect_timeout = CONNECT_SECONDS
    plugin.socket_read_timeout = READ_SECONDS
    call = Call(policy=policy, deadline=time.monotonic() + seconds)
    token = CALL.set(call)
    watchdog = threading.Timer(seconds, call.expire)
    watchdog.start()
    try:
        sent = plugin.notify(body=body, title=title, body_format=apprise.NotifyFormat.MARKDOWN)
    except Exception as err:  # a plugin's own bug: say so, do not retry it forever
        return Outcome(sent=False, error=f"{plugin.service_name} failed: {err!r}"[:300])
    finally:
        watchdog.cancel()
        CALL.reset(token)
    if sent:
        return Outcome(sent=True)
    return judged(str(plugin.service_name), call)


def judged(service: str, call: Call) -> Outcome:
    """A failed send, classified: permanent unless it is the network or a "later"."""
    if call.blocked:
        return Outcome(sent=False, error=call.blocked)
    if call.expired:
        return Outcome(
            sent=False, error=f"{service} unreachable: no answer in time", transient=True
        )
    if call.status is not None and call.status >= 300:
        error = f"{service} answered HTTP {call.status}"
        if call.answer:
            error += f": {call.answer}"
        if call.status in DISABLING:
            return Outcome(sent=False, error=error, disable=True)
        return Outcome(sent=False, error=error, transient=call.status in TRANSIENT)
    if call.transport_error:
        return Outcome(sent=False, error=f"{service} unreachable: {call.transport_error}",
                       transient=True)  # fmt: skip
    said = call.logged[-1] if call.logged else "no reason given"
    return Outcome(sent=False, error=f"{service} refused the message: {said}")


class Refused(OSError):
    """The guard's refusal, as the connection error urllib3 and the plugin expect."""


# The hooks -------------------------------------------------------------------------------

_create_connection = urllib3.util.connection.create_connection
_adapter_send = requests.adapters.HTTPAdapter.send


def guarded_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
    """urllib3's connect, to the checked address only, while a `send` runs."""
    call = CALL.get()
    if call is None:
        return _create_connection(address, *args, **kwargs)
    host, port = address
    host = host.strip("[]")
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    for checked in addresses:
        if (reason := call.policy.refusal(checked)) is not None:
            call.blocked = f"refused {host}: it resolves to {checked}, {reason}"
            raise Refused(call.blocked)
    sock = _create_connection((str(addresses[0]), port), *args, **kwargs)
    call.sockets.append(sock)
    if call.expired:  # the watchdog ran while this connection was being made
        sock.close()
        raise Refused("no time left for another connection")
    return sock


def timed_send(
    self: requests.adapters.HTTPAdapter, request: Any, *args: Any, **kwargs: Any
) -> requests.Response:
    """Every request inside the call's deadline; its answer noted for `judged`."""
    call = CALL.get()
    if call is None:
        return _adapter_send(self, request, *args, **kwargs)
    left = call.deadline - time.monotonic()
    if left <= 0.5:
        call.transport_error = "no time left for another request"
        raise requests.exceptions.Timeout(call.transport_error)
    kwargs["timeout"] = (min(CONNECT_SECONDS, left), min(READ_SECONDS, left))
    try:
        response = _adapter_send(self, request, *args, **kwargs)
    except requests.RequestException as err:
        if call.blocked is None:
            call.transport_error = _reason(err)
        raise
    call.status = response.status_code
    call.answer = " ".join(response.text[:200].split()) if response.status_code >= 300 else ""
    return response


def _reason(err: Exception) -> str:
    if isinstance(err, requests.exceptions.Timeout):
        return "no answer in time"
    if isinstance(err, requests.exceptions.ConnectionError):
        return "connection refused or reset"
    return type(err).__name__


class _Noted(logging.Handler):
    """Apprise's own words for a failure that made no HTTP request (a plugin's check)."""

    def emit(self, record: logging.LogRecord) -> None:
        if (call := CALL.get()) is not None and record.levelno >= logging.WARNING:
            call.logged.append(record.getMessage()[:200])


urllib3.util.connection.create_connection = guarded_connection
requests.adapters.HTTPAdapter.send = timed_send  # type: ignore[method-assign]
# Apprise's log lines stay out of the worker's console (one per send at INFO; its warnings
# may quote a URL): `_Noted` keeps what a failure needs for its error.
logging.getLogger("apprise").addHandler(_Noted())
logging.getLogger("apprise").propagate = False
