"""The dashboard's charts, drawn on the server as SVG: no script, no library, nothing from
a CDN, and every label escaped (a price's name is the page's text)."""

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from html import escape

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


def price_chart(name: str, points: Sequence[tuple[datetime, Decimal]]) -> Markup:
    """One named price over its slots: a line with one dot per slot (its title: the slot and
    the amount), the lowest and highest amount and the first and last slot as labels."""
    if not points:
        return Markup("")
    times = [t.timestamp() for t, _ in points]
    first, last = min(times), max(times)
    span = (last - first) or 1.0
    xs = [PAD + (WIDTH - 2 * PAD) * ((t - first) / span if last > first else 0.5) for t in times]
    amounts = [amount for _, amount in points]
    ys = _scale([float(a) for a in amounts], HEIGHT, PAD)
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))
    dots = "".join(  # a slot and a Decimal: nothing to escape
        f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3">'
        f"<title>{slot.isoformat(' ', 'minutes')[:16]} UTC: {amount}</title></circle>"
        for (slot, amount), x, y in zip(points, xs, ys, strict=True)
    )
    low, high = min(amounts), max(amounts)
    labels = (
        f'<text x="4" y="{PAD - 8}">{escape(str(high))}</text>'
        f'<text x="4" y="{HEIGHT - 6}">{escape(str(low))}</text>'
        f'<text x="{WIDTH - 4}" y="{HEIGHT - 6}" text-anchor="end">'
        f"{points[-1][0]:%Y-%m-%d %H:%M}</text>"
    )
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(name)}"><polyline points="{line}"/>{dots}{labels}</svg>'
    )


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
