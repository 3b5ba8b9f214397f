"""Gated effects end to end (docs/design.md#gated-effects): real worker subprocesses, the real local target, real
SIGKILL at the effect kill points, and receipts checked with verify().

Timeouts are short so recovery comes quickly: send_timeout 2.5 s, settle_margin 1 s.
"""

from __future__ import annotations

import signal

import flows
import pytest

from conftest import wait_for
from interlock_runtime import InvalidInput, Runtime, receipts
from world.target import Target
from world.target_client import TargetAdmin

PAYMENT = "pay_881"


@pytest.fixture(params=[1, 2, 3], ids=["tier1", "tier2", "tier3"])
def tier(request) -> int:
    return request.param


def case(target: Target, tier: int, case_id: str = "case-4471", **extra) -> dict:
    return {"id": case_id, "target_url": target.url, "payment": PAYMENT, "tier": tier, **extra}


def refunds(admin: TargetAdmin) -> list[int]:
    return [r["amount"] for r in admin.ledger()["refunds"]]


def posts(admin: TargetAdmin) -> list[dict]:
    return admin.log(path="/refunds", method="POST")


def start_and_approve(rt: Runtime, wf: str, c: dict, amount: int = 2000) -> str:
    rt.start(flows.refund, wf, c)
    wait_for(lambda: (rt.describe(wf)["waiting"] or {}).get("signal") == "approve", 30,
             "the approval wait")  # fmt: skip
    decided = rt.describe(wf)["steps"][0]["output"]
    return rt.approve(wf, {"payment": PAYMENT, "amount": amount}, decided["premises"], by="alice")


def test_happy_path_commits_once_with_a_valid_receipt(dsn, workers, target_factory, tier) -> None:
    target, admin = target_factory(tier)
    with Runtime(dsn) as rt:
        workers("W1")
        grant = start_and_approve(rt, "wf-ok", case(target, tier))
        out = rt.result("wf-ok", timeout=30)
        bundle = rt.receipt(out["effect_id"], key=b"k")
        eff = rt.effects("wf-ok")[0]
    assert out["status"] == "COMMITTED" and out["result"]["amount"] == 2000
    assert refunds(admin) == [2000]
    assert eff["state"] == "committed" and eff["sends"] == 1 and eff["grant_id"] == grant
    assert eff["action"] == "refund"  # recorded at the proposal (describe lists it)
    v = receipts.verify(bundle, b"k")
    assert v["valid"] and v["happened"] is True and v["happened_once"] is True
    assert v["authorized_when_fired"] is True and v["assumptions_held"] is True and v["signed"]
    kinds = [e["kind"] for e in bundle["entries"]]
    assert kinds == ["PROPOSED", "AUTHORIZED", "DISPATCHED", "COMMITTED"]
    sent = posts(admin)
    assert len(sent) == 1 and sent[0]["worker"] == "W1" and sent[0]["epoch"] == "2"


EXPECTED_AFTER_SEND = {1: ("COMMITTED_BY_RETRY", True), 2: ("COMMITTED_ON_QUERY", True),
                       3: ("AMBIGUOUS", "unknown")}  # fmt: skip


def test_crash_after_send_recovers_by_tier(dsn, workers, target_factory, tier) -> None:
    """S01: SIGKILL after the target answered, before T_commit."""
    target, admin = target_factory(tier)
    with Runtime(dsn) as rt:
        dying = workers("W1", env={"ILR_KILL_AT": "effect_after_send"}, lease_ttl=1.5)
        start_and_approve(rt, "wf-s01", case(target, tier))
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        workers("W2", lease_ttl=1.5)
        out = rt.result("wf-s01", timeout=40)
        v = receipts.verify(rt.receipt(out["effect_id"]))
    status, happened = EXPECTED_AFTER_SEND[tier]
    assert out["status"] == status
    assert refunds(admin) == [2000]  # our applications = 1 at every tier
    assert v["valid"] and v["happened"] == happened
    if tier == 1:
        assert [p["worker"] for p in posts(admin)] == ["W1", "W2"]  # the resend was deduped
        assert v["happened_once"] is True and v["sends"] == 2
    else:
        assert [p["worker"] for p in posts(admin)] == ["W1"]  # never resent
    if tier == 3:
        with Runtime(dsn) as rt:
            assert [e["effect_id"] for e in rt.ambiguous()] == [out["effect_id"]]
            rt.reconcile(out["effect_id"], "ledger shows re_1 for 2000", by="ops")
            assert rt.receipt(out["effect_id"])["reconciled"]["by"] == "ops"


def test_hand_refund_during_outage_is_refused_at_recovery(
    dsn, workers, target_factory, tier
) -> None:
    """S02: killed after T_dispatch with nothing sent; a person refunds 2000 meanwhile."""
    target, admin = target_factory(tier)
    with Runtime(dsn) as rt:
        dying = workers("W1", env={"ILR_KILL_AT": "effect_after_dispatch"}, lease_ttl=1.5)
        start_and_approve(rt, "wf-s02", case(target, tier))
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        assert posts(admin) == []  # the killed worker sent nothing (access log)
        admin.hand_refund(PAYMENT, 2000)
        workers("W2", lease_ttl=1.5)
        out = rt.result("wf-s02", timeout=40)
        v = receipts.verify(rt.receipt(out["effect_id"]))
    expected = "AMBIGUOUS" if tier == 3 else "REFUSED:stale_premise_at_recovery"
    assert out["status"] == expected
    assert refunds(admin) == [2000]  # the hand refund only
    assert posts(admin) == []
    assert v["valid"] and v["happened"] == ("unknown" if tier == 3 else False)


def test_revoke_during_outage_is_refused_at_recovery(dsn, workers, target_factory, tier) -> None:
    """S03: killed after T_dispatch; the approval is revoked while no worker runs."""
    target, admin = target_factory(tier)
    with Runtime(dsn) as rt:
        dying = workers("W1", env={"ILR_KILL_AT": "effect_after_dispatch"}, lease_ttl=1.5)
        grant = start_and_approve(rt, "wf-s03", case(target, tier))
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        eid = rt.effects("wf-s03")[0]["effect_id"]
        assert rt.revoke(grant, by="alice") == [eid]  # exactly what may still land
        workers("W2", lease_ttl=1.5)
        out = rt.result("wf-s03", timeout=40)
    assert out["status"] == ("AMBIGUOUS" if tier == 3 else "REFUSED:authority_at_recovery")
    assert refunds(admin) == [] and posts(admin) == []


def test_revoked_grant_refuses_the_dispatch(dsn, workers, target_factory) -> None:
    target, admin = target_factory(2)
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", constraints={"amount": {"max": 5000}}, by="policy")
        assert rt.revoke(grant, by="alice") == []
        rt.start(flows.policy_refund, "wf-rev", case(target, 2, payload={"amount": 2000},
                                                      grant=grant))  # fmt: skip
        workers("W1")
        out = rt.result("wf-rev", timeout=30)
        v = receipts.verify(rt.receipt(out["effect_id"]))
    assert out["status"] == "REFUSED:authority" and refunds(admin) == []
    assert out["reason"].startswith(f"revoked: grant {grant!r} was revoked at ")
    assert v["valid"] and v["happened"] is False and v["refused"]


def test_amount_above_the_grant_cap_is_refused(dsn, workers, target_factory) -> None:
    target, admin = target_factory(2)
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", constraints={"amount": {"max": 1000}}, by="policy")
        rt.start(flows.policy_refund, "wf-cap", case(target, 2, payload={"amount": 2000},
                                                      grant=grant))  # fmt: skip
        workers("W1")
        out = rt.result("wf-cap", timeout=30)
    assert out["status"] == "REFUSED:authority" and refunds(admin) == []
    assert out["reason"] == "constraint: amount 2000 is above the grant's max 1000"


@pytest.mark.parametrize(("granted", "offered", "why"), [
    ("send_email", None, "action_mismatch: grant 'g-act' allows action 'send_email', this "
                         "effect is 'refund'"),  # the target's declared action
    ("refund", "refund_partial", "action_mismatch: grant 'g-act' allows action 'refund', this "
                                 "effect is 'refund_partial'"),  # ctx.effect(action=...)
    ("refund_partial", "refund_partial", None),
])  # fmt: skip
def test_a_grant_covers_only_its_action_and_the_refusal_says_so(
    dsn, workers, target_factory, granted, offered, why
) -> None:
    target, admin = target_factory(2)
    with Runtime(dsn) as rt:
        rt.grant("agent", granted, by="policy", grant_id="g-act")
        rt.start(flows.policy_refund, "wf-act", case(target, 2, payload={"amount": 2000},
                                                      grant="g-act", action=offered))  # fmt: skip
        workers("W1")
        out = rt.result("wf-act", timeout=30)
    if why is None:
        assert out["status"] == "COMMITTED" and refunds(admin) == [2000]
    else:
        assert out["status"] == "REFUSED:authority" and out["reason"].startswith(why)
        assert refunds(admin) == [] and posts(admin) == []


def test_fork_reaching_a_committed_effect_sends_nothing(dsn, workers, target_factory) -> None:
    """ForkNeverResends: the fork replays the decision and approval, reaches the effect."""
    target, admin = target_factory(2)
    with Runtime(dsn) as rt:
        workers("W1")
        start_and_approve(rt, "wf-orig", case(target, 2))
        assert rt.result("wf-orig", timeout=30)["status"] == "COMMITTED"
        rt.fork("wf-orig", at_seq=3, new_id="wf-fork")
        assert rt.result("wf-fork", timeout=30)["status"] == "DUPLICATE_IGNORED"
    assert refunds(admin) == [2000] and len(posts(admin)) == 1


def test_cancelled_workflow_effect_is_refused(dsn, workers, target_factory) -> None:
    target, admin = target_factory(1)
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", by="policy")
        rt.start(flows.cancel_then_refund, "wf-cx", case(target, 1, payload={"amount": 2000},
                                                          grant=grant))  # fmt: skip
        workers("W1")
        wait_for(lambda: rt.describe("wf-cx")["status"] == "sleeping", 20, "the wait")
        rt.cancel("wf-cx", by="ops")
        assert rt.result("wf-cx", timeout=30) == {"status": "REFUSED:cancelled"}
    assert refunds(admin) == []


def test_bad_effect_input_is_refused_before_anything_is_written(dsn, target_factory) -> None:
    from interlock_runtime.context import Run, WorkflowContext
    from interlock_runtime.db import connect
    from world.target_client import LocalRefunds

    target, _ = target_factory(1)
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", by="policy")
    good = LocalRefunds(target.url, PAYMENT, 1)

    class NoApply:
        name, tier = "broken", 1

    class BadTier:
        name, tier = "odd", 4
        apply = validate_premises = staticmethod(lambda *a, **k: [])

    with connect(dsn) as conn:
        ctx = WorkflowContext(
            Run("wf", "refund", "1", {}, 1, None, 0, None, 5, 1e18), conn, [], "t"
        )
        cases = [
            (dict(target=good, payload={"when": object()}), "not JSON-serializable"),
            (dict(target=good, payload={"amount": 1}, grant="grant_nope"), "unknown grant"),
            (dict(target=NoApply()), "is not an effect target"),
            (dict(target=BadTier()), "tier 4"),
        ]
        for kwargs, message in cases:
            args = dict(key="k", payload={"amount": 1}, premises={}, grant=grant) | kwargs
            with pytest.raises(InvalidInput, match=message):
                ctx.effect(**args)
            ctx._seq = 0
        written = conn.execute("select (select count(*) from ilr.effects) + "
                               "(select count(*) from ilr.journal) as n").fetchone()["n"]  # fmt: skip
    assert written == 0


def test_tier1_dedup_margin_must_exceed_timeout_plus_settle() -> None:
    from interlock_runtime.effects import check_target
    from world.target_client import LocalRefunds

    t = LocalRefunds("http://127.0.0.1:9", PAYMENT, 1, send_timeout=35, settle_margin=10)
    t.dedup_margin = 40
    with pytest.raises(InvalidInput, match=r"40.0 <= 35.0 \+ 10.0"):
        check_target(t)
    t.dedup_margin = 46
    assert check_target(t).tier == 1


def test_receipt_and_verify_through_the_cli(dsn, workers, target_factory, tmp_path) -> None:
    import json
    import os
    import subprocess
    import sys

    target, _ = target_factory(2)
    with Runtime(dsn) as rt:
        workers("W1")
        grant = start_and_approve(rt, "wf-cli", case(target, 2))
        eid = rt.result("wf-cli", timeout=30)["effect_id"]

    env = dict(os.environ, ILR_TEST_KEY="s3cret")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "interlock_runtime.cli", *args],
                              capture_output=True, text=True, env=env, timeout=60)  # fmt: skip

    out = cli("receipt", eid, "--key-env", "ILR_TEST_KEY", "--dsn", dsn)
    assert out.returncode == 0, out.stderr
    path = tmp_path / "bundle.json"
    path.write_text(out.stdout)
    ok = cli("verify", str(path), "--key-env", "ILR_TEST_KEY")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(cli("verify", str(path), "--key-env", "ILR_TEST_KEY", "--json").stdout)[
        "signed"
    ]
    tampered = out.stdout.replace('"amount": 2000', '"amount": 2001', 1)
    assert tampered != out.stdout
    path.write_text(tampered)
    assert cli("verify", str(path), "--key-env", "ILR_TEST_KEY").returncode == 1
    missing = cli("verify", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "nope.json" in missing.stderr
    revoked = cli("revoke", grant, "--by", "alice", "--dsn", dsn)
    assert revoked.returncode == 0 and "may still land: 0" in revoked.stdout
    assert "(none)" in cli("ambiguous", "--dsn", dsn).stdout


def test_late_result_after_a_takeover_is_preserved(dsn, workers, target_factory) -> None:
    """S08a shape: the sender's Postgres link is partitioned right after T_dispatch; its send
    lands (target delay 2 s); a successor takes over and resolves the effect by query; when the
    partition heals, the sender's T_commit fails the fence and its response is kept as
    LATE_RESULT, never dropped (LateResultPreserved)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from world.fault_proxy import FaultProxy

    target, admin = target_factory(2, delay_ms=2000)
    params = conninfo_to_dict(dsn)
    with FaultProxy(upstream=(params["host"], int(params["port"]))) as proxy, Runtime(dsn) as rt:
        via_proxy = make_conninfo(**{**params, "host": "127.0.0.1", "port": str(proxy.port)})
        sender = workers("A", dsn=via_proxy, lease_ttl=1.5,
                         env={"ILR_STOP_AT": "effect_after_dispatch"})  # fmt: skip
        start_and_approve(rt, "wf-late", case(target, 2, send_timeout=4.0))
        sender.wait_stopped()
        proxy.set_mode("blackhole")  # A can reach the target, but no longer Postgres
        sender.signal(signal.SIGCONT)
        wait_for(lambda: posts(admin), 10, "A's send to arrive")
        workers("B", lease_ttl=1.5)
        out = rt.result("wf-late", timeout=40)
        assert out["status"] == "COMMITTED_ON_QUERY"
        proxy.set_mode("pass")
        sender.wait_event("fenced", wf="wf-late", by="write", timeout=20)
        eff = rt.effects("wf-late")[0]
        v = receipts.verify(rt.receipt(out["effect_id"]))
        kinds = [e["kind"] for e in rt.receipt(out["effect_id"])["entries"]]
    assert refunds(admin) == [2000] and [p["worker"] for p in posts(admin)] == ["A"]
    assert kinds[-2:] == ["COMMITTED", "LATE_RESULT"]
    assert eff["late_result"]["from_epoch"] == 2
    assert eff["late_result"]["state_at_arrival"] == "committed"
    assert v["valid"] and v["happened"] is True and v["happened_once"] is True


def test_recover_orphans_resolves_effects_of_a_workflow_that_will_never_run(
    dsn, workers, target_factory
) -> None:
    """A workflow that ended stuck with its effect still dispatched: rt.recover_orphans resolves
    it under a synthetic claim ($recovery) and restores the workflow's status."""
    import time

    from world.target_client import LocalRefunds

    target, admin = target_factory(2)
    with Runtime(dsn) as rt:
        dying = workers("W1", env={"ILR_KILL_AT": "effect_after_dispatch"}, lease_ttl=1.5)
        start_and_approve(rt, "wf-orphan", case(target, 2))
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        rt._execute("update ilr.workflows set status = 'stuck', owner = null, "
                    "lease_expires_at = null where id = 'wf-orphan'")  # fmt: skip
        assert rt.recover_orphans({"local-refunds": LocalRefunds(target.url, PAYMENT, 2)}) == []
        time.sleep(2.5 + 1.0 + 0.2)  # past send_deadline + settle_margin
        done = rt.recover_orphans({"local-refunds": LocalRefunds(target.url, PAYMENT, 2)})
        row = rt.describe("wf-orphan")
        eff = rt.effects("wf-orphan")[0]
    assert [d["outcome"] for d in done] == ["REAPPLIED_AFTER_QUERY"]
    assert eff["state"] == "committed" and refunds(admin) == [2000]
    assert row["status"] == "stuck" and row["claims"][-1]["owner"] == "$recovery"
    assert not any(s["kind"] == "effect" for s in row["steps"])  # journal and effects row only


def test_a_tier2_target_without_lookup_is_refused() -> None:
    """Found by the parity test: recovery at tier 2 must query before resending; a target that
    neither dedupes nor answers lookups is tier 3 and is refused as tier 2."""
    from interlock_runtime.effects import check_target
    from world.target_client import LocalRefunds

    with pytest.raises(InvalidInput, match="tier 2 means the target answers lookups"):
        check_target(LocalRefunds("http://127.0.0.1:9", PAYMENT, 2, queryable=False))
