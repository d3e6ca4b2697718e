-- Channels and deliveries belong to their target: removing the target removes them.
DELETE FROM channels c WHERE NOT EXISTS (SELECT 1 FROM monitor_targets t WHERE t.id = c.target_id);
DELETE FROM deliveries d
 WHERE NOT EXISTS (SELECT 1 FROM monitor_targets t WHERE t.id = d.target_id);
ALTER TABLE channels ADD CONSTRAINT channels_target_fkey
    FOREIGN KEY (target_id) REFERENCES monitor_targets (id) ON DELETE CASCADE;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_target_fkey
    FOREIGN KEY (target_id) REFERENCES monitor_targets (id) ON DELETE CASCADE;

-- One name per concept: the schedule's pending slot is `next_slot` in code, SQL and docs.
ALTER TABLE monitor_targets RENAME COLUMN next_check_at TO next_slot;
