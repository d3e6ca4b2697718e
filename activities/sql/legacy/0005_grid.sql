-- The grid is data: each target's slots are `anchor + k * interval_seconds`. It is written
-- at the first registration and changed only by a deliberate reconfigure of the interval;
-- every later registration (a reset, a restart, a new start of a stopped target) adopts it.
-- Existing targets are anchored at their pending slot, which is on their grid.
ALTER TABLE monitor_targets ADD COLUMN anchor timestamptz;
UPDATE monitor_targets SET anchor = next_check_at;
ALTER TABLE monitor_targets ALTER COLUMN anchor SET NOT NULL;

-- The first grid point strictly after `after`. The schedule calls it with the database's
-- own now(), never a worker's clock, so a skewed worker cannot skip or invent slots.
CREATE FUNCTION grid_after(anchor timestamptz, interval_seconds integer, after timestamptz)
RETURNS timestamptz LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN anchor + make_interval(
    secs => (floor(extract(epoch FROM after - anchor) / interval_seconds) + 1)
            * interval_seconds);

-- The grid points strictly between `after` and `before` (itself a grid point): the slots a
-- late schedule moves past.
CREATE FUNCTION grid_between(
    anchor timestamptz, interval_seconds integer, after timestamptz, before timestamptz
) RETURNS SETOF timestamptz LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT generate_series(grid_after(anchor, interval_seconds, after),
                           before - make_interval(secs => interval_seconds),
                           make_interval(secs => interval_seconds))
$$;

-- A slot's work id, exactly as `pricewatch.slots.work_id` writes it (ISO-8601 UTC, `Z`,
-- microseconds only when present), for rows the database writes itself.
CREATE FUNCTION slot_work_id(target_id text, slot timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN target_id || ':'
    || to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
    || CASE WHEN extract(microseconds FROM slot)::bigint % 1000000 = 0 THEN ''
            ELSE to_char(slot AT TIME ZONE 'UTC', '.US') END
    || 'Z';

-- A slot whose check failed and will be attempted again reads `retrying` (with when the
-- next attempt may come); `failed` means it gave up. Rows of slots still in flight move
-- to `retrying`; final rows keep what they say.
ALTER TABLE source_checks ADD COLUMN next_attempt_at timestamptz;
ALTER TABLE source_checks DROP CONSTRAINT source_checks_status_check;
ALTER TABLE source_checks DROP CONSTRAINT source_checks_hash_check;
UPDATE source_checks c SET status = 'retrying'
  FROM monitor_targets t
 WHERE c.target_id = t.id AND c.status = 'failed' AND c.kind = 'scheduled'
   AND t.next_check_at <= c.scheduled_for;
ALTER TABLE source_checks ADD CONSTRAINT source_checks_status_check
    CHECK (status IN ('unchanged', 'changed', 'retrying', 'failed', 'skipped'));
ALTER TABLE source_checks ADD CONSTRAINT source_checks_hash_check
    CHECK ((status IN ('retrying', 'failed', 'skipped')) = (result_hash IS NULL));
ALTER TABLE source_checks ADD CONSTRAINT source_checks_next_attempt_check
    CHECK (next_attempt_at IS NULL OR status = 'retrying');
