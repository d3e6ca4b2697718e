"""The plain-poller design: one asyncio process, no Temporal. It claims due rows of the
product's `monitor_targets` with `FOR UPDATE SKIP LOCKED`, fetches with the product's
guarded httpx client, and commits with the product's own COMMIT statement (row, schedule
advance and lease release in one). Run as `python -m bench.poller`.
"""

import asyncio
import signal
import uuid
from datetime import datetime

import asyncpg
import httpx

from activities import store
from fetchers.http import FetchError, Request, fetch_page, new_client
from pricewatch.models import CheckKind, CheckStatus
from pricewatch.policy import CHECK_LEASE
from pricewatch.settings import Settings
from pricewatch.slots import work_id
from workers.worker import WorkerTuning, address_policy

# Lease the due rows (each with its own holder) and read each one's last good hash, in one
# statement; rows another poller holds are skipped, not waited for.
CLAIM_DUE = """
WITH due AS (
    SELECT id FROM monitor_targets
     WHERE enabled AND next_slot <= now()
       AND (lease_token IS NULL OR lease_expires_at <= now())
     ORDER BY next_slot LIMIT $2
       FOR UPDATE SKIP LOCKED
)
UPDATE monitor_targets t
   SET lease_token = $1 || t.id, lease_expires_at = now() + $3::interval
  FROM due WHERE t.id = due.id
RETURNING t.id, t.url, t.interval_seconds, t.next_slot, t.lease_token,
    (SELECT result_hash FROM source_checks c
      WHERE c.target_id = t.id AND c.status <> 'failed'
      ORDER BY checked_at DESC LIMIT 1) AS previous_hash
"""
# How long the poller sleeps when nothing is due: the floor of its lateness.
POLL_EVERY = 0.05


async def check(pool: asyncpg.Pool, http: httpx.AsyncClient, row: asyncpg.Record) -> None:
    slot: datetime = row["next_slot"]
    previous: str | None = row["previous_hash"]
    try:
        page = await fetch_page(http, Request(row["url"]))
        status = CheckStatus.UNCHANGED if previous in (None, page.sha256) else CheckStatus.CHANGED
        outcome = store.Outcome(
            status=status,
            result_hash=page.sha256,
            previous_hash=previous,
            http_status=page.status_code,
            body_bytes=page.size,
        )
    except FetchError as err:
        outcome = store.Outcome(status=CheckStatus.FAILED, error_message=str(err))
    await store.commit(
        pool,
        target_id=row["id"],
        execution_id=row["lease_token"],
        work_id=work_id(row["id"], slot),
        slot=slot,
        kind=CheckKind.SCHEDULED,
        outcome=outcome,
        advance=True,
    )


async def main() -> None:
    settings = Settings()
    tuning = WorkerTuning.from_settings(settings)
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    token_prefix = f"poller-{uuid.uuid4().hex[:8]}:"
    pool = await asyncpg.create_pool(
        settings.resolved_database_url(),
        min_size=1,
        max_size=tuning.pool_size,
        reset=store.keep_session,  # the same pool as the worker's
    )
    in_flight: set[asyncio.Task[None]] = set()
    try:
        async with new_client(address_policy(settings)) as http:
            print("poller polling monitor_targets", flush=True)
            while not stop.is_set():
                room = tuning.max_activities - len(in_flight)
                rows = await pool.fetch(CLAIM_DUE, token_prefix, room, CHECK_LEASE) if room else []
                for row in rows:
                    task = asyncio.create_task(check(pool, http, row))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
                if len(rows) < room or not room:  # caught up, or every slot busy
                    await asyncio.sleep(POLL_EVERY)
            await asyncio.gather(*in_flight)
    finally:
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main())
