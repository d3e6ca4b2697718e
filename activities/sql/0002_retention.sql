-- Retention (1.1): check rows do not grow forever. The rows of one target that may go:
-- routine rows (unchanged, skipped, failed) older than `keep_checks`, changes older than
-- `keep_changes`. Never what a check or a notice still needs: the latest observation (the
-- next check compares against it), the newest snapshot (its text, for the next diff), a
-- slot still being retried, a change with a notice not yet sent or not yet started.
-- Callers also leave alone a target whose lease is live (see `prune_checks`).
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
       AND (c.status <> 'changed' OR NOT EXISTS (
           SELECT 1 FROM channels ch
            WHERE ch.target_id = target AND ch.created_at <= c.checked_at
              AND ch.disabled_reason IS NULL AND NOT EXISTS (
                  SELECT 1 FROM deliveries d
                   WHERE d.work_id = c.work_id AND d.channel_id = ch.channel_id
                     AND d.notice = 'changed' AND d.status IN ('sent', 'failed'))))
$$;
