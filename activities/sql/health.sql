-- Schedule health (issue 48): the statements `pricewatch health` runs, by name, loaded by
-- activities/health.py as queries.sql is by activities/queries.py. Every time is Postgres's
-- now(); no worker's or client's clock enters.

-- name: schedule_health
-- Over the window's due slots (scheduled, not manual: `scheduled_for` in (now - window,
-- now]), per target and for the deployment (the row whose target_id is NULL): how many
-- were recorded on time (a result recorded within `bound` of its slot: the greater of
-- :on_time_floor seconds and :on_time_share of the target's interval), late, skipped (with
-- the causes the skipped rows name, each clause counted, durations and numbers blanked so
-- that alike causes add up), failed, still being retried, and due with no row yet
-- (`pending`: the check in flight, or a schedule that does not move), the lateness of the
-- recorded ones (p50, p99), and for each enabled target how many of its newest due slots
-- in a row went unchecked (skipped, or due with no row), whatever the window.
WITH clock AS (
    SELECT now() AS at, now() - :window::interval AS since
), slots AS (
    -- Read once, by `counted` alone, so it is not materialised: 10,000 targets' day can be
    -- 200,000 rows, and their messages (`reasons` reads the skipped ones') spilled to disk.
    SELECT c.target_id, c.status,
           greatest(extract(epoch FROM c.checked_at - c.scheduled_for), 0)::float8 AS lateness,
           greatest(:on_time_floor::float8, t.interval_seconds * :on_time_share::float8) AS bound
      FROM source_checks c JOIN monitor_targets t ON t.id = c.target_id
     WHERE c.kind = 'scheduled' AND c.scheduled_for > now() - :window::interval
       AND c.scheduled_for <= now()
), counted AS (
    SELECT target_id, GROUPING(target_id) = 1 AS deployment,
           count(*) FILTER (WHERE status IN ('unchanged', 'changed') AND lateness <= bound)
               AS on_time,
           count(*) FILTER (WHERE status IN ('unchanged', 'changed') AND lateness > bound)
               AS late,
           count(*) FILTER (WHERE status = 'skipped') AS skipped,
           count(*) FILTER (WHERE status = 'failed') AS failed,
           count(*) FILTER (WHERE status = 'retrying') AS retrying,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY lateness)
               FILTER (WHERE status IN ('unchanged', 'changed')) AS lateness_p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY lateness)
               FILTER (WHERE status IN ('unchanged', 'changed')) AS lateness_p99
      FROM slots GROUP BY GROUPING SETS ((target_id), ())
), reasons AS (
    -- A skipped row's message less what every one says: `not checked: came due before
    -- <work id> was final: <causes>`, `... gave up: ...`, `the schedule was behind: ...`.
    SELECT target_id,
           coalesce(nullif(regexp_replace(regexp_replace(regexp_replace(
               coalesce(error_message, ''), '^not checked: ', ''),
               '^came due before \S+ (was final|gave up)(: |$)', ''),
               '^the schedule was behind(: |$)', ''), ''), 'cause not recorded') AS reason
      FROM source_checks c, clock
     WHERE c.kind = 'scheduled' AND c.status = 'skipped' AND c.scheduled_for > clock.since
       AND c.scheduled_for <= clock.at
), causes AS (
    SELECT target_id, GROUPING(target_id) = 1 AS deployment,
           jsonb_object_agg(cause, n) AS causes
      FROM (SELECT target_id, cause, count(*) AS n
              FROM (SELECT target_id,
                           regexp_replace(regexp_replace(clause,
                               '[0-9]+ min( [0-9]+ s\M)?|[0-9]+ s\M', '…', 'g'),
                               '[0-9]+', 'N', 'g') AS cause
                      FROM reasons, unnest(string_to_array(reason, '; ')) AS clause) c
             GROUP BY target_id, cause) per_cause
     GROUP BY GROUPING SETS ((target_id), ())
), schedules AS (
    -- Enabled targets whose next slot is due: the due slots with no row yet, in the window
    -- (`pending`) and in all (`overdue`). The next slot itself has a row while its check
    -- is retrying (the schedule moves when the slot is final): it is counted as that.
    SELECT t.id AS target_id,
           (t.next_slot > clock.since AND NOT in_flight.retrying)::integer + (
               SELECT count(*) FROM grid_between(
                   t, greatest(t.next_slot, clock.since), after_now.slot))::integer AS pending,
           CASE WHEN t.time_zone IS NULL
                THEN floor(extract(epoch FROM clock.at - t.next_slot) / t.interval_seconds)
                     ::integer + 1
                ELSE 1 + (SELECT count(*) FROM grid_between(t, t.next_slot, after_now.slot))
                   ::integer
           END - in_flight.retrying::integer AS overdue
      FROM monitor_targets t, clock,
           LATERAL (SELECT grid_after(t, clock.at) AS slot) after_now,
           LATERAL (SELECT EXISTS (
               SELECT 1 FROM source_checks k WHERE k.target_id = t.id
                  AND k.kind = 'scheduled' AND k.scheduled_for = t.next_slot) AS retrying
           ) in_flight
     WHERE t.enabled AND t.next_slot <= clock.at
), unchecked AS (
    -- Each enabled target's newest due slots in a row that no check took: its skipped rows
    -- since its newest other scheduled row, and the due slots with no row yet.
    SELECT t.id AS target_id,
           coalesce(s.overdue, 0) + (
               SELECT count(*) FROM source_checks k
                WHERE k.target_id = t.id AND k.kind = 'scheduled' AND k.status = 'skipped'
                  AND k.scheduled_for > coalesce(
                      (SELECT max(scheduled_for) FROM source_checks
                        WHERE target_id = t.id AND kind = 'scheduled' AND status <> 'skipped'),
                      '-infinity'))::integer AS slots,
           (SELECT max(checked_at) FROM source_checks
             WHERE target_id = t.id AND status <> 'skipped') AS last_checked
      FROM monitor_targets t LEFT JOIN schedules s ON s.target_id = t.id
     WHERE t.enabled
)
SELECT (SELECT at FROM clock) AS at, NULL::text AS target_id, NULL::integer AS interval_seconds,
       NULL::float8 AS bound, c.on_time, c.late, c.skipped, c.failed, c.retrying,
       (SELECT coalesce(sum(pending), 0)::integer FROM schedules) AS pending,
       c.lateness_p50, c.lateness_p99,
       coalesce((SELECT causes FROM causes WHERE deployment), '{}') AS causes,
       NULL::integer AS unchecked_slots, NULL::timestamptz AS last_checked
  FROM counted c WHERE c.deployment
UNION ALL
SELECT (SELECT at FROM clock), t.id, t.interval_seconds,
       greatest(:on_time_floor::float8, t.interval_seconds * :on_time_share::float8),
       coalesce(c.on_time, 0), coalesce(c.late, 0), coalesce(c.skipped, 0),
       coalesce(c.failed, 0), coalesce(c.retrying, 0), coalesce(s.pending, 0),
       c.lateness_p50, c.lateness_p99, coalesce(k.causes, '{}'),
       coalesce(u.slots, 0), u.last_checked
  FROM monitor_targets t
  LEFT JOIN counted c ON c.target_id = t.id AND NOT c.deployment
  LEFT JOIN schedules s ON s.target_id = t.id
  LEFT JOIN causes k ON k.target_id = t.id AND NOT k.deployment
  LEFT JOIN unchecked u ON u.target_id = t.id
 WHERE c.target_id IS NOT NULL OR s.pending > 0 OR u.slots >= :unchecked_after
 ORDER BY target_id NULLS FIRST;

-- name: worker_beat
-- A worker's heartbeat, per task queue it polls: the database's clock, the worst loop lag
-- of its last minute. Rows of workers unseen for an hour go (killed, not stopped).
WITH beat AS (
    INSERT INTO workers AS w (identity, task_queue, loop_lag_seconds)
    SELECT :identity::text, queue, :loop_lag_seconds::float8
      FROM unnest(:task_queues::text[]) AS queue
    ON CONFLICT (identity, task_queue) DO UPDATE
       SET last_seen = now(), loop_lag_seconds = excluded.loop_lag_seconds
)
DELETE FROM workers WHERE last_seen < now() - interval '1 hour';

-- name: worker_gone
-- A worker that stops cleanly: nothing to say about it any more.
DELETE FROM workers WHERE identity = :identity;

-- name: worker_beats
-- Every worker's heartbeat, with how long ago it was by the database's clock.
SELECT identity, task_queue, started_at, last_seen, loop_lag_seconds,
       extract(epoch FROM now() - last_seen)::float8 AS silent_seconds
  FROM workers ORDER BY task_queue, identity;
