-- One row per monitored target: a mirror of the workflow's config and schedule, plus the
-- lease that fences concurrent or stale check attempts.
CREATE TABLE monitor_targets (
    id               text PRIMARY KEY CHECK (id ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    url              text NOT NULL CHECK (url ~ '^https?://'),
    -- The configurable minimum (PRICEWATCH_MIN_INTERVAL) is checked at the edges; the
    -- table refuses what no setting can make valid.
    interval_seconds integer NOT NULL CHECK (interval_seconds >= 1),
    enabled          boolean NOT NULL DEFAULT true,
    -- Failed slots in a row (reset by a good one); unhealthy from `unhealthy_after` on.
    failure_streak   integer NOT NULL DEFAULT 0 CHECK (failure_streak >= 0),
    unhealthy_after  integer NOT NULL DEFAULT 3 CHECK (unhealthy_after >= 1),
    next_check_at    timestamptz NOT NULL,
    lease_token      text,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK ((lease_token IS NULL) = (lease_expires_at IS NULL))
);

-- One row per (target, due slot): the durable result of a check.
CREATE TABLE source_checks (
    work_id       text PRIMARY KEY,
    target_id     text NOT NULL REFERENCES monitor_targets (id) ON DELETE CASCADE,
    scheduled_for timestamptz NOT NULL,
    kind          text NOT NULL DEFAULT 'scheduled' CHECK (kind IN ('scheduled', 'manual')),
    checked_at    timestamptz NOT NULL,
    status        text NOT NULL CHECK (status IN ('unchanged', 'changed', 'failed')),
    attempt_count integer NOT NULL DEFAULT 1 CHECK (attempt_count > 0),
    result_hash   text,
    previous_hash text,
    http_status   integer,
    body_bytes    integer,
    error_message text,
    CHECK ((status = 'failed') = (result_hash IS NULL)),
    CHECK (status <> 'changed' OR previous_hash IS NOT NULL)
);

-- Second guard: even a bug that builds another work id cannot record a slot twice.
-- Manual checks are not slots (their time is when someone asked); their work id is unique.
CREATE UNIQUE INDEX source_checks_target_slot ON source_checks (target_id, scheduled_for)
    WHERE kind = 'scheduled';
CREATE INDEX source_checks_target_checked ON source_checks (target_id, checked_at DESC);
