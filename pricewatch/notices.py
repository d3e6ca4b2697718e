"""What a chat message says: title and body templates over a notice.

Templates are Jinja2 in its immutable sandbox: no attribute of Python internals, no
mutation, no imports, and an undefined variable is an error (a misspelt name is refused at
add time, not sent as an empty string). The variables are the notice's fields (the same JSON a
webhook gets, docs/schemas/notice.json) plus a few words for people:

    target, url, slot, work_id, status, checked_at, error, failure_streak, excerpt
    notice      changed | failing | recovered | test
    kind        page | price
    headline    "price changed", "page changed", "is failing", "recovered", "test notice"
    prices      each move: name, old, new, currency, change, change_percent, rules, line
    test        true only for `pricewatch notify-test`

The default body is Markdown: Apprise turns it into what each service renders (HTML for
Teams or Matrix, Markdown for Slack or Discord, plain text for SMS).
"""

from collections.abc import Mapping
from dataclasses import dataclass

from jinja2 import StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from pricewatch.prices import move_line

TEST_TYPE = "test"  # a notice's `type` for `pricewatch notify-test`
MAX_TITLE = 250
MAX_BODY = 4000  # Apprise cuts further for services that take less

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

```
{{ excerpt }}
```
{%- endif %}
{%- if error %}

Error: {{ error }} (failed slots in a row: {{ failure_streak }})
{%- endif %}

work id {{ work_id }}"""

ENVIRONMENT = ImmutableSandboxedEnvironment(
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
    """A notice's JSON (activities.notify.notice_body) as template variables."""
    kind, _, what = str(notice["type"]).partition(".")
    if notice["type"] == TEST_TYPE:
        kind, what = "page", "test"
    moves = notice.get("prices")
    prices = (
        [{**move, "line": move_line(move)} for move in moves] if isinstance(moves, list) else []
    )
    return {
        "target": notice["target_id"],
        "url": notice["url"],
        "slot": notice["slot"],
        "work_id": notice["work_id"],
        "status": notice["status"],
        "checked_at": notice["checked_at"],
        "error": notice.get("error"),
        "failure_streak": notice.get("failure_streak", 0),
        "excerpt": notice.get("excerpt"),
        "notice": what,
        "kind": kind,
        "headline": HEADLINES.get((kind, what), what),
        "prices": prices,
        "test": test,
    }


def render(title: str | None, body: str | None, values: Mapping[str, object]) -> Message:
    """The message; TemplateError (or ValueError for an empty body) if it does not render."""
    text = ENVIRONMENT.from_string(body or DEFAULT_BODY).render(values).strip()
    if not text:
        raise ValueError("the body template renders to nothing")
    heading = ENVIRONMENT.from_string(title or DEFAULT_TITLE).render(values).strip()
    return Message(title=" ".join(heading.split())[:MAX_TITLE], body=text[:MAX_BODY])


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
]


def check(title: str | None, body: str | None) -> None:
    """ValueError naming the template that does not render for some notice."""
    for sample in SAMPLES:
        for test in (False, True):
            try:
                render(title, body, variables(sample, test))
            except ValueError:
                raise
            except Exception as err:  # TemplateError, and what an expression raises (1/0)
                which = "title" if title and _fails(title, sample) else "body"
                lineno = getattr(err, "lineno", None)
                line = f" (line {lineno})" if lineno else ""
                raise ValueError(f"the {which} template does not render{line}: {err}") from err


def _fails(template: str, sample: Mapping[str, object]) -> bool:
    try:
        ENVIRONMENT.from_string(template).render(variables(sample))
    except Exception:
        return True
    return False
