"""The SQL race suite (docs/design.md#concessions R3): two transactions interleaved for real on two connections,
one held open while the other runs, lock waits observed from a third connection.

The effect path runs in-process on a real claim. A slow local premise (pg_sleep inside
T_dispatch, after the grant's FOR SHARE lock) holds T_dispatch open; a test-only trigger holds
the suspend transaction open. Both are created only in the test's own database.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import flows
import psycopg
import pytest

from conftest import wait_for
from interlock_runtime import Runtime, db
from interlock_runtime.context import Run, WorkflowContext
from interlock_runtime.runtime import cancel_in, revoke_in, signal_in
from world.target import Target
from world.target_client import LocalRefunds, TargetAdmin

PAYMENT = "pay_881"
SLOW_PREMISE = """
create schema if not exists ilr_test;
create or replace function ilr_test.slow_premise(args jsonb, effect_id text) returns jsonb
language plpgsql as $$
begin
  perform pg_sleep((args->>'seconds')::float8);
  return coalesce(args->'violations', '[]'::jsonb);
end $$;
"""


@pytest.fixture
def target(tmp_path):
    t = Target(2, db=str(tmp_path / "ledger.db")).start()
    TargetAdmin(t.url).create_payment(PAYMENT, 10000)
    yield t
    t.stop()


def claim(dsn: str, wf: str) -> Run:
    """Claim one workflow as a worker would (the real claim statement)."""
    with db.connect(dsn) as conn:
        params = {"names": ["policy_refund", "waiter"], "versions": ["1", "1"], "limit": 10,
                  "owner": "test", "ttl": 60, "queues": None}  # fmt: skip
        t0 = time.monotonic()
        rows = [r for r in conn.execute(db.query("claim"), params).fetchall() if r["id"] == wf]
    row = rows[0]
    return Run(row["id"], row["name"], row["version"], row["input"], row["epoch"], row["waiting"],
               row["takeovers"], row["cancel_requested_at"], 60, t0 + 60,
               claimed_now=row["claimed_now"])  # fmt: skip


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def backend_waiting(observer: psycopg.Connection, pid: int, event: str) -> bool:
    """pg_stat_activity is a per-transaction snapshot: poll it in autocommit (docs/design.md#refinements)."""
    row = observer.execute("select wait_event_type, wait_event from pg_stat_activity where pid = %s",
                           (pid,)).fetchone()  # fmt: skip
    return row is not None and event in (row["wait_event_type"], row["wait_event"])


def effect_ctx(dsn: str, wf: str) -> tuple[WorkflowContext, psycopg.Connection]:
    conn = db.connect(dsn)
    return WorkflowContext(claim(dsn, wf), conn, [], "test"), conn


def start_policy_refund(rt: Runtime, target: Target, wf: str, grant: str, amount: int = 2000,
                        seconds: float = 0.0, key: str = "case-1") -> None:  # fmt: skip
    rt.start(flows.policy_refund, wf, {"id": key, "target_url": target.url, "payment": PAYMENT,
             "tier": 2, "payload": {"amount": amount}, "grant": grant})  # fmt: skip


def run_effect(ctx: WorkflowContext, target: Target, grant: str, amount: int = 2000,
               seconds: float = 0.0, key: str = "case-1") -> Any:  # fmt: skip
    t = LocalRefunds(target.url, PAYMENT, 2, send_timeout=5, settle_margin=1)
    return ctx.effect(t, key=f"refund:{key}", payload={"amount": amount}, premises={},
                      grant=grant, local_premises=[("ilr_test.slow_premise", {"seconds": seconds})])  # fmt: skip


@pytest.fixture
def setup(dsn):
    with db.connect(dsn) as conn:
        conn.execute(SLOW_PREMISE)
    with Runtime(dsn) as rt, db.connect(dsn) as observer, db.connect(dsn) as other:
        yield rt, observer, other


def test_revoke_committed_first_refuses_the_dispatch(dsn, setup, target) -> None:
    rt, observer, other = setup
    grant = rt.grant("agent", "refund", by="policy")
    start_policy_refund(rt, target, "wf-r1", grant)
    ctx, conn = effect_ctx(dsn, "wf-r1")
    with other.transaction():
        assert revoke_in(other, grant, "alice") == []  # held open: not committed yet
        thread, box = in_thread(lambda: run_effect(ctx, target, grant))
        wait_for(lambda: backend_waiting(observer, conn.info.backend_pid, "Lock"), 10,
                 "T_dispatch to wait on the grant")  # fmt: skip
    thread.join(20)
    assert box["value"].status == "REFUSED:authority"
    assert TargetAdmin(target.url).ledger()["refunds"] == []


def test_dispatch_committed_first_is_in_the_revokes_list(dsn, setup, target) -> None:
    rt, observer, other = setup
    grant = rt.grant("agent", "refund", by="policy")
    start_policy_refund(rt, target, "wf-r2", grant)
    ctx, conn = effect_ctx(dsn, "wf-r2")
    thread, box = in_thread(lambda: run_effect(ctx, target, grant, seconds=1.5))
    wait_for(lambda: backend_waiting(observer, conn.info.backend_pid, "PgSleep"), 10,
             "T_dispatch to hold the grant FOR SHARE")  # fmt: skip
    revoker, revoked = in_thread(lambda: rt.revoke(grant, by="alice"))
    wait_for(lambda: backend_waiting(observer, rt._conn.info.backend_pid, "Lock"), 10,
             "the revoke to wait for T_dispatch")  # fmt: skip
    revoker.join(20)
    thread.join(20)
    eid = box["value"].effect_id
    # The dispatch committed before the revoke: the revoke returns it as "may still land".
    assert revoked["value"] == [eid]
    assert box["value"].status == "COMMITTED"


def test_cancel_committed_first_refuses_the_dispatch(dsn, setup, target) -> None:
    rt, observer, other = setup
    grant = rt.grant("agent", "refund", by="policy")
    start_policy_refund(rt, target, "wf-c1", grant)
    ctx, conn = effect_ctx(dsn, "wf-c1")
    with other.transaction():
        cancel_in(other, "wf-c1", "ops")
        thread, box = in_thread(lambda: run_effect(ctx, target, grant))
        wait_for(lambda: backend_waiting(observer, conn.info.backend_pid, "Lock"), 10,
                 "the fence to wait for the cancel")  # fmt: skip
    thread.join(20)
    assert box["value"].status == "REFUSED:cancelled"


def test_cancel_after_dispatch_waits_and_the_send_goes_out(dsn, setup, target) -> None:
    rt, observer, other = setup
    grant = rt.grant("agent", "refund", by="policy")
    start_policy_refund(rt, target, "wf-c2", grant)
    ctx, conn = effect_ctx(dsn, "wf-c2")
    thread, box = in_thread(lambda: run_effect(ctx, target, grant, seconds=1.0))
    wait_for(lambda: backend_waiting(observer, conn.info.backend_pid, "PgSleep"), 10, "T_dispatch")
    canceller, _ = in_thread(lambda: rt.cancel("wf-c2", by="ops"))
    wait_for(lambda: backend_waiting(observer, rt._conn.info.backend_pid, "Lock"), 10,
             "the cancel to wait for T_dispatch")  # fmt: skip
    thread.join(20)
    canceller.join(20)
    assert box["value"].status == "COMMITTED"  # authorized before the cancel committed
    assert rt.describe("wf-c2")["cancel_requested_at"] is not None


def test_concurrent_submits_with_different_payloads(dsn, setup, target) -> None:
    rt, observer, other = setup
    grant = rt.grant("agent", "refund", by="policy")
    start_policy_refund(rt, target, "wf-p1", grant)
    ctx1, conn1 = effect_ctx(dsn, "wf-p1")  # claims are taken one at a time
    start_policy_refund(rt, target, "wf-p2", grant, amount=3000)
    ctx2, conn2 = effect_ctx(dsn, "wf-p2")
    first, box1 = in_thread(lambda: run_effect(ctx1, target, grant, seconds=1.0))
    wait_for(lambda: backend_waiting(observer, conn1.info.backend_pid, "PgSleep"), 10, "the first")
    second, box2 = in_thread(lambda: run_effect(ctx2, target, grant, amount=3000))
    wait_for(lambda: backend_waiting(observer, conn2.info.backend_pid, "Lock"), 10,
             "the second to wait on the effect row")  # fmt: skip
    first.join(20)
    second.join(20)
    # The second T_dispatch got the effect row only after the first committed its dispatch: the
    # send is in flight, so it commits nothing and suspends until send_deadline + settle_margin.
    assert box1["value"].status == "COMMITTED"
    assert type(box2["error"]).__name__ == "Suspend" and "in flight" in str(box2["error"])
    rt.signal("wf-p2", "poke", {})  # wake it early; the effect is committed by now
    ctx3, _ = effect_ctx(dsn, "wf-p2")
    assert run_effect(ctx3, target, grant, amount=3000).status == "REFUSED:conflicting_payload"
    assert [r["amount"] for r in TargetAdmin(target.url).ledger()["refunds"]] == [2000]


HOLD_SUSPEND = """
create or replace function ilr_test.hold_suspend() returns trigger language plpgsql as $$
begin
  if new.status = 'sleeping' and old.status = 'running' then perform pg_sleep(1.0); end if;
  return new;
end $$;
create trigger hold_suspend before update on ilr.workflows
  for each row execute function ilr_test.hold_suspend();
"""


def test_signal_racing_a_suspend_is_never_lost(dsn, setup) -> None:
    """Signal sent while the suspend transaction is open: it waits for the row lock, then
    wakes the workflow (NoLostWakeup)."""
    rt, observer, other = setup
    rt.start(flows.waiter, "wf-s", {"timeout": 0.5})
    other.execute(HOLD_SUSPEND)
    ctx, conn = effect_ctx(dsn, "wf-s")
    thread, box = in_thread(lambda: ctx.wait_signal("go"))
    wait_for(lambda: backend_waiting(observer, conn.info.backend_pid, "PgSleep"), 10,
             "the suspend transaction")  # fmt: skip
    sender, _ = in_thread(lambda: rt.signal("wf-s", "go", {"n": 1}))
    wait_for(lambda: backend_waiting(observer, rt._conn.info.backend_pid, "Lock"), 10,
             "the signal to wait for the suspend")  # fmt: skip
    thread.join(20)
    sender.join(20)
    assert type(box["error"]).__name__ == "Suspend"
    row = rt.describe("wf-s")
    assert row["status"] == "pending"  # woken after the suspend committed: not lost


def test_signal_committed_first_is_seen_by_the_mailbox_check(dsn, setup) -> None:
    rt, observer, other = setup
    rt.start(flows.waiter, "wf-m", {"timeout": 0.5})
    ctx, conn = effect_ctx(dsn, "wf-m")
    with other.transaction():
        signal_in(other, "wf-m", "go", {"n": 7})
        thread, box = in_thread(lambda: ctx.wait_signal("go"))
        wait_for(lambda: backend_waiting(observer, conn.info.backend_pid, "Lock"), 10,
                 "the suspend's fence to wait for the signal")  # fmt: skip
    thread.join(20)
    assert box["value"] == {"n": 7}
    assert rt.describe("wf-m")["steps"][0]["output"] == {"n": 7}


def test_concurrent_appends_to_one_chain_are_rejected(dsn, setup) -> None:
    rt, observer, other = setup
    with db.connect(dsn) as conn:
        conn.execute("insert into ilr.deployments values ('w', '1', 'sha', now(), null)")
        conn.execute(
            "insert into ilr.workflows (id, name, version, input) values ('wf', 'w', '1', '{}')"
        )
        conn.execute("insert into ilr.effects (effect_id, workflow_id, target, tier, payload, "
                     "payload_hash) values ('e1', 'wf', 't', 1, '{}', 'h')")  # fmt: skip
        conn.execute("insert into ilr.journal (effect_id, kind, body, prev, hash) "
                     "values ('e1', 'PROPOSED', '{}', null, 'h0')")  # fmt: skip
        append = ("insert into ilr.journal (effect_id, kind, body, prev, hash) "
                  "values ('e1', 'AUTHORIZED', '{}', 'h0', %s)")  # fmt: skip
        with other.transaction():
            other.execute(append, ("h1a",))
            thread, box = in_thread(lambda: conn.execute(append, ("h1b",)))
            wait_for(lambda: backend_waiting(observer, conn.info.backend_pid, "Lock"), 10,
                     "the second append to wait")  # fmt: skip
        thread.join(10)
    assert isinstance(box["error"], psycopg.errors.UniqueViolation)
