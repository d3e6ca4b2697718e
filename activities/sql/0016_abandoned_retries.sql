-- A slot left `retrying` once its schedule moved past it is final: `skipped` (issue 41,
-- design invariant 8). The schedule never claims a slot behind it again, so the retries of
-- such a slot were abandoned (the run retrying it ended or was reset, or a re-run moved the
-- schedule on) and nothing else would ever finish its row. The statements that move the
-- schedule (`commit`, `record_failed`, `advance_past_final`, and a sync that moves it
-- forward) finalise those rows as they pass them, in the same statement or transaction.
--
-- Such a row keeps its attempt's data and says why it was never checked, then what its last
-- attempt said. An attempt of it that is still running (a zombie of the ended run) and
-- commits later is refused: a placeholder `skipped` row gives way to a real result, an
-- abandoned one does not (`abandoned`), so the slot keeps exactly one final row.
CREATE FUNCTION abandoned(status text, error_message text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN status = 'skipped'
   AND starts_with(coalesce(error_message, ''), 'not checked: its retries were abandoned');

-- Finalise the target's scheduled slots from `since` (where the schedule stood) up to
-- `before` (where it now stands) that are still `retrying`, saying they were abandoned
-- `why`; returns how many. `recorded`, the slot the calling statement itself records, is
-- left to it. The range starts where the schedule stood, not at the slot recorded: a run
-- whose dead letter could not be written moves on in its own state alone, and its next
-- commit passes that slot. A row a concurrent commit finalised first keeps its result (the
-- UPDATE re-checks the status under its lock).
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
