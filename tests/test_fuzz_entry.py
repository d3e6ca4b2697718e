"""A targets-file entry (`apply`, the API's PUT body, the dashboard's form) made of generated
input: any text and any unicode (NUL and lone surrogates included), extreme numbers and
dates, wrong types. Every outcome is a target or one line saying what is wrong; never another
exception, and never a target that Postgres, the grid or an export cannot take (issue 40)."""

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from client.inputs import BadInput, storable, texts
from client.manifest import Entry, ManifestError, dump, field_error, load
from pricewatch import calendar
from pricewatch.models import ChannelKind, TargetConfig

EXAMPLES = 300

# Text a user or an attacker may send: any code point, surrogates too (JSON's `\ud800`).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=30)
ODD = st.sampled_from(["", " ", "\x00", "a\x00b", "\ud800", "\udfff", "\n", "0", "-1", "1e999"])
TEXT = ANY_TEXT | ODD
NUMBERS = st.integers() | st.floats() | st.sampled_from([0, -1, 2**63, -(2**63), 10**30])
ZONED = st.sampled_from([UTC, timezone(timedelta(hours=14)), timezone(-timedelta(hours=12))])
MOMENTS = (
    st.datetimes(timezones=ZONED)  # year 1 to 9999
    | st.datetimes(datetime(1969, 12, 31), datetime(2200, 1, 2), timezones=ZONED)
).map(datetime.isoformat)
DURATIONS = st.builds(
    "{}{}".format, st.integers(0, 10**20) | st.integers(0, 200), st.sampled_from("smhdSMHDx")
) | st.sampled_from(["0s", "1s", "15m", "1h30m", "PT1H", "1:30", "366d", "367d"])
URLS = st.sampled_from(
    ["https://acme.example/", "http://127.0.0.1/", "file:///etc/passwd", "http://[::1]/",
     "https://ACME.example:99999/", "http://a\x00b/", "https://例え.jp/"]
) | TEXT  # fmt: skip
TIMES = st.sampled_from(["08:00", "23:59", "24:00", "8", ""]) | TEXT
ZONES = st.sampled_from(["UTC", "Europe/Berlin", "", " ", "Mars/Olympus", "../etc"]) | TEXT
DAYS = st.sampled_from(["daily", "mon-fri", "sat,sun", "fri-mon", "", ","]) | TEXT
CRONS = st.sampled_from(["0 8 * * 1-5", "* * * * *", "@daily", "0 0 30 2 *", ""]) | TEXT
ANYTHING = st.recursive(
    st.none() | st.booleans() | NUMBERS | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)

FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "every": DURATIONS,
    "cron": CRONS,
    "at": TIMES | st.lists(TIMES, max_size=3),
    "on": DAYS,
    "tz": ZONES,
    "jitter": DURATIONS,
    "start_at": MOMENTS,
    "paused": st.booleans(),
    "max_attempts": NUMBERS,
    "unhealthy_after": NUMBERS,
    "webhooks": st.lists(URLS, max_size=2),
    "emails": st.lists(TEXT | st.just("ops@example.com"), max_size=2),
    "notify": st.lists(
        st.sampled_from(["json://127.0.0.1/", "slack://T0/B0/X"]) | TEXT, max_size=2
    ),
    "selector": TEXT | st.sampled_from(["#pricing", "p[", "tr.plan"]),
    "ignore": TEXT | st.sampled_from(["\\d+", "("]),
    "json_pointer": TEXT | st.just("/offers/0"),
    "user_agent": TEXT,
    "prices": st.just({})
    | st.fixed_dictionaries(
        {}, optional={"selector": TEXT, "below": NUMBERS | TEXT, "notify_on": TEXT}
    ),
    "timeout": DURATIONS,
    "render": st.booleans(),
    "steps": st.lists(TEXT | st.sampled_from(["click #yearly", "wait .price"]), max_size=2),
}


@st.composite
def entries(draw: st.DrawFn) -> dict[Any, Any]:
    """An entry: an id and a URL mostly well formed, some fields each either a value of its
    kind or anything at all, and now and then a key no entry has."""
    slug = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
    entry: dict[Any, Any] = {
        "id": draw(slug if draw(st.integers(0, 9)) else TEXT),
        "url": draw(URLS if draw(st.integers(0, 3)) == 0 else st.just("https://acme.example/")),
    }
    for name in draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=4, unique=True)):
        entry[name] = draw(ANYTHING if draw(st.integers(0, 9)) == 0 else FIELDS[name])
    if draw(st.integers(0, 19)) == 0:
        entry[draw(TEXT)] = draw(ANYTHING)
    return entry


def target(raw: object) -> TargetConfig | str:
    """The entry's target, or the one line that refuses it (what `apply` and the API say)."""
    try:
        config = Entry.model_validate(raw).config()
        for name, text in texts(config.model_dump()):
            storable(name, text)
    except ValidationError as err:
        return field_error(err)
    except (ValueError, BadInput) as err:
        return str(err)
    return config


@pytest.fixture(autouse=True)
def apprise_quiet() -> Iterator[None]:
    """Apprise logs the URLs it refuses, surrogates included: a line xdist cannot send back
    (it crashed a worker). The refusal's one line is what the tests read."""
    logger = logging.getLogger("apprise")
    logger.disabled = True
    yield
    logger.disabled = False


def first_slot(config: TargetConfig, start_at: datetime) -> datetime:
    """Where the grid starts: the calendar's first slot from `start_at` (as the workflow
    and `apply`'s plan compute it), or `start_at` itself."""
    if config.calendar is None:
        return start_at + config.interval
    return calendar.slot_after(config.calendar, config.target_id, start_at - timedelta.resolution)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=entries())
@example(raw={"id": "a", "url": "https://a.example/", "every": "0s"})
@example(raw={"id": "a", "url": "https://a.example/", "start_at": "0001-01-01T00:00:00+05:00"})
@example(raw={"id": "a", "url": "https://a.example/", "at": "08:00", "tz": ""})
@example(raw={"id": "a", "url": "https://a.example/", "selector": "\x00"})
@example(raw={"id": "a", "url": "https://a.example/", "notify": ["json://a\ud800/"]})
@example(raw={"id": "a", "url": "https://a.example/", "every": "99999999999999999999d"})
def test_an_entry_is_a_target_or_one_line(raw: dict[Any, Any]) -> None:
    outcome = target(raw)
    if isinstance(outcome, str):
        assert outcome and "\n" not in outcome, outcome
        return
    assert "\x00" not in outcome.model_dump_json()
    entry = Entry.model_validate(raw)
    if entry.start_at is not None:  # a grid can be laid from it: no overflow
        assert first_slot(outcome, entry.start_at).year < 2300


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=entries())
@example(raw={"id": "0", "url": "https://acme.example/", "ignore": ""})  # exported as no filter
@example(raw={"id": "0", "url": "https://acme.example/", "notify": ["json://127.0.0.1/"]})
def test_a_file_of_an_entry_loads_as_one_line_and_exports_back(
    tmp_path_factory: pytest.TempPathFactory, raw: dict[Any, Any]
) -> None:
    """The same entry in a targets file: a ManifestError of one line, or a target whose
    export applies back as itself."""
    path = Path(tmp_path_factory.mktemp("fuzz")) / "targets.yaml"
    try:
        path.write_text(yaml.safe_dump({"targets": [raw]}, allow_unicode=True), "utf-8")
    except (UnicodeEncodeError, yaml.YAMLError):  # a surrogate: no file can hold it
        return
    try:
        (located,) = load(path)
    except ManifestError as err:
        assert "\n" not in str(err), str(err)
        return
    # An Apprise URL is exported as its stored channel's id: only a stored target exports.
    assume(all(channel.kind is not ChannelKind.APPRISE for channel in located.config.channels))
    path.write_text(dump([(located.config, located.entry.paused)]), "utf-8")
    (again,) = load(path)
    assert again.config == located.config
