"""Falsy and empty recorded values through replay (issue 22, mutant ReplayRerunsFalsyStep).

A recorded step is one whose row exists, whatever its output: None, 0, {}, [], "" and False are
results like any other. A replay that asked whether the output is truthy instead would run those
bodies again after a crash (NoRerunAfterComplete) and hand the workflow something else.
"""

from __future__ import annotations

import signal

import flows

from interlock_runtime import Runtime
from interlock_runtime.testing import read_jsonl, wait_for


def test_falsy_step_outputs_replay_without_running_their_bodies_again(
    dsn, workers, tmp_path
) -> None:
    log = tmp_path / "runs.jsonl"
    names = list(flows.FALSY)
    with Runtime(dsn) as rt:
        # The sixth record commits at the frontier of the step "last"; W1 dies right after it.
        dying = workers("W1", lease_ttl=1.0, env={"ILR_KILL_AT": f"step_after_record@{len(names)}"})
        rt.start(flows.falsy_steps, "wf-falsy", {"log": str(log)})
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        recorded = [(s["name"], s["output"]) for s in rt.describe("wf-falsy")["steps"]]
        assert recorded == list(flows.FALSY.items())  # all six recorded, nothing after them
        again = workers("W2", lease_ttl=1.0)
        wait_for(lambda: rt.describe("wf-falsy")["status"] in ("completed", "failed", "stuck"),
                 30, "W2 to end the workflow")  # fmt: skip
        # Each falsy body ran once, in W1; only "last" ran in W2.
        runs = [(r["step"], r["pid"]) for r in read_jsonl(log)]
        assert runs == [(n, dying.pid) for n in names] + [("last", again.pid)]
        out = rt.result("wf-falsy", timeout=30)
        steps = [(s["name"], s["epoch"]) for s in rt.describe("wf-falsy")["steps"]]
    first = steps[0][1]
    assert steps[:-1] == [(n, first) for n in names]
    assert steps[-1][0] == "last" and steps[-1][1] > first  # recorded by W2's claim
    # The replay returned the recorded values with their JSON types (0 is not False or None).
    assert out["values"] == flows.FALSY
    assert out["types"] == {"none": "NoneType", "zero": "int", "empty_dict": "dict",
                            "empty_list": "list", "empty_str": "str", "false": "bool"}  # fmt: skip


def test_falsy_signal_payloads_and_a_timeout_replay_without_waiting_again(dsn, workers) -> None:
    """A wait step is recorded when its row exists: a replay of a wait that received 0, {}, [],
    "" or False, or that timed out (None), must return that, never wait (or consume) again."""
    sent = [0, {}, [], "", False]
    with Runtime(dsn) as rt:
        rt.start(flows.falsy_signals, "wf-fsig", {"timeout": 0.2})
        for payload in sent:
            rt.signal("wf-fsig", "value", payload)
        workers("W1")

        def waiting_for_good() -> dict | None:
            row = rt.describe("wf-fsig")
            w = row["waiting"] or {}
            return w if row["status"] == "sleeping" and w and w.get("until") is None else None

        # The first wait with no timeout after the replays: `finish`, never `value` again.
        w = wait_for(waiting_for_good, 30, "the workflow to wait with no timeout")
        assert (w["name"], w["seq"]) == ("finish", 7), w
        rt.signal("wf-fsig", "finish", {"go": True})
        out = rt.result("wf-fsig", timeout=30)
        consumed = rt._execute("select name, consumed_seq from ilr.signals "
                               "where workflow_id = 'wf-fsig' order by id").fetchall()  # fmt: skip
    assert out["values"] == [*sent, None]
    assert out["types"] == ["int", "dict", "list", "str", "bool", "NoneType"]
    assert [(c["name"], c["consumed_seq"]) for c in consumed] == [
        ("value", 1), ("value", 2), ("value", 3), ("value", 4), ("value", 5), ("finish", 7)]  # fmt: skip
