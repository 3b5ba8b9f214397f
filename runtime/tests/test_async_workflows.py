"""`async def` workflows end to end on real Postgres and real asyncio worker subprocesses
(docs/async.md): steps, sleeps, signals, gather replayed by position after a SIGKILL, the
non-determinism an async workflow can show, a blocking call reported, the heartbeat's gap."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import async_flows
import pytest

from conftest import wait_for
from interlock_runtime import Runtime

MODULE = "async_flows"


def ran(log: Path) -> list[str]:
    """The step bodies that started, in order, from their own side log."""
    if not log.exists():
        return []
    return [json.loads(line)["step"] for line in log.read_text().splitlines()]


def stuck_error(rt: Runtime, wf: str) -> dict:
    wait_for(lambda: rt.describe(wf)["status"] == "stuck", 30, f"{wf} stuck")
    return rt.describe(wf)["error"]


def parked_on(rt: Runtime, wf: str, name: str) -> bool:
    return (rt.describe(wf)["waiting"] or {}).get("signal") == name


def test_async_steps_sleep_signal_and_status(dsn, workers, tmp_path) -> None:
    log = tmp_path / "side.jsonl"
    with Runtime(dsn) as rt:
        w = workers("A1", module=MODULE)
        rt.start(async_flows.a_basics, "a-1", {"log": str(log)})
        wait_for(lambda: parked_on(rt, "a-1", "go"), 30, "the signal wait")
        assert rt.query("a-1") == {"waiting": "go"}
        rt.signal("a-1", "go", {"ok": True})
        out = rt.result("a-1", timeout=30)
        kinds = [(s["kind"], s["name"]) for s in rt.describe("a-1")["steps"]]
    assert out == {"one": "async_one", "two": "plain_two", "go": {"ok": True}}
    assert kinds == [("step", "async_one"), ("step", "plain_two"), ("sleep", "sleep"),
                     ("step", "$status"), ("signal", "go")]  # fmt: skip
    assert ran(log) == [
        "async_one",
        "plain_two",
    ]  # replays after the sleep and the signal ran nothing
    assert w.wait_event("completed", wf="a-1")


def test_gather_replays_recorded_results_by_position_after_a_sigkill(
    dsn, workers, tmp_path
) -> None:
    """slow, mid, fast are called in that order and finish in the reverse one. The worker is
    killed once fast and mid are recorded, with slow still running; the next worker replays
    fast and mid (their bodies do not run again), runs slow, and the gather returns the
    results in call order."""
    log = tmp_path / "side.jsonl"
    sleeps = {"slow": 2.5, "mid": 0.8, "fast": 0.1}
    with Runtime(dsn) as rt:
        dying = workers("G1", module=MODULE, lease_ttl=1.5,
                        env={"ILR_KILL_AT": "step_after_record@2"})  # fmt: skip
        rt.start(async_flows.a_gather, "g-1", {"log": str(log), "sleeps": sleeps})
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        recorded = {s["seq"]: s["name"] for s in rt.describe("g-1")["steps"]}
        assert recorded == {2: "mid", 3: "fast"}  # places are call order, slow's is empty
        assert ran(log) == ["slow", "mid", "fast"]
        second = workers("G2", module=MODULE, lease_ttl=1.5)
        out = rt.result("g-1", timeout=30)
    assert [r["step"] for r in out["gathered"]] == ["slow", "mid", "fast"]
    by_step = {r["step"]: r["pid"] for r in out["gathered"]}
    assert by_step["fast"] == by_step["mid"] == dying.pid  # recorded by the first worker
    assert by_step["slow"] == second.pid
    assert sorted(ran(log)) == sorted(["slow", "mid", "fast", "slow", "after"])


def test_an_unawaited_step_is_nondeterminism(dsn, workers, tmp_path) -> None:
    log = tmp_path / "side.jsonl"
    with Runtime(dsn) as rt:
        workers("U1", module=MODULE)
        rt.start(async_flows.a_unawaited, "u-1", {"log": str(log)})
        error = stuck_error(rt, "u-1")
    assert error["type"] == "NonDeterminism"
    assert error["recorded"] == {"kind": "step", "name": "forgotten"}
    assert "never awaited" in error["called"]["unawaited"]
    assert ran(log) == ["first"]


def test_a_changed_order_on_replay_is_nondeterminism(dsn, workers, tmp_path) -> None:
    log, flag = tmp_path / "side.jsonl", tmp_path / "flag"
    with Runtime(dsn) as rt:
        workers("O1", module=MODULE)
        rt.start(async_flows.a_order, "o-1", {"log": str(log), "flag": str(flag)})
        wait_for(lambda: parked_on(rt, "o-1", "go"), 30, "the signal wait")
        flag.write_text("b first now")  # the code's order changes under a parked run
        rt.signal("o-1", "go", 1)
        error = stuck_error(rt, "o-1")
    assert error["type"] == "NonDeterminism" and error["seq"] == 1
    assert error["recorded"]["name"] == "a" and error["called"]["name"] == "b"
    assert ran(log) == ["a", "b"]


def test_wall_clock_and_concurrent_helpers_are_nondeterminism(dsn, workers, tmp_path) -> None:
    log = tmp_path / "side.jsonl"
    with Runtime(dsn) as rt:
        workers("N1", module=MODULE)
        rt.start(async_flows.a_wall_clock, "n-clock", {"log": str(log)})
        rt.start(async_flows.a_helper_tasks, "n-help", {"log": str(log)})
        clock = stuck_error(rt, "n-clock")
        helpers = stuck_error(rt, "n-help")
    assert clock["type"] == "NonDeterminism" and clock["called"]["wall_clock"] == "time.time()"
    assert (
        helpers["type"] == "NonDeterminism" and "workflow's own code" in helpers["called"]["rule"]
    )
    assert "x" not in ran(log) and "y" not in ran(log)


def test_a_blocking_step_is_reported_and_the_heartbeat_keeps_its_pace(
    dsn, workers, tmp_path
) -> None:
    """An async step that spins the CPU for 2.5 s holds the event loop: the worker names it
    (loop_blocked), and the heartbeat, in its own thread, keeps renewing (lease 1.5 s, so a
    starved heartbeat would lose the run)."""
    log = tmp_path / "side.jsonl"
    with Runtime(dsn) as rt:
        w = workers("B1", module=MODULE, lease_ttl=1.5)
        rt.start(async_flows.a_blocking, "b-1", {"log": str(log), "seconds": 2.5})
        assert rt.result("b-1", timeout=30) == "blocked"
        blocked = w.wait_event("loop_blocked")
        w.wait_event("loop_unblocked")
    assert blocked["task"] == "step b-1#1 hold_loop"
    gaps = [e["gap"] for e in w.events() if e.get("event") == "heartbeat" and e.get("gap")]
    worst = max(gaps)
    print(f"\nworst heartbeat gap while the loop was blocked 2.5 s: {worst:.3f} s "
          f"(interval {1.5 / 3:.2f} s, {len(gaps)} renewals)")  # fmt: skip
    assert len(gaps) >= 3 and worst < 1.5 / 2
    assert not [e for e in w.events() if e.get("event") == "fenced"]
    assert ran(log) == ["blocking"]


@pytest.mark.parametrize("tier", [1, 2], ids=["tier1", "tier2"])
def test_async_refund_survives_a_sigkill_after_the_send(dsn, workers, target_factory, tier):
    """S01 for an async workflow: SIGKILL after the target answered, before T_commit; the
    next worker recovers by tier and the target applied the refund exactly once."""
    target, admin = target_factory(tier)
    case = {"id": "case-a1", "target_url": target.url, "payment": "pay_881", "tier": tier}
    with Runtime(dsn) as rt:
        dying = workers("R1", module=MODULE, lease_ttl=1.5,
                        env={"ILR_KILL_AT": "effect_after_send"})  # fmt: skip
        rt.start(async_flows.a_refund, "r-1", case)
        wait_for(lambda: parked_on(rt, "r-1", "approve"), 30, "the approval wait")
        decided = rt.describe("r-1")["steps"][0]["output"]
        rt.approve("r-1", {"payment": "pay_881", "amount": 2000}, decided["premises"], by="alice")
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        workers("R2", module=MODULE, lease_ttl=1.5)
        out = rt.result("r-1", timeout=40)
    assert out["status"] == {1: "COMMITTED_BY_RETRY", 2: "COMMITTED_ON_QUERY"}[tier]
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]  # applied exactly once
    sent = [p["worker"] for p in admin.log(path="/refunds", method="POST")]
    assert sent == (["R1", "R2"] if tier == 1 else ["R1"])


# -- step timeouts (docs/timeouts.md) ---------------------------------------------------------------


def _read(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("plain", [False, True], ids=["async_body", "plain_body"])
def test_start_to_close_abandons_a_hung_attempt_and_retries(dsn, workers, tmp_path, plain):
    """An async body is cancelled at its deadline; a plain one (in a thread) is left to
    finish and its late result dropped, as the sync worker does. The retry answers."""
    log = tmp_path / "body.jsonl"
    with Runtime(dsn) as rt:
        w = workers("S1", module=MODULE, poll=0.1)
        rt.start(async_flows.a_start_to_close, "s-1",
                 {"log": str(log), "hang": 2.5, "limit": 0.4, "plain": plain})  # fmt: skip
        assert rt.result("s-1", timeout=15) == "fast"
        wf = rt.describe("s-1")
        late = "late return" if plain else "cancelled"
        wait_for(lambda: any(e["event"] == late for e in _read(log)), 10, late)
        assert rt.describe("s-1")["steps"][0]["output"] == "fast"
    assert w.wait_event("step_abandoned", wf="s-1")["timeout"] == "start_to_close"
    events = [e["event"] for e in _read(log)]
    assert events == (
        ["start", "start", "late return"] if plain else ["start", "cancelled", "start"]
    )
    starts = [e["t"] for e in _read(log) if e["event"] == "start"]
    # after the limit (counted from the recorded start, a little before the body's first line
    # on a busy loop), not after the 2.5 s hang
    assert 0.25 <= starts[1] - starts[0] < 1.8
    assert wf["step_timers"][0]["attempts"] == 2


def test_an_async_body_is_cancelled_at_its_deadline_not_when_the_run_ends(dsn, workers, tmp_path):
    """The timeout is caught and the run goes on (a 1 s step): the hung body was cancelled at
    the deadline, not left running until the run ended."""
    log = tmp_path / "body.jsonl"
    with Runtime(dsn) as rt:
        workers("S2", module=MODULE, poll=0.1)
        rt.start(async_flows.a_start_to_close, "s-2",
                 {"log": str(log), "hang": 5.0, "limit": 0.4, "plain": False, "catch": True})  # fmt: skip
        assert rt.result("s-2", timeout=15) == "start_to_close"
    start, cancelled = _read(log)
    assert cancelled["event"] == "cancelled"
    assert 0.25 <= cancelled["t"] - start["t"] < 0.9  # (the limit counts from the recorded start)


def test_schedule_to_close_keeps_counting_across_a_worker_sigkill(dsn, workers, tmp_path):
    log = tmp_path / "body.jsonl"
    budget = 3.0
    with Runtime(dsn) as rt:
        rt.start(async_flows.a_schedule_to_close, "b-1",
                 {"log": str(log), "budget": budget, "sleep": 20.0})  # fmt: skip
        first = workers("B1", module=MODULE, poll=0.1, lease_ttl=1.0)
        wait_for(lambda: _read(log), 15, "the first attempt to start")
        first.signal(signal.SIGKILL)
        assert first.proc.wait(timeout=10) == -signal.SIGKILL
        workers("B2", module=MODULE, poll=0.1, lease_ttl=1.0)
        assert rt.result("b-1", timeout=20) == {"timeout": "schedule_to_close", "attempt": 2}
        wf = rt.describe("b-1")
    assert len(_read(log)) == 2  # one attempt per worker
    # from the first claim to the failure's record: the budget, not the budget again from
    # B2's attempt (which started after the 1 s lease expired)
    failed_at = wf["steps"][0]["created_at"]
    first_claim, takeover = wf["claims"][0]["claimed_at"], wf["claims"][1]["claimed_at"]
    assert (takeover - first_claim).total_seconds() > 1.0
    assert budget <= (failed_at - first_claim).total_seconds() < budget + 1.0
    assert wf["step_timers"][0]["attempts"] == 2


def test_an_async_child_runs_on_its_parents_queue_unless_told_otherwise(dsn, conn, workers):
    """As test_queues' sync one: the only worker serves queue a, so a child left on the
    default queue would never run; one sent to queue b at priority 7 waits there."""
    with Runtime(dsn) as rt:
        rt.register(async_flows.a_placed_parent, async_flows.a_child)
        rt.start(async_flows.a_placed_parent, "ap-1", {"x": 2}, queue="a", priority=3)
        rt.start(async_flows.a_placed_parent, "ap-2", {"x": 5, "queue": "b", "priority": 7},
                 queue="a")  # fmt: skip
        workers("AQ", module=MODULE, extra_args=("--queue", "a"))
        assert rt.result("ap-1", timeout=30) == {"child": "ap-1/1", "result": 4}
        wait_for(lambda: conn.execute("select 1 from ilr.workflows where id = 'ap-2/1'"
                                      ).fetchone(), 30, "the child on b")  # fmt: skip
        placed = {r["id"]: (r["queue"], r["priority"]) for r in conn.execute(
            "select id, queue, priority from ilr.workflows where parent_id is not null")}  # fmt: skip
        assert placed == {"ap-1/1": ("a", 3), "ap-2/1": ("b", 7)}
        assert rt.describe("ap-2")["status"] == "sleeping"  # waiting for its child
