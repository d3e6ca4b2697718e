"""The one way a target comes in: what the user wrote (a targets file, `add`'s options, the
dashboard's form, the API's PUT) is a targets-file entry (`manifest.Entry`), validated, planned
against what runs, then applied. `add` is an apply of one entry; `try` reads one entry's page
without applying it (client.trying).

    steps = await plans.plan(client, entries, prune=False)   # validated; nothing done yet
    await plans.apply(client, steps, done=print)              # CONCURRENCY targets at a time
    steps = await plans.put(client, entry)                    # both, for one entry
"""

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import ValidationError

from activities import store
from client import channels, manifest
from client.inputs import BadInput, Unknown
from client.manifest import Located, ManifestError
from client.temporal import start_monitor, workflow_id
from fetchers.guard import BlockedAddress
from pricewatch import placement
from pricewatch.models import MonitorState, MonitorStatus, TargetConfig
from pricewatch.names import WORKFLOW_TYPE, Update
from pricewatch.placement import Sites
from pricewatch.slots import spread_anchor

if TYPE_CHECKING:
    from client.pricewatch import Pricewatch

# Starts, updates and queries in flight at once when many targets are applied or read.
CONCURRENCY = 32


class Action(StrEnum):
    ADD = "add"
    RECONFIGURE = "reconfigure"
    PAUSE = "pause"
    RESUME = "resume"
    REMOVE = "remove"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class Step:
    """One thing `apply` does to one target (`changes`: what a reconfigure changes)."""

    action: Action
    target_id: str
    located: Located | None = None
    changes: tuple[str, ...] = ()
    start_at: datetime | None = None
    """An add's first slot: its own site's other targets spread apart (`first_slot`)."""


def changes(old: TargetConfig, new: TargetConfig) -> tuple[str, ...]:
    """What differs, in the targets file's words: `every: 5s -> 10s`, `timeout: default ->
    30s`. Any difference counts, also in a setting no file names (then its field name)."""
    if old == new:
        return ()
    before, after = manifest.entry(old), manifest.entry(new)
    said = tuple(
        f"{key}: {_as_said(key, before.get(key))} -> {_as_said(key, after.get(key))}"
        for key in dict.fromkeys([*before, *after])
        if before.get(key) != after.get(key)
    )
    if said:
        return said
    fields = old.model_dump(mode="json"), new.model_dump(mode="json")
    return tuple(name for name in fields[1] if fields[0].get(name) != fields[1][name])


# Settings whose absence is "none" (no channel, no selector, text mode), not a default value.
ABSENT_IS_NONE = ("webhooks", "emails", "notify", "selector", "ignore", "json_pointer", "prices")


def _as_said(key: str, value: object) -> str:
    if value is None:
        return "none" if key in ABSENT_IS_NONE else "default"
    if isinstance(value, list):  # an Apprise channel by its masked URL
        return ", ".join(str(v["masked"]) if isinstance(v, dict) else str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{key}: {item}" for key, item in value.items()) or "structured data"
    return str(value)


async def put(
    pw: "Pricewatch", entry: manifest.Entry, where: str = "", said: Callable[[str], str] = str
) -> list[Step]:
    """One targets-file entry made true, as `apply` does for it (never a removal): what was
    done, or `unchanged`. `where` names the entry in errors (a form's: nothing); `said` names
    its fields as the user wrote them (`add`'s flags)."""
    try:
        # Off the loop: a channel's template is tried on the largest notice (up to 1 s in a
        # child process), and a server's loop answers other requests meanwhile.
        located = Located(entry, await asyncio.to_thread(entry.config, said), where)
    except ValidationError as err:  # `url: ...`, as `apply` names the field
        raise BadInput(manifest.field_error(err, said)) from err
    except ValueError as err:
        raise BadInput(str(err).splitlines()[0]) from err
    steps = await plan(pw, [located], prune=False)
    carried_out = iter(await apply(pw, [s for s in steps if s.action is not Action.UNCHANGED]))
    return [step if step.action is Action.UNCHANGED else next(carried_out) for step in steps]


async def plan(pw: "Pricewatch", entries: list[Located], prune: bool) -> list[Step]:
    """What `apply` would do, target by target, without doing it. Every entry is validated
    first (URLs resolved CONCURRENCY at a time): the first bad one, in file order, is a
    ManifestError naming its line."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def problem(located: Located) -> ManifestError | None:
        async with gate:
            try:
                await pw.validate(located.config)
            except (BadInput, BlockedAddress, ValueError) as err:
                return located.error(str(err).splitlines()[0])
        return None

    problems = await asyncio.gather(*(problem(located) for located in entries))
    if first := next((p for p in problems if p is not None), None):
        raise first
    # One entry (a put: add, the form, the API) is asked of its workflow, which has seen a
    # start or a pause a moment ago; a file is planned from the list and the mirror.
    one = [entries[0].config.target_id] if len(entries) == 1 and not prune else None
    now = await current(pw, one)
    taken = await site_slots(pw)
    steps = []
    for located in entries:
        # An Apprise URL already stored compares by its ref; a new one is a change.
        config = await channels.with_refs(await pw.pool(), located.config, keep=False)
        paused = located.entry.paused
        if config.target_id not in now:
            config, anchor = placed(pw, config, taken)
            located = dataclasses.replace(located, config=config)
            start_at = located.entry.start_at or anchor
            steps.append(Step(Action.ADD, config.target_id, located, start_at=start_at))
            continue
        had, was_paused = now[config.target_id]
        config = kept(pw, had, config, taken)
        located = dataclasses.replace(located, config=config)
        changed = changes(had, config)
        if changed:
            steps.append(Step(Action.RECONFIGURE, config.target_id, located, changed))
        if paused != was_paused:
            action = Action.PAUSE if paused else Action.RESUME
            steps.append(Step(action, config.target_id, located))
        if not changed and paused == was_paused:
            steps.append(Step(Action.UNCHANGED, config.target_id, located))
    if prune:
        wanted = {located.config.target_id for located in entries}
        steps += [Step(Action.REMOVE, t) for t in sorted(set(now) - wanted)]
    return steps


async def apply(
    pw: "Pricewatch", steps: list[Step], done: Callable[[Step], None] = lambda _: None
) -> list[Step]:
    """Carry the plan out, CONCURRENCY targets at a time, one target's steps in order (a
    resume waits for its reconfigure, which the workflow may refuse); `done` after each
    step. New `--every` targets are spread again, from now (the plan is minutes old), and
    the steps as carried out are returned; calendar offsets do not age, so the plan's stand
    (placed with every other step of it)."""
    gate = asyncio.Semaphore(CONCURRENCY)
    taken = await site_slots(pw)
    steps = [
        _placed_again(pw, step, taken)
        if step.action is Action.ADD
        and step.located
        and step.located.config.calendar is None
        and not step.located.entry.start_at
        else step
        for step in steps
    ]

    by_target: dict[str, list[Step]] = {}
    for step in steps:
        by_target.setdefault(step.target_id, []).append(step)

    async def one(target_steps: list[Step]) -> None:
        async with gate:
            for step in target_steps:
                await _apply(pw, step)
                done(step)

    await asyncio.gather(*(one(target_steps) for target_steps in by_target.values()))
    return steps


async def running(pw: "Pricewatch") -> set[str]:
    """The targets whose workflow runs on this deployment's task queue (Temporal's
    visibility: a second or so behind a start)."""
    query = (
        f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
        f"AND TaskQueue = '{pw.settings.task_queue}'"
    )
    temporal = await pw.temporal()
    return {
        execution.id.removeprefix(workflow_id(""))
        async for execution in temporal.list_workflows(query)
    }


async def current(
    pw: "Pricewatch", named: list[str] | None = None
) -> dict[str, tuple[TargetConfig, bool]]:
    """Each running target's config and whether it is paused. Of every target (`named`
    None): the mirror's, or its workflow's where the mirror has none yet, from one visibility
    list. Of named ones: each workflow's own (its status query: a worker answers), which has
    seen a start or a pause made a moment ago (the list and the mirror follow it by a second
    or so: an add planned twice at once would be a second start that changes nothing)."""
    mirrored = {} if named is not None else await store.target_configs(await pw.pool())
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(target_id: str) -> tuple[TargetConfig, bool] | None:
        config, enabled = mirrored.get(target_id, (None, True))
        if config is not None:
            return config, not enabled
        async with gate:
            try:
                status: MonitorStatus = await pw.status(target_id)
            except Unknown:
                return None
        return status.config, status.paused

    ids = sorted(await running(pw) if named is None else set(named))
    found = await asyncio.gather(*(one(target_id) for target_id in ids))
    return {target_id: got for target_id, got in zip(ids, found, strict=True) if got}


async def site_slots(pw: "Pricewatch") -> Sites:
    """Where the targets of each site fall due, by grid (pricewatch.placement)."""
    rows = await store.list_targets(await pw.pool(), trend=0)
    return placement.sites_of(rows, pw.settings.site_gap)


def placed(pw: "Pricewatch", config: TargetConfig, sites: Sites) -> tuple[TargetConfig, datetime]:
    return placement.placed(config, sites, pw.settings.site_gap, datetime.now(UTC))


def kept(pw: "Pricewatch", had: TargetConfig, config: TargetConfig, sites: Sites) -> TargetConfig:
    return placement.kept(had, config, sites, pw.settings.site_gap, datetime.now(UTC))


def _placed_again(pw: "Pricewatch", step: Step, sites: Sites) -> Step:
    assert step.located is not None
    config, anchor = placed(pw, step.located.config, sites)
    located = dataclasses.replace(step.located, config=config)
    return dataclasses.replace(step, located=located, start_at=anchor)


async def _apply(pw: "Pricewatch", step: Step) -> None:
    located = step.located
    if step.action is Action.ADD and located is not None:
        async with _stored(pw, located.config) as config:
            await _start(pw, config, step.start_at, located.entry.paused)
    elif step.action is Action.RECONFIGURE and located is not None:
        async with _stored(pw, located.config) as config:
            handle = await pw.acted_on(step.target_id)
            await handle.execute_update(Update.RECONFIGURE, config, result_type=MonitorStatus)
    elif step.action is Action.PAUSE:
        await pw.pause(step.target_id)
    elif step.action is Action.RESUME:
        await pw.resume(step.target_id)
    elif step.action is Action.REMOVE:
        await pw.remove(step.target_id)


@contextlib.asynccontextmanager
async def _stored(pw: "Pricewatch", config: TargetConfig) -> AsyncIterator[TargetConfig]:
    """The config with its Apprise URLs stored (`channels.with_refs`) for what follows to
    start or reconfigure with; if that fails, the URLs stored for it are deleted again
    (unless a channel uses one by then): an add that failed leaves nothing behind. Not one
    transaction: the worker copies a stored URL into its channel's row at once."""
    pool = await pw.pool()
    new = {c.url for c in config.channels if c.url is not None}
    new -= {url for url in new if await store.find_notify_url(pool, url) is not None}
    stored = await channels.with_refs(pool, config, keep=True)
    try:
        yield stored
    except Exception:
        written = zip(config.channels, stored.channels, strict=True)
        refs = [after.ref for before, after in written if before.url in new and after.ref]
        if refs:
            await store.forget_unused_notify_urls(pool, refs)
        raise


async def _start(
    pw: "Pricewatch", config: TargetConfig, start_at: datetime | None, paused: bool
) -> None:
    """The grid's anchor is decided here, once: the first registration records it and every
    later start or reset adopts the recorded one."""
    anchor = start_at or spread_anchor(config.target_id, datetime.now(UTC))
    minimum = int(pw.settings.min_interval.total_seconds())
    state = MonitorState(
        config=config, start_at=anchor, paused=paused, min_interval_seconds=minimum
    )
    await start_monitor(await pw.temporal(), state, pw.settings.task_queue)
