"""Targets files: every entry read and validated up front, errors that name the file and
line, and `dump` writing what `load` reads back (the services: tests/test_e2e.py)."""

from decimal import Decimal
from pathlib import Path

import pytest

from client.manifest import ManifestError, dump, load
from client.plans import changes
from pricewatch.models import Channel, ChannelKind, NotifyOn, PriceSettings, TargetConfig

GOOD = """\
targets:
  - id: hetzner
    url: https://www.hetzner.com/cloud
    every: 24h
    webhooks: [https://hooks.example.com/pricing]
    emails: [ops@example.com]
    selector: "#pricing"
    paused: true
  - id: acme
    url: https://acme.example/pricing
    every: 15m
    max_attempts: 2
  - id: plans
    url: https://plans.example/
    every: 6h
    prices: {selector: tr.plan, name: th, below: "9.50", notify_on: drop}
  - id: shop
    url: https://shop.example/
    every: 1h
    prices: {}
  - id: kettle
    url: https://kettle.example/
    every: 1h
    prices: {selector: "#buy", attribute: data-price, notify_on: [drop, back-in-stock]}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "targets.yaml"
    path.write_text(text)
    return path


def test_a_good_file_reads_as_configs(tmp_path: Path) -> None:
    hetzner, acme, plans, shop, kettle = load(write(tmp_path, GOOD))
    assert hetzner.config == TargetConfig(
        target_id="hetzner", url="https://www.hetzner.com/cloud", interval_seconds=86400,
        channels=[Channel(kind=ChannelKind.WEBHOOK, destination="https://hooks.example.com/pricing"),
                  Channel(kind=ChannelKind.EMAIL, destination="ops@example.com")],
        selector="#pricing",
    )  # fmt: skip
    assert hetzner.entry.paused and not acme.entry.paused
    assert acme.config.max_attempts == 2 and acme.where.endswith("targets.yaml:9")
    assert plans.config.price_mode == PriceSettings(
        selector="tr.plan", name="th", below=Decimal("9.50"), notify_on=NotifyOn.DROP
    )
    assert shop.config.price_mode == PriceSettings(), "`prices: {}`: price mode, structured data"
    assert kettle.config.price_mode == PriceSettings(
        selector="#buy", attribute="data-price", notify_on=[NotifyOn.DROP, NotifyOn.BACK_IN_STOCK]
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (GOOD.replace("every: 15m", "every: 1x"), "targets.yaml:11: every: invalid duration"),
        (GOOD.replace("id: acme", "id: Acme"), "targets.yaml:9: id: target id must be a slug"),
        (GOOD.replace("    max_attempts: 2", "    colour: red"), "targets.yaml:12: colour: Extra"),
        (GOOD.replace("id: acme", "id: hetzner"), "targets.yaml:9: duplicate id 'hetzner' (first"),
        (GOOD.replace("url: https://acme", "url: ftp://acme"), "targets.yaml:10: url:"),
        (GOOD.replace("max_attempts: 2", "max_attempts: 99"), "targets.yaml:12: max_attempts:"),
        ("targets:\n  - id: [\n", "targets.yaml:3: not valid YAML"),
        ("- id: a\n", "expected a mapping with one key, `targets`"),
        ("targets: {id: a}\n", "targets.yaml:1: `targets` must be a list"),
        (GOOD.replace("below:", "belw:"), "targets.yaml:16: prices.belw: Extra inputs"),
        (GOOD.replace('"9.50"', "cheap"), "targets.yaml:16: prices.below: write an amount like"),
    ],
)
def test_a_bad_entry_names_its_line_and_nothing_is_read(
    tmp_path: Path, text: str, error: str
) -> None:
    with pytest.raises(ManifestError) as raised:
        load(write(tmp_path, text))
    assert error in str(raised.value)
    assert "\n" not in str(raised.value)


def test_dump_writes_what_load_reads(tmp_path: Path) -> None:
    entries = load(write(tmp_path, GOOD))
    again = load(write(tmp_path, dump([(e.config, e.entry.paused) for e in entries])))
    assert [(e.config, e.entry.paused) for e in again] == [
        (e.config, e.entry.paused) for e in entries
    ]
    assert "max_attempts: 2" in dump([(entries[1].config, False)])
    assert "max_attempts" not in dump([(entries[0].config, True)]), "defaults are left out"


def test_a_timeout_round_trips_and_is_written_only_when_set(tmp_path: Path) -> None:
    """`timeout:` is read as `--timeout` is; `dump` writes it back for the target that has
    one only, so an export applies back as a no-op."""
    slow = GOOD.replace("    max_attempts: 2\n", "    max_attempts: 2\n    timeout: 45s\n")
    entries = load(write(tmp_path, slow))
    assert [e.config.timeout_seconds for e in entries] == [None, 45, None, None, None]
    written = dump([(e.config, e.entry.paused) for e in entries])
    assert written.count("timeout:") == 1 and "  timeout: 45s\n" in written
    again = load(write(tmp_path, written))
    assert [e.config for e in again] == [e.config for e in entries]


@pytest.mark.parametrize("value", ["3s", "200s", "0s", "soon"])
def test_a_timeout_outside_its_bounds_names_its_line(tmp_path: Path, value: str) -> None:
    text = GOOD.replace("    max_attempts: 2\n", f"    max_attempts: 2\n    timeout: {value}\n")
    with pytest.raises(ManifestError) as raised:
        load(write(tmp_path, text))
    expected = (
        f"invalid duration {value!r}"
        if value == "soon"
        else f"must be from 5s to 120s, not {value}"
    )
    assert f"targets.yaml:13: timeout: {expected}" in str(raised.value)


def test_an_empty_file_of_targets_is_no_targets(tmp_path: Path) -> None:
    assert load(write(tmp_path, "targets: []\n")) == []
    assert load(write(tmp_path, "targets:\n")) == []


def test_a_plan_says_what_changes_in_the_files_words() -> None:
    """`apply`'s plan line: durations as typed, defaults and absent settings named."""
    old = TargetConfig(target_id="acme", url="https://acme.example/", interval_seconds=5)
    hook = Channel(kind=ChannelKind.WEBHOOK, destination="https://hooks.example.com/p")
    new = old.model_copy(update={"interval_seconds": 10, "timeout_seconds": 30, "channels": [hook]})
    assert changes(old, old) == ()
    assert changes(old, new) == (
        "every: 5s -> 10s",
        "webhooks: none -> https://hooks.example.com/p",
        "timeout: default -> 30s",
    )
    assert changes(new, old)[-1] == "timeout: 30s -> default"


CALENDARS = """\
targets:
  - id: mornings
    url: https://acme.example/
    at: "08:00"
    on: mon-fri
    tz: Europe/Berlin
    jitter: 10m
  - id: cron
    url: https://acme.example/b
    cron: "30 2 * * sun"
    tz: America/New_York
"""


def test_calendars_read_as_written_and_round_trip(tmp_path: Path) -> None:
    """A bare `on:` (YAML 1.1 reads it as true) is the days; export writes it back."""
    mornings, cron = load(write(tmp_path, CALENDARS))
    assert mornings.config.calendar is not None and cron.config.calendar is not None
    assert mornings.config.schedule == "weekdays 08:00 Europe/Berlin + jitter 10m"
    assert cron.config.schedule == "30 2 * * sun America/New_York"
    assert cron.config.interval_seconds == 7 * 24 * 3600
    again = load(write(tmp_path, dump([(e.config, False) for e in (mornings, cron)])))
    assert [e.config for e in again] == [mornings.config, cron.config]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ("    every: 1h\n", "two schedules"),
        ("    cron: '0 8 * * *'\n", "two calendars"),
        ("    tz: Mars/Olympus\n", "unknown time zone"),
    ],
)
def test_a_calendar_that_cannot_be_names_its_entry(tmp_path: Path, extra: str, says: str) -> None:
    text = CALENDARS.replace("    jitter: 10m\n", extra).replace(
        "    tz: Europe/Berlin\n", "" if "tz:" in extra else "    tz: Europe/Berlin\n"
    )
    with pytest.raises(ManifestError, match=says) as err:
        load(write(tmp_path, text))
    assert "targets.yaml:2" in str(err.value)


ONE = "targets:\n  - id: acme\n    url: https://acme.example/\n"


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        # Given empty or zero is not left out: no default takes its place (issue 40).
        ("    every: 0s\n", "targets.yaml:2: every: must be at least 1s"),
        ("    at: '08:00'\n    tz: ''\n", "targets.yaml:2: unknown time zone ''"),
        ("    at: '08:00'\n    on: ''\n", "targets.yaml:2: --on '': use day names"),
        ("    cron: ''\n", "targets.yaml:2: cron '': needs 5 fields"),
        ("    at: ''\n", "targets.yaml:2: --at '': use a 24-hour local time"),
        ("    tz: ''\n", "targets.yaml:2: tz needs cron or at"),
        # A first slot no grid can be added to: a line, not an OverflowError.
        ("    start_at: 0001-01-01T00:00:00Z\n", "targets.yaml:2: start_at: must be from 1970"),
        ("    start_at: 9999-12-31T23:59:59Z\n", "targets.yaml:2: start_at: must be from 1970"),
        ("    start_at: 0001-01-01T00:00:00+05:00\n", "start_at: must be from 1970-01-01"),
        # A duration is written as `add` takes it; YAML reads 1:30 as the number 90.
        ("    every: 3600\n", "targets.yaml:4: every: write a duration like 90s"),
        (
            "    every: 1:30\n",
            "targets.yaml:4: every: write a duration like 90s, 15m, 24h or 1d, not 90",
        ),
        ("    every: ' 15m'\n", "targets.yaml:4: every: invalid duration ' 15m'"),
        ("    webhooks: [ftp://hooks.example/]\n", "targets.yaml:2: webhooks: URL scheme should"),
        ("    emails: [nobody]\n", "targets.yaml:2: emails: not an email address: 'nobody'"),
        # Found by schemathesis: what the document allows parses, the rest is refused.
        ("    every: 99999999999999999999d\n", "targets.yaml:4: every: invalid duration"),
        ("    prices: {below: '1_000'}\n", "prices.below: write an amount like 9.50"),
        (
            "    prices: {min_change_percent: '0'}\n",
            "prices.min_change_percent: write a percentage",
        ),
        ("    prices: {name: th}\n", "targets.yaml:2: prices: a price name selector needs a"),
    ],
)
def test_a_value_given_empty_zero_or_out_of_range_names_its_field(
    tmp_path: Path, extra: str, error: str
) -> None:
    with pytest.raises(ManifestError) as raised:
        load(write(tmp_path, ONE + extra))
    assert error in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("start", ["1970-01-01T00:00:00Z", "2199-12-31T23:59:59Z"])
def test_a_first_slot_within_the_range_is_taken(tmp_path: Path, start: str) -> None:
    (acme,) = load(write(tmp_path, ONE + f"    start_at: {start}\n"))
    assert acme.entry.start_at is not None and acme.entry.start_at.year in (1970, 2199)


@pytest.mark.parametrize(("key", "named"), [("'\\n'", "'\\n': Extra"), ("''", "'': Extra")])
def test_a_made_up_key_is_named_quoted_on_one_line(tmp_path: Path, key: str, named: str) -> None:
    """Found by tests/test_fuzz_entry.py: a key of a newline split the error line in two,
    an empty one lost its name."""
    with pytest.raises(ManifestError) as raised:
        load(write(tmp_path, ONE + f'    "{key[1:-1]}": 1\n'))
    assert f": {named}" in str(raised.value) and "\n" not in str(raised.value)
