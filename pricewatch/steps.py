"""Browser steps (issue 30): what a rendered check does on the page before it reads it, as the
user writes them (`click #yearly`, `wait .price`, `wait 2s`, `select #plan=pro`, `fill
#zip=10115`, `press Enter`, `scroll`; `click frame=#pay #yearly` reaches into the iframe
`#pay`). Parsed here, with no browser, so `add` refuses a
malformed step before anything starts; fetchers/browser.py runs them.
"""

import re
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

MAX_STEPS = 10
MAX_WAIT = timedelta(seconds=30)
_KEY = re.compile(r"^[A-Za-z0-9+]{1,32}$")  # `Enter`, `Escape`, `Control+A`
_PAUSE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s)")  # `wait 2s`, `wait 500ms`


class Action(StrEnum):
    CLICK = "click"
    WAIT = "wait"
    SELECT = "select"
    FILL = "fill"
    PRESS = "press"
    SCROLL = "scroll"


@dataclass(frozen=True)
class Step:
    """One step: `selector` for click, wait (for an element), select and fill, looked for in
    the iframe `frame` (a CSS selector on the page) when it is set; `value` for select and
    fill; `key` for press; `pause` for `wait 2s`."""

    action: Action
    selector: str | None = None
    value: str | None = None
    key: str | None = None
    pause: timedelta | None = None
    frame: str | None = None

    def __str__(self) -> str:
        if self.pause is not None:
            return f"wait {self.pause.total_seconds():g}s"
        if self.key is not None:
            return f"press {self.key}"
        where = f"frame={self.frame} {self.selector}" if self.frame else self.selector
        if self.value is not None:
            return f"{self.action.value} {where}={self.value}"
        return f"{self.action.value} {where or ''}".rstrip()


def parse_step(text: str) -> Step:
    """One step as written; ValueError (one line, naming the step) if it is not one."""
    action_word, _, rest = text.strip().partition(" ")
    rest = rest.strip()
    try:
        action = Action(action_word.lower())
    except ValueError:
        words = ", ".join(a.value for a in Action)
        raise ValueError(
            f"step {text!r}: unknown action {action_word!r} (one of {words})"
        ) from None
    if action is Action.SCROLL:
        if rest:
            raise ValueError(f"step {text!r}: scroll takes nothing (it scrolls to the bottom)")
        return Step(action)
    if not rest:
        raise ValueError(f"step {text!r}: {action.value} needs a CSS selector")
    if action is Action.PRESS:
        if not _KEY.fullmatch(rest):
            raise ValueError(f"step {text!r}: press needs a key name such as Enter or Escape")
        return Step(action, key=rest)
    if action is Action.WAIT and (found := _PAUSE.fullmatch(rest)):
        number, unit = found.groups()
        pause = timedelta(seconds=float(number) / (1000 if unit == "ms" else 1))
        if pause > MAX_WAIT:
            raise ValueError(f"step {text!r}: a wait is at most {MAX_WAIT.total_seconds():g}s")
        return Step(action, pause=pause)
    frame = None
    if rest.startswith("frame="):  # the iframe's selector ends at the first space
        frame, _, rest = rest.removeprefix("frame=").partition(" ")
        rest = rest.strip()
        if not frame or not rest:
            raise ValueError(f"step {text!r}: frame= needs the iframe's CSS, a space, then CSS")
    if action in (Action.SELECT, Action.FILL):
        selector, equals, value = rest.partition("=")
        if not equals or not selector.strip():
            raise ValueError(f"step {text!r}: {action.value} needs CSS=VALUE")
        return Step(action, selector=selector.strip(), value=value, frame=frame)
    return Step(action, selector=rest, frame=frame)


def parse_steps(texts: list[str]) -> list[Step]:
    if len(texts) > MAX_STEPS:
        raise ValueError(f"at most {MAX_STEPS} steps, not {len(texts)}")
    return [parse_step(text) for text in texts]
