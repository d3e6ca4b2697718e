"""Decide what is hashed for a fetched page, so markup noise does not register as a change.

The fingerprint is the SHA-256 of `normalise(...)`, not of the raw body: rotating CSRF tokens in
scripts, re-indented markup, reordered attributes or JSON keys would otherwise report a change
on every check. Pure (no I/O, no Temporal) so it can be unit-tested and run at add time.

Selectors apply to HTML only (XML parsed as HTML would lowercase names and mangle namespaces,
so a selector on any other content type is an ExtractionError); pointers apply to JSON only.
"""

import json
import re
from typing import Any

from selectolax.lexbor import LexborHTMLParser, SelectolaxError

from pricewatch import isolated
from pricewatch.models import Extraction

_HIDDEN = ["script", "style", "noscript", "template", "svg"]
# Elements that start a new line when rendered; inline ones (b, span, a) keep text together,
# so "Price: <b>5</b> EUR" stays one line.
_BLOCKS = (
    "address, article, aside, blockquote, br, caption, dd, details, dialog, div, dl, dt, "
    "fieldset, figcaption, figure, footer, form, h1, h2, h3, h4, h5, h6, header, hr, li, "
    "main, nav, ol, option, p, pre, section, summary, table, tbody, td, tfoot, th, thead, tr, ul"
)
# Marks block boundaries while source newlines (mere whitespace in HTML) are collapsed; U+FFFF is
# a Unicode noncharacter, so real text should never contain it (if it does: one more line break).
_BREAK = "\uffff"
_POINTER = re.compile(r"(/([^~/]|~[01])*)*")
# A user's `ignore` regex runs in a child process with this deadline: Python's `re` holds the
# GIL while it matches, so a catastrophic pattern (`(a+)+$`) in a thread would stop the whole
# worker, its event loop included, for as long as it backtracks.
IGNORE_SECONDS = 5.0
_LOOKS_HTML = re.compile(r"\s*(<!--.*?-->\s*)*<(!doctype\s+html|html|head|body)\b", re.I | re.S)


class ExtractionError(ValueError):
    """A rule that cannot apply: bad syntax, or nothing in this body for it to select."""


def validate_extraction(extraction: Extraction) -> None:
    """Raise ExtractionError for rules that can never work, at add time, before any check runs."""
    if extraction.selector is not None and extraction.json_pointer is not None:
        raise ExtractionError("set selector (HTML) or json_pointer (JSON), not both")
    if extraction.selector is not None:
        try:
            LexborHTMLParser("").css(extraction.selector)
        except (SelectolaxError, ValueError) as e:
            raise ExtractionError(f"invalid CSS selector {extraction.selector!r}: {e}") from e
    if extraction.ignore is not None:
        try:
            re.compile(extraction.ignore)
        except re.error as e:
            raise ExtractionError(f"invalid ignore regex {extraction.ignore!r}: {e}") from e
    if extraction.json_pointer is not None and not _POINTER.fullmatch(extraction.json_pointer):
        raise ExtractionError(
            f"invalid JSON pointer {extraction.json_pointer!r}: must be '' or start with '/', "
            "and '~' must be followed by 0 or 1"
        )


def normalise(body: bytes, content_type: str, extraction: Extraction) -> str:
    """The text whose SHA-256 is the page's fingerprint."""
    validate_extraction(extraction)
    media_type, _, params = content_type.partition(";")
    media_type = media_type.strip().lower()
    text = decode(body, params)
    if media_type == "application/json" or media_type.endswith("+json"):
        text = _json_text(text, extraction)
    elif media_type in ("text/html", "application/xhtml+xml") or (
        not media_type and looks_html(text)
    ):
        text = _html_text(text, extraction)
    elif extraction.selector is not None or extraction.json_pointer is not None:
        rule = "selector" if extraction.selector is not None else "json_pointer"
        raise ExtractionError(f"{rule} does not apply to content type {media_type or 'unknown'!r}")
    text = _tidy(text)
    if extraction.ignore is not None:
        text = _tidy(without(extraction.ignore, text))
    return text


def without(ignore: str, text: str) -> str:
    """`text` with every match of `ignore` removed, in a child process within
    IGNORE_SECONDS; ExtractionError if the regex takes longer on this page."""
    try:
        removed: str = isolated.run(_removed, ignore, text, seconds=IGNORE_SECONDS)
    except isolated.Overrun as err:
        raise ExtractionError(f"the ignore regex {ignore!r}: {err} on this page") from None
    return removed


def _removed(note: isolated.Note, ignore: str, text: str) -> str:
    return re.sub(ignore, "", text, flags=re.MULTILINE)


def decode(body: bytes, params: str) -> str:
    """Declared charset if Python knows it, else UTF-8; never fails (bad bytes become U+FFFD)."""
    found = re.search(r"charset\s*=\s*[\"']?([^\"';\s]+)", params, re.I)
    try:
        text = body.decode(found.group(1) if found else "utf-8", errors="replace")
    # An unknown charset, a codec that is no text encoding ("base64") or one that ignores
    # errors="replace" ("idna", "undefined"): a server's typo must not fail the check.
    except (LookupError, UnicodeError):
        text = body.decode("utf-8", errors="replace")
    return text.removeprefix("\ufeff")


def looks_html(text: str) -> bool:
    """A body served without a content type that is an HTML document."""
    return _LOOKS_HTML.match(text) is not None


def _tidy(text: str) -> str:
    """Collapse whitespace runs (including no-break spaces) per line; drop empty lines."""
    return "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


def _html_text(html: str, extraction: Extraction) -> str:
    """Visible text, one line per block: source line breaks inside a paragraph are layout."""
    if extraction.json_pointer is not None:
        raise ExtractionError("json_pointer does not apply to HTML; use selector")
    tree = LexborHTMLParser(html)
    tree.strip_tags(_HIDDEN, recursive=True)
    # Select before inserting line breaks, so the extra text nodes cannot affect matching
    # (e.g. `:empty`). Comments are never part of .text().
    if extraction.selector is None:
        nodes = [n for n in [tree.body] if n is not None]
    else:
        nodes = tree.css(extraction.selector)
        if not nodes:
            raise ExtractionError(f"selector {extraction.selector!r} matched nothing")
    for block in tree.css(_BLOCKS):
        block.insert_before(_BREAK)
        block.insert_after(_BREAK)
    return re.sub(r"\s+", " ", _BREAK.join(n.text() for n in nodes)).replace(_BREAK, "\n")


def _json_text(text: str, extraction: Extraction) -> str:
    if extraction.selector is not None:
        raise ExtractionError("selector does not apply to JSON; use json_pointer")
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise ExtractionError(f"body is not valid JSON: {e}") from e
    pointer = extraction.json_pointer or ""
    for token in pointer.split("/")[1:]:
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif (
            isinstance(value, list)
            and re.fullmatch(r"0|[1-9][0-9]*", key)
            and int(key) < len(value)
        ):
            value = value[int(key)]
        else:
            raise ExtractionError(f"JSON pointer {pointer!r} does not resolve (at {key!r})")
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
