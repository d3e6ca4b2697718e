-- Every statement pricewatch runs, by name, with named parameters (`:name`). Loaded once by
-- `activities/queries.py`. Idempotency lives here: conflicts on the unique keys are normal
-- outcomes, returned, never raised. Each hot-path step is one statement (one round trip):
-- claim, then commit.

-- name: claim
-- Claim the target's lease for one slot and, in the same snapshot, read what the check
-- needs: the slot's row if it exists and the last good observation. The lease is taken
-- only if it is free, expired (by the database's clock) or already ours, and, for the due
-- slot (not a manual check or a retry), only while the target is enabled and not yet past
-- this slot: a stale attempt for a slot the schedule left behind never claims. A lease held
-- by an earlier attempt of the same run is taken over at once (`supersedes`, 0013). A lease
-- another attempt holds says how long it has left (`lease_left`): when to ask again.
WITH target AS (
    SELECT enabled, next_slot, lease_token, lease_expires_at FROM monitor_targets
     WHERE id = :target_id
), existing AS (
    SELECT work_id, scheduled_for AS slot, kind, status, checked_at, attempt_count, result_hash,
           previous_hash, error_message, next_attempt_at, notify
      FROM source_checks WHERE work_id = :work_id
), claimed AS (
    UPDATE monitor_targets
       SET lease_token = :execution_id, lease_expires_at = now() + :lease::interval
     WHERE id = :target_id
       AND (lease_token IS NULL OR lease_expires_at <= now() OR lease_token = :execution_id
            OR supersedes(:execution_id, lease_token))
       AND (NOT :on_schedule::boolean OR (enabled AND next_slot <= :slot))
       AND NOT EXISTS (SELECT 1 FROM existing WHERE status NOT IN ('retrying', 'failed'))
    RETURNING id
)
SELECT
    EXISTS (SELECT 1 FROM target) AS target_exists,
    (SELECT enabled FROM target) AS enabled,
    (SELECT next_slot FROM target) AS next_slot,
    EXISTS (SELECT 1 FROM claimed) AS claimed,
    now() AS claimed_at,  -- the database's clock: how late the check began (skip causes)
    (SELECT lease_expires_at - now() FROM target
      WHERE lease_token <> :execution_id AND lease_expires_at > now()) AS lease_left,
    -- The latest observation, whichever check made it: each change is reported once. Its
    -- validators make the fetch conditional; the newest snapshot is the text it saw.
    (SELECT to_jsonb(p) FROM (
        SELECT result_hash, etag, last_modified, rules, prices, skipped_values FROM source_checks
         WHERE target_id = :target_id AND status IN ('unchanged', 'changed')
           AND work_id <> :work_id
         ORDER BY checked_at DESC LIMIT 1) p) AS previous,
    (SELECT snapshot FROM source_checks
      WHERE target_id = :target_id AND snapshot IS NOT NULL AND work_id <> :work_id
      ORDER BY checked_at DESC LIMIT 1) AS previous_snapshot,
    (SELECT to_jsonb(existing) FROM existing) AS existing;

-- name: commit
-- Record an attempt's outcome and, for a final outcome of the next slot (:advance), move the
-- schedule to the first grid point after the database's now() (or Temporal's time for the
-- attempt, :temporal_now, if later: the time-skipping test server runs ahead of every real
-- clock; never a worker's clock) and release the lease: all in one statement, all
-- conditional on still holding the lease. `FOR UPDATE` waits for a concurrent lease change
-- and re-checks the holder, so a stale attempt whose lease was taken over matches nothing and
-- writes nothing. A row that is already final is left alone (the DO UPDATE's WHERE), and
-- then nothing else happens either. Each grid point the schedule passes gets a `skipped`
-- row; each is at or before the clock that decided, so none is in the future. Each says
-- what held the slot back (:skip_cause, `pricewatch.decisions.skip_cause`) when given. A
-- slot it passes that is still `retrying` was abandoned: it becomes `skipped` (0016). So does
-- this slot's own `retrying` outcome when the schedule already stands past it (a sync moved
-- it on while this attempt ran, say the new run of a reset): no attempt would claim it again.
WITH lease AS (
    SELECT id, next_slot AS since,
           :status::text = 'retrying' AND :kind::text = 'scheduled'
           AND next_slot > :slot::timestamptz AS passed
      FROM monitor_targets
     WHERE id = :target_id AND lease_token = :execution_id FOR UPDATE
), recorded AS (
    INSERT INTO source_checks AS c (work_id, target_id, scheduled_for, kind, checked_at, status,
        attempt_count, result_hash, previous_hash, http_status, body_bytes, error_message,
        etag, last_modified, snapshot, excerpt, rules, next_attempt_at, prices, price_moves,
        notify, skipped_values, screenshot)
    SELECT :work_id::text, id, :slot::timestamptz, :kind::text, now(),
           CASE WHEN passed THEN 'skipped' ELSE :status::text END, 1,
           :result_hash::text, :previous_hash::text, :http_status::integer,
           :body_bytes::integer,
           CASE WHEN passed
                THEN 'not checked: its retries were abandoned when the schedule moved past '
                     || 'it during an attempt'
                     || coalesce('; its last attempt: ' || :error_message::text, '')
                ELSE :error_message::text END,
           :etag::text, :last_modified::text, :snapshot::bytea, :excerpt::text, :rules::text,
           CASE WHEN passed THEN NULL ELSE now() + :next_attempt_in::interval END,
           :prices::jsonb, :price_moves::jsonb, :notify::boolean, :skipped_values::text[],
           :screenshot::bytea
      FROM lease
    ON CONFLICT (work_id) DO UPDATE
       SET checked_at = excluded.checked_at, status = excluded.status,
           attempt_count = c.attempt_count + 1, result_hash = excluded.result_hash,
           previous_hash = excluded.previous_hash, http_status = excluded.http_status,
           body_bytes = excluded.body_bytes, error_message = excluded.error_message,
           etag = excluded.etag, last_modified = excluded.last_modified,
           snapshot = excluded.snapshot, excerpt = excluded.excerpt, rules = excluded.rules,
           next_attempt_at = excluded.next_attempt_at, prices = excluded.prices,
           price_moves = excluded.price_moves, notify = excluded.notify,
           skipped_values = excluded.skipped_values, screenshot = excluded.screenshot
     -- A real result replaces a placeholder; an abandoned slot's row is final (0016).
     WHERE c.status IN ('retrying', 'failed', 'skipped') AND NOT abandoned(c.status, c.error_message)
    RETURNING work_id, scheduled_for AS slot, kind, status, checked_at, attempt_count,
              result_hash, previous_hash, error_message, next_attempt_at, notify, skipped_values
), pruned AS (
    -- Keep the newest :snapshots_kept snapshots of the target (this new one included).
    UPDATE source_checks SET snapshot = NULL, screenshot = NULL  -- a screenshot goes with it
     WHERE target_id = :target_id AND snapshot IS NOT NULL AND :snapshot::bytea IS NOT NULL
       AND EXISTS (SELECT 1 FROM recorded)
       AND work_id NOT IN (
           SELECT work_id FROM source_checks
            WHERE target_id = :target_id AND snapshot IS NOT NULL
            ORDER BY checked_at DESC LIMIT :snapshots_kept::integer - 1)
), moved AS (
    -- The schedule's rule (0005_advance.sql): `next_due` decides, `skip_passed` (in
    -- RETURNING: once per row this UPDATE changed) writes the slots it passed.
    UPDATE monitor_targets
       SET lease_token = NULL, lease_expires_at = NULL,
           next_slot = CASE WHEN :advance::boolean
                            THEN next_due(monitor_targets, :slot, :temporal_now)
                            ELSE next_slot END,
           failure_streak = CASE WHEN :advance::boolean THEN 0 ELSE failure_streak END,
           updated_at = now()
     WHERE id = :target_id AND lease_token = :execution_id AND EXISTS (SELECT 1 FROM recorded)
    RETURNING next_slot,
              CASE WHEN :advance::boolean
                   THEN skip_passed(monitor_targets, :slot, next_slot,
                                    'not checked: came due before ' || :work_id || ' was final'
                                    || coalesce(': ' || :skip_cause::text, ''))
              END AS skipped,
              CASE WHEN :advance::boolean
                   THEN abandon_passed(id, (SELECT since FROM lease), next_slot, :slot,
                                       'the schedule moved past it (' || :work_id || ' was final)')
              END AS abandoned
)
SELECT recorded.*, (SELECT next_slot FROM moved WHERE :advance::boolean) AS next_slot
  FROM recorded;

-- name: release
-- Only the holder can release: an old attempt cannot clear a newer attempt's lease.
UPDATE monitor_targets SET lease_token = NULL, lease_expires_at = NULL
 WHERE id = :target_id AND lease_token = :execution_id;

-- name: extend_lease
-- Heartbeat: push the lease forward while a slow fetch is still making progress. Only the
-- holder can; zero rows means the lease was taken over and the fetch should stop.
UPDATE monitor_targets SET lease_expires_at = now() + :lease::interval
 WHERE id = :target_id AND lease_token = :execution_id;

-- name: lease_left
-- How long the target's live lease has left (no row, or NULL: none is live).
SELECT lease_expires_at - now() FROM monitor_targets
 WHERE id = :target_id AND lease_expires_at > now();

-- name: record_failed
-- Finalise a slot whose check gave up: keep the attempts' row as `failed` (or write one if
-- no attempt got that far), advance the schedule (:advance) if it still points at or
-- before this slot, with a skipped row per slot it passes, and clear the (expired) lease so
-- the attempt that held it can never complete the row later. Waits for nobody: a live lease
-- means an attempt is still running, so this refuses (no row), unless an earlier attempt of
-- this run holds it (`supersedes`): the run gave up on that one.
WITH target AS (
    SELECT id, next_slot <= :slot AND :advance::boolean AS advance, next_slot AS since
      FROM monitor_targets
     WHERE id = :target_id
       AND (lease_token IS NULL OR lease_expires_at <= now()
            OR supersedes(:execution_id, lease_token))
       FOR UPDATE
), recorded AS (
    INSERT INTO source_checks AS c (work_id, target_id, scheduled_for, kind, checked_at,
        status, attempt_count, error_message)
    SELECT :work_id::text, id, :slot::timestamptz, :kind::text, now(), 'failed', 1,
           :error_message::text
      FROM target
    ON CONFLICT (work_id) DO UPDATE
       SET status = 'failed', error_message = excluded.error_message, next_attempt_at = NULL
     WHERE c.status IN ('retrying', 'failed')
    RETURNING work_id, scheduled_for AS slot, kind, status, checked_at, attempt_count,
              result_hash, previous_hash, error_message, next_attempt_at
), moved AS (
    -- The schedule's rule, as in `commit` (0005_advance.sql).
    UPDATE monitor_targets t
       SET lease_token = NULL, lease_expires_at = NULL, updated_at = now(),
           next_slot = CASE WHEN target.advance
                            THEN next_due(t, :slot, :temporal_now)
                            ELSE next_slot END,
           failure_streak = CASE WHEN target.advance AND EXISTS (SELECT 1 FROM recorded)
                                 THEN failure_streak + 1 ELSE failure_streak END
      FROM target WHERE t.id = target.id
    RETURNING t.next_slot,
              CASE WHEN target.advance
                   THEN skip_passed(t, :slot, t.next_slot,
                                    'not checked: came due before ' || :work_id || ' gave up'
                                    || coalesce(': ' || :skip_cause::text, ''))
              END AS skipped,
              CASE WHEN target.advance
                   THEN abandon_passed(t.id, target.since, t.next_slot, :slot,
                                       'the schedule moved past it (' || :work_id || ' gave up)')
              END AS abandoned
)
SELECT recorded.*, (SELECT next_slot FROM moved WHERE :advance::boolean) AS next_slot
  FROM recorded;

-- name: advance_past_final
-- A re-run of a final slot finds the schedule still at or before it (a sync wrote the
-- workflow's slot back): move the schedule on as the commit would have, with a skipped row
-- for each slot the jump passes. Returns where the schedule stands either way.
WITH target AS (
    SELECT id, next_slot AS since FROM monitor_targets
     WHERE id = :target_id AND next_slot <= :slot FOR UPDATE
), moved AS (
    -- The schedule's rule, as in `commit` (0005_advance.sql).
    UPDATE monitor_targets t
       SET next_slot = next_due(t, :slot, :temporal_now), updated_at = now()
      FROM target WHERE t.id = target.id
    RETURNING t.next_slot,
              skip_passed(t, :slot, t.next_slot,
                          'not checked: the schedule was behind'
                          || coalesce(': ' || :skip_cause::text, '')) AS skipped,
              abandon_passed(t.id, target.since, t.next_slot, :slot,
                             'the schedule, found behind, moved past it') AS abandoned
)
SELECT COALESCE((SELECT next_slot FROM moved),
                (SELECT next_slot FROM monitor_targets WHERE id = :target_id));

-- name: register_target
-- A registration creates the target with the grid it proposes, or adopts the grid and the
-- next slot already recorded (a reset to the first workflow task, a target started
-- again). Only a different grid (interval, or calendar: 1.4) changes it, as a reconfigure
-- does (`grid_anchor`, the one rule): the pending slot stays and later slots use the new grid. `xmax = 0` tells an insert from an
-- update.
INSERT INTO monitor_targets AS t (id, url, interval_seconds, enabled, unhealthy_after,
    anchor, next_slot, config, time_zone, calendar_times, calendar_days, calendar_months,
    calendar_weekdays, calendar_days_or, jitter_seconds, calendar_offset)
VALUES (:target_id, :url, :interval_seconds, :enabled, :unhealthy_after, :anchor, :next_slot,
        :config::jsonb, :time_zone, :calendar_times, :calendar_days, :calendar_months,
        :calendar_weekdays, :calendar_days_or, :jitter_seconds, :calendar_offset)
ON CONFLICT (id) DO UPDATE
   SET url = excluded.url, interval_seconds = excluded.interval_seconds,
       enabled = excluded.enabled, unhealthy_after = excluded.unhealthy_after,
       config = excluded.config, time_zone = excluded.time_zone,
       calendar_times = excluded.calendar_times, calendar_days = excluded.calendar_days,
       calendar_months = excluded.calendar_months,
       calendar_weekdays = excluded.calendar_weekdays,
       calendar_days_or = excluded.calendar_days_or, jitter_seconds = excluded.jitter_seconds,
       calendar_offset = excluded.calendar_offset,
       anchor = grid_anchor(t, grid_of(excluded), t.next_slot),
       updated_at = now()
RETURNING anchor, next_slot, xmax = 0 AS created;

-- name: sync_target
-- The workflow's view, mirrored. The grid stays unless the interval or calendar changed (a
-- reconfigure): then it is re-anchored at the next slot (`grid_anchor`). A missing row (deleted, a
-- restored database) is written again on the workflow's grid, whose next slot is one of
-- its points.
INSERT INTO monitor_targets AS t (id, url, interval_seconds, enabled, unhealthy_after,
    anchor, next_slot, config, time_zone, calendar_times, calendar_days, calendar_months,
    calendar_weekdays, calendar_days_or, jitter_seconds, calendar_offset)
VALUES (:target_id, :url, :interval_seconds, :enabled, :unhealthy_after, :next_slot,
        :next_slot, :config::jsonb, :time_zone, :calendar_times, :calendar_days,
        :calendar_months, :calendar_weekdays, :calendar_days_or, :jitter_seconds,
        :calendar_offset)
ON CONFLICT (id) DO UPDATE
   SET url = excluded.url, interval_seconds = excluded.interval_seconds,
       enabled = excluded.enabled, next_slot = excluded.next_slot,
       unhealthy_after = excluded.unhealthy_after, config = excluded.config,
       time_zone = excluded.time_zone, calendar_times = excluded.calendar_times,
       calendar_days = excluded.calendar_days, calendar_months = excluded.calendar_months,
       calendar_weekdays = excluded.calendar_weekdays,
       calendar_days_or = excluded.calendar_days_or, jitter_seconds = excluded.jitter_seconds,
       calendar_offset = excluded.calendar_offset,
       anchor = grid_anchor(t, grid_of(excluded), excluded.next_slot),
       updated_at = now();

-- name: reconfigure_target
-- A reconfigure, mirrored before the Update returns, also while a check of the next slot
-- is retrying: the config alone. A new grid (interval or calendar) re-anchors at the next
-- slot as the database has it (`grid_anchor`: the slot being checked, or the one after it
-- if that check committed meanwhile), so the check's commit or dead letter moves on the new grid. The next slot,
-- the pause and the lease stay the workflow's and the check's. No row: nothing to do (the
-- workflow's next sync writes it).
UPDATE monitor_targets AS t
   SET url = :url, interval_seconds = :interval_seconds, unhealthy_after = :unhealthy_after,
       config = :config::jsonb, time_zone = :time_zone, calendar_times = :calendar_times,
       calendar_days = :calendar_days, calendar_months = :calendar_months,
       calendar_weekdays = :calendar_weekdays, calendar_days_or = :calendar_days_or,
       jitter_seconds = :jitter_seconds, calendar_offset = :calendar_offset,
       anchor = grid_anchor(t, ROW(:interval_seconds::integer, :time_zone::text,
                                   :calendar_times::integer[], :calendar_days::integer[],
                                   :calendar_months::integer[], :calendar_weekdays::integer[],
                                   :calendar_days_or::boolean, :jitter_seconds::integer,
                                   :calendar_offset::integer)::grid, t.next_slot),
       updated_at = now()
 WHERE id = :target_id
RETURNING id;

-- name: abandon_passed_by_sync
-- A sync that moves the schedule forward (to the workflow's next slot, :next_slot) passes
-- the slots from where the database had it: one still `retrying` there was abandoned by the
-- workflow (the run retrying it ended or was reset, or a resume moved on), and becomes
-- `skipped` (0016). Runs in the sync's transaction, before the sync writes the new slot.
SELECT abandon_passed(id, next_slot, :next_slot, NULL,
                      'the workflow moved its schedule past it')
  FROM monitor_targets WHERE id = :target_id FOR UPDATE;

-- name: insert_skipped
-- Slots the workflow found due and never checked (before a pause took effect, or before its
-- first task ran), by Temporal's clock: one skipped row each.
INSERT INTO source_checks (work_id, target_id, scheduled_for, kind, checked_at, status,
    error_message)
SELECT slot_work_id(:target_id, s), :target_id, s, 'scheduled', now(), 'skipped', :reason
  FROM unnest(:slots::timestamptz[]) AS s
ON CONFLICT DO NOTHING;

-- name: sync_channels
-- Channels follow the config: new ones are added (keeping the secret of one that exists;
-- an Apprise channel's is its stored URL), dropped ones deleted, templates follow.
-- Deliveries already recorded stay.
WITH wanted AS (
    SELECT * FROM unnest(:channel_ids::text[], :kinds::text[], :destinations::text[],
                         :secrets::text[], :titles::text[], :bodies::text[])
        AS w(channel_id, kind, destination, secret, title_template, body_template)
), dropped AS (
    DELETE FROM channels
     WHERE target_id = :target_id AND channel_id NOT IN (SELECT channel_id FROM wanted)
)
INSERT INTO channels AS c
    (target_id, channel_id, kind, destination, secret, title_template, body_template)
SELECT :target_id, channel_id, kind, destination,
       COALESCE(secret, (SELECT n.url FROM notify_urls n
                          WHERE kind = 'apprise' AND 'apprise-' || n.ref = w.channel_id)),
       title_template, body_template
  FROM wanted w
ON CONFLICT (target_id, channel_id) DO UPDATE
   SET title_template = excluded.title_template, body_template = excluded.body_template
 WHERE (c.title_template, c.body_template)
       IS DISTINCT FROM (excluded.title_template, excluded.body_template);

-- name: keep_notify_url
-- An Apprise URL's ref: the one it has, or a new one.
INSERT INTO notify_urls (url) VALUES (:url)
ON CONFLICT (url) DO UPDATE SET url = excluded.url
RETURNING ref;

-- name: find_notify_url
SELECT ref FROM notify_urls WHERE url = :url;

-- name: stored_notify_url
SELECT url FROM notify_urls WHERE ref = :ref;

-- name: forget_notify_urls
-- Stored Apprise URLs no channel uses (an hour old: an add may be about to use one).
DELETE FROM notify_urls n
 WHERE n.created_at < now() - interval '1 hour'
   AND NOT EXISTS (SELECT 1 FROM channels c WHERE c.channel_id = 'apprise-' || n.ref);

-- name: forget_unused_notify_urls
-- The Apprise URLs an add stored for a start that then failed, unless a channel uses one.
DELETE FROM notify_urls n
 WHERE n.ref = ANY(:refs::text[])
   AND NOT EXISTS (SELECT 1 FROM channels c WHERE c.channel_id = 'apprise-' || n.ref);

-- name: unnotified_changes
-- Changes between two slots with a channel (that existed when the change was recorded) that
-- has neither sent nor given up: the run that recorded them is not the one asking, so
-- nobody else will tell the channels.
SELECT work_id, scheduled_for AS slot, kind, status, checked_at, attempt_count, result_hash,
       previous_hash, error_message, next_attempt_at, notify
  FROM source_checks c
 WHERE c.target_id = :target_id AND c.kind = 'scheduled' AND c.status = 'changed' AND c.notify
   AND c.scheduled_for > :after AND c.scheduled_for < :before
   AND EXISTS (
       SELECT 1 FROM channels ch
        WHERE ch.target_id = c.target_id AND ch.created_at <= c.checked_at AND NOT EXISTS (
            SELECT 1 FROM deliveries d
             WHERE d.work_id = c.work_id AND d.channel_id = ch.channel_id
               AND d.notice = 'changed' AND d.status IN ('sent', 'failed')))
 ORDER BY c.scheduled_for;

-- name: delete_target
-- Its checks, channels and deliveries go with it (foreign keys, ON DELETE CASCADE).
DELETE FROM monitor_targets WHERE id = :target_id;

-- name: target_configs
-- Every target's mirrored config and whether it is enabled (`apply` plans against it).
SELECT id, enabled, config FROM monitor_targets ORDER BY id;

-- name: target_exists
SELECT EXISTS (SELECT 1 FROM monitor_targets WHERE id = :target_id);

-- name: stored_check
SELECT work_id, scheduled_for AS slot, kind, status, checked_at, attempt_count, result_hash,
       previous_hash, error_message, next_attempt_at, notify
  FROM source_checks WHERE work_id = :work_id;

-- name: check_target
SELECT target_id FROM source_checks WHERE work_id = :work_id;

-- name: list_targets
-- With, in price mode, the newest prices and each named price's last :trend amounts. Paged
-- (the dashboard, the API): targets whose id or URL holds :search, in :state (unhealthy,
-- paused, retrying, prices), tagged :tag, :limit from :offset on in :sort's order (id,
-- next, checked, changed, streak; :direction 1 or -1, id breaking ties); `total` counts every
-- match. The page is chosen before the lateral reads, so they run for its rows only (a sort
-- by checked or changed reads each match's newest check: the CASE asks only for the one
-- sorted by); it is chosen by a bounded sort of the matches' ids and counted apart (an
-- index-only count: a window over every match took half the page's time), and only its
-- rows are read whole. `overdue`: enabled, and
-- its next slot is further in the past (by Postgres's clock) than the on-time bound
-- (max(:on_time_floor s, :on_time_share of the interval)), so its check can no longer be on
-- time: what `health` counts as late. `error`: the newest check's, when it failed or is
-- being retried.
WITH matched AS NOT MATERIALIZED (
    SELECT t.id, t.next_slot, t.failure_streak FROM monitor_targets t
     WHERE (:search::text IS NULL
            OR strpos(t.id, lower(:search)) > 0 OR strpos(lower(t.url), lower(:search)) > 0)
       AND (:tag::text IS NULL OR t.config -> 'tags' @> to_jsonb(:tag::text))
       AND CASE :state::text
             WHEN 'unhealthy' THEN t.failure_streak >= t.unhealthy_after
             WHEN 'paused' THEN NOT t.enabled
             WHEN 'retrying' THEN t.id IN (
                 SELECT target_id FROM source_checks WHERE status = 'retrying')
             WHEN 'prices' THEN jsonb_typeof(t.config -> 'prices') = 'object'
             ELSE true END
), page AS (
    SELECT id, (SELECT count(*) FROM matched) AS total, :offset::integer + row_number()
               OVER (ORDER BY sorted NULLS LAST, up, down DESC) AS place
      FROM (SELECT t.id, CASE :sort::text
                     WHEN 'next' THEN extract(epoch FROM t.next_slot)
                     WHEN 'streak' THEN t.failure_streak
                     WHEN 'checked' THEN extract(epoch FROM (
                         SELECT checked_at FROM source_checks WHERE target_id = t.id
                          ORDER BY checked_at DESC LIMIT 1))
                     WHEN 'changed' THEN extract(epoch FROM (
                         SELECT checked_at FROM source_checks
                          WHERE target_id = t.id AND status = 'changed'
                          ORDER BY checked_at DESC LIMIT 1))
                   END * :direction::integer AS sorted,
                   CASE WHEN :direction::integer > 0 THEN t.id END AS up,
                   CASE WHEN :direction::integer < 0 THEN t.id END AS down
              FROM matched t ORDER BY sorted NULLS LAST, up, down DESC
             LIMIT :limit::integer OFFSET :offset::integer) ordered
), chosen AS (
    SELECT t.*, page.total, page.place FROM page JOIN monitor_targets t USING (id)
)
SELECT t.id, t.url, t.interval_seconds, t.config -> 'calendar' AS calendar, t.enabled,
       t.next_slot, t.failure_streak >= t.unhealthy_after AS unhealthy, t.total,
       t.enabled AND t.next_slot < now() - make_interval(secs => greatest(
           :on_time_floor::float8, t.interval_seconds * :on_time_share::float8)) AS overdue,
       COALESCE(t.config -> 'tags', '[]') AS tags,
       c.status AS last_status, c.checked_at AS last_checked,
       CASE WHEN c.status IN ('failed', 'retrying') THEN c.error_message END AS error,
       (SELECT checked_at FROM source_checks
         WHERE target_id = t.id AND status = 'changed'
         ORDER BY checked_at DESC LIMIT 1) AS last_changed,
       p.prices,
       (SELECT COALESCE(jsonb_object_agg(named.name, named.amounts), '{}') FROM (
            SELECT listed.p ->> 'name' AS name,
                   jsonb_agg(listed.p ->> 'amount' ORDER BY r.checked_at) AS amounts
              FROM (SELECT checked_at, prices FROM source_checks
                     WHERE target_id = t.id AND prices IS NOT NULL
                     ORDER BY checked_at DESC LIMIT :trend) r,
                   jsonb_array_elements(r.prices) AS listed(p)
             -- as text: store.list_targets leaves out an amount 1.8 stored that no price
             -- has (price_points' rule; here in Postgres it was 40% of the page's time)
             WHERE listed.p ->> 'name' IS NOT NULL
             GROUP BY 1) named) AS trends
  FROM chosen t
  LEFT JOIN LATERAL (
      SELECT status, checked_at, error_message FROM source_checks
       WHERE target_id = t.id AND status <> 'skipped' ORDER BY checked_at DESC LIMIT 1
  ) c ON true
  LEFT JOIN LATERAL (
      SELECT prices FROM source_checks
       WHERE target_id = t.id AND prices IS NOT NULL ORDER BY checked_at DESC LIMIT 1
  ) p ON true
 ORDER BY t.place;

-- name: price_history
-- The prices each slot's check read (price mode), oldest first, from :since on.
SELECT work_id, slot, status, prices FROM (
    SELECT work_id, scheduled_for AS slot, status, prices FROM source_checks
     WHERE target_id = :target_id AND prices IS NOT NULL AND scheduled_for >= :since
     ORDER BY scheduled_for DESC LIMIT :limit) newest
 ORDER BY slot;

-- name: price_points
-- Each named price of the newest :limit slots that read prices, oldest first: the charts'
-- points, unnested here so a chart of hundreds of slots decodes no JSON in Python.
SELECT p ->> 'name' AS name, newest.slot, (p ->> 'amount')::numeric AS amount
  FROM (SELECT scheduled_for AS slot, prices FROM source_checks
         WHERE target_id = :target_id AND prices IS NOT NULL
         ORDER BY scheduled_for DESC LIMIT :limit) newest,
       jsonb_array_elements(newest.prices) WITH ORDINALITY AS listed(p, place)
 WHERE p ->> 'name' IS NOT NULL AND jsonb_typeof(p -> 'amount') IN ('string', 'number')
   -- an amount 1.8 stored with an exponent numeric cannot hold (1E+999999) is left out,
   -- not a failed page: 1.9's reader skips any amount of more than 15 digits
   AND p ->> 'amount' ~ '^[-+]?[0-9]{0,40}[.]?[0-9]{0,40}([eE][-+]?[0-9]{1,2})?$'
 ORDER BY newest.slot, listed.place;

-- name: price_lines
-- Each named price of the newest :limit price slots of target :target_id, or of the first
-- :targets price-mode targets tagged :tag by id: the charts' lines, a point per slot, with
-- the currency and period each slot read (`period`: where the reader says, else null).
-- Unnested here, as in price_points.
SELECT t.id AS target_id, listed.p ->> 'name' AS name, listed.p ->> 'currency' AS currency,
       listed.p ->> 'period' AS period, newest.slot, (listed.p ->> 'amount')::numeric AS amount
  FROM (SELECT id FROM monitor_targets
         WHERE (:target_id::text IS NULL OR id = :target_id)
           AND (:tag::text IS NULL OR (config -> 'tags' @> to_jsonb(:tag::text)
                                       AND jsonb_typeof(config -> 'prices') = 'object'))
         ORDER BY id LIMIT :targets::integer) t
 CROSS JOIN LATERAL (
       SELECT scheduled_for AS slot, prices FROM source_checks
        WHERE target_id = t.id AND prices IS NOT NULL
        ORDER BY scheduled_for DESC LIMIT :limit) newest,
       jsonb_array_elements(newest.prices) WITH ORDINALITY AS listed(p, place)
 WHERE listed.p ->> 'name' IS NOT NULL AND jsonb_typeof(listed.p -> 'amount') IN ('string', 'number')
   AND listed.p ->> 'amount' ~ '^[-+]?[0-9]{0,40}[.]?[0-9]{0,40}([eE][-+]?[0-9]{1,2})?$'
 ORDER BY t.id, newest.slot, listed.place;

-- name: group_changes
-- The newest :limit changes of the targets tagged :tag, newest first.
SELECT c.target_id, c.work_id, c.scheduled_for AS slot, c.checked_at
  FROM source_checks c JOIN monitor_targets t ON t.id = c.target_id
 WHERE t.config -> 'tags' @> to_jsonb(:tag::text) AND c.status = 'changed'
 ORDER BY c.checked_at DESC LIMIT :limit;

-- name: check_history
-- :changes_only: the target page's default, the slots that recorded a change or failed.
SELECT work_id, scheduled_for AS slot, kind, status, checked_at, attempt_count, result_hash,
       previous_hash, error_message, next_attempt_at, skipped_values
  FROM source_checks
 WHERE target_id = :target_id AND (:before::timestamptz IS NULL OR scheduled_for < :before)
   AND (NOT :changes_only::boolean OR status IN ('changed', 'failed'))
 ORDER BY scheduled_for DESC LIMIT :limit;

-- name: failed_checks
-- Dead letters and slots still being retried, newest first.
SELECT work_id, scheduled_for AS slot, kind, status, checked_at, attempt_count, result_hash,
       previous_hash, error_message, next_attempt_at
  FROM source_checks
 WHERE status IN ('retrying', 'failed') AND (:target_id::text IS NULL OR target_id = :target_id)
 ORDER BY scheduled_for DESC LIMIT :limit;

-- name: target_channels
SELECT channel_id, kind, destination, secret, disabled_reason FROM channels
 WHERE target_id = :target_id ORDER BY kind, destination;

-- name: channels_to_test
SELECT c.channel_id, c.kind, c.destination, c.secret, c.disabled_reason, c.title_template,
       c.body_template, t.url, now() AS now
  FROM channels c JOIN monitor_targets t ON t.id = c.target_id
 WHERE c.target_id = :target_id ORDER BY c.kind, c.destination;

-- name: target_deliveries
SELECT work_id, notice, channel_id, status, attempt_count, last_error, sent_at
  FROM deliveries WHERE target_id = :target_id
 ORDER BY created_at DESC, channel_id LIMIT :limit;

-- name: snapshots_for_diff
-- A change's snapshot and the one before it (the newest change if no work id).
WITH chosen AS (
    SELECT work_id, checked_at, snapshot FROM source_checks
     WHERE target_id = :target_id AND status = 'changed' AND snapshot IS NOT NULL
       AND (:work_id::text IS NULL OR work_id = :work_id)
     ORDER BY checked_at DESC LIMIT 1
)
SELECT c.work_id, c.snapshot, p.work_id AS previous_work_id, p.snapshot AS previous_snapshot
  FROM chosen c
  LEFT JOIN LATERAL (
      SELECT work_id, snapshot FROM source_checks
       WHERE target_id = :target_id AND snapshot IS NOT NULL AND checked_at < c.checked_at
       ORDER BY checked_at DESC LIMIT 1
  ) p ON true;

-- name: claim_delivery
-- Take the delivery for this attempt: create its row on first sight, and refuse if it was
-- sent already or another attempt is sending right now. Returns the channel to send to,
-- and the database's clock for the webhook's timestamp (receivers refuse one far from
-- theirs, Standard Webhooks allow five minutes, so it never comes from a worker's clock).
WITH taken AS (
    INSERT INTO deliveries AS d
        (work_id, channel_id, notice, target_id, message_id, sending_until)
    SELECT :work_id, :channel_id, :notice, :target_id, :message_id,
           now() + :sending_lease::interval
     WHERE EXISTS (SELECT 1 FROM monitor_targets WHERE id = :target_id)  -- not removed
    ON CONFLICT (work_id, channel_id, notice) DO UPDATE SET sending_until = excluded.sending_until
     WHERE d.status <> 'sent' AND (d.sending_until IS NULL OR d.sending_until < now())
    RETURNING status
)
SELECT
    COALESCE(
        (SELECT status FROM taken),
        (SELECT status FROM deliveries
          WHERE work_id = :work_id AND channel_id = :channel_id AND notice = :notice)
    ) AS status,
    EXISTS (SELECT 1 FROM taken) AS taken,
    (SELECT excerpt FROM source_checks WHERE work_id = :work_id) AS excerpt,
    (SELECT price_moves FROM source_checks WHERE work_id = :work_id) AS price_moves,
    now() AS now,
    c.kind, c.destination, c.secret, c.disabled_reason, c.title_template, c.body_template
  FROM (SELECT 1) AS one
  LEFT JOIN channels c ON c.target_id = :target_id AND c.channel_id = :channel_id;

-- name: record_delivery
UPDATE deliveries
   SET status = :status, attempt_count = attempt_count + :attempts, last_error = :last_error,
       sent_at = CASE WHEN :status = 'sent' THEN now() END, sending_until = NULL
 WHERE work_id = :work_id AND channel_id = :channel_id AND notice = :notice
   AND status <> 'sent'
RETURNING status, attempt_count;

-- name: select_delivery
SELECT status, attempt_count FROM deliveries
 WHERE work_id = :work_id AND channel_id = :channel_id AND notice = :notice;

-- name: disable_channel
UPDATE channels SET disabled_reason = :reason
 WHERE target_id = :target_id AND channel_id = :channel_id;

-- name: prune_checks
-- One small batch of retention, off the hot path: the next few targets after :after whose
-- lease is free, locked (a claim on one of them waits for this statement; a target a check
-- holds right now is skipped, `SKIP LOCKED`, and pruned on a later pass), and of each at
-- most :rows_per_target expired rows, with their (settled) deliveries. `capped` says some
-- target had more: another pass is worth it.
WITH targets AS (
    SELECT id FROM monitor_targets
     WHERE id > :after AND (lease_token IS NULL OR lease_expires_at <= now())
     ORDER BY id LIMIT :targets
       FOR UPDATE SKIP LOCKED
), doomed AS (
    SELECT t.id AS target_id, e.work_id
      FROM targets t,
           LATERAL (SELECT work_id FROM expired_checks(t.id, :keep_checks, :keep_changes)
                    LIMIT :rows_per_target) e
), gone_deliveries AS (
    DELETE FROM deliveries WHERE work_id IN (SELECT work_id FROM doomed)
), gone AS (
    DELETE FROM source_checks WHERE work_id IN (SELECT work_id FROM doomed) RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT max(id) FROM targets) AS last_target,
       EXISTS (SELECT 1 FROM doomed GROUP BY target_id
                HAVING count(*) >= :rows_per_target) AS capped;

-- name: expired_summary
-- What retention would delete now, by status (`pricewatch prune --dry-run`).
SELECT e.status, count(*) AS rows, min(e.checked_at) AS oldest, max(e.checked_at) AS newest,
       count(DISTINCT e.target_id) AS targets,
       sum((SELECT count(*) FROM deliveries d WHERE d.work_id = e.work_id)) AS deliveries
  FROM monitor_targets t, LATERAL expired_checks(t.id, :keep_checks, :keep_changes) e
 GROUP BY e.status ORDER BY e.status;

-- name: screenshot
-- A rendered check's screenshot (NULL: none), and whether the check is there at all.
SELECT EXISTS (SELECT 1 FROM source_checks WHERE work_id = :work_id) AS found,
       (SELECT screenshot FROM source_checks WHERE work_id = :work_id) AS screenshot;
