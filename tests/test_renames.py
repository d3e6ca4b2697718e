"""One name per concept in code; the 1.2 spelling on the wire (issue 28).

During a rolling upgrade 1.2 and 1.3 workers poll the same task queues and share Postgres,
so a field renamed in code reads its new name and its 1.2 spelling, and writes the 1.2
spelling: in Temporal payloads (workflow input, messages, activity inputs and results) and in
the config Postgres keeps. The `--json` views, read by people's scripts and never by a
worker, use the new names. docs/operations.md's renames ledger says when each may switch.
"""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from activities import store
from client.temporal import DATA_CONVERTER, LOCAL_ACTIVITY_MARKER
from pricewatch import views
from pricewatch.decisions import rules_fingerprint
from pricewatch.models import (
    CheckInput,
    CheckKind,
    CheckResult,
    CheckStatus,
    MonitorState,
    MonitorStatus,
    PriceSettings,
    RegisterTargetInput,
    RetryRequest,
    TargetConfig,
)
from pricewatch.names import Update

# A 1.2 run in price mode: its input, registration and check results carry the old names.
HISTORY = Path(__file__).parent / "histories" / "1.2.0" / "monitor_target_run4.json"
SLOT = datetime(2026, 12, 1, 8, tzinfo=UTC)
PRICED = TargetConfig(
    target_id="acme",
    url="http://127.0.0.1/plans",
    interval_seconds=3600,
    price_mode=PriceSettings(selector="tr.plan", name="th"),
)
RESULT = CheckResult(
    work_id="acme:2026-12-01T08:00:00Z", slot=SLOT, status=CheckStatus.CHANGED,
    checked_at=SLOT, attempt_count=1,
)  # fmt: skip


def decoded(payload: Payload, into: type[Any]) -> Any:
    return DATA_CONVERTER.payload_converter.from_payloads([payload], [into])[0]


def encoded(value: object) -> dict[str, Any]:
    """`value` as this release sends it: the JSON inside its Temporal payload."""
    [payload] = DATA_CONVERTER.payload_converter.to_payloads([value])
    parsed: dict[str, Any] = json.loads(payload.data)
    return parsed


def test_a_1_2_history_decodes_under_the_new_names() -> None:
    history = WorkflowHistory.from_json("pricewatch-recorded-prices", HISTORY.read_text())
    started = history.events[0].workflow_execution_started_event_attributes
    state = decoded(started.input.payloads[0], MonitorState)
    assert state.config.price_mode is not None, "the 1.2 `prices` key is read"
    assert state.config.price_mode.notify_on == ["drop"]
    registered = [
        decoded(e.activity_task_scheduled_event_attributes.input.payloads[0], RegisterTargetInput)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "register_target"
    ]
    assert registered and registered[0].config == state.config
    results = [
        decoded(e.marker_recorded_event_attributes.details["result"].payloads[0], CheckResult)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER
        and "result" in e.marker_recorded_event_attributes.details
    ]
    assert results, "the run's checks"
    for result in results:
        assert result.work_id.endswith(result.slot.isoformat().replace("+00:00", "Z"))


def test_1_2_shaped_messages_decode() -> None:
    """What a 1.2 client or worker sends: a retry request, a config, a check, a result."""
    retry = RetryRequest.model_validate_json('{"scheduled_for": "2026-12-01T08:00:00Z"}')
    assert retry == RetryRequest(slot=SLOT, kind=CheckKind.SCHEDULED)
    config = TargetConfig.model_validate_json(
        '{"target_id": "acme", "url": "http://127.0.0.1/plans", "interval_seconds": 3600,'
        ' "prices": {"selector": "tr.plan", "name": "th"}}'
    )
    assert config == PRICED
    check = CheckInput.model_validate(
        {"target_id": "acme", "url": PRICED.url, "slot": SLOT, "prices": {"selector": "tr.plan"}}
    )
    assert check.price_mode == PriceSettings(selector="tr.plan")
    stored = CheckResult.model_validate_json(RESULT.model_dump_json(by_alias=True))
    assert stored == RESULT


def test_what_this_release_sends_has_the_1_2_spelling() -> None:
    check = CheckInput.of(PRICED, SLOT)
    state = MonitorState(config=PRICED, last_result=RESULT, pending_checks=[check])
    status = MonitorStatus(
        config=PRICED, paused=False, next_slot=SLOT, last_result=RESULT, checks_completed=1
    )
    sent = {
        "retry request": encoded(RetryRequest(slot=SLOT)),
        "config": encoded(PRICED),
        "check": encoded(check),
        "result": encoded(RESULT),
        "state": encoded(state),
        "status": encoded(status),
    }
    assert "scheduled_for" in sent["retry request"] and "slot" not in sent["retry request"]
    assert sent["result"]["scheduled_for"] == "2026-12-01T08:00:00Z"
    assert "slot" not in sent["result"]
    assert sent["config"]["prices"]["selector"] == "tr.plan"
    assert "price_mode" not in sent["config"]
    assert sent["check"]["slot"] == "2026-12-01T08:00:00Z", "CheckInput's own 1.2 name"
    assert "prices" in sent["check"] and "price_mode" not in sent["check"]
    for whole in (sent["state"], sent["status"]):
        assert "prices" in whole["config"] and "price_mode" not in whole["config"]
        assert "scheduled_for" in whole["last_result"] and "slot" not in whole["last_result"]
    assert "prices" in sent["state"]["pending_checks"][0]
    assert decoded(DATA_CONVERTER.payload_converter.to_payloads([state])[0], MonitorState) == state


def test_the_config_in_postgres_keeps_the_1_2_spelling() -> None:
    """`monitor_targets.config` is read by 1.2 workers and `apply` too."""
    stored = json.loads(str(store._target(PRICED)["config"]))
    assert "prices" in stored and "price_mode" not in stored
    assert TargetConfig.model_validate_json(json.dumps(stored)) == PRICED


def test_the_price_rules_fingerprint_is_the_settings_own_json() -> None:
    """The rename is of the config's field, not of PriceSettings' fields: the fingerprint a
    1.2 worker stored still compares equal (a new one would start a new baseline)."""
    settings = PRICED.price_mode
    assert settings is not None
    assert list(json.loads(settings.model_dump_json())) == list(PriceSettings.model_fields)
    from_1_2 = TargetConfig.model_validate_json(json.dumps(encoded(PRICED))).price_mode
    assert rules_fingerprint(None, None, None, from_1_2) == rules_fingerprint(
        None, None, None, settings
    )


def test_the_json_views_use_the_new_names() -> None:
    history = json.loads(views.dump("history", [RESULT]))
    assert history[0]["slot"] == "2026-12-01T08:00:00Z" and "scheduled_for" not in history[0]
    status = views.StatusView(
        status=MonitorStatus(
            config=PRICED, paused=False, next_slot=SLOT, last_result=RESULT, checks_completed=1
        ),
        retrying=[RESULT],
        history_url="http://127.0.0.1:8233",
    )
    shown = json.loads(views.dump("status", status))
    assert "price_mode" in shown["status"]["config"] and "prices" not in shown["status"]["config"]
    assert "slot" in shown["retrying"][0] and "slot" in shown["status"]["last_result"]
    for name in views.OUTPUTS:
        assert '"scheduled_for"' not in views.schema(name), name


def test_the_extra_check_keeps_its_wire_names() -> None:
    """The glossary calls a check off the grid an extra check; what crosses the wire keeps
    its names (the renames ledger): the Update, the kind on the row and in the work id, and
    the workflow state's queue, which open histories carry."""
    assert Update.CHECK_NOW.value == "check_now"
    check = CheckInput.of(PRICED, SLOT, CheckKind.MANUAL)
    assert check.work_id == "acme:manual:2026-12-01T08:00:00Z"
    assert encoded(check)["kind"] == "manual"
    state = encoded(MonitorState(config=PRICED, pending_checks=[check]))
    assert state["pending_checks"][0]["kind"] == "manual"
