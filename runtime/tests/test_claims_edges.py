"""The fence and the heartbeat, the two statements that decide whether a worker still holds a
run (docs/design.md#fence, docs/design.md#claims), against real Postgres rows: a lease that
expired, and an epoch that moved on, each alone. Named in models/mutants/claims.yaml.
"""

from __future__ import annotations

import signal
import threading

import flows
import pytest

from conftest import wait_for
from interlock_runtime import Runtime, db
from interlock_runtime.errors import Fenced

WF = "wf-claim"


def _running(conn, epoch: int, lease_s: float) -> None:
    """The row as a claim leaves it: running under `epoch`, the lease `lease_s` from now."""
    conn.execute("update ilr.workflows set status = 'running', epoch = %s, owner = 'w', "
                 "lease_expires_at = now() + make_interval(secs => %s) where id = %s",
                 (epoch, lease_s, WF))  # fmt: skip


@pytest.fixture
def row(dsn, conn):
    with Runtime(dsn) as rt:
        rt.start(flows.echo, WF, {"x": 1})
    return conn


def _fence(conn, epoch: int) -> bool:
    try:
        with db.fenced(conn, WF, epoch, 5.0):
            return True
    except Fenced:
        return False


def test_the_fence_matches_only_a_live_lease_of_the_current_epoch(row) -> None:
    _running(row, 3, 5)
    assert _fence(row, 3)
    assert not _fence(row, 2)  # a stale epoch, while the lease is live
    assert not _fence(row, 4)
    _running(row, 3, -0.5)  # the same epoch, its lease just expired, nobody claimed yet
    assert not _fence(row, 3)
    lease = row.execute("select lease_expires_at < now() as gone from ilr.workflows "
                        "where id = %s", (WF,)).fetchone()  # fmt: skip
    assert lease["gone"]  # a refused fence extends nothing


def _heartbeat(conn, epoch: int) -> list:
    """The ids the heartbeat renewed."""
    return [r["id"] for r in _heartbeat_rows(conn, epoch) if r["renewed"]]


def _heartbeat_rows(conn, epoch: int) -> list:
    return conn.execute(
        db.query("heartbeat"), {"ids": [WF], "epochs": [epoch], "ttl": 5.0}
    ).fetchall()


def test_the_heartbeat_renews_only_a_live_lease_of_its_own_epoch(row) -> None:
    _running(row, 3, 5)
    assert _heartbeat(row, 3) == [WF]
    before = row.execute("select lease_expires_at from ilr.workflows where id = %s",
                         (WF,)).fetchone()["lease_expires_at"]  # fmt: skip
    assert _heartbeat(row, 2) == []  # a zombie's heartbeat: it learns it was fenced
    after = row.execute("select lease_expires_at from ilr.workflows where id = %s",
                        (WF,)).fetchone()["lease_expires_at"]  # fmt: skip
    assert after == before  # and the successor's lease is not its to extend
    _running(row, 3, -0.5)
    assert _heartbeat(row, 3) == []  # an expired lease is not revived
    gone = row.execute("select lease_expires_at < now() as gone from ilr.workflows "
                       "where id = %s", (WF,)).fetchone()["gone"]  # fmt: skip
    assert gone


def test_the_heartbeat_tells_a_run_that_ended_itself_from_a_fenced_one(row) -> None:
    """A run's own last write (here: completed) can commit between the heartbeat's snapshot of
    the worker's runs and its renewal: not renewed, but not fenced either (no `fenced` event)."""
    _running(row, 3, -0.5)  # expired, still running: fenced
    assert [(r["renewed"], r["ended"]) for r in _heartbeat_rows(row, 3)] == [(False, False)]
    _running(row, 4, 5)
    assert [(r["renewed"], r["ended"]) for r in _heartbeat_rows(row, 3)] == [(False, False)]
    row.execute("update ilr.workflows set status = 'completed', "
                "lease_expires_at = null where id = %s", (WF,))  # fmt: skip
    assert [(r["renewed"], r["ended"]) for r in _heartbeat_rows(row, 4)] == [(False, True)]
    assert [(r["renewed"], r["ended"]) for r in _heartbeat_rows(row, 3)] == [(False, False)]


def test_an_end_that_commits_while_the_heartbeat_waits_is_not_a_fence(row, dsn) -> None:
    """The run's last write holds the row when the heartbeat arrives, and commits while the
    heartbeat waits for the row's lock. The answer must say `ended` from the row as committed,
    not from the statement's older snapshot, which still shows the run running (that read
    logged a false `fenced` for a run that had completed)."""
    _running(row, 3, 5)
    ending = db.connect(dsn)
    ending.execute("begin")
    ending.execute("update ilr.workflows set status = 'completed', "
                   "lease_expires_at = null where id = %s", (WF,))  # fmt: skip
    answers: list = []
    heartbeat = db.connect(dsn)
    waiter = threading.Thread(target=lambda: answers.extend(_heartbeat_rows(heartbeat, 3)))
    waiter.start()
    wait_for(lambda: row.execute(
        "select count(*) as n from pg_stat_activity where pid = %s and wait_event_type = 'Lock'",
        (heartbeat.info.backend_pid,)).fetchone()["n"] == 1, 10, "the heartbeat to wait")  # fmt: skip
    ending.execute("commit")
    waiter.join(10)
    ending.close()
    heartbeat.close()
    assert [(r["renewed"], r["ended"]) for r in answers] == [(False, True)]


def test_a_commit_after_the_lease_expired_is_fenced_with_no_successor(
    dsn, workers, target_factory
) -> None:
    """A real worker stops after its send and resumes after its lease expired, with no peer to
    take over: its T_commit must not pass the fence. Ground truth: no step row of its epoch is
    written after the moment its lease was seen expired."""
    target, admin = target_factory(2)
    w = workers("W1", lease_ttl=1.5, env={"ILR_STOP_AT": "effect_after_send"})
    with Runtime(dsn) as rt, db.connect(dsn) as c:
        grant = rt.grant("agent", "refund", by="policy")
        rt.start(flows.policy_refund, "wf-exp", {"id": "k1", "target_url": target.url,
                 "payment": "pay_881", "tier": 2, "payload": {"amount": 2000}, "grant": grant})  # fmt: skip
        w.wait_stopped(timeout=30)
        wait_for(lambda: c.execute("select lease_expires_at < now() as x from ilr.workflows "
                                   "where id = 'wf-exp'").fetchone()["x"], 20, "the lease to expire")  # fmt: skip
        seen = c.execute(
            "select now() as t, epoch from ilr.workflows where id = 'wf-exp'"
        ).fetchone()
        w.signal(signal.SIGCONT)
        out = rt.result("wf-exp", timeout=40)
        late = c.execute("select seq, kind, created_at from ilr.steps where workflow_id = 'wf-exp' "
                         "and epoch = %s and created_at > %s", (seen["epoch"], seen["t"])).fetchall()  # fmt: skip
    assert late == [], f"epoch {seen['epoch']} wrote after its lease expired: {late}"
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    assert out["status"] in ("COMMITTED", "DUPLICATE_IGNORED")


def _finish_in_one(conn, epoch: int) -> bool:
    """The completion's single fenced statement (query finish_fenced) with a deferred step."""
    params = {"wf": WF, "epoch": epoch, "status": "completed", "result": db.jsonb("done"),
              "error": None, "seq": 1, "name": "s", "kind": "step", "fingerprint": None,
              "output": db.jsonb("out"), "step_error": None, "ends_grants": True}  # fmt: skip
    return conn.execute(db.query("finish_fenced"), params).fetchone() is not None


def test_the_one_statement_completion_matches_only_a_live_lease_of_the_current_epoch(row) -> None:
    _running(row, 3, 5)
    assert not _finish_in_one(row, 2)  # a stale epoch, while the lease is live
    assert not _finish_in_one(row, 4)
    _running(row, 3, -0.5)  # the same epoch, its lease just expired, nobody claimed yet
    assert not _finish_in_one(row, 3)
    untouched = row.execute("select status, (select count(*) from ilr.steps where workflow_id "
                            "= %s) as steps from ilr.workflows where id = %s", (WF, WF)).fetchone()  # fmt: skip
    assert untouched == {"status": "running", "steps": 0}  # a refused completion writes nothing
    _running(row, 3, 5)
    assert _finish_in_one(row, 3)
    done = row.execute("select status, result, owner, lease_expires_at, (select output from "
                       "ilr.steps where workflow_id = %s and seq = 1) as step from ilr.workflows "
                       "where id = %s", (WF, WF)).fetchone()  # fmt: skip
    assert done == {"status": "completed", "result": "done", "owner": None,
                    "lease_expires_at": None, "step": "out"}  # fmt: skip


def _record_in_one(conn, epoch: int) -> bool:
    """A step record as one fenced statement (query record_step_fenced)."""
    step = {"wf": WF, "epoch": epoch, "seq": 1, "name": "s", "kind": "step", "fingerprint": None,
            "output": db.jsonb({"b": 1, "a": 2}), "error": None}  # fmt: skip
    try:
        row = db.record_step_fenced(conn, step, 5.0)
    except Fenced:
        return False
    assert row["output"] == {"a": 2, "b": 1} and row["cancel_requested_at"] is None
    return True


def test_the_one_statement_step_record_matches_only_a_live_lease_of_the_current_epoch(row) -> None:
    _running(row, 3, 5)
    row.execute("update ilr.workflows set takeovers = 2, waiting = '{\"seq\": 1}' where id = %s",
                (WF,))  # fmt: skip
    assert not _record_in_one(row, 2)  # a stale epoch, while the lease is live
    assert not _record_in_one(row, 4)
    _running(row, 3, -0.5)  # the same epoch, its lease just expired, nobody claimed yet
    assert not _record_in_one(row, 3)
    untouched = row.execute("select takeovers, lease_expires_at < now() as gone, (select count(*) "
                            "from ilr.steps where workflow_id = %s) as steps from ilr.workflows "
                            "where id = %s", (WF, WF)).fetchone()  # fmt: skip
    assert untouched == {"takeovers": 2, "gone": True, "steps": 0}  # refused: nothing written
    _running(row, 3, 0.5)
    assert _record_in_one(row, 3)
    done = row.execute("select takeovers, waiting, lease_expires_at > now() + interval '4 s' as "
                       "extended, (select epoch from ilr.steps where workflow_id = %s and seq = 1) "
                       "as step_epoch from ilr.workflows where id = %s", (WF, WF)).fetchone()  # fmt: skip
    assert done == {"takeovers": 0, "waiting": None, "extended": True, "step_epoch": 3}
