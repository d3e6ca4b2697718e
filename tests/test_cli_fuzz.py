"""`add`'s options given anything (any unicode, NUL, extreme numbers, dates and durations):
each set is a target or bad input said in one line (exit 2), never a traceback (issue 40).
The functions `add` builds its target with are called directly: the same path, no services."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from surfaces import options
from surfaces.errors import Fault, failure

ANY = st.text(max_size=30)
WORDS = st.one_of(
    ANY,
    st.sampled_from(["", " ", "0s", "1s", "15m", "24h", "99999999d", "-1h", "1e9s", "PT1H"]),
)
NUMBERS = st.one_of(st.integers(), st.sampled_from([0, -1, 2**63, 10**30]))
TIMES = st.one_of(
    ANY,
    st.sampled_from(["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2026-12-01T08:00:00",
                     "2026-02-30T08:00:00Z", "tomorrow", ""]),
)  # fmt: skip


def bad_input_line(err: BaseException) -> str:
    said = failure(err)
    assert said is not None, f"not an expected failure: {err!r}"
    assert said.fault is Fault.INPUT, said
    assert said.line and "\n" not in said.line and "Traceback" not in said.line
    return said.line


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    target_id=st.one_of(ANY, st.just("acme")),
    url=st.one_of(ANY, st.sampled_from(["https://acme.example/p", "file:///etc/passwd"])),
    every=st.one_of(st.none(), WORDS),
    max_attempts=NUMBERS, unhealthy_after=NUMBERS,
    selector=st.one_of(st.none(), ANY), ignore=st.one_of(st.none(), ANY),
    timeout=st.one_of(st.none(), WORDS), below=st.one_of(st.none(), ANY),
    cron=st.one_of(st.none(), ANY, st.just("0 8 * * 1-5")),
    at=st.one_of(st.none(), st.lists(st.one_of(ANY, st.just("08:00")), max_size=2)),
    on=st.one_of(st.none(), ANY), tz=st.one_of(st.none(), ANY, st.just("Europe/Berlin")),
    jitter=st.one_of(st.none(), WORDS), start_at=st.one_of(st.none(), TIMES),
    step=st.one_of(st.none(), st.lists(ANY, max_size=2)), rendered=st.booleans(),
)  # fmt: skip
def test_any_options_are_a_target_or_one_line(
    target_id: str, url: str, every: str | None, max_attempts: int, unhealthy_after: int,
    selector: str | None, ignore: str | None, timeout: str | None, below: str | None,
    cron: str | None, at: list[str] | None, on: str | None, tz: str | None,
    jitter: str | None, start_at: str | None, step: list[str] | None, rendered: bool,
) -> None:  # fmt: skip
    try:
        given = {
            "every": every, "max_attempts": max_attempts, "unhealthy_after": unhealthy_after,
            "selector": selector, "ignore": ignore, "fetch_timeout": timeout, "below": below,
            "cron": cron, "at": at, "on": on, "tz": tz, "jitter": jitter,
            "start_at": start_at, "step": step, "rendered": rendered,
        }  # fmt: skip
        options.config_of(options.entry_of(target_id, url, given))
    except Exception as err:  # each kind `add` says in one line; anything else fails here
        bad_input_line(err)


@pytest.mark.parametrize("start_at", ["2026-02-30T08:00:00Z", "tomorrow", "", "\x00"])
def test_a_start_no_calendar_holds_is_one_line(start_at: str) -> None:
    with pytest.raises(Exception) as raised:
        options.parse_start_at(start_at)
    assert "start" in bad_input_line(raised.value)
