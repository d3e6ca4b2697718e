-- A target's checks in slot order, of every kind (1.6): the history's keyset pages, the price
-- charts and the slots being retried read the newest first, and the unique index above is
-- only over scheduled checks, so each of them read and sorted every row of the target (2-3 ms
-- a read at 10,000 rows, growing with the history). Only added: older workers never notice.
CREATE INDEX source_checks_target_slot_order ON source_checks (target_id, scheduled_for DESC);
-- Dead letters and slots being retried, newest first: the failures page and the `retrying`
-- filter of the targets page read these few rows instead of the whole table.
CREATE INDEX source_checks_unsettled ON source_checks (scheduled_for DESC)
    WHERE status IN ('retrying', 'failed');
