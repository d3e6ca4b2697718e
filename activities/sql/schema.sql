-- pricewatch's schema as it is now: every table, index and function, in one file to read.
-- It is not what builds a database: a fresh one, like an old one, gets the numbered
-- migrations beside this file, applied in order (activities/migrate.py), so there is one way
-- a schema comes about. This file is what they add up to, and tests/test_schema.py proves
-- it (it builds one database from the migrations and one from this file and compares their
-- catalogs). A new migration changes this file too, in place: a column added at its
-- table's end, a function as it now reads.
--
-- The migrations' comments say why each step was taken; the comments here say what things
-- are. The `schema_migrations` ledger belongs to activities/migrate.py, not to this file.

-- The grids, with pricewatch.slots's names: a target's grid is an interval grid (slots
-- `anchor + k * interval_seconds`: `interval_after`, `interval_between`) or a calendar grid
-- (`calendar_after`, `calendar_between`); `grid_after` and `grid_between` take a target's
-- row and cover either (below the table). The schedule calls them (through `next_due`) with
-- the database's own now(), never a worker's clock, so a skewed worker cannot skip or
-- invent slots.

-- The first interval grid point strictly after a moment.
CREATE FUNCTION interval_after(anchor timestamptz, interval_seconds integer, after timestamptz)
RETURNS timestamptz LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN anchor + make_interval(
    secs => (floor(extract(epoch FROM after - anchor) / interval_seconds) + 1)
            * interval_seconds);

-- The interval grid points strictly between `after` and `before` (itself a grid point): the
-- slots a late schedule moves past.
CREATE FUNCTION interval_between(
    anchor timestamptz, interval_seconds integer, after timestamptz, before timestamptz
) RETURNS SETOF timestamptz LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT generate_series(interval_after(anchor, interval_seconds, after),
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

-- The calendar grid: slots at local wall-clock times in `time_zone`, each at its only
-- occurrence, the first of two (fall back), or the end of the gap it falls in (spring
-- forward); exactly pricewatch/calendar.py (its docstring and docs/schedules.md state the
-- rules).

-- Whether an array is sorted and without repeats, as the calendar functions read them (a
-- binary search over the times, one slot per value).
CREATE FUNCTION calendar_sorted(vals integer[])
RETURNS boolean LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN vals = ARRAY(SELECT DISTINCT v FROM unnest(vals) v ORDER BY v);

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

-- `grid_after` and `grid_between` with the row's columns one by one: what 1.10's health.sql
-- calls, kept for 1.10 workers during an upgrade (0017); 1.12 drops them.
-- Not STRICT: an interval target's calendar columns are NULL.
CREATE FUNCTION grid_next(
    anchor timestamptz, interval_seconds integer, times integer[], days integer[],
    months integer[], weekdays integer[], days_or boolean, time_zone text,
    jitter_seconds integer, offset_seconds integer, target_id text, after timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN time_zone IS NULL THEN interval_after(anchor, interval_seconds, after)
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
        RETURN QUERY SELECT interval_between(anchor, interval_seconds, after, before);
    ELSE
        RETURN QUERY SELECT calendar_between(times, days, months, weekdays, days_or, time_zone,
                                             jitter_seconds, offset_seconds, target_id,
                                             after, before);
    END IF;
END
$$;

-- One row per monitored target: a mirror of the workflow's config, its grid and pending
-- slot, and the lease that fences concurrent or stale check attempts.
CREATE TABLE monitor_targets (
    id               text PRIMARY KEY
                     CONSTRAINT monitor_targets_id_check
                     CHECK (id ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    url              text NOT NULL CONSTRAINT monitor_targets_url_check CHECK (url ~ '^https?://'),
    -- The configurable minimum (PRICEWATCH_MIN_INTERVAL) is checked at the edges; the
    -- table refuses what no setting can make valid.
    interval_seconds integer NOT NULL
                     CONSTRAINT monitor_targets_interval_seconds_check CHECK (interval_seconds >= 1),
    enabled          boolean NOT NULL DEFAULT true,
    -- Failed slots in a row (reset by a good one); unhealthy from `unhealthy_after` on.
    failure_streak   integer NOT NULL DEFAULT 0
                     CONSTRAINT monitor_targets_failure_streak_check CHECK (failure_streak >= 0),
    unhealthy_after  integer NOT NULL DEFAULT 3
                     CONSTRAINT monitor_targets_unhealthy_after_check CHECK (unhealthy_after >= 1),
    -- The next slot: the grid point the schedule waits for.
    next_slot        timestamptz NOT NULL,
    -- The lease: its holder's execution id, and when it lapses (by the database's clock).
    lease_token      text,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- Written at the first registration; changed only by a deliberate change of interval.
    anchor           timestamptz NOT NULL,
    -- The whole config the workflow holds, mirrored: `pricewatch apply` plans against it and
    -- `pricewatch export` writes it back. NULL until a target's next registration or sync.
    config           jsonb,
    -- The calendar grid, expanded (all NULL: the interval grid). Times are minutes after
    -- local midnight, sorted; weekdays are cron's (0 = Sunday); `calendar_days_or` is Vixie
    -- cron's rule (both day fields restricted: either matches, else both must). The jitter
    -- shifts each slot by [0, jitter_seconds) seconds, fixed per target and slot; the offset
    -- (chosen by `add`/`apply`, NULL before 1.7) is its place in the jitter, or without
    -- jitter its shift, which keeps a site's targets apart.
    time_zone        text,
    calendar_times   integer[],
    calendar_days    integer[],
    calendar_months  integer[],
    calendar_weekdays integer[],
    calendar_days_or boolean,
    jitter_seconds   integer NOT NULL DEFAULT 0,
    calendar_offset  integer,
    CONSTRAINT monitor_targets_check CHECK ((lease_token IS NULL) = (lease_expires_at IS NULL)),
    CONSTRAINT monitor_targets_calendar_check CHECK (
        num_nulls(time_zone, calendar_times, calendar_days, calendar_months,
                  calendar_weekdays, calendar_days_or) IN (0, 6)),
    CONSTRAINT monitor_targets_calendar_values_check CHECK (
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
    CONSTRAINT monitor_targets_jitter_seconds_check CHECK (
        jitter_seconds >= 0 AND (jitter_seconds = 0 OR time_zone IS NOT NULL)),
    CONSTRAINT monitor_targets_calendar_offset_check CHECK (calendar_offset >= 0)
);

-- One row per (target, due slot): the durable result of a check, or what happened to a slot
-- that was never checked (`skipped`), or a check still being retried (`retrying`, with when
-- the next attempt comes). What a check saw besides its hash: validators for conditional
-- requests, and for the checks that set a new state (the baseline and every change) the
-- normalised text, compressed and pruned to the newest few per target, plus an excerpt of
-- what changed, and the fingerprint of the extraction rules the hash was made under.
CREATE TABLE source_checks (
    work_id         text PRIMARY KEY,
    target_id       text NOT NULL REFERENCES monitor_targets (id) ON DELETE CASCADE,
    scheduled_for   timestamptz NOT NULL,
    kind            text NOT NULL DEFAULT 'scheduled'
                    CONSTRAINT source_checks_kind_check CHECK (kind IN ('scheduled', 'manual')),
    checked_at      timestamptz NOT NULL,
    status          text NOT NULL CONSTRAINT source_checks_status_check
                    CHECK (status IN ('unchanged', 'changed', 'retrying', 'failed', 'skipped')),
    attempt_count   integer NOT NULL DEFAULT 1
                    CONSTRAINT source_checks_attempt_count_check CHECK (attempt_count > 0),
    result_hash     text,
    previous_hash   text,
    http_status     integer,
    body_bytes      integer,
    error_message   text,
    etag            text,
    last_modified   text,
    snapshot        bytea,
    excerpt         text,
    rules           text,
    next_attempt_at timestamptz,
    -- Price mode: the prices the check read (`[{name, amount, currency}]`, in page order), a
    -- change's moves (`[{name, old, new, ..., rules}]`), and whether the target's price rules
    -- tell the channels about the change (a change nobody is told owes no delivery).
    prices          jsonb,
    price_moves     jsonb,
    notify          boolean NOT NULL DEFAULT true,
    -- The values price mode could not read and skipped, each named with why (1.3).
    skipped_values  text[],
    -- A rendered page's viewport as PNG, beside a new state's snapshot (1.4).
    screenshot      bytea,
    CONSTRAINT source_checks_hash_check
        CHECK ((status IN ('retrying', 'failed', 'skipped')) = (result_hash IS NULL)),
    CONSTRAINT source_checks_check1 CHECK (status <> 'changed' OR previous_hash IS NOT NULL),
    CONSTRAINT source_checks_next_attempt_check
        CHECK (next_attempt_at IS NULL OR status = 'retrying')
);

-- Second guard: even a bug that builds another work id cannot record a slot twice.
-- Manual checks are not slots (their time is when someone asked); their work id is unique.
CREATE UNIQUE INDEX source_checks_target_slot ON source_checks (target_id, scheduled_for)
    WHERE kind = 'scheduled';
CREATE INDEX source_checks_target_checked ON source_checks (target_id, checked_at DESC);
-- A target's checks in slot order, of every kind: the history's pages, the price charts and
-- the slots being retried, newest first (1.6).
CREATE INDEX source_checks_target_slot_order ON source_checks (target_id, scheduled_for DESC);
-- Dead letters and slots being retried, newest first (the failures page, `retrying`).
CREATE INDEX source_checks_unsettled ON source_checks (scheduled_for DESC)
    WHERE status IN ('retrying', 'failed');
CREATE INDEX source_checks_target_snapshots ON source_checks (target_id, checked_at DESC)
    WHERE snapshot IS NOT NULL;

-- Where a target's changes are told. Secrets live here and only here: the workflow and its
-- history carry the channel id, never the secret (for an Apprise channel, its whole URL).
CREATE TABLE channels (
    target_id       text NOT NULL,
    channel_id      text NOT NULL,
    kind            text NOT NULL
                    CONSTRAINT channels_kind_check CHECK (kind IN ('webhook', 'email', 'apprise')),
    destination     text NOT NULL,
    secret          text,
    -- Set when the endpoint said it is gone for good (HTTP 410; an Apprise service's 401,
    -- 403, 404 or 410): no more attempts.
    disabled_reason text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- The channel's message templates (pricewatch/notices.py); NULL: the default.
    title_template  text,
    body_template   text,
    PRIMARY KEY (target_id, channel_id),
    -- A webhook always has its signing secret and an email never has one; an Apprise
    -- channel whose ref is not stored in notify_urls has none, and its deliveries say so.
    CONSTRAINT channels_check CHECK (
        CASE kind WHEN 'webhook' THEN secret IS NOT NULL WHEN 'email' THEN secret IS NULL
                  ELSE true END),
    CONSTRAINT channels_target_fkey
        FOREIGN KEY (target_id) REFERENCES monitor_targets (id) ON DELETE CASCADE
);

-- Apprise URLs, stored by the client before any workflow hears of their channel: the
-- workflow names one by `ref` (channel id `apprise-<ref>`), never by its URL.
CREATE TABLE notify_urls (
    ref        text PRIMARY KEY DEFAULT substr(md5(gen_random_uuid()::text), 1, 12),
    url        text NOT NULL CONSTRAINT notify_urls_url_key UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One row per notice per channel: the idempotency guard of every send. The monitor's own
-- notices (`unwell`, `recovered` of a self-watch episode: work id `selfwatch:<episode>`)
-- have no target.
CREATE TABLE deliveries (
    work_id        text NOT NULL,
    channel_id     text NOT NULL,
    notice         text NOT NULL,
    target_id      text,
    message_id     text NOT NULL,
    status         text NOT NULL DEFAULT 'pending'
                   CONSTRAINT deliveries_status_check CHECK (status IN ('pending', 'sent', 'failed')),
    attempt_count  integer NOT NULL DEFAULT 0
                   CONSTRAINT deliveries_attempt_count_check CHECK (attempt_count >= 0),
    last_error     text,
    -- A sending attempt holds this briefly, so two executions of one delivery never send
    -- at the same time.
    sending_until  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    sent_at        timestamptz,
    PRIMARY KEY (work_id, channel_id, notice),
    CONSTRAINT deliveries_check CHECK ((status = 'sent') = (sent_at IS NOT NULL)),
    CONSTRAINT deliveries_notice_check
        CHECK (notice IN ('changed', 'failing', 'recovered', 'unwell')),
    CONSTRAINT deliveries_target_fkey
        FOREIGN KEY (target_id) REFERENCES monitor_targets (id) ON DELETE CASCADE
);

CREATE INDEX deliveries_target ON deliveries (target_id, created_at DESC);

-- Retention: the rows of one target that may go: routine rows (unchanged, skipped, failed)
-- older than `keep_checks`, changes older than `keep_changes`. Never what a check or a
-- notice still needs: the latest observation (the next check compares against it), the
-- newest snapshot (its text, for the next diff), a slot still being retried, a change whose
-- notices have not all settled (a change nobody is told has none). Callers also leave alone
-- a target whose lease is live (see `prune_checks`).
CREATE FUNCTION expired_checks(target text, keep_checks interval, keep_changes interval)
RETURNS SETOF source_checks LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT c.* FROM source_checks c
     WHERE c.target_id = target
       AND c.checked_at < now() - least(keep_checks, keep_changes)
       AND c.checked_at < now() - CASE WHEN c.status = 'changed' THEN keep_changes
                                       ELSE keep_checks END
       AND c.status <> 'retrying'
       AND c.work_id IS DISTINCT FROM (
           SELECT work_id FROM source_checks
            WHERE target_id = target AND status IN ('unchanged', 'changed')
            ORDER BY checked_at DESC LIMIT 1)
       AND c.work_id IS DISTINCT FROM (
           SELECT work_id FROM source_checks
            WHERE target_id = target AND snapshot IS NOT NULL
            ORDER BY checked_at DESC LIMIT 1)
       AND NOT EXISTS (
           SELECT 1 FROM deliveries d WHERE d.work_id = c.work_id AND d.status = 'pending')
       AND (c.status <> 'changed' OR NOT c.notify OR NOT EXISTS (
           SELECT 1 FROM channels ch
            WHERE ch.target_id = target AND ch.created_at <= c.checked_at
              AND ch.disabled_reason IS NULL AND NOT EXISTS (
                  SELECT 1 FROM deliveries d
                   WHERE d.work_id = c.work_id AND d.channel_id = ch.channel_id
                     AND d.notice = 'changed' AND d.status IN ('sent', 'failed'))))
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

-- The schedule's one rule (why this shape: 0005_advance.sql). The slot after `slot` once it
-- is final: the first point of the target's grid after the database's now(), or after
-- Temporal's time for the attempt if that is later (the time-skipping test server runs
-- ahead of every real clock); never a worker's clock, never at or before `slot`. Not
-- STRICT: `temporal_now` is NULL when the caller has no Temporal time.
CREATE FUNCTION next_due(
    target monitor_targets, slot timestamptz, temporal_now timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN grid_after(target, greatest(now(), temporal_now, slot));

-- A `skipped` row, saying `reason`, for each grid point strictly between `after` and
-- `before` (the slot the schedule left and the one `next_due` moved it to); a slot that
-- already has a row keeps it. Returns how many rows it wrote. `commit`, `record_failed` and
-- `advance_past_final` call it in the RETURNING of the UPDATE that moved the schedule (why
-- there: 0005_advance.sql). Every such point is at or before the clock `next_due` read, so
-- no skipped row is in the future.
CREATE FUNCTION skip_passed(
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

-- A later attempt of the same workflow run takes a live lease over. A lease token is
-- the attempt's execution id (activities/checks.py `this_execution_id`):
-- `<run id>/<activity seq>/<attempt>`, and `/local-<random>` for a local attempt. A run
-- checks its target one slot at a time, and Temporal starts a later activity (a higher seq)
-- or a later attempt only once it has given up on every earlier one: an earlier attempt that
-- still holds the lease is a zombie (its worker froze, or it gave up while the database was
-- away and could not release it), and waiting out its lease only made the schedule late.
-- The zombie's late write stays out as before: its commit is conditional on its token. Two
-- executions of the same attempt (a local one replayed after a crash) supersede neither.
-- Tokens of any other shape never supersede.
CREATE FUNCTION supersedes(claimant text, holder text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN claimant ~ '^[^/]+/[0-9]{1,9}/[0-9]{1,9}(/|$)'
     AND holder ~ '^[^/]+/[0-9]{1,9}/[0-9]{1,9}(/|$)'
    THEN split_part(claimant, '/', 1) = split_part(holder, '/', 1)
     AND (split_part(claimant, '/', 2)::integer, split_part(claimant, '/', 3)::integer)
       > (split_part(holder, '/', 2)::integer, split_part(holder, '/', 3)::integer)
    ELSE false
END;

-- A slot left `retrying` once its schedule moved past it was abandoned: the statements that
-- move the schedule make it `skipped`, saying why (`abandon_passed`, 0016). Such a row is
-- final: a late commit of one of its attempts is refused (`abandoned`), while a placeholder
-- `skipped` row gives way to a real result.
CREATE FUNCTION abandoned(status text, error_message text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN status = 'skipped'
   AND starts_with(coalesce(error_message, ''), 'not checked: its retries were abandoned');

-- The target's scheduled slots from `since` (where the schedule stood) up to `before` (where
-- it now stands) still `retrying`, but for `recorded` (the slot the caller records), become
-- `skipped`, saying they were abandoned `why` and what the last attempt said; returns how
-- many.
CREATE FUNCTION abandon_passed(
    target_id text, since timestamptz, before timestamptz, recorded timestamptz, why text
)
RETURNS integer LANGUAGE sql VOLATILE
AS $$
    WITH finalised AS (
        UPDATE source_checks c
           SET status = 'skipped', next_attempt_at = NULL,
               error_message = 'not checked: its retries were abandoned when ' || why
                               || coalesce('; its last attempt: ' || c.error_message, '')
         WHERE c.target_id = abandon_passed.target_id AND c.kind = 'scheduled'
           AND c.status = 'retrying' AND c.scheduled_for >= since AND c.scheduled_for < before
           AND c.scheduled_for IS DISTINCT FROM recorded
        RETURNING 1
    )
    SELECT count(*)::integer FROM finalised
$$;

-- One row per worker process and task queue it polls: its heartbeat (issue 48). `last_seen`
-- is the database's clock at the worker's latest beat (every few seconds); the loop lag is
-- the worst its event loop ran late in the last minute. A clean stop deletes the row; a
-- killed worker's is forgotten an hour after its last beat.
CREATE TABLE workers (
    identity         text NOT NULL,
    task_queue       text NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT now(),
    last_seen        timestamptz NOT NULL DEFAULT now(),
    loop_lag_seconds double precision NOT NULL DEFAULT 0
                     CONSTRAINT workers_loop_lag_seconds_check CHECK (loop_lag_seconds >= 0),
    PRIMARY KEY (identity, task_queue)
);

-- The monitor watching itself: each episode in which the deployment was unwell (its on-time
-- rate below the threshold, or a target unchecked for N intervals), by the database's
-- clock; at most one open.
CREATE TABLE selfwatch_episodes (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reason     text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    ended_at   timestamptz
);

CREATE UNIQUE INDEX selfwatch_episodes_open ON selfwatch_episodes ((true)) WHERE ended_at IS NULL;
