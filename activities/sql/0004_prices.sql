-- Price mode (1.1): each slot's row keeps the prices the check read (`[{name, amount,
-- currency}]`, in page order), a change keeps the moves (`[{name, old, new, ..., rules}]`),
-- and `notify` says whether the target's price rules tell the channels about the change. A
-- change nobody is told is settled as it is: no delivery is owed for it.
ALTER TABLE source_checks
    ADD COLUMN prices jsonb,
    ADD COLUMN price_moves jsonb,
    ADD COLUMN notify boolean NOT NULL DEFAULT true;

-- Retention keeps a change until its notices settled; a change nobody is told has none.
CREATE OR REPLACE FUNCTION expired_checks(target text, keep_checks interval, keep_changes interval)
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
