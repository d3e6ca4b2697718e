"""The dashboard's charts, drawn on the server as SVG: no script, no library, nothing from
a CDN, and every label escaped (a price's name is the page's text)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from html import escape
from itertools import groupby

from markupsafe import Markup

WIDTH, HEIGHT, PAD = 640, 180, 28


def _scale(values: Sequence[float], size: float, pad: float) -> list[float]:
    """Each value's place on an axis of `size`, low values at the far end (SVG's y grows
    downwards); a flat series sits in the middle."""
    low, high = min(values), max(values)
    if low == high:
        return [size / 2 for _ in values]
    stretch = (size - 2 * pad) / (high - low)
    return [pad + stretch * (high - v) for v in values]


def sparkline(values: Sequence[Decimal], width: int = 96, height: int = 20) -> Markup:
    """The first price's last amounts, oldest first, as a line."""
    if len(values) < 2:
        return Markup("")
    ys = _scale([float(v) for v in values], height, 2)
    step = (width - 4) / (len(values) - 1)
    points = " ".join(f"{2 + i * step:.1f},{y:.1f}" for i, y in enumerate(ys))
    return Markup(
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="trend"><polyline points="{points}"/></svg>'
    )


# A line's colour on a chart of several (presentation attributes: the CSP allows no inline
# style, and the stylesheet colours `svg.chart`'s single line only). Told apart by the
# legend's swatches too, and the dots' titles name their line.
PALETTE = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7ea4", "#57606a"]
LEFT, BOTTOM, TOP, RIGHT = 60, 30, 12, 14  # room for the amounts and the times


@dataclass(frozen=True)
class Line:
    """One line of a chart: its legend's words and its (slot, amount) points, oldest first."""

    label: str
    points: Sequence[tuple[datetime, Decimal]]


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _time_ticks(first: float, last: float, count: int = 5) -> list[tuple[float, str]]:
    """Evenly spaced moments from `first` to `last` with labels as fine as their spacing
    needs (dates a day or more apart, then minutes, then seconds), none reading as another;
    one tick for a single moment."""
    if last <= first:
        return [(first, f"{datetime.fromtimestamp(first, UTC):%Y-%m-%d %H:%M}")]
    spacing = (last - first) / (count - 1)
    shape = "%Y-%m-%d" if spacing >= 86400 else "%m-%d %H:%M" if spacing >= 60 else "%H:%M:%S"
    ticks: list[tuple[float, str]] = []
    for i in range(count):
        moment = first + (last - first) * i / (count - 1)
        said = f"{datetime.fromtimestamp(moment, UTC):{shape}}"
        if not ticks or ticks[-1][1] != said:  # a span of seconds: fewer ticks, none twice
            ticks.append((moment, said))
    return ticks


def _amount_ticks(low: Decimal, high: Decimal) -> list[Decimal]:
    """The highest, middle and lowest amount (a half always ends: no rounding)."""
    return [low] if low == high else [high, (low + high) / 2, low]


def lines_chart(label: str, lines: Sequence[Line], coloured: bool = True) -> Markup:
    """Lines on one shared time axis (labelled dates, UTC) and one amount axis (the highest,
    middle and lowest amount): a dot per slot, titled by runs of one amount (`_dots`).
    Every label is escaped. `coloured`: each line a path in its colour (the legend's), its
    dots `dot`s; else the stylesheet colours the polyline and its `point`s (price_chart's)."""
    drawn = [line for line in lines if line.points]
    if not drawn:
        return Markup("")
    times = [t.timestamp() for line in drawn for t, _ in line.points]
    amounts = [a for line in drawn for _, a in line.points]
    first, last = min(times), max(times)
    low, high = min(amounts), max(amounts)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT + 40 - TOP - BOTTOM
    height = HEIGHT + 40

    def x(moment: float) -> float:
        return LEFT + (inner_w * (moment - first) / (last - first) if last > first else inner_w / 2)

    top, span = float(high), float(high - low)  # floats: a chart's thousand points add up

    def y(amount: Decimal) -> float:
        return TOP + (inner_h * (top - float(amount)) / span if span else inner_h / 2)

    parts = [
        f'<line x1="{LEFT}" y1="{TOP + inner_h}" x2="{WIDTH - RIGHT}" y2="{TOP + inner_h}" '
        'stroke="#8c959f"/>'
    ]
    ticks = _time_ticks(first, last)
    for place, (moment, said) in enumerate(ticks):
        at = x(moment)
        anchor = "end" if place == len(ticks) - 1 and place else "middle"  # inside the frame
        parts.append(
            f'<line class="tick" x1="{at:.1f}" y1="{TOP}" x2="{at:.1f}" y2="{TOP + inner_h}" '
            f'stroke="#d0d7de" stroke-dasharray="2,3"/><text class="time" x="{at:.1f}" '
            f'y="{height - 10}" text-anchor="{anchor}" font-size="11" fill="#57606a">{said}</text>'
        )
    for amount in _amount_ticks(low, high):
        parts.append(
            f'<text class="amount" x="{LEFT - 6}" y="{y(amount) + 4:.1f}" text-anchor="end" '
            f'font-size="11" fill="#57606a">{escape(str(amount))}</text>'
        )
    for index, line in enumerate(drawn):
        places = [f"{x(t.timestamp()):.1f},{y(a):.1f}" for t, a in line.points]
        path = " ".join(places)
        shape = (
            f'<polyline points="{path}"/>'
            if not coloured
            else f'<path d="M{path.replace(" ", " L")}" fill="none" stroke="{colour(index)}" '
            'stroke-width="2"/>'
        )
        fill, dots, start = colour(index) if coloured else None, [], 0
        for said, run in groupby(str(a) for _, a in line.points):  # as the page wrote it
            end = start + len(list(run))
            slots = (line.points[start][0], line.points[end - 1][0])
            dots.append(_dots(escape(line.label), places[start:end], slots, said, fill))
            start = end
        parts.append(f'<g class="line" data-line="{escape(line.label)}">{shape}{"".join(dots)}</g>')
    css = "chart lines" if coloured else "chart"
    return Markup(
        f'<svg class="{css}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(label)}">{"".join(parts)}</svg>'
    )


def _dots(
    label: str, places: list[str], slots: tuple[datetime, datetime], amount: str, fill: str | None
) -> str:
    """A dot per slot of a run of one amount, as one path of zero-length strokes with round
    caps, and one title for the run: a 500-slot chart is a few elements, not a thousand (a
    fifth of the bytes, half the time), and a hover on any dot still says its line, its
    slots and its amount."""
    marks = "".join(f"M{place}h0" for place in places)
    first, last = _minute(slots[0]), _minute(slots[1])
    when = f"{len(places)} slots, {first} to {last} UTC" if len(places) > 1 else f"{first} UTC"
    kind, stroke = ("dot", f' stroke="{fill}"') if fill else ("point", "")
    title = f"<title>{label}: {when}: {amount}</title>"
    return f'<path class="{kind}" d="{marks}"{stroke}>{title}</path>'


def _minute(moment: datetime) -> str:
    return moment.isoformat(" ", "minutes")[:16]


def price_chart(name: str, points: Sequence[tuple[datetime, Decimal]]) -> Markup:
    """One named price over its slots, on labelled axes (lines_chart's, one line)."""
    return lines_chart(name, [Line(name, points)], coloured=False)


def moved(values: Sequence[Decimal]) -> Decimal | None:
    """The change since the previous slot: the last amount less the one before it."""
    return values[-1] - values[-2] if len(values) >= 2 else None


def side_by_side(diff: str) -> list[tuple[str, str, str]]:
    """A unified diff as rows of (kind, before, after): kind `same`, `gone`, `new`, `moved`
    (a line replaced by another) or `hunk`. The caller escapes the text."""
    rows: list[tuple[str, str, str]] = []
    gone: list[str] = []
    new: list[str] = []

    def flush() -> None:
        for i in range(max(len(gone), len(new))):
            before = gone[i] if i < len(gone) else ""
            after = new[i] if i < len(new) else ""
            kind = "moved" if i < len(gone) and i < len(new) else "gone" if before else "new"
            rows.append((kind, before, after))
        gone.clear()
        new.clear()

    for line in diff.splitlines():
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            flush()
            rows.append(("hunk", line, line))
        elif line.startswith("-"):
            gone.append(line[1:])
        elif line.startswith("+"):
            new.append(line[1:])
        else:
            flush()
            rows.append(("same", line[1:], line[1:]))
    flush()
    return rows
