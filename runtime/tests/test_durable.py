"""Durable execution parity with Temporal's core (docs/design.md#concessions R2, R5), in real worker processes."""

from __future__ import annotations

import signal
from datetime import datetime

import flows
import pytest

from conftest import read_jsonl, wait_for
from interlock_runtime import (
    Runtime,
    WorkflowConflict,
    WorkflowFailed,
    WorkflowFinished,
    WorkflowNotFound,
    db,
    local_postgres,
)

local_only = pytest.mark.skipif(
    local_postgres.external_dsn() is not None, reason="needs the project's own cluster"
)


def _signals(rt: Runtime) -> int:
    return rt._execute("select count(*) as n from ilr.signals").fetchone()["n"]


def test_retry_backoff_gaps_on_the_database_clock(dsn, workers, tmp_path) -> None:
    counter = tmp_path / "counter"
    with Runtime(dsn) as rt:
        rt.start(flows.retrying, "wf-retry",
                 {"counter": str(counter), "failures": 3, "initial": 0.4})  # fmt: skip
        workers("W", poll=0.1)
        assert rt.result("wf-retry", timeout=30) == "ok after 4 attempts"
        claims = rt.claim_history("wf-retry")
    assert counter.read_text() == "4"
    assert len(claims) == 4  # one claim per attempt: each retry released the row
    gaps = [
        (b["claimed_at"] - a["claimed_at"]).total_seconds()
        for a, b in zip(claims, claims[1:], strict=False)
    ]
    for gap, expected in zip(gaps, [0.4, 0.8, 1.6], strict=True):
        assert expected <= gap < expected + 2.0, gaps


def test_max_attempts_and_non_retryable_end_failed_with_the_error(dsn, workers, tmp_path) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.retrying, "wf-max",
                 {"counter": str(tmp_path / "c"), "failures": 9, "initial": 0.1, "max": 2})  # fmt: skip
        rt.start(flows.non_retryable, "wf-nr", {})
        workers("W", poll=0.1)
        with pytest.raises(WorkflowFailed) as failed:
            rt.result("wf-max", timeout=30)
        assert failed.value.status == "failed" and "flaky" in str(failed.value.error)
        with pytest.raises(WorkflowFailed) as refused:
            rt.result("wf-nr", timeout=30)
        steps = rt.describe("wf-nr")["steps"]
    assert (tmp_path / "c").read_text() == "2"
    assert steps[0]["error"]["type"] == "NotEligible"
    assert steps[0]["error"]["attempt"] == 1  # not retried
    assert "not eligible" in refused.value.error["message"]


def test_step_never_reruns_across_sigkill(dsn, workers, tmp_path) -> None:
    log = tmp_path / "inv.jsonl"
    with Runtime(dsn) as rt:
        rt.start(flows.three_steps, "wf-k", {"log": str(log)})
        killed = workers("K", env={"ILR_KILL_AT": "step_after_record@2"}, lease_ttl=1.5)
        assert killed.proc.wait(timeout=30) == -signal.SIGKILL
        workers("S", lease_ttl=1.5)
        assert [r["worker"] for r in rt.result("wf-k", timeout=30)] == ["K", "K", "S"]
    assert [i["step"] for i in read_jsonl(log)] == ["s1", "s2", "s3"]


@local_only
@pytest.mark.exclusive  # crashes the shared cluster: every other test would see it
def test_timer_survives_worker_sigkill_and_a_postgres_crash(dsn, workers, tmp_path) -> None:
    log = tmp_path / "inv.jsonl"
    with Runtime(dsn) as rt:
        rt.start(flows.sleeper, "wf-timer", {"log": str(log), "seconds": 3})
        first = workers("T1", lease_ttl=1.5)
        wait_for(lambda: rt.describe("wf-timer")["status"] == "sleeping", 20, "the sleep")
        until = datetime.fromisoformat(rt.describe("wf-timer")["waiting"]["until"])
    first.signal(signal.SIGKILL)
    first.proc.wait(timeout=10)
    local_postgres.restart_immediate()
    workers("T2", lease_ttl=1.5)
    with Runtime(dsn) as rt:
        assert [r["step"] for r in rt.result("wf-timer", timeout=30)] == ["before", "after"]
        sleep_row = rt.describe("wf-timer")["steps"][1]
    assert sleep_row["kind"] == "sleep"
    assert sleep_row["created_at"] >= until  # TimerNotEarly, on the database clock
    assert datetime.fromisoformat(sleep_row["output"]["until"]) == until
    assert [i["step"] for i in read_jsonl(log)] == ["before", "after"]


def test_two_buffered_signals_are_consumed_in_order_once_each(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.waiter, "wf-sig", {"timeout": 0.5})
        rt.signal("wf-sig", "go", {"n": 1}, sender="test")
        rt.signal("wf-sig", "go", {"n": 2}, sender="test")
        workers("W")
        assert rt.result("wf-sig", timeout=30) == [{"n": 1}, {"n": 2}, None]
        rows = rt._execute(
            "select payload, consumed_seq from ilr.signals where workflow_id = 'wf-sig' order by id"
        ).fetchall()
        steps = rt.describe("wf-sig")["steps"]
    assert rows == [
        {"payload": {"n": 1}, "consumed_seq": 1},
        {"payload": {"n": 2}, "consumed_seq": 2},
    ]
    assert [(s["kind"], s["output"]) for s in steps] == [
        ("signal", {"n": 1}), ("signal", {"n": 2}), ("signal", None)]  # fmt: skip


def test_a_signal_wakes_a_suspended_waiter(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.waiter, "wf-wake", {"timeout": 0.5})
        workers("W", poll=30)  # only the NOTIFY can wake it this fast
        wait_for(lambda: rt.describe("wf-wake")["status"] == "sleeping", 20, "the wait")
        assert rt.describe("wf-wake")["available_at"] == db.FOREVER  # no timeout: 'infinity'
        rt.signal("wf-wake", "go", {"n": 1})
        rt.signal("wf-wake", "go", {"n": 2})
        assert rt.result("wf-wake", timeout=20) == [{"n": 1}, {"n": 2}, None]


def test_cancel_mid_sleep_delivers_cancelled_once_for_compensation(dsn, workers, tmp_path) -> None:
    log = tmp_path / "inv.jsonl"
    with Runtime(dsn) as rt:
        rt.start(flows.cancellable, "wf-c", {"log": str(log)})
        workers("W")
        wait_for(lambda: rt.describe("wf-c")["status"] == "sleeping", 20, "the sleep")
        rt.cancel("wf-c", by="ops@example")
        with pytest.raises(WorkflowFailed) as ended:
            rt.result("wf-c", timeout=20)
        row = rt.describe("wf-c")
    assert ended.value.status == "cancelled"
    assert row["cancel_requested_by"] == "ops@example"
    assert [s["name"] for s in row["steps"]] == ["start", "compensate"]
    assert [i["step"] for i in read_jsonl(log)] == ["compensate"]


def test_signal_and_cancel_refuse_unknown_or_finished_workflows(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.echo, "wf-done", {"x": 1})
        workers("W")
        rt.result("wf-done", timeout=20)
        before = _signals(rt)
        with pytest.raises(WorkflowNotFound, match="nothing was signalled"):
            rt.signal("nope", "go", {})
        with pytest.raises(WorkflowFinished, match="completed; nothing was signalled"):
            rt.signal("wf-done", "go", {})
        with pytest.raises(WorkflowFinished, match="nothing was cancelled"):
            rt.cancel("wf-done")
        with pytest.raises(WorkflowNotFound):
            rt.cancel("nope")
        assert _signals(rt) == before
        assert rt.describe("wf-done")["cancel_requested_at"] is None


def test_result_timeout_says_the_current_status(dsn) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.echo, "wf-wait", {})
        with pytest.raises(TimeoutError, match="still pending after 0.2s"):
            rt.result("wf-wait", timeout=0.2)


def test_swallowed_suspend_marks_the_workflow_stuck(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.swallower, "wf-sw", {})
        workers("W")
        with pytest.raises(WorkflowFailed) as stuck:
            rt.result("wf-sw", timeout=20)
    assert stuck.value.status == "stuck" and stuck.value.error["type"] == "SuspendSwallowed"


def test_v2_only_worker_never_claims_v1_and_migrate_moves_it(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.register(flows.pinned_v1, flows.pinned_v2)
        rt.start("pinned_flow", "wf-v1", {}, version="1")
        rt.start("pinned_flow", "wf-v2", {}, version="2")
        workers("V2", extra_args=("--only", "pinned_flow@2"))
        assert rt.result("wf-v2", timeout=20) == {"version": "2", "worker": "V2"}
        with pytest.raises(TimeoutError, match="still pending"):
            rt.result("wf-v1", timeout=2)  # a v2-only worker never claims v1
        assert rt.claim_history("wf-v1") == []
        report = {(r["version"], r["status"]): r["workflows"] for r in rt.drain_report()
                  if r["name"] == "pinned_flow"}  # fmt: skip
        assert report == {("1", "pending"): 1, ("2", "completed"): 1}
        rt.migrate("wf-v1", "2")
        assert rt.result("wf-v1", timeout=20) == {"version": "2", "worker": "V2"}
        with pytest.raises(WorkflowConflict, match="only pending or sleeping"):
            rt.migrate("wf-v1", "1")


def test_changed_step_name_is_stuck_with_nothing_run(dsn, workers, tmp_path) -> None:
    log = tmp_path / "inv.jsonl"
    with Runtime(dsn) as rt:
        rt.start(flows.renamed, "wf-nd", {"log": str(log)})
        old = workers("OLD")
        wait_for(lambda: rt.describe("wf-nd")["status"] == "sleeping", 20, "the wait")
        old.signal(signal.SIGKILL)
        old.proc.wait(timeout=10)
        workers("NEW", env={"ILR_TEST_STEP_NAME": "a_renamed"})
        rt.signal("wf-nd", "go", {})
        with pytest.raises(WorkflowFailed) as stuck:
            rt.result("wf-nd", timeout=20)
    assert stuck.value.status == "stuck"
    assert stuck.value.error == {
        "type": "NonDeterminism", "seq": 1,
        "recorded": {"kind": "step", "name": "a", "fingerprint": None},
        "called": {"kind": "step", "name": "a_renamed", "fingerprint": None},
    }  # fmt: skip
    assert [i["step"] for i in read_jsonl(log)] == ["a"]  # nothing ran on the new code


def test_patched_takes_the_old_path_on_old_history_and_the_new_one_after(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.patchy, "wf-old", {})
        old = workers("OLD", env={"ILR_TEST_PATCH": "0"})
        wait_for(lambda: rt.describe("wf-old")["status"] == "sleeping", 20, "the wait")
        old.signal(signal.SIGKILL)
        old.proc.wait(timeout=10)
        workers("NEW")
        rt.start(flows.patchy, "wf-new", {})
        rt.signal("wf-old", "go", {})
        rt.signal("wf-new", "go", {})
        assert rt.result("wf-old", timeout=20) == "old"
        assert rt.result("wf-new", timeout=20) == "new"
        new_steps = [(s["kind"], s["name"]) for s in rt.describe("wf-new")["steps"]]
    assert new_steps == [("step", "a"), ("patch", "fix-amount"), ("step", "new"), ("signal", "go")]


def test_decide_records_once_across_a_kill_after_the_response(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.decider, "wf-d", {"case": "case-4471"})
        dying = workers("D1", env={"ILR_KILL_AT": "decide_after_response"}, lease_ttl=1.5)
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        workers("D2", lease_ttl=1.5)
        result = rt.result("wf-d", timeout=30)
        steps = rt.describe("wf-d")["steps"]
        calls = rt._execute(
            "select epoch from ilr.llm_calls where workflow_id = 'wf-d' order by id"
        ).fetchall()
    assert result == {"amount": 2000, "premises": {"refunded_by_others": 0}, "seq": 1}
    assert [s["kind"] for s in steps] == ["decide"] and steps[0]["epoch"] == 2
    out = steps[0]["output"]
    assert out["model"] == "stub-emulated" and out["captured_at"] and out["request_hash"]
    assert steps[0]["fingerprint"] == out["request_hash"]
    assert [c["epoch"] for c in calls] == [1, 2]  # one discarded call, counted


def test_child_completion_wakes_the_parent(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.parent_flow, "wf-parent", {"x": 21})
        workers("W", poll=30)  # NOTIFY-driven: the child's completion signal wakes the parent
        assert rt.result("wf-parent", timeout=20) == {"child": "wf-parent/1", "result": 42}
        child = rt.describe("wf-parent/1")
    assert child["parent_id"] == "wf-parent" and child["status"] == "completed"


def test_continue_as_new_chains_runs(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.counter, "wf-n", {"n": 0, "until": 3})
        workers("W")
        assert rt.result("wf-n", timeout=20) == 3
        chain = [(w["id"], w["status"]) for w in rt.list(name="counter")]
        assert rt.describe("wf-n#2")["continued_from"] == "wf-n#1"
    assert chain == [("wf-n", "continued"), ("wf-n#1", "continued"), ("wf-n#2", "completed")]


def test_fork_reuses_the_prefix_and_runs_the_rest(dsn, workers, tmp_path) -> None:
    log = tmp_path / "inv.jsonl"
    with Runtime(dsn) as rt:
        rt.start(flows.forkable, "wf-f", {"log": str(log)})
        workers("W")
        assert rt.result("wf-f", timeout=20) == ["a", "b", "c"]
        rt.fork("wf-f", at_seq=3, new_id="wf-f2")
        assert rt.result("wf-f2", timeout=20) == ["a", "b", "c"]
        forked = rt.describe("wf-f2")
        with pytest.raises(WorkflowConflict):
            rt.fork("wf-f", at_seq=2, new_id="wf-f2")
    assert forked["forked_from"] == "wf-f"
    assert [(s["name"], s["epoch"]) for s in forked["steps"]] == [("a", 0), ("b", 0), ("c", 1)]
    assert [i["step"] for i in read_jsonl(log)] == ["a", "b", "c", "c"]
