"""What a chat message says: title and body templates over a notice.

Templates are Jinja2 in its immutable sandbox: no attribute of Python internals, no
mutation, no imports, and an undefined variable is an error (a misspelt name is refused at
add time, not sent as an empty string). The variables are the notice's fields (the same JSON a
webhook gets, docs/schemas/notice.json) plus a few words for people:

    target, url, slot, work_id, status, checked_at, error, failure_streak, excerpt
    notice      changed | failing | recovered | test
    kind        page | price
    headline    "price changed", "page changed", "is failing", "recovered", "test notice"
    prices      each move: name, old, new, currency, change, change_percent, rules, line,
                period, previous_period, per, previous_per (where the page says)
    test        true only for `pricewatch notify-test`

    excerpt_block  the excerpt as a fenced code block that nothing in it can close

The default body is Markdown: Apprise turns it into what each service renders (HTML for
Teams or Matrix, Markdown for Slack or Discord, plain text for SMS).

Text that came from a page or a URL (the excerpt, each move's fields and line, the error,
the url) is made inert before a template sees it (`escaped`): whatever the template does
with it, it cannot ping a channel, make a link or an image, open an HTML tag or close a code
block. What the template's own text says is the user's and is sent as written.

A template's cost is bounded: it is at most MAX_TEMPLATE characters, `*` and `**` refuse
results too big to send, and it renders in a child process (pricewatch.isolated) with a
deadline and a memory cap, so a slow one fails its own message and stalls nothing else.
`check` renders it at add time on every kind of notice, the largest one a notice can carry
among them, within half the deadline a send gives it.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from pricewatch import isolated
from pricewatch.prices import move_line

TEST_TYPE = "test"  # a notice's `type` for `pricewatch notify-test`
MAX_TITLE = 250
MAX_BODY = 4000  # Apprise cuts further for services that take less
MAX_TEMPLATE = 10_000  # characters of one template, title or body
# A render stops reading its output here: the message is cut at MAX_BODY anyway.
MAX_OUTPUT = 16 * MAX_BODY
# A message's render, at send time; `check` asks for all its samples in half of it.
RENDER_SECONDS = 2.0
CHECK_SECONDS = RENDER_SECONDS / 2

DEFAULT_TITLE = "pricewatch: {{ target }} {{ headline }}"
DEFAULT_BODY = """\
{%- if test -%}
This is a test notice from pricewatch: this channel works.
{% endif -%}
**{{ target }}** {{ headline }} ({{ slot }})
{{ url }}
{%- if prices %}

{% for move in prices %}- {{ move.line }}
{% endfor -%}
{%- elif excerpt %}

{{ excerpt_block }}
{%- endif %}
{%- if error %}

Error: {{ error }} (failed slots in a row: {{ failure_streak }})
{%- endif %}

work id {{ work_id }}"""


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox, and `*` and `**` refuse a result too big to send: a string or
    list repeated past MAX_OUTPUT, a power past MAX_POWER_BITS. A cheap guard in front of
    the child process's deadline and memory cap, with a clearer word than theirs."""

    intercepted_binops = frozenset({"*", "**"})
    MAX_POWER_BITS = 4096

    def call_binop(self, context: Context, op: str, left: Any, right: Any) -> Any:
        if op == "*":
            for times, value in ((left, right), (right, left)):
                if (
                    isinstance(times, int)
                    and isinstance(value, str | list | tuple)
                    and len(value) * times > MAX_OUTPUT
                ):
                    raise SecurityError(f"repeats a value to more than {MAX_OUTPUT} items")
        if (
            op == "**"
            and isinstance(left, int)
            and isinstance(right, int)
            and abs(left) > 1
            and right * abs(left).bit_length() > self.MAX_POWER_BITS
        ):
            raise SecurityError(f"raises to a power past {self.MAX_POWER_BITS} bits")
        return super().call_binop(context, op, left, right)


ENVIRONMENT = BoundedEnvironment(
    undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False
)

HEADLINES = {
    ("price", "changed"): "price changed",
    ("page", "changed"): "page changed",
    ("page", "failing"): "is failing",
    ("page", "recovered"): "recovered",
    ("page", "test"): "test notice",
}


@dataclass(frozen=True)
class Message:
    title: str
    body: str


def variables(notice: Mapping[str, object], test: bool = False) -> dict[str, object]:
    """A notice's JSON (activities.notify.notice_body) as template variables, what came from
    a page or a URL made inert (`escaped`)."""
    kind, _, what = str(notice["type"]).partition(".")
    if notice["type"] == TEST_TYPE:
        kind, what = "page", "test"
    moves = notice.get("prices")
    prices = [_inert_move(move) for move in moves] if isinstance(moves, list) else []
    excerpt, error = notice.get("excerpt"), notice.get("error")
    return {
        "target": notice["target_id"],
        "url": shown_url(str(notice["url"])),
        "slot": notice["slot"],
        "work_id": notice["work_id"],
        "status": notice["status"],
        "checked_at": notice["checked_at"],
        "error": escaped(one_line(error)) if isinstance(error, str) else error,
        "failure_streak": notice.get("failure_streak", 0),
        "excerpt": escaped(excerpt) if isinstance(excerpt, str) else excerpt,
        "excerpt_block": code_block(excerpt) if isinstance(excerpt, str) else None,
        "notice": what,
        "kind": kind,
        "headline": HEADLINES.get((kind, what), what),
        "prices": prices,
        "test": test,
    }


# What could start Markdown's links and images (`[`), an autolink, an HTML tag or a Slack
# anchor or mention (`<!channel>`, `<@U1>`, `<url|text>`), a code span or fence (backticks,
# `~~`), a quote (`>` first on a line), an entity (`&#64;` is an @ once rendered), or an
# escape of its own (`\\`). Emphasis (`*`, `_`) only changes how text looks and is common in
# URLs and names: left alone, as is a `>` inside a line (`->`), which opens nothing.
_SYNTAX = re.compile(r"[\\`\[\]<]|~(?=~)|(?<=~)~|&(?=#?[0-9A-Za-z]{1,32};)|^[ \t]*>", re.MULTILINE)
# A zero-width space after every @: no service reads `@\u200beveryone` as a mention
# (Discord's own advice), and people see the text unchanged.
_MENTION = re.compile("@")
_BREAK = "@\u200b"
_BACKTICKS = re.compile("`+")


def escaped(text: str) -> str:
    """Page text as literal Markdown: a backslash before what could be syntax (Apprise
    turns it into each service's form: `&lt;` for Slack, HTML for Teams and Matrix), and no
    mention. Safe inside a code block too (a backslash is shown there, nothing closes it)."""
    return _MENTION.sub(_BREAK, _SYNTAX.sub(_backslashed, text))


def _backslashed(found: re.Match[str]) -> str:
    """A backslash before the syntax character (the last of the match, after any spaces)."""
    return found[0][:-1] + "\\" + found[0][-1]


def code_block(text: str) -> str:
    """Page text as a fenced code block, shown as it is: its fence is longer than any
    backtick run inside, so no line of the page can close it; mentions broken as above."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{_MENTION.sub(_BREAK, text)}\n{fence}"


def one_line(text: str) -> str:
    """A field that is one line (a price's name, an error): a newline in it could start a
    heading, a list or a fence in the message."""
    return " ".join(text.split())


def shown_url(url: str) -> str:
    """The URL escaped, an @ in its path or query percent-encoded (the same URL, and no
    mention; `https://social.example/@everyone` must not ping anyone)."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    return (
        escaped(one_line(scheme + sep + authority))
        + slash
        + escaped(one_line(path.replace("@", "%40")))
    )


def _inert_move(move: dict[str, Any]) -> dict[str, Any]:
    """A move with its page's words escaped, and its line made of them."""
    inert = {
        key: escaped(one_line(value)) if isinstance(value, str) else value
        for key, value in move.items()
    }
    return {**inert, "line": move_line(inert)}


def render(title: str | None, body: str | None, values: Mapping[str, object]) -> Message:
    """The message, rendered in a child process within RENDER_SECONDS; ValueError naming
    the template that does not render, renders to nothing, or overruns its bounds."""
    _check_lengths(title, body)
    message: Message = isolated.run(render_here, title, body, dict(values), seconds=RENDER_SECONDS)
    return message


def render_here(
    note: isolated.Note, title: str | None, body: str | None, values: Mapping[str, object]
) -> Message:
    """The message, in this process: what `render` runs in its child (and tests, for
    speed: the output is the same)."""
    note("the body template")
    text = _render_one(body or DEFAULT_BODY, values).strip()
    if not text:
        raise ValueError("the body template renders to nothing")
    note("the title template")
    heading = _render_one(title or DEFAULT_TITLE, values).strip()
    return Message(title=" ".join(heading.split())[:MAX_TITLE], body=text[:MAX_BODY])


def _render_one(template: str, values: Mapping[str, object]) -> str:
    """Stream the output and stop at MAX_OUTPUT: a loop that writes more costs no more."""
    chunks, size = [], 0
    for chunk in ENVIRONMENT.from_string(template).generate(values):
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_OUTPUT:
            break
    return "".join(chunks)


def _check_lengths(title: str | None, body: str | None) -> None:
    for which, template in (("title", title), ("body", body)):
        if template is not None and len(template) > MAX_TEMPLATE:
            raise ValueError(
                f"the {which} template is {len(template)} characters, over the limit of "
                f"{MAX_TEMPLATE}"
            )


# Notices of every shape, for checking a template before it is stored.
SAMPLE: dict[str, object] = {
    "type": "page.changed", "target_id": "acme-pricing", "url": "https://acme.example/pricing",
    "slot": "2026-12-01T08:00:00Z", "work_id": "acme-pricing:2026-12-01T08:00:00Z",
    "status": "changed", "checked_at": "2026-12-01T08:00:02+00:00", "error": None,
    "failure_streak": 0, "excerpt": "- Pro 12 EUR\n+ Pro 13 EUR", "previous_hash": "a" * 64,
    "new_hash": "b" * 64,
}  # fmt: skip
SAMPLE_MOVE: dict[str, object] = {
    "name": "Pro", "old": "12.00", "new": "13.00", "currency": "EUR", "change": "1.00",
    "change_percent": "8.33", "rules": ["price-change"], "availability": None,
    "previous_availability": None,
}  # fmt: skip
# The largest a notice gets: the excerpt at its cap (readers.snapshots: 20 lines, 2000
# characters), a listing's worth of moves, a long error. A template that is cheap on the
# small samples and slow on a page is refused at add, not found out at send.
LARGEST_MOVES = 100
LARGE_EXCERPT = "\n".join(f"{'-+'[i % 2]} {'Pro plan 12.00 EUR per month ' * 4}"[:99]
                          for i in range(20))  # fmt: skip
SAMPLES: list[dict[str, object]] = [
    SAMPLE,
    {**SAMPLE, "type": "price.changed", "prices": [SAMPLE_MOVE], "excerpt": None},
    {
        **SAMPLE,
        "type": "page.failing",
        "status": "failed",
        "error": "HTTP 503",
        "failure_streak": 3,
        "excerpt": None,
    },
    {**SAMPLE, "type": "page.recovered", "status": "unchanged", "excerpt": None},
    {**SAMPLE, "excerpt": LARGE_EXCERPT},
    {
        **SAMPLE,
        "type": "price.changed",
        "excerpt": None,
        "prices": [{**SAMPLE_MOVE, "name": f"Plan {i} " + "x" * 60} for i in range(LARGEST_MOVES)],
    },
    {**SAMPLE, "type": "page.failing", "status": "failed", "excerpt": None,
     "error": "HTTP 503 " + "Service Unavailable " * 50, "failure_streak": 99},
]  # fmt: skip
SAMPLE_WORDS = [
    "a page change", "a price change", "a failing notice", "a recovered notice",
    "a page change with the largest excerpt", f"a price change of {LARGEST_MOVES} moves",
    "a failing notice with a long error",
]  # fmt: skip


def check(title: str | None, body: str | None) -> None:
    """ValueError naming the template that does not render for some notice, renders to
    nothing, or takes more than CHECK_SECONDS for all of them together."""
    _check_lengths(title, body)
    try:
        isolated.run(_check_all, title, body, seconds=CHECK_SECONDS)
    except isolated.Overrun as err:
        raise ValueError(f"{err}: make it cheaper") from None
    except isolated.Unfinished as err:  # not the template's fault: no verdict on it
        raise ValueError(f"could not try the templates: {err}; try again") from None


def _check_all(note: isolated.Note, title: str | None, body: str | None) -> None:
    """Render each template on each sample (in `check`'s child process)."""
    for sample, words in zip(SAMPLES, SAMPLE_WORDS, strict=True):
        for test in (False, True):
            values = variables(sample, test)
            for which, template, default in (
                ("body", body, DEFAULT_BODY),
                ("title", title, DEFAULT_TITLE),
            ):
                note(f"the {which} template, on {words},")
                try:
                    text = _render_one(template or default, values)
                except MemoryError:  # its child's cap: isolated.run says so
                    raise
                except Exception as err:  # TemplateError, and what an expression raises (1/0)
                    lineno = getattr(err, "lineno", None)
                    line = f" (line {lineno})" if lineno else ""
                    raise ValueError(f"the {which} template does not render{line}: {err}") from err
                if which == "body" and not text.strip():
                    raise ValueError("the body template renders to nothing")
