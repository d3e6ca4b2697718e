-- The monitor watching itself (issue 48): one row per episode in which the deployment was
-- unwell (its on-time rate below the threshold, or a target unchecked for N intervals), by
-- the database's clock. At most one is open (the partial unique index): two workers, or a
-- retried evaluation, that find it unwell at once open one episode between them, and so it
-- is told once.
CREATE TABLE selfwatch_episodes (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reason     text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    ended_at   timestamptz
);

CREATE UNIQUE INDEX selfwatch_episodes_open ON selfwatch_episodes ((true)) WHERE ended_at IS NULL;

-- Its notices are deliveries like a target's, keyed (work id `selfwatch:<episode>`,
-- channel, notice): `unwell` when an episode opens, `recovered` when it ends; no target.
ALTER TABLE deliveries ALTER COLUMN target_id DROP NOT NULL;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_notice_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_notice_check
    CHECK (notice IN ('changed', 'failing', 'recovered', 'unwell'));
