"""Who may in, for `pricewatch serve`: the one token compared whole and in constant time (the
API's bearer, the dashboard's sign-in), the session that sign-in begins (its cookie's name,
its signing key), the CSRF token every form carries, and the way back after signing in.

Kept apart from the app's wiring (web.py) and the pages (dashboard.py) so that every rule
that lets someone in reads in one place, and the mutation run (`make mutants`) checks all of
it and nothing else.
"""

import hmac
import secrets
from urllib.parse import urlsplit

from fastapi import Request
from starlette.exceptions import HTTPException

from pricewatch.settings import Settings

BEARER_NEEDED = "a bearer token is needed: Authorization: Bearer $PRICEWATCH_API_TOKEN"


def matches(given: str, token: str) -> bool:
    """The whole token, in constant time: a comparison by prefix would let the empty guess
    in, and one that stops at the first differing byte tells a guesser how much was right."""
    return hmac.compare_digest(given.encode(), token.encode())


def api_refusal(request: Request, token: str | None) -> tuple[int, str] | None:
    """Why an API request is refused, if it is: a missing or wrong bearer token; without a
    token (loopback only), a change asked by another site's page (a browser sends its
    Origin), which could otherwise reach a local server."""
    if token is not None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not matches(given, token):
            return 401, BEARER_NEEDED
        return None
    origin = request.headers.get("origin")
    changes = request.method not in ("GET", "HEAD")
    if changes and origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        return 403, f"a change from another site ({origin}) is refused"
    return None


def private(path: str) -> bool:
    """A page that needs the session: all but the sign-in and the stylesheet."""
    return path != "/login" and not path.startswith("/static/")


def sign_in(request: Request, given: str, token: str | None) -> bool:
    """Whether `given` is the token; if it is, the session starts afresh (a new CSRF token
    too: one seen before signing in is not one after) and is signed in."""
    if token is None or not matches(given, token):
        return False
    request.session.clear()
    request.session["signed_in"] = True
    return True


def csrf_token(request: Request) -> str:
    """The session's CSRF token, made on first use."""
    if "csrf" not in request.session:
        request.session["csrf"] = secrets.token_urlsafe(32)
    token: str = request.session["csrf"]
    return token


def check_csrf(request: Request, given: str) -> None:
    """403 unless `given` is the session's CSRF token (a session without one has none to
    match: an empty form field is not a match)."""
    expected = request.session.get("csrf")
    if not expected or not matches(given, str(expected)):
        raise HTTPException(403, "the form's CSRF token is wrong or missing: reload the page")


def local(path: str) -> str:
    """A path on this server to go back to, never another site (`//evil`, `https://`)."""
    return path if path.startswith("/") and not path.startswith("//") and "\\" not in path else "/"


def cookie_name(settings: Settings, port: int) -> str:
    """PRICEWATCH_SESSION_COOKIE, else one per port: a browser sends a host's cookies to
    every port of it, so two servers on one host sharing a name would sign each other out."""
    return settings.session_cookie or f"pricewatch_{port}"


def session_key(token: str | None) -> str:
    """What signs the session cookie: derived from the token, so that a session outlives a
    restart and is no session on a deployment with another token; without a token (loopback
    only) a new one each start."""
    if token is None:
        return secrets.token_hex(32)
    return hmac.new(token.encode(), b"pricewatch session", "sha256").hexdigest()
