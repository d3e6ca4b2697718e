"""Apprise channels as users write them (`--notify URL`, a targets file's `notify:`), and
the one step that keeps their credentials out of Temporal: the URL goes into Postgres
(`notify_urls`) and the workflow's config names it by its ref.

A channel is written as its URL, or as `apprise-<ref>`: the stored URL of this database
(what `export` writes, so a file applies back without carrying a credential).
"""

import asyncpg

from activities import store
from pricewatch.models import STORED_PATTERN, Channel, ChannelKind, TargetConfig


def apprise_channel(written: str, title: str | None = None, body: str | None = None) -> Channel:
    """The channel a `--notify` value names; ValueError (one line) if Apprise cannot use the
    URL or a template does not render."""
    # Apprise and Jinja2 load on first use: most commands never parse a channel.
    from activities import services
    from pricewatch import notices

    written = written.strip()
    notices.check(title, body)
    if stored := STORED_PATTERN.fullmatch(written):
        return Channel(kind=ChannelKind.APPRISE, destination=written, ref=stored[1],
                       title=title, body=body)  # fmt: skip
    service = services.parse(written)
    return Channel(kind=ChannelKind.APPRISE, destination=service.masked, url=written,
                   title=title, body=body)  # fmt: skip


async def with_refs(pool: asyncpg.Pool, config: TargetConfig, keep: bool) -> TargetConfig:
    """The config as the workflow gets it: each Apprise channel by its ref, its URL dropped.
    `keep`: store URLs not stored yet (else they stay by URL: a plan only reads). A stored
    ref's channel takes its masked form from the stored URL; ValueError if it has none."""
    channels = []
    for channel in config.channels:
        if channel.kind is ChannelKind.APPRISE:
            channel = await resolved(pool, channel, keep)
        channels.append(channel)
    return config.model_copy(update={"channels": channels})


async def resolved(pool: asyncpg.Pool, channel: Channel, keep: bool) -> Channel:
    """One Apprise channel by its ref (see `with_refs`)."""
    from activities import services

    if channel.url is None:
        assert channel.ref is not None
        url = await store.stored_notify_url(pool, channel.ref)
        if url is None:
            raise ValueError(
                f"apprise-{channel.ref} is not stored in this database: give the channel's URL"
            )
        return channel.model_copy(update={"destination": services.parse(url).masked})
    ref = await (store.keep_notify_url if keep else store.find_notify_url)(pool, channel.url)
    if ref is None:
        return channel
    return channel.model_copy(update={"ref": ref, "url": None})
