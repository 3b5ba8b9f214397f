"""A zombie resumed while its successor holds a live lease (issue 22, mutant FenceIgnoresEpoch).

The SIGSTOP test of test_durable resumes its zombie only after the workflow completed, so the
zombie's fence fails on the status and never on the epoch. Here the successor is itself paused
right after its claim with a long lease: when the zombie goes on, the row is 'running' with a
live lease, and only `epoch = %(epoch)s` in the fence stands between the zombie's T_dispatch and
a send under a claim that is no longer its own.
"""

from __future__ import annotations

import signal

import flows

from interlock_runtime import Runtime, db, receipts
from interlock_runtime.testing import WorkerProcess, wait_for

PAYMENT = "pay_881"
ENDS = ("fenced", "completed", "failed", "suspended", "stuck")


def run_ended(w: WorkerProcess, wf: str, epoch: int) -> dict | None:
    """The event that ended the worker's run of `wf` at `epoch`, if it ended (a heartbeat that
    finds the claim gone only marks the run; the run ends at its next write)."""
    for e in w.events():
        if e.get("event") in ENDS and e.get("wf") == wf and e.get("epoch") == epoch:
            if e.get("by") != "heartbeat":
                return e
    return None


def test_a_zombie_resumed_under_a_live_successor_lease_is_fenced_by_its_epoch(
    dsn, workers, target_factory
) -> None:
    target, admin = target_factory(2)
    with Runtime(dsn) as rt, db.connect(dsn) as conn:
        grant = rt.grant("agent", "refund", by="policy")
        # A reads the premises, records its capture step and pauses just before T_dispatch.
        zombie = workers("A", lease_ttl=1.5, env={"ILR_STOP_AT": "effect_before_dispatch"})
        rt.start(flows.policy_refund, "wf-z", {"id": "case-z", "target_url": target.url,
                 "payment": PAYMENT, "tier": 2, "payload": {"amount": 2000}, "grant": grant})  # fmt: skip
        zombie.wait_stopped()
        # B takes over once A's lease expired, with a lease of 60 s, and pauses right after.
        successor = workers("B", lease_ttl=60.0, env={"ILR_STOP_AT": "claimed"})
        successor.wait_stopped()
        held = conn.execute("select status, epoch, owner, lease_expires_at > now() as live "
                            "from ilr.workflows where id = 'wf-z'").fetchone()  # fmt: skip
        assert held == {"status": "running", "epoch": 2, "owner": "B", "live": True}

        zombie.signal(signal.SIGCONT)
        ended = wait_for(lambda: run_ended(zombie, "wf-z", 1), 20, "A's run of epoch 1 to end")
        # Still B's claim, live: the only thing the zombie's fence could fail on is its epoch.
        still = conn.execute("select epoch, owner, lease_expires_at > now() as live "
                             "from ilr.workflows where id = 'wf-z'").fetchone()  # fmt: skip
        effects = conn.execute("select count(*) as n from ilr.effects").fetchone()["n"]
        journal = conn.execute("select count(*) as n from ilr.journal").fetchone()["n"]
        steps = conn.execute("select name, epoch from ilr.steps where workflow_id = 'wf-z' "
                             "order by seq").fetchall()  # fmt: skip
        sent = admin.log(path="/refunds", method="POST")
        assert ended["event"] == "fenced" and ended["by"] == "write", ended
        assert still == {"epoch": 2, "owner": "B", "live": True}
        assert (effects, journal, sent) == (0, 0, [])  # T_dispatch rolled back, nothing sent
        assert steps == [{"name": "capture", "epoch": 1}]  # recorded before the takeover

        successor.signal(signal.SIGCONT)
        out = rt.result("wf-z", timeout=30)
        claims = [(c["owner"], c["epoch"]) for c in rt.claim_history("wf-z")]
        steps = conn.execute("select name, epoch from ilr.steps where workflow_id = 'wf-z' "
                             "order by seq").fetchall()  # fmt: skip
        bundle = rt.receipt(out["effect_id"])
    assert out["status"] == "COMMITTED"
    assert claims == [("A", 1), ("B", 2)]
    assert [(s["name"], s["epoch"]) for s in steps] == [("capture", 1), ("effect:refund:case-z", 2)]
    dispatched = [e for e in bundle["entries"] if e["kind"] == "DISPATCHED"]
    assert [e["by"]["epoch"] for e in dispatched] == [2]
    assert [(p["worker"], p["epoch"]) for p in admin.log(path="/refunds", method="POST")] == [
        ("B", "2")]  # fmt: skip
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    v = receipts.verify(bundle)
    assert v["valid"] and v["happened_once"] is True
