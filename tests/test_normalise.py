"""What is hashed: markup noise normalises away, real changes (and only those in scope) remain."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricewatch.models import Extraction
from readers.normalise import ExtractionError, normalise, validate_extraction

HTML = "text/html; charset=utf-8"
JSON = "application/json"
NONE = Extraction()


def page(price: str = "19.99", token: str = "abc", stamp: str = "08:00", rest: str = "") -> bytes:
    return f"""<!doctype html>
<html><head><title>Plans</title><style>.p {{ color: red }}</style>
<script>window.csrf = "{token}";</script></head>
<body>
  <!-- build {token} -->
  <form><input type="hidden" name="csrf" value="{token}"></form>
  <div id="plan"><h2>CX22</h2><p class="price">€ {price} / month</p></div>
  <p>Rendered at {stamp}</p>
  <footer>{rest}</footer>
</body></html>""".encode()


def test_whole_page_text_one_line_per_block() -> None:
    assert normalise(page(), HTML, NONE) == "CX22\n€ 19.99 / month\nRendered at 08:00"


def test_rotating_token_in_script_comment_and_hidden_input_does_not_count() -> None:
    assert normalise(page(token="abc"), HTML, NONE) == normalise(page(token="xyz"), HTML, NONE)


def test_hidden_elements_are_dropped() -> None:
    body = (
        b"<body><p>seen</p><noscript>ns</noscript><template>tpl</template>"
        b"<svg><text>icon</text></svg><style>p{}</style></body>"
    )
    assert normalise(body, HTML, NONE) == "seen"


def test_ignore_removes_a_timestamp() -> None:
    rules = Extraction(ignore=r"Rendered at \d\d:\d\d")
    early, late = page(stamp="08:00"), page(stamp="09:15")
    assert normalise(early, HTML, rules) == normalise(late, HTML, rules)
    assert normalise(early, HTML, NONE) != normalise(late, HTML, NONE)


def test_ignore_is_multiline_and_empty_lines_drop() -> None:
    rules = Extraction(ignore=r"^Rendered.*$")
    assert normalise(page(), HTML, rules) == "CX22\n€ 19.99 / month"


def test_price_change_inside_selector_counts_outside_does_not() -> None:
    rules = Extraction(selector="#plan .price")
    base = normalise(page(), HTML, rules)
    assert base == "€ 19.99 / month"
    assert normalise(page(price="21.49"), HTML, rules) != base
    assert normalise(page(stamp="23:59", rest="new footer"), HTML, rules) == base


def test_selector_matches_join_in_document_order() -> None:
    body = b"<ul><li class=x>one</li><li>skip</li><li class=x>two <b>2</b></li></ul>"
    assert normalise(body, HTML, Extraction(selector=".x")) == "one\ntwo 2"


def test_whitespace_indentation_and_attribute_order_do_not_matter() -> None:
    a = b'<div class="a" id="b"><p>Price:   <b>5</b>\n EUR</p></div>'
    b = b'\n\n  <div id="b"  class="a">\n\t<p>\n Price: <b>5</b> EUR\n</p>\n  </div>\n'
    assert normalise(a, HTML, NONE) == normalise(b, HTML, NONE) == "Price: 5 EUR"


def test_blocks_separate_lines() -> None:
    assert normalise(b"<p>a</p><p>b</p>", HTML, NONE) == "a\nb"
    assert normalise(b"x<br>y<div>z</div>", HTML, NONE) == "x\ny\nz"


def test_unknown_content_type_sniffs_html() -> None:
    assert normalise(b"  <!DOCTYPE html><p>a</p><p>b</p>", "", NONE) == "a\nb"
    assert normalise(b"<p>a</p>", "", NONE) == "<p>a</p>"


def test_charset_from_content_type() -> None:
    body = "<p>Preis: 5 € - Größe</p>".encode("iso-8859-15")
    assert normalise(body, "text/html; charset=iso-8859-15", NONE) == "Preis: 5 € - Größe"
    latin1 = "<p>café</p>".encode("latin-1")
    assert normalise(latin1, 'text/html; charset="ISO-8859-1"', NONE) == "café"


@pytest.mark.parametrize("charset", ["bogus", "base64", "idna", "undefined", "punycode"])
def test_unusable_charset_falls_back_to_utf8(charset: str) -> None:
    assert normalise("café".encode(), f"text/plain; charset={charset}", NONE) == "café"


def test_undecodable_bytes_are_replaced() -> None:
    assert normalise(b"caf\xe9", "text/plain", NONE) == "caf\ufffd"


def test_plain_text_whitespace_collapses_per_line() -> None:
    body = b"\xef\xbb\xbf  a \t b  \r\n\n\n   c\n"
    assert normalise(body, "text/plain", NONE) == "a b\nc"


def test_json_key_order_and_whitespace_do_not_matter() -> None:
    a = b'{"b": [1, 2], "a": {"y": "\xc3\xa9", "x": null}}'
    b = b'{\n  "a": {"x": null, "y": "\\u00e9"},\n  "b": [1,2]\n}'
    assert normalise(a, JSON, NONE) == normalise(b, "application/ld+json", NONE)
    assert normalise(a, JSON, NONE) == '{"a":{"x":null,"y":"é"},"b":[1,2]}'


def test_json_pointer_picks_a_nested_value() -> None:
    rules = Extraction(json_pointer="/prices/0/amount")
    a = b'{"prices": [{"amount": 4.5, "sku": "a"}], "generated": "08:00"}'
    b = b'{"generated": "09:00", "prices": [{"sku": "b", "amount": 4.5}]}'
    assert normalise(a, JSON, rules) == normalise(b, JSON, rules) == "4.5"
    assert normalise(b'{"prices": [{"amount": 5}]}', JSON, rules) == "5"


def test_json_pointer_strings_as_is_and_objects_canonical() -> None:
    body = b'{"p": {"name": "CX22", "cur": {"z": 1, "a": 2}}}'
    assert normalise(body, JSON, Extraction(json_pointer="/p/name")) == "CX22"
    assert normalise(body, JSON, Extraction(json_pointer="/p/cur")) == '{"a":2,"z":1}'
    assert normalise(body, JSON, Extraction(json_pointer="")) == normalise(body, JSON, NONE)


def test_json_pointer_escapes() -> None:
    body = b'{"a/b": {"m~n": "hit"}, "a": {"b": "miss"}}'
    assert normalise(body, JSON, Extraction(json_pointer="/a~1b/m~0n")) == "hit"


@pytest.mark.parametrize(
    ("body", "content_type", "rules", "message"),
    [
        (b"<p>x</p>", HTML, Extraction(selector=".price"), "matched nothing"),
        (b'{"a": [1]}', JSON, Extraction(json_pointer="/a/1"), "does not resolve"),
        (b'{"a": [1]}', JSON, Extraction(json_pointer="/a/01"), "does not resolve"),
        (b'{"a": [1]}', JSON, Extraction(json_pointer="/a/-"), "does not resolve"),
        (b'{"a": 1}', JSON, Extraction(json_pointer="/a/b"), "does not resolve"),
        (b"{'a': 1}", JSON, NONE, "not valid JSON"),
        (b"{}", JSON, Extraction(selector="p"), "selector does not apply to JSON"),
        (b"<p>x</p>", HTML, Extraction(json_pointer="/a"), "json_pointer does not apply"),
        (b"<a>x</a>", "application/xml", Extraction(selector="a"), "does not apply"),
        (b"x", "text/plain", Extraction(ignore="("), "invalid ignore regex"),
        (b"<p>x</p>", HTML, Extraction(selector="div["), "invalid CSS selector"),
    ],
)
def test_errors_name_the_failing_rule(
    body: bytes, content_type: str, rules: Extraction, message: str
) -> None:
    with pytest.raises(ExtractionError, match=message):
        normalise(body, content_type, rules)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (Extraction(ignore="[a-"), "invalid ignore regex"),
        (Extraction(selector="p >"), "invalid CSS selector"),
        (Extraction(selector=""), "invalid CSS selector"),
        (Extraction(json_pointer="a/b"), "invalid JSON pointer"),
        (Extraction(json_pointer="/a~2"), "invalid JSON pointer"),
        (Extraction(selector="p", json_pointer="/a"), "not both"),
    ],
)
def test_validate_extraction_rejects(rules: Extraction, message: str) -> None:
    with pytest.raises(ExtractionError, match=message):
        validate_extraction(rules)


@pytest.mark.parametrize(
    "rules",
    [
        NONE,
        Extraction(selector="#plan > p.price, li:nth-child(2)", ignore=r"\d+"),
        Extraction(json_pointer=""),
        Extraction(json_pointer="/a~0~1/0/"),
    ],
)
def test_validate_extraction_accepts(rules: Extraction) -> None:
    validate_extraction(rules)


@given(st.text())
def test_plain_text_normalisation_is_idempotent(text: str) -> None:
    once = normalise(text.encode(errors="surrogatepass"), "text/plain", NONE)
    assert normalise(once.encode(), "text/plain", NONE) == once
