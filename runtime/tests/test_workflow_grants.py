"""Grants bound to one workflow end with it (issue 19): an approval (principal workflow:<id>)
is revoked, reason 'workflow finished', in the transaction that completes, fails, cancels or
continues the workflow; nobody else's grants change. Real Postgres, real worker processes."""

from __future__ import annotations

import grant_flows
import pytest

from conftest import wait_for
from interlock_runtime import Runtime, db

FLOWS = "grant_flows"


def waits_for_approval(rt: Runtime, wf: str) -> None:
    wait_for(lambda: (rt.describe(wf)["waiting"] or {}).get("signal") == "approve", 30,
             f"{wf} to wait for approval")  # fmt: skip


def grant_row(conn, gid: str) -> dict:
    return conn.execute("select revoked_at, revoked_by, revoke_reason, xmin::text as x "
                        "from ilr.grants where id = %s", (gid,)).fetchone()  # fmt: skip


def finish_xmin(conn, wf: str) -> str:
    return conn.execute("select xmin::text as x from ilr.workflows where id = %s",
                        (wf,)).fetchone()["x"]  # fmt: skip


@pytest.mark.parametrize("outcome,status", [("complete", "completed"), ("fail", "failed"),
                                            ("cancel", "cancelled"), ("continue", "continued")])  # fmt: skip
def test_a_workflows_approval_is_revoked_when_it_ends(dsn, conn, workers, outcome, status) -> None:
    wf, other = f"wf-{outcome}", f"wf-{outcome}-other"
    with Runtime(dsn) as rt:
        workers("W1", module=FLOWS)
        rt.start(grant_flows.approved_then, wf, {"outcome": outcome})
        rt.start(grant_flows.approved_then, other, {"outcome": "sleep"})
        waits_for_approval(rt, wf)
        waits_for_approval(rt, other)
        standing = rt.grant("support-bot", "refund", by="policy")  # not bound to a workflow
        others = rt.approve(other, {"outcome": "sleep"}, {}, by="alice")
        gid = rt.approve(wf, {"outcome": outcome}, {}, by="alice")
        # Not read here whether it is live: the worker may already have ended the run (a race
        # the test once lost). That the revoke is the ending's own transaction, not the
        # approval's, is checked below by the row versions.
        if outcome == "cancel":
            wait_for(lambda: (rt.describe(wf)["waiting"] or {}).get("signal") == "never", 30,
                     "the workflow to take its approval")  # fmt: skip
            assert grant_row(conn, gid)["revoked_at"] is None
            rt.cancel(wf, by="bob")
        wait_for(lambda: rt.describe(wf)["status"] == status, 30, f"{wf} to be {status}")
    row = grant_row(conn, gid)
    assert row["revoked_at"] is not None
    assert (row["revoked_by"], row["revoke_reason"]) == ("$runtime", "workflow finished")
    # In the very transaction that ended the workflow.
    assert row["x"] == finish_xmin(conn, wf)
    # Nobody else's grants: the other workflow's approval and the standing grant stay live.
    for g in (others, standing):
        assert grant_row(conn, g)["revoked_at"] is None, g


def test_an_earlier_revoke_is_kept_and_only_live_grants_end(dsn, conn, workers) -> None:
    """A grant revoked before the workflow ended keeps who revoked it and no reason."""
    with Runtime(dsn) as rt:
        workers("W1", module=FLOWS)
        rt.start(grant_flows.approved_then, "wf-a", {"outcome": "complete"})
        waits_for_approval(rt, "wf-a")
        first = rt.grant("workflow:wf-a", "refund", by="policy")
        rt.revoke(first, by="carol")
        gid = rt.approve("wf-a", {"outcome": "complete"}, {}, by="alice")
        assert rt.result("wf-a", timeout=30) == gid
    assert grant_row(conn, first)["revoked_by"] == "carol"
    assert grant_row(conn, first)["revoke_reason"] is None
    assert grant_row(conn, gid)["revoke_reason"] == "workflow finished"
    with db.connect(dsn) as c:
        assert db.one(c.execute(db.query("end_workflow_grants"), {"wf": "wf-a"}))["ended"] == 0
