"""T_dispatch's own checks, each with a real worker and the real local target: a premise that
changed between the decision and the send (external, and a local SQL premise), and the send
stopwatch, which starts before T_dispatch so that a pause after it still counts against
send_timeout (docs/design.md#send-deadline).

Each test is named in models/mutants/dispatch.yaml as the one that kills a mutant; its verdict
comes from the target's ledger and access log and from the effects row, not from the status the
runtime reports.
"""

from __future__ import annotations

import signal

import flows

from conftest import wait_for
from interlock_runtime import Runtime, db

PAYMENT = "pay_881"


def _case(target, **extra) -> dict:
    return {"id": "case-disp", "target_url": target.url, "payment": PAYMENT, "tier": 2, **extra}


def _approve(rt: Runtime, wf: str) -> str:
    wait_for(lambda: (rt.describe(wf)["waiting"] or {}).get("signal") == "approve", 30,
             "the approval wait")  # fmt: skip
    decided = rt.describe(wf)["steps"][0]["output"]
    return rt.approve(wf, {"payment": PAYMENT, "amount": 2000}, decided["premises"], by="alice")


def test_hand_refund_before_dispatch_is_refused(dsn, workers, target_factory) -> None:
    """Someone refunds by hand after the decision and before the send: nothing is sent."""
    target, admin = target_factory(2)
    workers("W1", lease_ttl=3)
    with Runtime(dsn) as rt:
        rt.start(flows.refund, "wf-stale", _case(target))
        wait_for(lambda: (rt.describe("wf-stale")["waiting"] or {}).get("signal") == "approve",
                 30, "the approval wait")  # fmt: skip
        admin.hand_refund(PAYMENT, 2000)  # the world moves after the decision was recorded
        _approve(rt, "wf-stale")
        out = rt.result("wf-stale", timeout=30)
    assert out["status"] == "REFUSED:stale_premise"
    assert [r["source"] for r in admin.ledger()["refunds"]] == ["hand"]
    assert admin.log(path="/refunds", method="POST") == []


def test_a_failing_local_premise_refuses_the_dispatch(dsn, conn, workers, target_factory) -> None:
    """A local SQL premise (a registered function returning violations) that does not hold."""
    conn.execute("create schema if not exists ilr_test")
    conn.execute("create function ilr_test.account_frozen(args jsonb, eid text) returns jsonb "
                 "language sql as $$ select jsonb_build_array('account ' || (args->>'account') "
                 "|| ' is frozen') $$")  # fmt: skip
    target, admin = target_factory(2)
    workers("W1", lease_ttl=3)
    premise = ["ilr_test.account_frozen", {"account": "acct-9"}]
    with Runtime(dsn) as rt:
        rt.start(flows.refund, "wf-local", _case(target, local_premises=[premise]))
        _approve(rt, "wf-local")
        out = rt.result("wf-local", timeout=30)
    assert out["status"] == "REFUSED:stale_premise"
    assert admin.ledger()["refunds"] == []
    assert admin.log(path="/refunds", method="POST") == []


def test_a_pause_after_dispatch_past_the_deadline_sends_nothing(
    dsn, workers, target_factory
) -> None:
    """The worker stops right after T_dispatch committed and resumes after send_deadline: its
    stopwatch started before T_dispatch, so it must not send. Nothing may reach the target
    between the deadline and deadline + settle_margin (only recovery sends, after that)."""
    target, admin = target_factory(2)
    w = workers("W1", lease_ttl=30, env={"ILR_STOP_AT": "effect_after_dispatch"})
    with Runtime(dsn) as rt:
        rt.start(flows.refund, "wf-pause", _case(target, send_timeout=2.0, settle_margin=4.0))
        _approve(rt, "wf-pause")
        w.wait_stopped(timeout=30)
        with db.connect(dsn) as c:
            eff = c.execute("select effect_id, send_deadline, settle_margin, "
                            "extract(epoch from send_deadline) as deadline_s, "
                            "extract(epoch from send_deadline + settle_margin) as settled_s "
                            "from ilr.effects").fetchone()  # fmt: skip
            wait_for(lambda: c.execute("select now() > %s as x", (eff["send_deadline"],))
                     .fetchone()["x"], 30, "the send deadline to pass")  # fmt: skip
        w.signal(signal.SIGCONT)
        out = rt.result("wf-pause", timeout=60)
    arrivals = [p["arrival"] for p in admin.log(path="/refunds", method="POST")]
    early = [a for a in arrivals if float(eff["deadline_s"]) < a <= float(eff["settled_s"])]
    assert early == [], f"sends inside the settle window after the deadline: {early}"
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    assert out["status"] in ("COMMITTED", "REAPPLIED_AFTER_QUERY", "COMMITTED_BY_RETRY")


def test_committed_and_its_step_row_are_one_transaction(dsn, workers, target_factory) -> None:
    """Stopped right after T_commit: the effect is committed and its step row exists, while the
    claim that dispatched it is still current (EffectCheckpointAtomic)."""
    target, admin = target_factory(2)
    w = workers("W1", lease_ttl=30, env={"ILR_STOP_AT": "effect_after_commit"})
    with Runtime(dsn) as rt:
        rt.start(flows.refund, "wf-ckpt", _case(target))
        _approve(rt, "wf-ckpt")
        w.wait_stopped(timeout=30)
        with db.connect(dsn) as c:
            row = c.execute(
                "select e.state, w.status, w.epoch = e.dispatch_epoch as current, "
                "exists (select 1 from ilr.steps s where s.workflow_id = w.id "
                "and s.kind = 'effect') as has_step "
                "from ilr.effects e join ilr.workflows w on w.id = e.dispatch_workflow_id"
            ).fetchone()
        w.signal(signal.SIGCONT)
        rt.result("wf-ckpt", timeout=30)
    assert (row["state"], row["status"], row["current"]) == ("committed", "running", True)
    assert row["has_step"], "a committed effect with no step row under a current claim"
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]


def test_premises_older_than_their_max_age_are_read_again(dsn, workers, target_factory) -> None:
    """The worker stalls between reading the premises and T_dispatch for longer than
    premise_max_age (5 s); a hand refund lands meanwhile: the premises are read again and the
    send is refused."""
    target, admin = target_factory(2)
    w = workers("W1", lease_ttl=30, env={"ILR_STOP_AT": "effect_before_dispatch"})
    with Runtime(dsn) as rt, db.connect(dsn) as c:
        rt.start(flows.refund, "wf-age", _case(target))
        _approve(rt, "wf-age")
        w.wait_stopped(timeout=30)
        stopped = c.execute("select now() as t").fetchone()["t"]
        admin.hand_refund(PAYMENT, 2000)
        wait_for(lambda: c.execute("select now() - %s > interval '5.2 seconds' as x", (stopped,))
                 .fetchone()["x"], 30, "premise_max_age to pass")  # fmt: skip
        w.signal(signal.SIGCONT)
        out = rt.result("wf-age", timeout=30)
    assert [r["source"] for r in admin.ledger()["refunds"]] == ["hand"]
    assert admin.log(path="/refunds", method="POST") == []
    assert out["status"] == "REFUSED:stale_premise"


def test_a_grant_past_its_expiry_refuses_the_dispatch(dsn, workers, target_factory) -> None:
    """A policy grant that expired (by the database clock) before the send is judged in
    T_dispatch: refused as expired, nothing sent."""
    target, admin = target_factory(2)
    with Runtime(dsn) as rt, db.connect(dsn) as c:
        grant = rt.grant("agent", "refund", expires_in=0.5, by="policy")
        wait_for(lambda: c.execute("select expires_at < now() as x from ilr.grants where id = %s",
                                   (grant,)).fetchone()["x"], 10, "the grant to expire")  # fmt: skip
        workers("W1", lease_ttl=3)
        rt.start(flows.policy_refund, "wf-exp", {"id": "k-exp", "target_url": target.url,
                 "payment": PAYMENT, "tier": 2, "payload": {"amount": 2000}, "grant": grant})  # fmt: skip
        out = rt.result("wf-exp", timeout=30)
    assert out["status"] == "REFUSED:authority"
    assert "expired" in out["reason"]
    assert admin.ledger()["refunds"] == [] and admin.log(path="/refunds", method="POST") == []


def test_an_approval_given_to_one_workflow_does_not_cover_another(
    dsn, workers, target_factory
) -> None:
    """A grant whose principal is workflow:wf-own (what an approval is) is refused, in
    T_dispatch, to another workflow that knows its id; its own workflow may use it."""
    target, admin = target_factory(2)
    workers("W1", lease_ttl=3)
    with Runtime(dsn) as rt:
        grant = rt.grant("workflow:wf-own", "refund", by="alice")
        for wf, key in (("wf-thief", "k-thief"), ("wf-own", "k-own")):
            rt.start(flows.policy_refund, wf, {"id": key, "target_url": target.url,
                     "payment": PAYMENT, "tier": 2, "payload": {"amount": 2000}, "grant": grant})  # fmt: skip
        thief, own = rt.result("wf-thief", timeout=30), rt.result("wf-own", timeout=30)
    assert thief["status"] == "REFUSED:authority" and "principal_mismatch" in thief["reason"]
    assert own["status"] == "COMMITTED"
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    assert len(admin.log(path="/refunds", method="POST")) == 1
