-- One grid, with the Python names (issue 45). pricewatch.slots has one `Grid` protocol with
-- two grids behind it, `IntervalGrid` and `CalendarGrid`; SQL now says the same:
--
-- - the interval grid's functions are `interval_after` and `interval_between` (0001's
--   `grid_after` and `grid_between`, renamed: they never covered calendars);
-- - the calendar grid's stay `calendar_after` and `calendar_between`;
-- - `grid_after` and `grid_between` take a target's row and cover either grid, as
--   `TargetConfig.grid` does; next_due, skip_passed and health.sql call them.
--
-- And the rule "the same grid keeps the anchor, a new grid is anchored at the next slot",
-- written three times in queries.sql (register_target, sync_target, reconfigure_target),
-- is one function, `grid_anchor`, over a `grid` value (`grid_of` a row).
--
-- 1.10 workers keep running on the migrated database: their statements call next_due and
-- skip_passed (same signatures), and their health.sql calls grid_next and grid_passed, kept
-- here for them only (1.12 drops them). The 0005 versions of next_due and skip_passed, kept
-- for 1.3 workers (0009), are dropped: no worker before 1.10 may run on 0016 already.

DROP FUNCTION next_due(timestamptz, integer, timestamptz, timestamptz);
DROP FUNCTION skip_passed(text, timestamptz, integer, timestamptz, timestamptz, text);

-- The rename keeps grid_next's call (its body is bound to the function, not its name);
-- interval_between's and grid_passed's bodies name what they call, so they are replaced.
ALTER FUNCTION grid_after(timestamptz, integer, timestamptz) RENAME TO interval_after;
ALTER FUNCTION grid_between(timestamptz, integer, timestamptz, timestamptz)
    RENAME TO interval_between;

CREATE OR REPLACE FUNCTION interval_between(
    anchor timestamptz, interval_seconds integer, after timestamptz, before timestamptz
) RETURNS SETOF timestamptz LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT generate_series(interval_after(anchor, interval_seconds, after),
                           before - make_interval(secs => interval_seconds),
                           make_interval(secs => interval_seconds))
$$;

CREATE OR REPLACE FUNCTION grid_passed(
    anchor timestamptz, interval_seconds integer, times integer[], days integer[],
    months integer[], weekdays integer[], days_or boolean, time_zone text,
    jitter_seconds integer, offset_seconds integer, target_id text, after timestamptz,
    before timestamptz
) RETURNS SETOF timestamptz LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF time_zone IS NULL THEN
        RETURN QUERY SELECT interval_between(anchor, interval_seconds, after, before);
    ELSE
        RETURN QUERY SELECT calendar_between(times, days, months, weekdays, days_or, time_zone,
                                             jitter_seconds, offset_seconds, target_id,
                                             after, before);
    END IF;
END
$$;

-- The first point of a target's grid strictly after `after`: its calendar when it has one
-- (time_zone set), else `anchor + k * interval_seconds`. `Grid.next` in Python.
CREATE FUNCTION grid_after(target monitor_targets, after timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN target.time_zone IS NULL
            THEN interval_after(target.anchor, target.interval_seconds, after)
            ELSE calendar_after(target.calendar_times, target.calendar_days,
                                target.calendar_months, target.calendar_weekdays,
                                target.calendar_days_or, target.time_zone,
                                target.jitter_seconds, target.calendar_offset, target.id,
                                after) END;

-- The points of a target's grid strictly between `after` and `before`, in order: the
-- slots a late schedule moves past. `Grid.between` in Python.
CREATE FUNCTION grid_between(target monitor_targets, after timestamptz, before timestamptz)
RETURNS SETOF timestamptz LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF target.time_zone IS NULL THEN
        RETURN QUERY SELECT interval_between(target.anchor, target.interval_seconds, after,
                                             before);
    ELSE
        RETURN QUERY SELECT calendar_between(
            target.calendar_times, target.calendar_days, target.calendar_months,
            target.calendar_weekdays, target.calendar_days_or, target.time_zone,
            target.jitter_seconds, target.calendar_offset, target.id, after, before);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION next_due(
    target monitor_targets, slot timestamptz, temporal_now timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN grid_after(target, greatest(now(), temporal_now, slot));

CREATE OR REPLACE FUNCTION skip_passed(
    target monitor_targets, after timestamptz, before timestamptz, reason text
) RETURNS integer LANGUAGE sql VOLATILE
AS $$
    WITH written AS (
        INSERT INTO source_checks (work_id, target_id, scheduled_for, kind, checked_at,
            status, error_message)
        SELECT slot_work_id(target.id, s), target.id, s, 'scheduled', now(), 'skipped', reason
          FROM grid_between(target, after, before) s
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT count(*)::integer FROM written
$$;

-- What makes a target's grid: its interval, or its calendar (the interval is then the
-- calendar's smallest spacing), jitter and offset included. Two rows with equal grids
-- have the same slots from the same anchor.
CREATE TYPE grid AS (
    interval_seconds integer,
    time_zone text,
    times integer[],
    days integer[],
    months integer[],
    weekdays integer[],
    days_or boolean,
    jitter_seconds integer,
    offset_seconds integer
);

CREATE FUNCTION grid_of(target monitor_targets)
RETURNS grid LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ROW(target.interval_seconds, target.time_zone, target.calendar_times,
           target.calendar_days, target.calendar_months, target.calendar_weekdays,
           target.calendar_days_or, target.jitter_seconds, target.calendar_offset)::grid;

-- A target's anchor once `proposed` is its grid: the same grid keeps the anchor; a new one
-- (a reconfigure, a start with another interval or calendar) is anchored at `next_slot`, the
-- slot the row goes on to, and later slots use it. Every statement that writes a grid
-- (register_target, sync_target, reconfigure_target) asks this.
CREATE FUNCTION grid_anchor(target monitor_targets, proposed grid, next_slot timestamptz)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN grid_of(target) IS NOT DISTINCT FROM proposed THEN target.anchor
            ELSE next_slot END;
