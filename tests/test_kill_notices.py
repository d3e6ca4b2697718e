"""What a chat message is made of, piece by piece (issue 49's mutation run over
pricewatch/notices.py, docs/testing.md#mutation-testing): each character a page could use as
chat syntax escaped and no other, the fence no page line can close, a URL's mention broken,
the variables a template gets, the bounds of `*` and `**` at their edges, the template
checks' words, and the cuts of a rendered message. In process: `_check_all` and
`render_here` are what `check` and `render` run in their child."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jinja2.exceptions import SecurityError

from pricewatch import isolated, notices

ZW = "\u200b"


def rendered(template: str, **values: object) -> str:
    return notices._render_one(template, values)


# Escaping -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\\b", "a\\\\b"), ("`x`", "\\`x\\`"), ("[x](y)", "\\[x\\](y)"), ("<b>", "\\<b>"),
        ("~~x~~", "\\~\\~x\\~\\~"), ("~x~", "~x~"), ("&#64;", "\\&#64;"), ("&lt;", "\\&lt;"),
        ("& x; &;", "& x; &;"), ("&" + "a" * 33 + ";", "&" + "a" * 33 + ";"),
        ("> quote", "\\> quote"), ("a\n  > b", "a\n  \\> b"), ("\t>x", "\t\\>x"),
        ("a > b -> c", "a > b -> c"), ("@everyone", f"@{ZW}everyone"),
        ("*bold* _it_ (x) ! | #", "*bold* _it_ (x) ! | #"),
    ],
)  # fmt: skip
def test_what_could_be_syntax_is_escaped_and_nothing_else(text: str, shown: str) -> None:
    assert notices.escaped(text) == shown


@given(st.text(st.characters(blacklist_characters="\\`[]<~&>@")))
def test_text_without_syntax_is_kept_as_it_is(text: str) -> None:
    assert notices.escaped(text) == text


@pytest.mark.parametrize(
    ("text", "fence"), [("plain", "```"), ("a `b` ``c``", "```"), ("x ```` y ``` z", "`````")]
)
def test_a_code_block_s_fence_is_longer_than_any_run_inside(text: str, fence: str) -> None:
    assert notices.code_block(text + " @here") == f"{fence}\n{text} @{ZW}here\n{fence}"


def test_one_line_joins_every_kind_of_space() -> None:
    assert notices.one_line("  a\nb\t\tc \r\n") == "a b c"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u@acme.example/a@b?c=@d#[x]",
         f"https://u@{ZW}acme.example/a%40b?c=%40d#\\[x\\]"),
        ("https://acme.example", "https://acme.example"),
        ("acme.example/x y\nz", "acme.example/x y z"),
        ("mailto:a@b", f"mailto:a@{ZW}b"),
    ],
)  # fmt: skip
def test_a_url_keeps_its_shape_and_pings_no_one(url: str, shown: str) -> None:
    assert notices.shown_url(url) == shown


# The variables --------------------------------------------------------------------------


def test_a_page_change_s_variables() -> None:
    sample = {**notices.SAMPLE, "excerpt": "- `a`\n+ @b"}
    assert notices.variables(sample) == {
        "target": "acme-pricing", "url": "https://acme.example/pricing",
        "slot": "2026-12-01T08:00:00Z", "work_id": "acme-pricing:2026-12-01T08:00:00Z",
        "status": "changed", "checked_at": "2026-12-01T08:00:02+00:00", "error": None,
        "failure_streak": 0, "excerpt": f"- \\`a\\`\n+ @{ZW}b",
        "excerpt_block": f"```\n- `a`\n+ @{ZW}b\n```", "notice": "changed", "kind": "page",
        "headline": "page changed", "prices": [], "test": False,
    }  # fmt: skip


def test_a_failing_notice_s_error_is_one_inert_line() -> None:
    failing = {**notices.SAMPLES[2], "error": "HTTP 503\n<b>down</b>", "failure_streak": 4}
    values = notices.variables(failing, test=True)
    assert values["error"] == "HTTP 503 \\<b>down\\</b>"
    assert (values["failure_streak"], values["test"]) == (4, True)
    assert (values["excerpt"], values["excerpt_block"]) == (None, None)
    assert (values["kind"], values["notice"], values["headline"]) == (
        "page",
        "failing",
        "is failing",
    )
    short = {k: v for k, v in notices.SAMPLE.items() if k != "failure_streak"}
    assert notices.variables(short)["failure_streak"] == 0


def test_a_test_notice_and_an_unnamed_kind() -> None:
    values = notices.variables({**notices.SAMPLE, "type": notices.TEST_TYPE})
    assert (values["kind"], values["notice"], values["headline"]) == ("page", "test", "test notice")
    odd = notices.variables({**notices.SAMPLE, "type": "price.failing"})
    assert (odd["kind"], odd["notice"], odd["headline"]) == ("price", "failing", "failing")


def test_each_move_is_escaped_word_by_word_and_its_line_made_of_them() -> None:
    move = {**notices.SAMPLE_MOVE, "name": "Pro\n<b>", "currency": "`EUR`"}
    values = notices.variables({**notices.SAMPLES[1], "prices": [move], "error": 3})
    moves = values["prices"]
    assert isinstance(moves, list)
    [shown] = moves
    assert shown["name"] == "Pro \\<b>" and shown["currency"] == "\\`EUR\\`"
    assert shown["rules"] == ["price-change"] and shown["availability"] is None
    assert shown["line"].startswith("Pro \\<b>: 12.00 -> 13.00 \\`EUR\\`")
    assert values["error"] == 3  # not a string: as it is
    assert notices.variables({**notices.SAMPLE, "prices": "x"})["prices"] == []


# Rendering ------------------------------------------------------------------------------


def test_a_message_is_cut_to_what_a_service_takes() -> None:
    notes: list[str] = []
    title = "{{ 'T  \n' * 200 }}"
    message = notices.render_here(notes.append, title, "{{ 'b' * 5000 }}\n\n", {})
    assert notes == ["the body template", "the title template"]
    assert message.body == "b" * notices.MAX_BODY
    assert message.title == "T " * 125  # spaces joined first, then cut


def test_the_default_templates_are_used_when_none_is_given() -> None:
    values = notices.variables(notices.SAMPLE)
    message = notices.render_here(lambda _: None, None, None, values)
    assert message.title == "pricewatch: acme-pricing page changed"
    assert message.body.startswith("**acme-pricing** page changed (2026-12-01T08:00:00Z)")


def test_a_body_of_only_spaces_renders_to_nothing() -> None:
    with pytest.raises(ValueError, match=r"^the body template renders to nothing$"):
        notices.render_here(lambda _: None, None, "  {{ '' }}\n", {})


def test_output_stops_at_its_bound() -> None:
    text = rendered("{% for i in range(10**5) %}{{ 'xyz' }}{% endfor %}")
    assert notices.MAX_OUTPUT <= len(text) < notices.MAX_OUTPUT + 3


@pytest.mark.parametrize("which", ["title", "body"])
def test_a_template_is_at_most_its_limit(which: str) -> None:
    at_limit = "x" * notices.MAX_TEMPLATE
    notices._check_lengths(at_limit, at_limit)
    over = {"title": None, "body": None, which: at_limit + "x"}
    with pytest.raises(ValueError) as refused:
        notices._check_lengths(over["title"], over["body"])
    assert str(refused.value) == (
        f"the {which} template is 10001 characters, over the limit of 10000"
    )


# `*` and `**` ---------------------------------------------------------------------------


@pytest.mark.parametrize("template", ["{{ x * n }}", "{{ n * x }}"])
@pytest.mark.parametrize("value", ["a", ["a"], ("a",)])
def test_a_repeat_up_to_the_bound_is_made_one_more_is_refused(template: str, value: object) -> None:
    assert len(rendered(template, x=value, n=notices.MAX_OUTPUT)) >= notices.MAX_OUTPUT
    with pytest.raises(SecurityError, match=r"^repeats a value to more than 64000 items$"):
        rendered(template, x=value, n=notices.MAX_OUTPUT + 1)


def test_other_products_are_left_to_jinja() -> None:
    assert rendered("{{ 3 * 4 }} {{ 2.5 * 2 }} {{ n * 'ab' }}", n=2) == "12 5.0 abab"


@pytest.mark.parametrize(
    ("left", "right", "refused"),
    [(2, 2048, False), (2, 2049, True), (-2, 2049, True), (3, 2049, True), (3, 2048, False),
     (1, 10**9, False), (-1, 10**9, False), (0, 10**9, False), (2.0, 10, False)],
)  # fmt: skip
def test_a_power_past_its_bits_is_refused(left: object, right: int, refused: bool) -> None:
    if refused:
        with pytest.raises(SecurityError, match=r"^raises to a power past 4096 bits$"):
            rendered("{{ a ** b }}", a=left, b=right)
    else:
        assert rendered("{{ a ** b }}", a=left, b=right) == str(left**right)  # type: ignore[operator]


# What `check` says ------------------------------------------------------------------------


def checked(title: str | None, body: str | None) -> list[str]:
    notes: list[str] = []
    notices._check_all(notes.append, title, body)
    return notes


def test_check_tries_both_templates_on_every_sample_and_says_which() -> None:
    notes = checked(None, None)
    assert len(notes) == 2 * 2 * len(notices.SAMPLES)
    assert notes[:4] == [
        "the body template, on a page change,", "the title template, on a page change,",
        "the body template, on a page change,", "the title template, on a page change,",
    ]  # fmt: skip
    assert notes[-1] == "the title template, on a failing notice with a long error,"


@pytest.mark.parametrize(
    ("title", "body", "said"),
    [
        (None, "x\n{{ 1 / 0 }}", "the body template does not render: division by zero"),
        ("{{ nope }}", None, "the title template does not render: 'nope' is undefined"),
        (None, "x\n{% if %}", "the body template does not render (line 2): "),
        (None, "{% if test %}x{% endif %}", "the body template renders to nothing"),
    ],
)
def test_check_names_the_template_and_why(title: str | None, body: str | None, said: str) -> None:
    with pytest.raises(ValueError) as refused:
        checked(title, body)
    assert str(refused.value).startswith(said), str(refused.value)


def test_a_title_may_render_to_nothing() -> None:
    checked("{{ '' }}", None)


def test_memory_that_runs_out_is_the_child_s_to_report(monkeypatch: pytest.MonkeyPatch) -> None:
    def exhausted(template: str, values: object) -> str:
        raise MemoryError

    monkeypatch.setattr(notices, "_render_one", exhausted)
    with pytest.raises(MemoryError):
        checked(None, None)


def test_an_overrun_check_says_to_make_it_cheaper(monkeypatch: pytest.MonkeyPatch) -> None:
    def overrun(*args: object, **kwargs: object) -> None:
        raise isolated.Overrun("the body template took longer than 1 s")

    monkeypatch.setattr(isolated, "run", overrun)
    with pytest.raises(ValueError) as refused:
        notices.check(None, None)
    assert str(refused.value) == "the body template took longer than 1 s: make it cheaper"
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_a_title_over_the_limit_is_refused_before_any_child_starts() -> None:
    title = "x" * (notices.MAX_TEMPLATE + 1)
    for call in (lambda: notices.render(title, None, {}), lambda: notices.check(title, None)):
        with pytest.raises(ValueError, match=r"^the title template is 10001 characters"):
            call()


def test_check_tries_the_title_given() -> None:
    with pytest.raises(ValueError, match=r"^the title template does not render: 'nope' is"):
        notices.check("{{ nope }}", None)


def test_check_tries_every_sample_as_a_test_notice_too() -> None:
    with pytest.raises(ValueError, match=r"^the body template does not render: 'nope' is"):
        checked(None, "{% if test %}{{ nope }}{% endif %}x")


def test_output_stops_at_exactly_its_bound_when_written_a_character_at_a_time() -> None:
    assert len(rendered("{% for i in range(10**5) %}x{% endfor %}")) == notices.MAX_OUTPUT
