-- Apprise channels (1.5): any Apprise URL (Slack, Teams, ntfy, ...). The URL carries the
-- service's credentials, so the client stores it here before any workflow hears of the
-- channel; the workflow names it by `ref` (channel id `apprise-<ref>`), and syncing the
-- channel copies the URL into `channels.secret`. Only added: 1.4 workers neither read nor
-- write Apprise channels (upgrade every worker before adding one).
CREATE TABLE notify_urls (
    ref        text PRIMARY KEY DEFAULT substr(md5(gen_random_uuid()::text), 1, 12),
    url        text NOT NULL CONSTRAINT notify_urls_url_key UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE channels
    DROP CONSTRAINT channels_kind_check,
    ADD CONSTRAINT channels_kind_check CHECK (kind IN ('webhook', 'email', 'apprise')),
    DROP CONSTRAINT channels_check,
    -- A webhook always has its signing secret and an email never has one; an Apprise
    -- channel whose ref is not stored here has none, and its deliveries say so.
    ADD CONSTRAINT channels_check CHECK (
        CASE kind WHEN 'webhook' THEN secret IS NOT NULL WHEN 'email' THEN secret IS NULL
                  ELSE true END),
    -- The channel's message templates (pricewatch/notices.py); NULL: the default.
    ADD COLUMN title_template text,
    ADD COLUMN body_template text;
