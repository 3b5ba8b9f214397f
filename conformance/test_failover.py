"""Failover (issue 20, the bounded version of `make soak`'s failover mode): refunds in flight on
real workers that reach Postgres through a multi-host DSN, the primary SIGKILLed mid-send, the
synchronous standby promoted, the old primary rewound and back as the standby. Everything
completes, nothing is applied twice at tiers 1 and 2, no epoch goes backwards, and every
catalog invariant holds over the run."""

from __future__ import annotations

import pytest

from conformance.invariants import Evidence, check_all, target_config
from conformance.run_sources import FLOWS, flows
from interlock_runtime import Runtime, UnsafeDatabase, db, migrations
from interlock_runtime.testing import WorkerProcess, wait_for
from world.pg_pair import PgPair
from world.target import Target
from world.target_client import TargetAdmin

N = 24  # per tier
LANDED = ("COMMITTED", "COMMITTED_ON_QUERY", "REAPPLIED_AFTER_QUERY", "COMMITTED_BY_RETRY")


@pytest.mark.parametrize("how", ["kill"])
def test_a_failover_loses_nothing_and_applies_nothing_twice(tmp_path, how: str) -> None:
    with PgPair() as pair:
        dsn = pair.dsn()
        with db.connect(dsn) as conn:
            migrations.ensure(conn)
        # a 400 ms service time keeps sends in flight when the primary dies
        targets = {tier: Target(tier, db=str(tmp_path / f"ledger{tier}.db"), delay_ms=400).start()
                   for tier in (1, 2)}  # fmt: skip
        workers: list[WorkerProcess] = []
        try:
            admins = {tier: TargetAdmin(t.url) for tier, t in targets.items()}
            ids = [f"f-t{tier}-{i}" for tier in targets for i in range(N)]
            with Runtime(dsn) as rt:
                grant = rt.grant("agent", "refund", constraints={"amount": {"max": 5000}},
                                 by="policy")  # fmt: skip
                for tier in targets:
                    for i in range(N):
                        wf, pay = f"f-t{tier}-{i}", f"pay_{i}"
                        admins[tier].create_payment(pay, 10000)
                        rt.start(flows.policy_refund, wf, {
                            "id": wf, "target_url": targets[tier].url, "payment": pay,
                            "tier": tier, "payload": {"amount": 100, "payment": pay},
                            "grant": grant, "send_timeout": 2.5, "settle_margin": 1.0})  # fmt: skip
            for name in ("A", "B"):
                workers.append(WorkerProcess(dsn, name, tmp_path, "flows", pythonpath=str(FLOWS),
                                             cwd=str(FLOWS), lease_ttl=3.0, poll=0.2,
                                             concurrency=4))  # fmt: skip

            def posts() -> int:
                return sum(len(a.log(method="POST", path="/refunds")) for a in admins.values())

            wait_for(lambda: posts() >= 4, 90, "sends to start")
            before = posts()
            event = pair.failover(how)  # in the middle of the sends
            with Runtime(dsn) as rt:
                results = {wf: rt.result(wf, timeout=240)["status"] for wf in ids}
            assert all(w.proc.poll() is None for w in workers), "a worker died"
            ledger = [dict(r, target=t.url) for t in targets.values()
                      for r in TargetAdmin(t.url).ledger()["refunds"]]  # fmt: skip
            log = [
                dict(r, target=t.url) for t in targets.values() for r in TargetAdmin(t.url).log()
            ]
            with db.connect(dsn) as conn:
                ev = Evidence(conn, ledger=ledger, access_log=log,
                              events=[e for w in workers for e in w.events()],
                              targets={t.url: target_config(t.url) for t in targets.values()})  # fmt: skip
                violations = {k: v for k, v in check_all(ev).items() if v}
                epochs = conn.execute(
                    "select count(*) from ilr.claims c join ilr.claims d on c.workflow_id = "
                    "d.workflow_id and d.epoch > c.epoch and d.claimed_at < c.claimed_at"
                ).fetchone()["count"]
        finally:
            for w in workers:
                w.close()
            for t in targets.values():
                t.stop()
    assert event["promoted_s"] > 0 and pair.failovers == [event]
    assert before < 2 * N, before  # the failover came while refunds were still to be sent
    assert any(e["event"] == "db_unavailable" for e in ev.events)  # the workers lost it
    assert set(results.values()) <= set(LANDED), sorted(set(results.values()))
    keys = [r["key"] for r in ledger]
    assert len(keys) == 2 * N and len(set(keys)) == 2 * N  # every refund applied exactly once
    assert epochs == 0  # no later epoch was claimed before an earlier one
    assert violations == {}


def test_a_client_rides_through_a_crash_restart_and_a_failover() -> None:
    """Runtime's transactional calls (start, signal, cancel, approve, revoke) find a dead
    connection at BEGIN, connect again (the multi-host DSN reaches whichever node is primary)
    and go on: no error reaches the caller for a connection that died between two calls."""
    with PgPair() as pair:
        with Runtime(pair.dsn()) as rt:
            rt.start(flows.echo, "c-0", {"n": 0})
            pair.crash_restart("immediate")
            rt.start(flows.echo, "c-1", {"n": 1})  # the first call after the restart
            pair.failover("kill")
            rt.signal("c-1", "nudge", {"n": 2})  # the first call after the failover
            rt.cancel("c-0", by="test")
            rows = rt.list()
        # With a synchronous standby configured, a session that commits locally only would
        # lose acknowledged commits at a failover: refused (durability.check).
        with pytest.raises(UnsafeDatabase, match="synchronous_commit = local"):
            Runtime(pair.dsn() + "&options=-c%20synchronous_commit%3Dlocal")
    assert {r["id"] for r in rows} >= {"c-0", "c-1"}
