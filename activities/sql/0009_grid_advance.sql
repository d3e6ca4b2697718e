-- The schedule's one rule (0005_advance.sql) on either kind of grid (issue 31): `commit`,
-- `record_failed` and `advance_past_final` now pass the target's row, and these versions of
-- next_due and skip_passed take the grid from it, through grid_next / grid_passed
-- (0008_calendar.sql): a calendar's local times when the row has one, else
-- `anchor + k * interval_seconds` exactly as before. The 0005 versions stay for workers of
-- 1.3 still running during an upgrade (they take no calendar: upgrade every worker before
-- adding a calendar target); a later release drops them.

-- The slot after `slot` once it is final: the first point of the target's grid after the
-- database's now(), or after Temporal's time for the attempt if that is later; never a
-- worker's clock, never at or before `slot`.
CREATE FUNCTION next_due(target monitor_targets, slot timestamptz, temporal_now timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN grid_next(target.anchor, target.interval_seconds, target.calendar_times,
                 target.calendar_days, target.calendar_months, target.calendar_weekdays,
                 target.calendar_days_or, target.time_zone, target.jitter_seconds, target.id,
                 greatest(now(), temporal_now, slot));

-- A `skipped` row, saying `reason`, for each point of the target's grid strictly between
-- `after` and `before`; a slot that already has a row keeps it. Returns how many it wrote.
CREATE FUNCTION skip_passed(
    target monitor_targets, after timestamptz, before timestamptz, reason text
) RETURNS integer LANGUAGE sql VOLATILE
AS $$
    WITH written AS (
        INSERT INTO source_checks (work_id, target_id, scheduled_for, kind, checked_at,
            status, error_message)
        SELECT slot_work_id(target.id, s), target.id, s, 'scheduled', now(), 'skipped', reason
          FROM grid_passed(target.anchor, target.interval_seconds, target.calendar_times,
                           target.calendar_days, target.calendar_months,
                           target.calendar_weekdays, target.calendar_days_or,
                           target.time_zone, target.jitter_seconds, target.id, after,
                           before) s
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT count(*)::integer FROM written
$$;
