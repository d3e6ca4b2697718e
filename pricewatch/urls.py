"""A target's URL in two forms: as typed, what `add`, `list` and `export` show and what is
compared; and as sent, percent-encoded with an IDN host in punycode, what is fetched.

`http://host/preis/größe?q=ü` is kept so, and fetched as
`http://host/preis/gr%C3%B6%C3%9Fe?q=%C3%BC`. Up to 1.1 the sent form was also the one
shown. No I/O: the workflow imports it (through the models)."""

import re

from pydantic import AnyHttpUrl

# A run of percent-escapes, which may spell UTF-8 characters.
_ESCAPES = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_PUNYCODE = "xn--"


def as_typed(value: str) -> str:
    """The URL normalised as before, so that equal URLs compare equal (lowercase scheme and
    host, `/` for an empty path, no default port, dot segments resolved), but readable: where
    the normalisation percent-encoded a printable non-ASCII character, or the host is in
    punycode, the character is shown (an IRI, as a browser's address bar shows it).
    ValueError unless it is an absolute http(s) URL.

    Typed encoded or not, a URL gives the same string; ASCII escapes (`%20`, `%2F`) stay as
    they are, and so does every URL that is ASCII alone (every URL up to 1.1)."""
    parsed = AnyHttpUrl(value.strip())
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError("url must be an absolute http(s) URL")
    sent = str(parsed)
    start = len(parsed.scheme) + 3  # after "scheme://"
    end = sent.index("/", start)  # an http(s) URL always has a path
    userinfo, at, host_port = sent[start:end].rpartition("@")
    host = ".".join(_label(label) for label in parsed.host.split("."))
    host_port = host + host_port.removeprefix(parsed.host)
    return (
        sent[:start]
        + _ESCAPES.sub(_characters, userinfo)
        + at
        + host_port
        + _ESCAPES.sub(_characters, sent[end:])
    )


def as_sent(url: str) -> str:
    """What is requested: every non-ASCII character percent-encoded (UTF-8), an IDN host in
    punycode; for a URL from before 1.2, exactly the form it was stored in. A URL that does
    not parse is returned as it is, for the fetch to refuse."""
    try:
        return str(AnyHttpUrl(url))
    except ValueError:
        return url


def _label(label: str) -> str:
    if not label.startswith(_PUNYCODE):
        return label
    try:
        shown = label[len(_PUNYCODE) :].encode("ascii").decode("punycode")
    except UnicodeError:
        return label
    return shown if shown.isprintable() else label


def _characters(escapes: re.Match[str]) -> str:
    """A run of escapes with the printable non-ASCII characters it spells decoded; ASCII,
    invalid UTF-8 and invisible characters (spaces, controls, bidi marks) stay escaped."""
    text = escapes.group()
    raw = bytes.fromhex(text.replace("%", ""))
    out, offset = [], 0
    for char in raw.decode("utf-8", errors="surrogateescape"):
        size = 1 if ord(char) < 0x80 or 0xDC80 <= ord(char) <= 0xDCFF else len(char.encode())
        keep = ord(char) >= 0x80 and size > 1 and char.isprintable()
        out.append(char if keep else text[3 * offset : 3 * (offset + size)])
        offset += size
    return "".join(out)
