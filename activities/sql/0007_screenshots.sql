-- Rendered pages (1.4): a PNG of the viewport, kept beside the snapshot of a new state (the
-- baseline, a change) and pruned with it. Only added: earlier workers do not write it.
ALTER TABLE source_checks ADD COLUMN screenshot bytea;
