"""Text from a page, a URL or a channel is shown by the CLI as written: never read as Rich
markup (`Pro [/bold] plan` crashed `list` in 1.8.1, `[click me]` vanished from `try`), emoji
codes, or control characters that drive the terminal (issue 40 point 2)."""

import contextlib
import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pricewatch.views import ChannelView, PriceView, TargetSummary
from surfaces import terminal

SLOT = datetime(2026, 12, 1, 8, tzinfo=UTC)
HOSTILE = [
    "Pro [/bold] plan",
    "[click me]",
    "[link=http://elsewhere]x[/link]",
    "[bold red]loud[/]",
    ":smile: :thumbs_up:",
    "a\\[b]",
]
# Text as a page may hold it: brackets, slashes, colons and every kind of character.
TEXT = st.text(
    st.one_of(st.sampled_from("[]/:=\\ "), st.characters(codec="utf-8")), min_size=1, max_size=40
)


def summary(name: str, url: str) -> TargetSummary:
    return TargetSummary(
        id="acme", url=url, interval_seconds=60, schedule="every 1m", enabled=True,
        unhealthy=False, next_slot=SLOT, last_status="changed",
        prices=[PriceView(name=name, amount=Decimal("9.90"), currency="EUR")],
    )  # fmt: skip


def printed(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().out


@pytest.mark.parametrize("text", HOSTILE)
def test_markup_in_page_text_is_printed_as_written(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    terminal.targets([summary(text, f"https://acme.example/{text}")])
    out = printed(capsys)
    assert f"{text} 9.90 EUR" in out
    assert f"https://acme.example/{text}" in out
    assert "😄" not in out


@settings(max_examples=150, deadline=None)
@given(name=TEXT, destination=TEXT, reason=TEXT)
@example(name="0", destination="0\x1f\u2028\x1f", reason="")  # a line separator broke the row
def test_any_text_in_any_table_is_shown_whole_and_inert(
    name: str, destination: str, reason: str
) -> None:
    with contextlib.redirect_stdout(io.StringIO()) as written:
        terminal.targets([summary(name, "https://acme.example/")])
        terminal.channels([ChannelView(channel_id="c1", kind="json", destination=destination,
                                     secret=None, disabled_reason=reason)])  # fmt: skip
    out = written.getvalue()
    for text in (name, destination, reason):
        assert terminal.inert(text, cell=True).strip() in out
    assert len(out.splitlines()) == 4  # two tables, a header and a row each
    assert "\x1b" not in out  # no page text drives the terminal


@given(TEXT)
def test_inert_leaves_no_control_character_and_keeps_the_rest(text: str) -> None:
    shown = terminal.inert(text)
    assert not any((ord(c) < 32 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F for c in shown)
    if text.isprintable():
        assert shown == text


def test_an_escape_sequence_from_a_page_is_shown_not_obeyed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    terminal.targets([summary("\x1b[2J\x1b[31mPro\u202e", "https://acme.example/")])
    out = printed(capsys)
    assert "\\x1b[2J\\x1b[31mPro\\u202e" in out
    assert "\x1b" not in out
