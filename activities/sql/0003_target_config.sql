-- The whole config the workflow holds, mirrored (1.1): `pricewatch apply` plans against it
-- and `pricewatch export` writes it back, without asking every workflow. Written by each
-- registration and sync; NULL until a target's next one (the plan then asks its workflow).
ALTER TABLE monitor_targets ADD COLUMN config jsonb;
