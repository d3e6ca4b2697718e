-- Where a target's changes are told. Secrets live here and only here: the workflow and its
-- history carry the channel id, never the secret.
CREATE TABLE channels (
    target_id       text NOT NULL,
    channel_id      text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('webhook', 'email')),
    destination     text NOT NULL,
    secret          text,
    -- Set when the endpoint said it is gone for good (HTTP 410): no more attempts.
    disabled_reason text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (target_id, channel_id),
    CHECK ((kind = 'webhook') = (secret IS NOT NULL))
);

-- One row per notice per channel: the idempotency guard of every send.
CREATE TABLE deliveries (
    work_id        text NOT NULL,
    channel_id     text NOT NULL,
    notice         text NOT NULL CHECK (notice IN ('changed', 'failing', 'recovered')),
    target_id      text NOT NULL,
    message_id     text NOT NULL,
    status         text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempt_count  integer NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    last_error     text,
    -- A sending attempt holds this briefly, so two executions of one delivery never send
    -- at the same time.
    sending_until  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    sent_at        timestamptz,
    PRIMARY KEY (work_id, channel_id, notice),
    CHECK ((status = 'sent') = (sent_at IS NOT NULL))
);

CREATE INDEX deliveries_target ON deliveries (target_id, created_at DESC);
