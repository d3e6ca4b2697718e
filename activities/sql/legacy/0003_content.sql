-- What a check saw, beyond its hash: validators for conditional requests, and for the checks
-- that set a new state (the baseline and every change) the normalised text, compressed and
-- pruned to the newest few per target, plus a short excerpt of what changed.
ALTER TABLE source_checks
    ADD COLUMN etag          text,
    ADD COLUMN last_modified text,
    ADD COLUMN snapshot      bytea,
    ADD COLUMN excerpt       text,
    -- Fingerprint of the extraction rules the hash was made under: a check under other
    -- rules starts a new baseline instead of reporting a change that is only the rules'.
    ADD COLUMN rules         text;

CREATE INDEX source_checks_target_snapshots ON source_checks (target_id, checked_at DESC)
    WHERE snapshot IS NOT NULL;
