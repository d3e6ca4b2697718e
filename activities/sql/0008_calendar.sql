-- Calendar grids (issue 31): slots at local wall-clock times in a time zone (`--cron "0 8 * *
-- 1-5" --tz Europe/Berlin`, `--at 08:00 --on mon-fri`), with an optional per-target jitter.
-- The database's clock still decides the next slot, so the calendar arithmetic is here as
-- well as in pricewatch/calendar.py, step for step (its docstring and docs/schedules.md
-- state the DST rules; tests/test_calendar.py proves both agree). Only added: a target with
-- no calendar (time_zone NULL) keeps its `anchor + k * interval` grid, and next_due and
-- skip_passed are unchanged until they dispatch through grid_next / grid_passed below.
--
-- Postgres's `timestamp AT TIME ZONE` is not our rule at a transition (measured, PG 18.4:
-- Berlin's missing 2026-03-29 02:30 reads as 01:30Z, i.e. 03:30 CEST, where we fire at the
-- gap's end, 01:00Z; the repeated 2026-10-25 02:30 reads as its second occurrence, 01:30Z,
-- where we fire at the first, 00:30Z), so `calendar_resolve` only uses the unambiguous
-- direction (an instant to local time) and finds occurrences itself.

-- Whether an array is sorted and without repeats, as the calendar functions read them (a
-- binary search over the times, one slot per value).
CREATE FUNCTION calendar_sorted(vals integer[])
RETURNS boolean LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN vals = ARRAY(SELECT DISTINCT v FROM unnest(vals) v ORDER BY v);

-- The calendar of a target, expanded (NULL: an interval grid). Times are minutes after local
-- midnight, sorted (the cron's hours x minutes, or --at's list); weekdays are cron's, 0 =
-- Sunday; `calendar_days_or` is Vixie cron's rule (both day fields restricted: either
-- matches, else both must).
ALTER TABLE monitor_targets
    ADD COLUMN time_zone text,
    ADD COLUMN calendar_times integer[],
    ADD COLUMN calendar_days integer[],
    ADD COLUMN calendar_months integer[],
    ADD COLUMN calendar_weekdays integer[],
    ADD COLUMN calendar_days_or boolean,
    ADD COLUMN jitter_seconds integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT monitor_targets_calendar_check CHECK (
        num_nulls(time_zone, calendar_times, calendar_days, calendar_months,
                  calendar_weekdays, calendar_days_or) IN (0, 6)),
    ADD CONSTRAINT monitor_targets_calendar_values_check CHECK (
        cardinality(calendar_times) > 0 AND 0 <= ALL (calendar_times)
        AND 1439 >= ALL (calendar_times)
        AND cardinality(calendar_days) > 0 AND 1 <= ALL (calendar_days)
        AND 31 >= ALL (calendar_days)
        AND cardinality(calendar_months) > 0 AND 1 <= ALL (calendar_months)
        AND 12 >= ALL (calendar_months)
        AND cardinality(calendar_weekdays) > 0 AND 0 <= ALL (calendar_weekdays)
        AND 6 >= ALL (calendar_weekdays)
        AND calendar_sorted(calendar_times) AND calendar_sorted(calendar_days)
        AND calendar_sorted(calendar_months) AND calendar_sorted(calendar_weekdays)),
    ADD CONSTRAINT monitor_targets_jitter_seconds_check CHECK (
        jitter_seconds >= 0 AND (jitter_seconds = 0 OR time_zone IS NOT NULL));

-- The instant a nominal local time fires at: its only occurrence, the first of two (fall
-- back), or the end of the gap it falls in (spring forward). The offsets 24 hours either side
-- give the candidates; with none reading back as the local time, a binary search over whole
-- seconds finds the first instant at or after it. Exactly `pricewatch.calendar.resolve`.
CREATE FUNCTION calendar_resolve(local_time timestamp, time_zone text)
RETURNS timestamptz LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    base timestamptz := local_time AT TIME ZONE 'UTC';
    early timestamptz := base - (((base - interval '24 hours') AT TIME ZONE time_zone)
                                 - ((base - interval '24 hours') AT TIME ZONE 'UTC'));
    late timestamptz := base - (((base + interval '24 hours') AT TIME ZONE time_zone)
                                - ((base + interval '24 hours') AT TIME ZONE 'UTC'));
    early_ok boolean := (early AT TIME ZONE time_zone) = local_time;
    late_ok boolean := (late AT TIME ZONE time_zone) = local_time;
    low timestamptz := late;
    high timestamptz := early;
    middle timestamptz;
BEGIN
    IF early_ok AND late_ok THEN
        RETURN least(early, late);
    ELSIF early_ok THEN
        RETURN early;
    ELSIF late_ok THEN
        RETURN late;
    END IF;
    WHILE high - low > interval '1 second' LOOP
        middle := low + make_interval(secs => floor(extract(epoch FROM high - low) / 2));
        IF (middle AT TIME ZONE time_zone) >= local_time THEN
            high := middle;
        ELSE
            low := middle;
        END IF;
    END LOOP;
    RETURN high;
END
$$;

-- The first nominal slot strictly after `after`: the calendar's dates from `after`'s local
-- date on (months it skips skipped whole), its times from the first after `after`'s local
-- minute. A later local time can still fire before `after` (the repeated hour's first copy
-- when `after` is in the second), hence the check on each. 400 years hold every date a
-- calendar has. Exactly `pricewatch.calendar._nominal_after`.
CREATE FUNCTION calendar_nominal_after(
    times integer[], days integer[], months integer[], weekdays integer[], days_or boolean,
    time_zone text, after timestamptz
) RETURNS timestamptz LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    start timestamp := after AT TIME ZONE time_zone;
    on_day date := start::date;
    last_day date := start::date + 146097;
    start_minute integer := extract(hour FROM start)::integer * 60
                            + extract(minute FROM start)::integer;
    lo integer := 1;
    hi integer := cardinality(times) + 1;
    mid integer;
    in_month boolean;
    in_week boolean;
    slot timestamptz;
BEGIN
    WHILE lo < hi LOOP  -- the first time after `after`'s minute, on its own date
        mid := (lo + hi) / 2;
        IF times[mid] > start_minute THEN
            hi := mid;
        ELSE
            lo := mid + 1;
        END IF;
    END LOOP;
    WHILE on_day <= last_day LOOP
        IF NOT extract(month FROM on_day)::integer = ANY (months) THEN
            on_day := (make_date(extract(year FROM on_day)::integer,
                                 extract(month FROM on_day)::integer, 1)
                       + interval '1 month')::date;
            lo := 1;
            CONTINUE;
        END IF;
        in_month := extract(day FROM on_day)::integer = ANY (days);
        in_week := extract(dow FROM on_day)::integer = ANY (weekdays);
        IF (in_month OR in_week) AND (in_month AND in_week OR days_or) THEN
            FOR i IN lo..cardinality(times) LOOP
                slot := calendar_resolve(on_day + make_interval(mins => times[i]), time_zone);
                IF slot > after THEN
                    RETURN slot;
                END IF;
            END LOOP;
        END IF;
        on_day := on_day + 1;
        lo := 1;
    END LOOP;
    RAISE EXCEPTION 'the calendar has no date in 400 years';
END
$$;

-- A nominal slot with its target's jitter: plus sha256(work id) (first six bytes, big-endian)
-- modulo the jitter, kept below the distance to the next nominal slot (`following`) so
-- order holds when DST brings two slots closer. STABLE only because convert_to is.
CREATE FUNCTION calendar_jitter(
    target_id text, nominal timestamptz, jitter_seconds integer, following timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN nominal + make_interval(secs => (
    ('x' || encode(substring(sha256(convert_to(slot_work_id(target_id, nominal), 'UTF8'))
                             FROM 1 FOR 6), 'hex'))::bit(48)::bigint
    % least(jitter_seconds, extract(epoch FROM following - nominal)::bigint)));

-- The first calendar slot strictly after `after`, jitter applied: only a nominal slot after
-- `after - jitter` can give one. Exactly `pricewatch.calendar.slot_after`.
CREATE FUNCTION calendar_after(
    times integer[], days integer[], months integer[], weekdays integer[], days_or boolean,
    time_zone text, jitter_seconds integer, target_id text, after timestamptz
) RETURNS timestamptz LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    nominal timestamptz;
    following timestamptz;
    slot timestamptz;
BEGIN
    IF jitter_seconds = 0 THEN
        RETURN calendar_nominal_after(times, days, months, weekdays, days_or, time_zone, after);
    END IF;
    nominal := calendar_nominal_after(times, days, months, weekdays, days_or, time_zone,
                                      after - make_interval(secs => jitter_seconds));
    LOOP
        following := calendar_nominal_after(times, days, months, weekdays, days_or, time_zone,
                                            nominal);
        slot := calendar_jitter(target_id, nominal, jitter_seconds, following);
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
    time_zone text, jitter_seconds integer, target_id text, after timestamptz,
    before timestamptz
) RETURNS SETOF timestamptz LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    nominal timestamptz := calendar_nominal_after(
        times, days, months, weekdays, days_or, time_zone,
        after - make_interval(secs => jitter_seconds));
    following timestamptz;
    slot timestamptz;
BEGIN
    LOOP
        following := calendar_nominal_after(times, days, months, weekdays, days_or, time_zone,
                                            nominal);
        slot := CASE WHEN jitter_seconds = 0 THEN nominal
                     ELSE calendar_jitter(target_id, nominal, jitter_seconds, following) END;
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
    jitter_seconds integer, target_id text, after timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN time_zone IS NULL THEN grid_after(anchor, interval_seconds, after)
            ELSE calendar_after(times, days, months, weekdays, days_or, time_zone,
                                jitter_seconds, target_id, after) END;

CREATE FUNCTION grid_passed(
    anchor timestamptz, interval_seconds integer, times integer[], days integer[],
    months integer[], weekdays integer[], days_or boolean, time_zone text,
    jitter_seconds integer, target_id text, after timestamptz, before timestamptz
) RETURNS SETOF timestamptz LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF time_zone IS NULL THEN
        RETURN QUERY SELECT grid_between(anchor, interval_seconds, after, before);
    ELSE
        RETURN QUERY SELECT calendar_between(times, days, months, weekdays, days_or, time_zone,
                                             jitter_seconds, target_id, after, before);
    END IF;
END
$$;
