"""What the CLI prints, line by line (issue 49's mutation run over surfaces/terminal.py,
docs/testing.md#mutation-testing): a channel's secret masked by kind, text made inert in
lines and cells, and each command's lines and tables exactly as a script reads them when
piped, and as a terminal folds and emboldens them."""

import io
import re
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricewatch.models import (
    CheckResult,
    CheckStatus,
    MonitorStatus,
    NotifyOn,
    PriceSettings,
    RenderSettings,
    TargetConfig,
)
from pricewatch.views import (
    ChannelView,
    DeliveryView,
    PricesRow,
    PriceView,
    TargetSummary,
    TriedPrice,
    TryView,
)
from surfaces import terminal

SLOT = datetime(2026, 12, 1, 8, tzinfo=UTC)
LATER = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
WORK = "acme:2026-12-01T08:00:00Z"


def out(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The lines printed, without the spaces that pad a table's last column."""
    return [line.rstrip() for line in capsys.readouterr().out.splitlines()]


# Masking and inert text -------------------------------------------------------------------


def channel(kind: str, secret: str | None) -> ChannelView:
    return ChannelView(channel_id="c1", kind=kind, destination="d", secret=secret,
                       disabled_reason=None)  # fmt: skip


@given(secret=st.text(min_size=1), kind=st.sampled_from(["webhook", "json", "email"]))
def test_a_secret_is_shown_as_its_kind_s_prefix_only(secret: str, kind: str) -> None:
    shown = terminal.masked(channel(kind, secret))
    assert shown.secret == "whsec_********"
    assert shown.model_dump(exclude={"secret"}) == channel(kind, secret).model_dump(
        exclude={"secret"}
    )


@given(secret=st.text(min_size=1))
def test_an_apprise_url_is_masked_whole(secret: str) -> None:
    assert terminal.masked(channel("apprise", secret)).secret == "********"


def test_a_channel_without_a_secret_is_shown_as_it_is() -> None:
    plain = channel("webhook", None)
    assert terminal.masked(plain) is plain


def test_inert_writes_each_control_as_its_escape() -> None:
    assert (
        terminal.inert("a\tb\nc\x1b\x7f\x9f\u202e\u2069") == "a\tb\nc\\x1b\\x7f\\x9f\\u202e\\u2069"
    )
    assert terminal.inert("a\tb\nc\x1b", cell=True) == "a\\tb\\nc\\x1b"
    assert terminal.inert(" \x20~\xa0é") == " \x20~\xa0é"


def test_the_console_shows_text_as_given_even_on_a_terminal() -> None:
    file = io.StringIO()
    shown = terminal.console(file=file, force_terminal=True, color_system="truecolor", width=80)
    shown.print("[bold]x[/bold] :smile: 123 https://a.example")
    assert file.getvalue() == "[bold]x[/bold] :smile: 123 https://a.example\n"


# One record's lines ---------------------------------------------------------------------


def result(**fields: object) -> CheckResult:
    values: dict[str, object] = {"work_id": WORK, "slot": SLOT, "status": CheckStatus.CHANGED,
                                 "checked_at": SLOT, "attempt_count": 2, **fields}  # fmt: skip
    return CheckResult.model_validate(values)


def test_a_check_is_one_line_with_what_it_has() -> None:
    assert terminal.check(result()) == f"{WORK}  changed   attempts=2"
    full = result(
        status=CheckStatus.RETRYING, result_hash="0123456789abcdef", next_attempt_at=LATER,
        error_message="HTTP 503\x1b[2J",
    )  # fmt: skip
    assert terminal.check(full) == (
        f"{WORK}  retrying  attempts=2  sha256=0123456789ab  next attempt not before "
        "2026-12-01T09:30:00Z  error=HTTP 503\\x1b[2J"
    )


def config(**fields: object) -> TargetConfig:
    values: dict[str, object] = {"target_id": "acme", "url": "https://acme.example/",
                                 "interval_seconds": 3600, **fields}  # fmt: skip
    return TargetConfig.model_validate(values)


def test_a_status_says_everything_in_order() -> None:
    status = MonitorStatus(
        config=config(timeout_seconds=20, price_mode=PriceSettings(),
                      render=RenderSettings(steps=["click #more"])),
        paused=True, next_slot=LATER, last_result=result(), checks_completed=7,
        failure_streak=3, unhealthy=True, checking=SLOT,
    )  # fmt: skip
    lines = terminal.status(status, [result(status=CheckStatus.RETRYING)], "http://ui/acme")
    schedule = status.config.schedule
    assert lines == [
        "target:     acme",
        "url:        https://acme.example/",
        f"schedule:   {schedule}",
        "timeout:    20s",
        "prices:     structured data, tell price-change",
        "rendered:   click #more",
        "state:      paused",
        "health:     unhealthy (3 failed slots in a row)",
        "next slot:  2026-12-01T09:30:00Z",
        "checks:     7",
        "checking:   2026-12-01T08:00:00Z (in flight)",
        f"now:        {WORK}  retrying  attempts=2",
        f"last:       {WORK}  changed   attempts=2",
        "history:    http://ui/acme",
    ]


def test_a_new_target_s_status_says_what_it_lacks() -> None:
    status = MonitorStatus(config=config(render=RenderSettings()), paused=False, next_slot=None,
                           last_result=None, checks_completed=0)  # fmt: skip
    lines = terminal.status(status, [], "link")
    assert lines[3:] == [
        "timeout:    default (10s per read, 30s in all)",
        "rendered:   no steps",
        "state:      active",
        "health:     healthy",
        "next slot:  -",
        "checks:     0",
        "last:       (no check yet)",
        "history:    link",
    ]


@pytest.mark.parametrize(
    ("rules", "said"),
    [
        (PriceSettings(), "structured data, tell price-change"),
        (PriceSettings(selector="tr.plan", name="th", notify_on=[NotifyOn.DROP, NotifyOn.RISE],
                       below=Decimal("10"), above=Decimal("20"),
                       min_change_percent=Decimal("5")),
         "selector tr.plan (names: th), tell drop or rise below 10 above 20 by 5% or more"),
    ],
)  # fmt: skip
def test_price_rules_read_as_add_set_them(rules: PriceSettings, said: str) -> None:
    assert terminal.price_rules(rules) == said


# Tables -----------------------------------------------------------------------------------


def summary(prices: list[PriceView] | None = None, **fields: object) -> TargetSummary:
    values: dict[str, object] = {"id": "acme", "url": "https://acme.example/",
                                 "interval_seconds": 60, "schedule": "every 1m", "enabled": True,
                                 "unhealthy": False, "next_slot": SLOT, "last_status": "changed",
                                 "prices": prices, **fields}  # fmt: skip
    return TargetSummary.model_validate(values)


def price(name: str, amount: str, currency: str | None = "EUR") -> PriceView:
    return PriceView(name=name, amount=Decimal(amount), currency=currency)


def test_the_targets_table_when_piped(capsys: pytest.CaptureFixture[str]) -> None:
    terminal.targets([summary(), summary(id="b", enabled=False, unhealthy=True, last_status=None)])
    assert out(capsys) == [
        "ID    STATE             SCHEDULE  NEXT SLOT             LAST     URL",
        "acme  active            every 1m  2026-12-01T08:00:00Z  changed  https://acme.example/",
        "b     paused,unhealthy  every 1m  2026-12-01T08:00:00Z  -        https://acme.example/",
    ]


def test_a_prices_column_once_any_target_has_prices(capsys: pytest.CaptureFixture[str]) -> None:
    trend = [Decimal(n) for n in "123"]
    many = [price("Basic", "9.90"), price("Pro", "20"), price("Team", "30")]
    terminal.targets([summary(many, trend=trend), summary(id="b")])
    assert out(capsys) == [
        "ID    STATE   SCHEDULE  NEXT SLOT             LAST     PRICES                        URL",
        "acme  active  every 1m  2026-12-01T08:00:00Z  changed  Basic 9.90 EUR ▁▅█ (+2 more)  "
        "https://acme.example/",
        "b     active  every 1m  2026-12-01T08:00:00Z  changed  -                             "
        "https://acme.example/",
    ]


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [("9.90", "EUR", "9.90 EUR"), ("999999999999999", None, "999999999999999"),
     ("1E+15", "USD", "1.000e+15 USD"), ("1E+999999", "EUR", "1.000e+999999 EUR")],
)  # fmt: skip
def test_an_amount_is_plain_below_a_quadrillion(
    amount: str, currency: str | None, shown: str
) -> None:
    assert terminal.amount(price("x", amount, currency)) == shown


def test_a_summary_without_prices_or_a_trend() -> None:
    assert terminal.price_summary(summary([])) == "-"
    assert terminal.price_summary(summary([price("Pro", "5", None)])) == "Pro 5"
    assert terminal.price_summary(summary([price("Pro", "5"), price("B", "1")])) == (
        "Pro 5 EUR (+1 more)"
    )


@pytest.mark.parametrize(
    ("values", "line"),
    [([], ""), ([1], ""), ([2, 2, 2], "▁▁▁"), ([1, 2, 3], "▁▅█"), ([0, 7, 1, 6], "▁█▂▇"),
     ([10, 0], "█▁")],
)  # fmt: skip
def test_a_sparkline_scales_between_lowest_and_highest(values: list[int], line: str) -> None:
    assert terminal.sparkline([Decimal(v) for v in values]) == line


def test_the_prices_table_has_a_column_per_name(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        PricesRow(work_id=WORK, slot=SLOT, status="changed", prices=[price("Pro", "10")]),
        PricesRow(work_id=WORK, slot=LATER, status="unchanged",
                  prices=[price("Team", "30", None), price("Pro", "11")]),
    ]  # fmt: skip
    terminal.prices(rows)
    assert out(capsys) == [
        "SLOT                  STATUS     Pro     Team",
        "2026-12-01T08:00:00Z  changed    10 EUR  -",
        "2026-12-01T09:30:00Z  unchanged  11 EUR  30",
    ]


def test_checks_history_and_failures(capsys: pytest.CaptureFixture[str]) -> None:
    failed = result(status=CheckStatus.RETRYING, result_hash="0123456789abcdef",
                    next_attempt_at=LATER, error_message="HTTP 503")  # fmt: skip
    terminal.checks([result(), failed])
    terminal.checks([result()], when=True)
    assert out(capsys) == [
        "WORK ID                    STATUS    ATTEMPTS  SHA256        NEXT ATTEMPT          ERROR",
        f"{WORK}  changed   2         -             -                     -",
        f"{WORK}  retrying  2         0123456789ab  2026-12-01T09:30:00Z  HTTP 503",
        "WORK ID                    STATUS   ATTEMPTS  SHA256  NEXT ATTEMPT  ERROR  AT",
        f"{WORK}  changed  2         -       -             -      2026-12-01T08:00:00Z",
    ]


def test_channels_and_deliveries(capsys: pytest.CaptureFixture[str]) -> None:
    terminal.channels(
        [
            channel("webhook", "whsec_********"),
            channel("json", None).model_copy(update={"disabled_reason": "HTTP 410"}),
        ]
    )

    def delivery(status: str, error: str | None) -> DeliveryView:
        return DeliveryView(
            work_id=WORK,
            notice="changed",
            channel_id="c1",
            status=status,
            attempt_count=1,
            last_error=error,
            sent_at=None,
        )

    terminal.deliveries([delivery("sent", "old"), delivery("failed", "HTTP 500"),
                       delivery("pending", None)])  # fmt: skip
    assert out(capsys) == [
        "CHANNEL  KIND     DESTINATION  SECRET          DISABLED",
        "c1       webhook  d            whsec_********  -",
        "c1       json     d            -               HTTP 410",
        "WORK ID                    NOTICE   CHANNEL  STATUS   ATTEMPTS  LAST ERROR",
        f"{WORK}  changed  c1       sent     1         -",
        f"{WORK}  changed  c1       failed   1         HTTP 500",
        f"{WORK}  changed  c1       pending  1         -",
    ]


def test_a_terminal_gets_bold_headers_and_folded_cells(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "30")
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.delenv("NO_COLOR", raising=False)
    terminal.table(["A", "B"], [["x" * 40, "y"]])
    printed = capsys.readouterr().out
    assert printed.startswith("\x1b[1mA")  # the header, bold
    lines = re.sub("\x1b\\[[0-9;]*m", "", printed).splitlines()
    assert [line.rstrip() for line in lines] == [
        "A" + " " * 28 + "B",
        "xxxxxxxxxxxxxxxxxxxxxxxxxxx  y",
        "xxxxxxxxxxxxx",
    ]


# try and plot -----------------------------------------------------------------------------


def tried_view(**fields: object) -> TryView:
    values: dict[str, object] = {"url": "https://acme.example/\x1b", "http_status": 200,
                                 "body_bytes": 120, "result_hash": "ab" * 32, "text": "",
                                 "prices": None, "skipped_values": [], **fields}  # fmt: skip
    return TryView.model_validate(values)


def test_try_shows_the_text_that_is_hashed(capsys: pytest.CaptureFixture[str]) -> None:
    text = "\n".join(f"line {n}\x1b" for n in range(22))
    terminal.tried(
        tried_view(text=text, skipped_values=["1e9999"], refused_requests=["http://10.0.0.1/"])
    )
    lines = out(capsys)
    assert lines[:3] == [
        "https://acme.example/\\x1b: HTTP 200, 120 bytes",
        "text that is hashed (22 lines, first 20):",
        "  line 0\\x1b",
    ]
    assert lines[21:] == [
        "  line 19\\x1b",
        "skipped: 1e9999",
        "refused request: http://10.0.0.1/",
        f"sha256: {'ab' * 32}  (nothing was written)",
    ]
    terminal.tried(tried_view(text="one"))
    assert out(capsys)[1:3] == ["text that is hashed (1 lines):", "  one"]


def test_try_shows_each_price_and_where_it_was_read(capsys: pytest.CaptureFixture[str]) -> None:
    read = [
        TriedPrice(name="Pro", amount=Decimal("10.50"), currency="EUR", regular=Decimal("12.00"),
                   availability="OutOfStock", source="json-ld"),
        TriedPrice(name="Free", amount=Decimal("0"), currency=None, regular=None,
                   availability=None, source=None),
    ]  # fmt: skip
    terminal.tried(tried_view(prices=read))
    assert out(capsys)[1:4] == [
        "PRICE  AMOUNT    WAS  STOCK         READ FROM",
        "Pro    10.5 EUR  12   out of stock  json-ld",
        "Free   0         -    -             -",
    ]


def test_a_plot_is_a_png_of_its_size(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [
        PricesRow(work_id=WORK, slot=SLOT, status="changed", prices=[price("Pro", "10")]),
        PricesRow(work_id=WORK, slot=LATER, status="changed",
                  prices=[price("Pro", "11"), price("Team", "3", None)]),
    ]  # fmt: skip
    path = tmp_path / "acme.png"
    terminal.plot_prices("acme", rows, path)
    png = path.read_bytes()
    assert png.startswith(b"\x89PNG")
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1000, 500)


def test_a_plot_without_matplotlib_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(
        ValueError, match=r"^--plot needs matplotlib: pip install 'pricewatch\[plot\]'$"
    ):
        terminal.plot_prices("acme", [], tmp_path / "x.png")


def test_a_status_without_rendering_or_with_several_steps() -> None:
    plain = MonitorStatus(config=config(), paused=False, next_slot=None, last_result=None,
                          checks_completed=0)  # fmt: skip
    assert not any(line.startswith("rendered:") for line in terminal.status(plain, [], "link"))
    steps = plain.model_copy(
        update={"config": config(render=RenderSettings(steps=["click #a", "wait 1s"]))}
    )
    assert "rendered:   click #a; wait 1s" in terminal.status(steps, [], "link")


@pytest.mark.parametrize(("count", "said"), [(20, "20 lines"), (21, "21 lines, first 20")])
def test_try_says_when_it_shows_the_first_20_lines_only(
    count: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    terminal.tried(tried_view(text="\n".join(["x"] * count)))
    lines = out(capsys)
    assert lines[1] == f"text that is hashed ({said}):"
    assert lines[2:-1] == ["  x"] * 20


def test_an_amount_without_a_currency_takes_no_space(capsys: pytest.CaptureFixture[str]) -> None:
    """Wider than its header, so that a trailing space would widen the column."""
    free = TriedPrice(name="Free", amount=Decimal("1234567"), currency=None, regular=None,
                      availability=None, source=None)  # fmt: skip
    terminal.tried(tried_view(prices=[free]))
    assert out(capsys)[1:3] == [
        "PRICE  AMOUNT   WAS  STOCK  READ FROM",
        "Free   1234567  -    -      -",
    ]


def test_a_plot_draws_each_name_as_its_own_step_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib import pyplot
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    closed: list[object] = []
    real = pyplot.close

    def close(figure: object) -> None:
        closed.append(figure)
        real(figure)  # type: ignore[arg-type]

    monkeypatch.setattr(pyplot, "close", close)
    rows = [
        PricesRow(work_id=WORK, slot=SLOT, status="changed", prices=[price("Pro", "10")]),
        PricesRow(work_id=WORK, slot=LATER, status="changed",
                  prices=[price("Pro", "11"), price("Team", "3", None)]),
    ]  # fmt: skip
    terminal.plot_prices("acme", rows, tmp_path / "acme.png")
    [figure] = closed
    assert isinstance(figure.get_layout_engine(), ConstrainedLayoutEngine)  # type: ignore[attr-defined]
    [axes] = figure.axes  # type: ignore[attr-defined]
    assert (axes.get_title(), axes.get_ylabel()) == ("acme: prices per check", "amount")
    pro, team = axes.get_lines()
    assert list(pro.get_ydata()) == [10.0, 11.0] and list(team.get_ydata()) == [3.0]
    assert {line.get_drawstyle() for line in (pro, team)} == {"steps-post"}
    assert {line.get_marker() for line in (pro, team)} == {"."}
    assert [t.get_text() for t in axes.get_legend().get_texts()] == ["Pro (EUR)", "Team"]
    assert axes.xaxis.get_gridlines()[0].get_alpha() == 0.3


@pytest.mark.parametrize("separator", ["\u2028", "\u2029"])
def test_a_line_separator_in_a_cell_keeps_the_record_on_one_line(
    separator: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by test_console_text's generated text during the mutation run: Rich broke the
    row at U+2028, so that grep saw half a record."""
    terminal.channels(
        [channel("json", None).model_copy(update={"disabled_reason": f"a{separator}b"})]
    )
    lines = capsys.readouterr().out.split("\n")
    assert len(lines) == 3 and lines[1].rstrip().endswith(f"a{ascii(separator)[1:-1]}b")
