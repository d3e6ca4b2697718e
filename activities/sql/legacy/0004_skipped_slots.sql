-- A slot that came due while the schedule was busy (an earlier slot still retrying, a
-- worker or server down) gets a `skipped` row when the schedule moves past it, so none is
-- lost silently (slots that fall due while a target is paused are not due: no row). A
-- skipped slot has no hash.
ALTER TABLE source_checks DROP CONSTRAINT source_checks_status_check;
ALTER TABLE source_checks DROP CONSTRAINT source_checks_check;
ALTER TABLE source_checks ADD CONSTRAINT source_checks_status_check
    CHECK (status IN ('unchanged', 'changed', 'failed', 'skipped'));
ALTER TABLE source_checks ADD CONSTRAINT source_checks_hash_check
    CHECK ((status IN ('failed', 'skipped')) = (result_hash IS NULL));
