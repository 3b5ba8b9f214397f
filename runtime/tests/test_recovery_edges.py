"""Recovery corner cases with a real worker crash and the real local target, judged by the
target's ledger (docs/design.md#gated-effects, recovery). Named in models/mutants/recovery.yaml.
"""

from __future__ import annotations

import signal
import time

import async_effect_flows
import pytest
from test_effects import start_and_approve

from conftest import wait_for
from interlock_runtime import Runtime, receipts

PAYMENT = "pay_881"


def test_tier1_past_its_dedup_window_is_looked_up_not_resent(dsn, workers, target_factory) -> None:
    """A tier-1 target keeps idempotency keys for dedup_window seconds (2 here). The worker dies
    after its send landed; the target forgets the key (pruned, as its window says it may);
    recovery comes after the window, so a resend would apply a second time: it must look the
    effect up instead (tier 1 read as tier 2) and find the first application."""
    target, admin = target_factory(1)
    c = {"id": "case-age", "target_url": target.url, "payment": PAYMENT, "tier": 1,
         "dedup_window": 2.0}  # fmt: skip
    with Runtime(dsn) as rt:
        dying = workers("W1", env={"ILR_KILL_AT": "effect_after_send"}, lease_ttl=1.5)
        start_and_approve(rt, "wf-age", c)
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]  # the send landed
        admin.prune_keys()
        workers("W2", lease_ttl=1.5)
        out = rt.result("wf-age", timeout=40)
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    assert out["status"] == "COMMITTED_ON_QUERY"


# The recovery read comes just after send_timeout + settle_margin = 6 s; tier 1 holds until
# dedup_window - dedup_margin = 8.5 s after the first dispatch (C2: 7 > 5 + 1). The stall at
# the stop point (about 2.5 s) stays within the resend's send budget (5 s less the 1 s
# minimum, counted from before T_resolve, B10), which would otherwise refuse the resend.
WINDOW = {"send_timeout": 5.0, "dedup_window": 15.5, "dedup_margin": 7.0}
TIER1_FOR = WINDOW["dedup_window"] - WINDOW["dedup_margin"]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    ("queryable", "status"),
    [(True, "COMMITTED_ON_QUERY"), (False, "AMBIGUOUS")],
    ids=["lookup", "no_lookup"],
)
def test_a_window_that_closes_before_t_resolve_sends_it_round_again(
    dsn, conn, workers, target_factory, mode, queryable, status
) -> None:
    """W1 dies after its tier-1 send landed. W2's recovery reads while the tier-1 window is
    open and stops right before T_resolve; the window closes and the target forgets the key
    (pruned, as the window lets it). T_resolve must judge the tier again and send recovery
    round: a lookup finds the refund (tier 2), or with no lookup it is AMBIGUOUS (tier 3). A
    resend under the tier read earlier would apply the refund twice (the model's TierAtRead,
    docs/design.md#recovery). The stall must end within the resend's send budget, or the
    stopwatch alone would refuse the resend and hide the bug."""
    target, admin = target_factory(1)
    wf = f"wf-window-{mode}-{queryable}"
    with Runtime(dsn) as rt:
        module = "flows" if mode == "sync" else "async_effect_flows"
        dying = workers(
            "W1", module=module, env={"ILR_KILL_AT": "effect_after_send"}, lease_ttl=1.5
        )
        if mode == "sync":
            c = {
                "id": wf,
                "target_url": target.url,
                "payment": PAYMENT,
                "tier": 1,
                "queryable": queryable,
                **WINDOW,
            }
            start_and_approve(rt, wf, c)
        else:
            grant = rt.grant("agent", "refund", by="policy")
            c = {
                "url": target.url,
                "tier": 1,
                "payment": PAYMENT,
                "grant": grant,
                "amount": 2000,
                "queryable": queryable,
                **WINDOW,
            }
            rt.start(async_effect_flows.ae_refund, wf, c)
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]  # the send landed
        recovering = workers(
            "W2", module=module, env={"ILR_STOP_AT": "resolve_before_begin"}, lease_ttl=60
        )
        recovering.wait_stopped(timeout=30)
        age = (
            "select extract(epoch from now() - first_dispatched_at)::float as age"
            " from ilr.effects where workflow_id = %s"
        )
        read_at = conn.execute(age, (wf,)).fetchone()["age"]
        assert read_at < TIER1_FOR, f"the recovery read came {read_at:.1f} s after dispatch"
        wait_for(
            lambda: conn.execute(age, (wf,)).fetchone()["age"] > TIER1_FOR + 0.2,
            30,
            "the tier-1 window to close",
        )
        admin.prune_keys()
        recovering.proc.send_signal(signal.SIGCONT)
        out = rt.result(wf, timeout=40)
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]  # never applied twice
    assert len(admin.log(path="/refunds", method="POST")) == 1  # nothing was resent
    assert out["status"] == status


FROZEN = """
create schema if not exists ilr_test;
create table ilr_test.frozen (account text primary key);
create function ilr_test.not_frozen(args jsonb, eid text) returns jsonb language sql as $$
  select coalesce(jsonb_agg('account ' || account || ' is frozen'), '[]'::jsonb)
    from ilr_test.frozen where account = args->>'account' $$;
"""


@pytest.mark.parametrize("tier", [1, 2])
def test_a_local_premise_broken_during_an_outage_refuses_the_resend(
    dsn, conn, workers, target_factory, tier
) -> None:
    """Killed after T_dispatch with nothing sent; meanwhile a local SQL premise stops holding
    (the account is frozen in the application's own table). Recovery re-reads the local
    premises inside T_resolve, as T_dispatch did, and sends nothing."""
    conn.execute(FROZEN)
    target, admin = target_factory(tier)
    c = {"id": "case-frozen", "target_url": target.url, "payment": PAYMENT, "tier": tier,
         "local_premises": [["ilr_test.not_frozen", {"account": "acct-7"}]]}  # fmt: skip
    with Runtime(dsn) as rt:
        dying = workers("W1", env={"ILR_KILL_AT": "effect_after_dispatch"}, lease_ttl=1.5)
        start_and_approve(rt, "wf-frozen", c)
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        conn.execute("insert into ilr_test.frozen values ('acct-7')")
        workers("W2", lease_ttl=1.5)
        out = rt.result("wf-frozen", timeout=40)
    assert admin.ledger()["refunds"] == []
    assert admin.log(path="/refunds", method="POST") == []
    assert out["status"] == "REFUSED:stale_premise_at_recovery"


def test_a_resend_starts_its_own_deadline(dsn, workers, target_factory) -> None:
    """W1 dies after T_dispatch; W2 resends at recovery and dies while the target still holds
    that resend (3.5 s, inside the resend's own send_timeout + settle_margin of 4 + 2). W3 must
    wait for the resend's deadline before it looks, so it finds the resend applied instead of
    resending a second time."""
    target, admin = target_factory(2)
    c = {"id": "case-dl", "target_url": target.url, "payment": PAYMENT, "tier": 2,
         "send_timeout": 4.0, "settle_margin": 2.0}  # fmt: skip
    with Runtime(dsn) as rt:
        w1 = workers("W1", env={"ILR_KILL_AT": "effect_after_dispatch"}, lease_ttl=1.5)
        start_and_approve(rt, "wf-dl", c)
        assert w1.proc.wait(timeout=30) == -signal.SIGKILL
        admin.set_delay(3500, count=1)
        w2 = workers("W2", lease_ttl=1.5)
        wait_for(lambda: admin.log(path="/refunds", method="POST"), 30, "W2's resend to arrive")
        w2.signal(signal.SIGKILL)
        workers("W3", lease_ttl=1.5)
        out = rt.result("wf-dl", timeout=60)
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    assert out["status"] in ("COMMITTED_ON_QUERY", "DUPLICATE_IGNORED")


def test_a_revoke_during_the_outage_after_the_send_landed_commits_on_lookup(
    dsn, workers, target_factory
) -> None:
    """Tier 1 with lookup: the send landed, the worker died before T_commit, and the grant was
    revoked meanwhile. Recovery may not resend, but it must look: the effect happened, and the
    record must say so (not REFUSED while the ledger shows the refund)."""
    target, admin = target_factory(1)
    c = {"id": "case-rl", "target_url": target.url, "payment": PAYMENT, "tier": 1}
    with Runtime(dsn) as rt:
        dying = workers("W1", env={"ILR_KILL_AT": "effect_after_send"}, lease_ttl=1.5)
        grant = start_and_approve(rt, "wf-rl", c)
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        eid = rt.effects("wf-rl")[0]["effect_id"]
        assert rt.revoke(grant, by="bob") == [eid]  # it may still land: it already did
        workers("W2", lease_ttl=1.5)
        out = rt.result("wf-rl", timeout=40)
        v = receipts.verify(rt.receipt(eid))
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    assert len(admin.log(path="/refunds", method="POST")) == 1  # looked up, never resent
    assert out["status"] == "COMMITTED_ON_QUERY"
    assert v["happened"] is True


def test_tier1_recovery_looks_up_before_it_resends_to_a_slow_target(
    dsn, workers, target_factory
) -> None:
    """A tier-1 target that answers lookups serves every refund 3 s after it arrives: past the
    2.5 s send timeout, within the 1 s settle margin. The first send times out, and the one
    resend under the key times out too; a send the watchdog catches ends its worker (exit 75).
    The recovery after the resend must look the effect up and find it applied: another resend
    would time out again, and so on for every worker after it (docs/design.md#recovery).

    Which worker sends what depends on timing: the client's own timeout may beat the
    watchdog, and then the worker suspends the run and resends it itself. So workers are
    started one at a time as each ends, and the test counts what the target saw: 2 requests,
    1 refund, at most 2 workers ended, and the last one still running."""
    target, admin = target_factory(1)
    c = {"id": "case-slow1", "target_url": target.url, "payment": PAYMENT, "tier": 1}
    admin.set_delay(3000)
    with Runtime(dsn) as rt:
        current, started, ended = workers("W1", lease_ttl=1.5), 1, 0
        start_and_approve(rt, "wf-slow1", c)
        deadline = time.monotonic() + 120
        while not rt.result_now("wf-slow1")[0]:
            assert time.monotonic() < deadline, "no result within 120 s"
            code = current.proc.poll()
            if code is not None:
                assert code == 75, f"W{started} exited {code}, not by the send watchdog"
                ended += 1
                assert ended <= 2, "a third worker ended: the effect was resent again"
                started += 1
                current = workers(f"W{started}", lease_ttl=1.5)
            time.sleep(0.1)
        out = rt.result("wf-slow1", timeout=30)
        assert current.proc.poll() is None  # the last worker sent nothing, so nothing timed out
    assert 1 <= ended <= 2
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]  # the key held
    assert len(admin.log(path="/refunds", method="POST")) == 2
    assert out["status"] == "COMMITTED_ON_QUERY"
