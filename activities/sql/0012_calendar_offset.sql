-- Calendar targets of one site spread apart (1.7, issue 31): `add` and `apply` give a new
-- calendar target an offset (`calendar_offset`, also the config's `calendar.offset_seconds`)
-- that keeps its slots PRICEWATCH_SITE_GAP clear of its site's other targets on the same
-- calendar, as an interval target's anchor is chosen. NULL for every target added before:
-- their slots stay exactly where they were (pricewatch/calendar.py's docstring has both
-- rules). The calendar functions take the offset as a new argument, so their 0008/0009
-- versions are replaced and dropped; next_due and skip_passed keep their signatures, so 1.6
-- workers running beside 1.7 ones during an upgrade call the new ones unknowingly.

-- The offset needs no time zone beside it: a row without one is an interval grid, which
-- ignores it (a 1.6 worker reconfiguring a target to an interval leaves the column as it was).
ALTER TABLE monitor_targets
    ADD COLUMN calendar_offset integer,
    ADD CONSTRAINT monitor_targets_calendar_offset_check CHECK (calendar_offset >= 0);

-- The first six bytes of a text's sha256, big-endian: how the jitter places a slot.
-- STABLE only because convert_to is.
CREATE FUNCTION calendar_hash(value text)
RETURNS bigint LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN ('x' || encode(substring(sha256(convert_to(value, 'UTF8')) FROM 1 FOR 6), 'hex'))
    ::bit(48)::bigint;

-- A nominal slot with its target's jitter and offset, kept below the distance to the next
-- nominal slot (`following`) so order holds when DST brings two slots closer. Without
-- jitter: shifted by the offset. With jitter and an offset (1.7, chosen by `add`/`apply` to
-- spread a site's targets apart): the nominal slot's own rotation, the same for every
-- target, plus the offset, modulo the jitter. With jitter and no offset (a target added
-- before 1.7): sha256 of the slot's work id modulo the jitter. Exactly
-- `pricewatch.calendar._jittered`. Not STRICT: the offset may be NULL.
CREATE FUNCTION calendar_shift(
    target_id text, nominal timestamptz, jitter_seconds integer, offset_seconds integer,
    following timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN nominal + make_interval(secs => CASE
    WHEN jitter_seconds = 0
        THEN coalesce(offset_seconds, 0) % extract(epoch FROM following - nominal)::bigint
    WHEN offset_seconds IS NULL
        THEN calendar_hash(slot_work_id(target_id, nominal))
             % least(jitter_seconds, extract(epoch FROM following - nominal)::bigint)
    ELSE (calendar_hash(slot_work_id('', nominal)) + offset_seconds)
         % least(jitter_seconds, extract(epoch FROM following - nominal)::bigint) END);

-- The first calendar slot strictly after `after`, shifted: a slot lies within `reach` (the
-- jitter, else the offset) after its nominal one, so only a nominal slot after
-- `after - reach` can give one. Exactly `pricewatch.calendar.slot_after`.
CREATE FUNCTION calendar_after(
    times integer[], days integer[], months integer[], weekdays integer[], days_or boolean,
    time_zone text, jitter_seconds integer, offset_seconds integer, target_id text,
    after timestamptz
) RETURNS timestamptz LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    reach integer := coalesce(nullif(jitter_seconds, 0), offset_seconds, 0);
    nominal timestamptz;
    following timestamptz;
    slot timestamptz;
BEGIN
    IF reach = 0 THEN
        RETURN calendar_nominal_after(times, days, months, weekdays, days_or, time_zone, after);
    END IF;
    nominal := calendar_nominal_after(times, days, months, weekdays, days_or, time_zone,
                                      after - make_interval(secs => reach));
    LOOP
        following := calendar_nominal_after(times, days, months, weekdays, days_or, time_zone,
                                            nominal);
        slot := calendar_shift(target_id, nominal, jitter_seconds, offset_seconds, following);
        IF slot > after THEN
            RETURN slot;
        END IF;
        nominal := following;
    END LOOP;
END
$$;

-- The calendar slots strictly between `after` and `before`, in order: the slots a late
-- schedule moves past. Exactly `pricewatch.calendar.slots_between`.
CREATE FUNCTION calendar_between(
    times integer[], days integer[], months integer[], weekdays integer[], days_or boolean,
    time_zone text, jitter_seconds integer, offset_seconds integer, target_id text,
    after timestamptz, before timestamptz
) RETURNS SETOF timestamptz LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    reach integer := coalesce(nullif(jitter_seconds, 0), offset_seconds, 0);
    nominal timestamptz := calendar_nominal_after(
        times, days, months, weekdays, days_or, time_zone,
        after - make_interval(secs => reach));
    following timestamptz;
    slot timestamptz;
BEGIN
    LOOP
        following := calendar_nominal_after(times, days, months, weekdays, days_or, time_zone,
                                            nominal);
        slot := CASE WHEN reach = 0 THEN nominal
                     ELSE calendar_shift(target_id, nominal, jitter_seconds, offset_seconds,
                                         following) END;
        EXIT WHEN slot >= before;
        IF slot > after THEN
            RETURN NEXT slot;
        END IF;
        nominal := following;
    END LOOP;
END
$$;

-- A target's grid either way, for next_due and skip_passed to call with the row's columns:
-- the calendar when it has one (time_zone set), else `anchor + k * interval_seconds`.
-- Not STRICT: an interval target's calendar columns are NULL.
CREATE FUNCTION grid_next(
    anchor timestamptz, interval_seconds integer, times integer[], days integer[],
    months integer[], weekdays integer[], days_or boolean, time_zone text,
    jitter_seconds integer, offset_seconds integer, target_id text, after timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN time_zone IS NULL THEN grid_after(anchor, interval_seconds, after)
            ELSE calendar_after(times, days, months, weekdays, days_or, time_zone,
                                jitter_seconds, offset_seconds, target_id, after) END;

CREATE FUNCTION grid_passed(
    anchor timestamptz, interval_seconds integer, times integer[], days integer[],
    months integer[], weekdays integer[], days_or boolean, time_zone text,
    jitter_seconds integer, offset_seconds integer, target_id text, after timestamptz,
    before timestamptz
) RETURNS SETOF timestamptz LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF time_zone IS NULL THEN
        RETURN QUERY SELECT grid_between(anchor, interval_seconds, after, before);
    ELSE
        RETURN QUERY SELECT calendar_between(times, days, months, weekdays, days_or, time_zone,
                                             jitter_seconds, offset_seconds, target_id,
                                             after, before);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION next_due(target monitor_targets, slot timestamptz, temporal_now timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN grid_next(target.anchor, target.interval_seconds, target.calendar_times,
                 target.calendar_days, target.calendar_months, target.calendar_weekdays,
                 target.calendar_days_or, target.time_zone, target.jitter_seconds,
                 target.calendar_offset, target.id, greatest(now(), temporal_now, slot));

CREATE OR REPLACE FUNCTION skip_passed(
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
                           target.time_zone, target.jitter_seconds, target.calendar_offset,
                           target.id, after, before) s
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT count(*)::integer FROM written
$$;

DROP FUNCTION grid_next(timestamptz, integer, integer[], integer[], integer[], integer[],
                        boolean, text, integer, text, timestamptz);
DROP FUNCTION grid_passed(timestamptz, integer, integer[], integer[], integer[], integer[],
                          boolean, text, integer, text, timestamptz, timestamptz);
DROP FUNCTION calendar_after(integer[], integer[], integer[], integer[], boolean, text,
                             integer, text, timestamptz);
DROP FUNCTION calendar_between(integer[], integer[], integer[], integer[], boolean, text,
                               integer, text, timestamptz, timestamptz);
DROP FUNCTION calendar_jitter(text, timestamptz, integer, timestamptz);
