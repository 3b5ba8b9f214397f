"""Timeouts (docs/timeouts.md) on real Postgres with real worker subprocesses: a step's
start-to-close and schedule-to-close, a workflow's execution timeout.

Times are judged from evidence the timeout code does not write: the claim history, the step
rows' and the workflow row's timestamps (database clock) and the bodies' own logs."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import time

import pytest
import timeout_flows as tf

from conftest import REPO, read_jsonl, wait_for
from interlock_runtime import (
    InvalidInput,
    RetryPolicy,
    Runtime,
    WorkflowConflict,
    WorkflowFailed,
)

M = "timeout_flows"


def _ended(rt: Runtime, wf: str, timeout: float = 15) -> dict:
    """Wait for the workflow to end; its row (status, error, timestamps)."""
    with pytest.raises(WorkflowFailed):
        rt.result(wf, timeout=timeout, poll=0.05)
    return rt.describe(wf)


def test_start_to_close_abandons_a_hung_attempt_and_retries(dsn, workers, tmp_path) -> None:
    log = tmp_path / "body.jsonl"
    with Runtime(dsn) as rt:
        rt.start(tf.start_to_close, "wf-s2c", {"log": str(log), "hang": 2.5, "limit": 0.4})
        workers("W", module=M, poll=0.1)
        assert rt.result("wf-s2c", timeout=15) == "fast"  # not "late": the hung one was dropped
        wf = rt.describe("wf-s2c")
        # the late return of the abandoned attempt comes, and is still not recorded
        wait_for(lambda: any(e["event"] == "late return" for e in read_jsonl(log)), 10,
                 "the abandoned attempt to return")  # fmt: skip
        assert rt.describe("wf-s2c")["steps"][0]["output"] == "fast"
    starts = [e for e in read_jsonl(log) if e["event"] == "start"]
    assert [e["attempt"] for e in starts] == [1, 2]
    # the second attempt started about start_to_close (+ backoff) after the first, not after
    # the first one's 2.5 s hang
    assert 0.4 <= starts[1]["t"] - starts[0]["t"] < 1.8
    assert len(wf["claims"]) == 2  # the timed-out attempt failed, its retry was a new claim
    assert wf["step_timers"][0]["attempts"] == 2


def test_schedule_to_close_keeps_counting_across_a_worker_sigkill(dsn, workers, tmp_path) -> None:
    log = tmp_path / "body.jsonl"
    budget = 3.0
    with Runtime(dsn) as rt:
        rt.start(tf.schedule_to_close, "wf-budget", {"log": str(log), "budget": budget,
                                                     "sleep": 20.0})  # fmt: skip
        first = workers("W1", module=M, poll=0.1, lease_ttl=1.0)
        wait_for(lambda: read_jsonl(log), 15, "the first attempt to start")
        time.sleep(0.5)
        first.signal(signal.SIGKILL)
        assert first.proc.wait(timeout=10) == -signal.SIGKILL
        workers("W2", module=M, poll=0.1, lease_ttl=1.0)
        assert rt.result("wf-budget", timeout=20) == {"timeout": "schedule_to_close",
                                                      "attempt": 2}  # fmt: skip
        wf = rt.describe("wf-budget")
    starts = read_jsonl(log)
    assert [e["pid"] for e in starts if e["event"] == "start"] == [first.pid, starts[1]["pid"]]
    assert starts[1]["pid"] != first.pid  # the second attempt ran on W2, after the takeover
    # from the first claim (W1) to the failure's record: the budget, not the budget again
    # from W2's attempt (which started well over a second later)
    failed_at = wf["steps"][0]["created_at"]
    first_claim, takeover = wf["claims"][0]["claimed_at"], wf["claims"][1]["claimed_at"]
    assert (takeover - first_claim).total_seconds() > 1.0
    assert budget <= (failed_at - first_claim).total_seconds() < budget + 1.0
    assert wf["steps"][0]["error"]["timeout"] == "schedule_to_close"
    assert {"seq": 1, "name": "slow", "timeout": "schedule_to_close", "limit": budget} \
        in wf["timed_out"]  # fmt: skip


def test_replay_after_a_step_timeout_raises_the_same_failure(dsn, workers, tmp_path) -> None:
    log = tmp_path / "body.jsonl"
    with Runtime(dsn) as rt:
        rt.start(tf.replay_after_timeout, "wf-replay", {"log": str(log), "limit": 0.3})
        workers("W", module=M, poll=0.1)
        assert rt.result("wf-replay", timeout=15) == {"type": "StepTimedOut",
                                                      "timeout": "start_to_close"}  # fmt: skip
        wf = rt.describe("wf-replay")
    assert len([e for e in read_jsonl(log) if e["event"] == "start"]) == 1  # replayed, not rerun
    assert len(wf["claims"]) == 2  # the sleep's suspend: the catch above ran again on replay
    assert wf["timed_out"] == [{"seq": 1, "name": "hang", "timeout": "start_to_close",
                                "limit": 0.3}]  # fmt: skip


def test_execution_timeout_ends_running_sleeping_parked_and_child(dsn, workers, tmp_path) -> None:
    limit = 1.0
    # a long poll: the sweep comes rarely, so a waiting run ending on time shows that its
    # wake-up was held at the deadline (the claim then ends it). The worker is up before the
    # starts: on a busy machine its interpreter start alone can outlast the limit, and the
    # parent would then end before it ever started its child.
    workers("W", module=M, poll=3.0, concurrency=6).wait_event("registered")
    with Runtime(dsn) as rt:
        rt.start(tf.busy, "wf-busy", {"log": str(tmp_path / "busy.jsonl")},
                 execution_timeout=limit)  # fmt: skip
        rt.start(tf.sleeper, "wf-sleep", {}, execution_timeout=limit)
        rt.start(tf.parked, "wf-parked", {}, execution_timeout=limit)
        rt.start(tf.parent, "wf-parent", {}, execution_timeout=limit)
        rows = {wf: _ended(rt, wf) for wf in ("wf-busy", "wf-sleep", "wf-parked", "wf-parent")}
        child = _ended(rt, "wf-parent/1")
    for wf, row in {**rows, "wf-parent/1": child}.items():
        assert row["status"] == "timed_out", (wf, row["status"], row["error"])
        assert row["error"]["type"] == "WorkflowTimedOut"
        assert row["timed_out"][-1]["timeout"] == "execution"
        # ended at its deadline (the child: its parent's), not at its 30 s step or timer
        started = rows["wf-parent" if wf == "wf-parent/1" else wf]["created_at"]
        took = (row["updated_at"] - started).total_seconds()
        assert limit <= took < limit + 1.5, (wf, took)
    assert child["execution_deadline"] == rows["wf-parent"]["execution_deadline"]
    assert rows["wf-busy"]["steps"] == []  # the abandoned step was never recorded


def test_execution_timeout_of_a_run_no_worker_ever_started(dsn, workers, tmp_path) -> None:
    log = tmp_path / "body.jsonl"
    with Runtime(dsn) as rt:
        rt.start(tf.logged, "wf-late", {"log": str(log)}, execution_timeout=0.3)
        rt.start("to_nobody_serves", "wf-unserved", {}, execution_timeout=0.3)
        assert rt.describe("wf-unserved")["status"] == "awaiting_worker"
        time.sleep(0.6)  # both deadlines pass with no worker anywhere
        assert rt.describe("wf-late")["execution_seconds_left"] < 0
        workers("W", module=M, poll=0.1)
        late, unserved = _ended(rt, "wf-late"), _ended(rt, "wf-unserved")
    assert late["status"] == "timed_out" and late["error"]["by"] == "claim"
    assert not log.exists() and late["steps"] == []  # claimed, ended, no code of it ran
    assert unserved["status"] == "timed_out" and unserved["error"]["by"] == "sweep"
    assert unserved["version"] is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1, 0, 1e12, "5", True])
def test_hostile_timeouts_are_refused_before_anything_is_written(dsn, bad) -> None:
    with Runtime(dsn) as rt:
        with pytest.raises(InvalidInput, match="execution_timeout"):
            rt.start(tf.sleeper, "wf-bad", {}, execution_timeout=bad)
        with pytest.raises(InvalidInput, match="start_to_close"):
            RetryPolicy(start_to_close=bad)
        with pytest.raises(ValueError, match="schedule_to_close"):  # InvalidInput is one
            RetryPolicy(schedule_to_close=bad)
        assert rt.list() == []


def test_a_second_start_must_ask_for_the_same_timeout(dsn) -> None:
    with Runtime(dsn) as rt:
        rt.start(tf.sleeper, "wf-same", {}, execution_timeout=5)
        assert rt.start(tf.sleeper, "wf-same", {}, execution_timeout=5.0) == "wf-same"
        for other in (None, 6):
            with pytest.raises(WorkflowConflict, match="execution timeout"):
                rt.start(tf.sleeper, "wf-same", {}, execution_timeout=other)
        rt.start(tf.sleeper, "wf-none", {})
        with pytest.raises(WorkflowConflict, match="execution timeout"):
            rt.start(tf.sleeper, "wf-none", {}, execution_timeout=6)
        wf = rt.describe("wf-same")
    assert wf["execution_timeout"] == 5.0
    left = (wf["execution_deadline"] - wf["created_at"]).total_seconds()
    assert left == pytest.approx(5.0, abs=1e-3)  # the start's own database time plus 5 s


@pytest.mark.parametrize("bad", ["nan", "-1", "0", "1e12", "soon"])
def test_cli_refuses_a_hostile_execution_timeout(dsn, bad) -> None:
    out = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "start", "to_sleeper",
                          "wf-cli", "--dsn", dsn, f"--execution-timeout={bad}"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)  # fmt: skip
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "--execution-timeout" in out.stderr
