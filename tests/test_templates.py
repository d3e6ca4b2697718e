"""Notice templates (issue 40, points 3 and 4): text from a page is inert in every chat
format Apprise speaks, and a template's cost is bounded at add and at send.

The escaping is judged on what the services would read: the rendered body through
Apprise's own converters (Markdown to HTML for Teams and Matrix, to Slack's mrkdwn) and
Discord's ping detection, over generated page text."""

import html
import html.parser
import re
import time

import pytest
from apprise.conversion import markdown_to_html
from apprise.plugins.discord import USER_ROLE_DETECTION_RE
from apprise.plugins.slack import NotifySlack
from hypothesis import given, settings
from hypothesis import strategies as st

from pricewatch import isolated, notices
from readers import snapshots

# What a hostile or careless page may hold, mixed with any text.
HOSTILE = [
    "<!channel>", "<!here>", "<!everyone>", "<@U123>", "<#C123>", "<http://x.example|y>",
    "@everyone", "@here", "@channel", "@all", "@room", "[t](http://x.example)",
    "![i](http://x.example/i.png)", "<img src=x onerror=alert(1)>", "<a href='http://x'>",
    "```", "````", "~~~", "\n", "\n```\n", "&lt;", "&#64;", "&#x3C;", "\\", "`", "*", "_",
    "<", ">", "[", "]", "(", ")", "!", "|", "#", "<http://x.example>", "http://x.example",
]  # fmt: skip
page_text = st.lists(st.sampled_from(HOSTILE) | st.text(max_size=6), max_size=12).map("".join)
MENTIONS = re.compile(r"@(everyone|here|channel|all|room)\b", re.IGNORECASE)
# What the default body's own Markdown makes: page text may add emphasis (documented), never
# a link, an image or any other element.
FORMATTING = {"p", "br", "strong", "em", "ul", "ol", "li", "pre", "code", "hr"} | {
    f"h{n}" for n in range(1, 7)
}


# Python-Markdown drops the two control characters it uses as placeholders.
MARKDOWNS_OWN = str.maketrans("", "", "\x02\x03")


class Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes += attrs


def body_of(**fields: object) -> str:
    sample = notices.SAMPLES[1] if "prices" in fields else notices.SAMPLE
    values = notices.variables({**sample, **fields})
    return notices.render_here(lambda _: None, None, None, values).body


def assert_inert(body: str) -> None:
    """No service Apprise sends this to reads a mention, a link, an image or a tag in it."""
    assert not MENTIONS.search(body), body
    assert not USER_ROLE_DETECTION_RE.search(body), body  # Discord's pings
    slack = NotifySlack._commonmark_to_slack(body)  # type: ignore[no-untyped-call]
    assert "<" not in slack, slack  # the default body writes none: every one came from a page
    tags = Tags()
    tags.feed(markdown_to_html(body))
    assert tags.tags <= FORMATTING and tags.attributes == [], (tags.tags, tags.attributes)


@settings(max_examples=300, deadline=None)
@given(old=page_text, new=page_text)
def test_a_changed_page_is_inert_and_stays_inside_its_code_block(old: str, new: str) -> None:
    excerpt = snapshots.excerpt(old, new)
    body = body_of(excerpt=excerpt or "-")
    assert_inert(body)
    if excerpt:  # the block holds exactly the excerpt: no line of it closed the fence
        [code] = re.findall(r"<pre><code>(.*?)</code></pre>", markdown_to_html(body), re.S)
        shown = excerpt.replace("@", "@\u200b").translate(MARKDOWNS_OWN)
        assert html.unescape(code).split() == shown.split()  # Markdown expands tabs


@settings(max_examples=300, deadline=None)
@given(name=page_text, currency=page_text, error=page_text, path=page_text)
def test_price_names_errors_and_urls_are_inert(
    name: str, currency: str, error: str, path: str
) -> None:
    move = {**notices.SAMPLE_MOVE, "name": name, "currency": currency, "availability": name}
    assert_inert(body_of(prices=[move], url=f"https://acme.example/{path}"))
    assert_inert(body_of(type="page.failing", status="failed", excerpt=None, error=error))


def test_what_a_page_says_reads_the_same_and_pings_no_one() -> None:
    excerpt = "+ Pro <!channel> @everyone [free](http://evil.example) ```"
    message = notices.render(None, None, notices.variables({**notices.SAMPLE, "excerpt": excerpt}))
    assert "````\n+ Pro <!channel> @\u200beveryone [free](http://evil.example) ```\n````" in (
        message.body
    )
    escaped = notices.variables({**notices.SAMPLE, "excerpt": excerpt})["excerpt"]
    assert (
        escaped
        == r"+ Pro \<!channel> @" + "\u200b" + r"everyone \[free\](http://evil.example) \`\`\`"
    )
    move = {**notices.SAMPLE_MOVE, "name": "Pro <@U1> [x](http://y)"}
    prices = notices.variables({**notices.SAMPLES[1], "prices": [move]})["prices"]
    assert isinstance(prices, list)
    assert prices[0]["line"].startswith("Pro \\<@\u200bU1> \\[x\\](http://y): 12.00 -> 13.00 EUR")
    url = notices.variables({**notices.SAMPLE, "url": "https://social.example/@everyone"})["url"]
    assert url == "https://social.example/%40everyone"


def test_what_the_users_template_writes_stays_theirs() -> None:
    body = "<!channel> @here [{{ target }}](https://status.example) {{ excerpt }}"
    message = notices.render(None, body, notices.variables(notices.SAMPLE))
    assert message.body.startswith("<!channel> @here [acme-pricing](https://status.example) ")


# Cost ------------------------------------------------------------------------------------

NESTED = (
    "{% for a in excerpt or '' %}{% for b in excerpt or '' %}{% for c in excerpt or '' %}"
    "{% endfor %}{% endfor %}{% endfor %}{{ target }}"
)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('{{ "x" * 10**9 }}', "repeats a value to more than 64000 items"),
        ("{{ 2 ** 1000000 }}", "raises to a power past 4096 bits"),
        ('{{ "x" | center(10**9) }}', "needs more than 256 MiB"),
        ('{{ "%099999999d" % 1 }}', "needs more than 256 MiB"),
        (NESTED, "the body template, on a page change with the largest excerpt, took longer"),
        ("{% for i in range(10**5) %}{% for j in range(10**5) %}{% endfor %}{% endfor %}x",
         "took longer than 1 s"),
        ("x" * (notices.MAX_TEMPLATE + 1), "over the limit of 10000"),
    ],
)  # fmt: skip
def test_a_template_without_a_bound_is_refused_at_add_in_seconds(body: str, says: str) -> None:
    started = time.monotonic()
    with pytest.raises(ValueError, match=re.escape(says)):
        notices.check(None, body)
    # Its CPU is bounded (2 s); the wall clock only by what a busy machine gives the child.
    assert time.monotonic() - started < isolated.WALL_SECONDS + 5


def test_a_template_cheap_on_a_short_sample_is_still_tried_on_the_largest_notice() -> None:
    """26 characters cubed is nothing; 2000 cubed is hours: refused at add."""
    small = notices.variables(notices.SAMPLE)
    assert notices.render(None, NESTED, small).body == "acme-pricing"
    with pytest.raises(ValueError, match="largest excerpt"):
        notices.check(None, NESTED)


def test_output_is_cut_where_the_message_ends_however_much_a_loop_writes() -> None:
    body = "{% for i in range(10**5) %}{% for j in range(10**5) %}{{ i }}{% endfor %}{% endfor %}"
    notices.check(None, body)  # bounded by its output: cheap
    message = notices.render(None, body, notices.variables(notices.SAMPLE))
    assert len(message.body) == notices.MAX_BODY


def test_a_slow_render_at_send_time_is_stopped_at_its_deadline() -> None:
    """A template that got past `check` (stored before it existed, or a notice bigger than
    the samples) fails its own message at the deadline, naming the template."""
    big = {**notices.SAMPLE, "excerpt": "x" * 5000}
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"^the body template took longer than 2 s$"):
        notices.render(None, NESTED, notices.variables(big))
    assert time.monotonic() - started < isolated.WALL_SECONDS + 5  # its CPU is bounded: 2 s
