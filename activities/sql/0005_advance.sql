-- One rule, once: "the schedule advances to the first grid point after the trusted
-- clock, and each grid point it passes gets a `skipped` row". `commit`, `record_failed` and
-- `advance_past_final` (queries.sql) each wrote it out; now they call these two functions.
--
-- Why two functions, and why they are called where they are. Each of those statements
-- updates the target's row itself (the lease, the failure streak), and a row may be
-- updated only once per statement, so no function here updates monitor_targets: the
-- statement's own UPDATE sets `next_slot = next_due(...)` and, in its RETURNING, calls
-- `skip_passed(...)` with the slot it just wrote. RETURNING runs once for each row the
-- UPDATE actually changed, after any re-check of a concurrently updated row (READ
-- COMMITTED re-evaluates SET, never RETURNING), so the skipped rows are written exactly
-- once, on the grid the row has, and only when the schedule really moved. A SELECT in a
-- CTE would run only if the statement reads it; a volatile function in SET could run
-- twice (and, after a concurrent reconfigure, write rows on the old grid). Each statement
-- stays one statement (one round trip). `next_due` is STABLE and one expression, so the
-- planner inlines it. Measured (PG 18.4, 2026-12-01, claim + commit of one target, 3,600
-- commits each, interleaved): the commit's median 0.628 ms against 0.616 ms for the CTEs
-- it replaces with no slot passed, 0.807 against 0.772 ms with two, inside the spread; a
-- PL/pgSQL `skip_passed` measured the same, so it stays SQL.

-- The slot after `slot` once it is final: the first grid point after the database's now(),
-- or after Temporal's time for the attempt if that is later (the time-skipping test server
-- runs ahead of every real clock); never a worker's clock, never at or before `slot`.
-- Not STRICT: `temporal_now` is NULL when the caller has no Temporal time.
CREATE FUNCTION next_due(
    anchor timestamptz, interval_seconds integer, slot timestamptz, temporal_now timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN grid_after(anchor, interval_seconds, greatest(now(), temporal_now, slot));

-- A `skipped` row, saying `reason`, for each grid point strictly between `after` and
-- `before` (the slot the schedule left and the one it moved to); a slot that already has a
-- row keeps it. Returns how many rows it wrote. Every such point is at or before the clock
-- `next_due` read, so no skipped row is in the future.
CREATE FUNCTION skip_passed(
    target_id text, anchor timestamptz, interval_seconds integer, after timestamptz,
    before timestamptz, reason text
) RETURNS integer LANGUAGE sql VOLATILE
AS $$
    WITH written AS (
        INSERT INTO source_checks (work_id, target_id, scheduled_for, kind, checked_at,
            status, error_message)
        SELECT slot_work_id(skip_passed.target_id, s), skip_passed.target_id, s, 'scheduled',
               now(), 'skipped', reason
          FROM grid_between(anchor, interval_seconds, after, before) s
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT count(*)::integer FROM written
$$;
