"""Where a new target of a site starts (pure): its first slot spread from the site's other
targets on the same grid by PRICEWATCH_SITE_GAP, so one host is not asked by several checks at
once. An `--every` target gets an anchor, a calendar target an offset into its calendar. The
client reads the site's due slots (`Pricewatch.site_slots`) and places with these."""

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from pricewatch.calendar import Calendar, offset_width, preferred_offset, spread_key
from pricewatch.models import TargetConfig
from pricewatch.slots import EPOCH, SiteSpread, spread_anchor

SECOND = timedelta(seconds=1)
# A site (URL host) and a grid its targets are spread apart on: an interval (and None), or
# a calendar's offset width and `spread_key`.
SiteGrid = tuple[str, timedelta, tuple[object, ...] | None]
Sites = dict[SiteGrid, SiteSpread]


def site(url: str) -> str:
    """The host a URL's checks land on: what spreading keeps apart."""
    return (urlsplit(url).hostname or "").lower()


def sites_of(rows: Iterable[Mapping[str, object]], gap: timedelta) -> Sites:
    """Where the targets of each site fall due, by grid, from the mirror's rows (`url`,
    `interval_seconds`, `calendar`, `next_slot`): `--every` targets by interval, at their
    next slots; calendar targets by calendar, at their offsets (one added before 1.7 with
    jitter has a shift per slot, so no place of its own)."""
    due: dict[SiteGrid, list[datetime]] = {}
    for row in rows:
        host = site(str(row["url"]))
        if row["calendar"] is None:
            interval = timedelta(seconds=int(str(row["interval_seconds"])))
            next_slot = row["next_slot"]
            assert isinstance(next_slot, datetime)
            due.setdefault((host, interval, None), []).append(next_slot)
            continue
        try:
            grid = Calendar.model_validate(row["calendar"])
        except ValueError:  # a zone this machine's tz data lacks: its worker decides
            continue
        if grid.offset_seconds is not None or not grid.jitter_seconds:
            key = (host, timedelta(seconds=offset_width(grid)), spread_key(grid))
            due.setdefault(key, []).append(EPOCH + SECOND * (grid.offset_seconds or 0))
    return {key: spread(key, slots, gap) for key, slots in due.items()}


def placed(
    config: TargetConfig, sites: Sites, gap: timedelta, now: datetime
) -> tuple[TargetConfig, datetime]:
    """A new target as it starts: its config and its anchor, spread from the targets of
    its site on its grid by `gap`. An `--every` target's anchor is `now`, spread by its id,
    moved on until none of them is due within the gap of it; a calendar target gets the
    offset that keeps it clear of them (it starts on its calendar: the workflow moves it
    there). It joins `sites`."""
    anchor = spread_anchor(config.target_id, now)
    grid = config.calendar
    if grid is None:
        key: SiteGrid = (site(config.url), config.interval, None)
        return config, sites.setdefault(key, spread(key, [], gap)).place(anchor)
    width = timedelta(seconds=offset_width(grid))
    key = (site(config.url), width, spread_key(grid))
    preferred = EPOCH + SECOND * preferred_offset(grid, config.target_id)
    offset = (sites.setdefault(key, spread(key, [], gap)).place(preferred) - EPOCH) % width
    placed_grid = grid.model_copy(update={"offset_seconds": offset // SECOND})
    return config.model_copy(update={"calendar": placed_grid}), anchor


def kept(
    had: TargetConfig, config: TargetConfig, sites: Sites, gap: timedelta, now: datetime
) -> TargetConfig:
    """`config` as a reconfigure of `had` runs it: the same calendar keeps its offset
    (unchanged stays unchanged), a new calendar gets one (`placed`)."""
    grid = config.calendar
    if grid is None or grid.offset_seconds is not None:
        return config
    if had.calendar is not None and spread_key(had.calendar) == spread_key(grid):
        kept_grid = grid.model_copy(update={"offset_seconds": had.calendar.offset_seconds})
        return config.model_copy(update={"calendar": kept_grid})
    return placed(config, sites, gap, now)[0]


def spread(key: SiteGrid, taken: list[datetime], gap: timedelta) -> SiteSpread:
    if key[2] is not None:  # offsets are whole seconds
        gap = SECOND * math.ceil(gap / SECOND)
    return SiteSpread(key[1], gap, taken)
