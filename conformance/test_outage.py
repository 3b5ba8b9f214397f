"""Outage (issue: reliability): 200 refunds in flight, Postgres crashed and down for 15 s, then
a 10 s partition of one worker's link. Everything completes, nothing recorded re-runs, nothing
is applied twice, and every catalog invariant holds over the run."""

from __future__ import annotations

import time

import pytest

from conformance.invariants import Evidence, check_all, target_config
from conformance.run_sources import FLOWS, flows
from interlock_runtime import Runtime, db, local_postgres, testing
from interlock_runtime.testing import WorkerProcess, wait_for
from world.fault_proxy import FaultProxy
from world.target import Target
from world.target_client import TargetAdmin

N = 200
LANDED = ("COMMITTED", "COMMITTED_ON_QUERY", "REAPPLIED_AFTER_QUERY")

pytestmark = [
    pytest.mark.skipif(local_postgres.external_dsn() is not None,
                       reason="crashes the project's own cluster"),
    pytest.mark.exclusive,  # every other test would see the crash
]  # fmt: skip


def test_outage_loses_nothing_and_applies_nothing_twice(tmp_path) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    admin = testing.admin_dsn()
    with (
        testing.template_database(admin) as template,
        testing.fresh_database(admin, template) as dsn,
    ):
        params = conninfo_to_dict(dsn)
        target = Target(2, db=str(tmp_path / "ledger.db")).start()
        workers: list[WorkerProcess] = []
        try:
            target_admin = TargetAdmin(target.url)
            for i in range(N):
                target_admin.create_payment(f"pay_{i}", 10000)
            with FaultProxy(upstream=(params["host"], int(params["port"]))) as proxy:
                via_proxy = make_conninfo(
                    **{**params, "port": str(proxy.port), "host": "127.0.0.1"}
                )
                with Runtime(dsn) as rt:
                    grant = rt.grant(
                        "agent", "refund", constraints={"amount": {"max": 5000}}, by="policy"
                    )
                    for i in range(N):
                        rt.start(flows.policy_refund, f"o-{i}", {
                            "id": f"o-{i}", "target_url": target.url, "payment": f"pay_{i}",
                            "tier": 2, "payload": {"amount": 100, "payment": f"pay_{i}"},
                            "grant": grant, "send_timeout": 2.5, "settle_margin": 1.0})  # fmt: skip
                for name, link in (("A", via_proxy), ("B", dsn), ("C", dsn)):
                    workers.append(WorkerProcess(link, name, tmp_path, "flows", pythonpath=str(FLOWS),
                                                 cwd=str(FLOWS), lease_ttl=2.0, poll=0.2,
                                                 concurrency=4))  # fmt: skip
                wait_for(lambda: len(target_admin.log(method="POST")) >= 10, 60, "sends to start")
                local_postgres.crash()  # in the middle of the sends
                time.sleep(15)
                local_postgres.start()
                proxy.set_mode("blackhole")  # then worker A alone loses its database for 10 s
                time.sleep(10)
                proxy.set_mode("pass")
                with Runtime(dsn) as rt:
                    results = {
                        f"o-{i}": rt.result(f"o-{i}", timeout=180)["status"] for i in range(N)
                    }
                assert all(w.proc.poll() is None for w in workers)  # no worker crashed
                with db.connect(dsn) as conn:
                    ev = Evidence(conn, ledger=target_admin.ledger()["refunds"],
                                  access_log=target_admin.log(),
                                  events=[e for w in workers for e in w.events()],
                                  targets={target.url: target_config(target.url)})  # fmt: skip
                    violations = {k: v for k, v in check_all(ev).items() if v}
        finally:
            for w in workers:
                w.close()
            target.stop()
    assert set(results.values()) <= set(LANDED), sorted(set(results.values()))
    keys = [r["key"] for r in ev.ledger]
    assert len(keys) == N and len(set(keys)) == N  # every refund applied exactly once
    assert any(e["event"] == "db_unavailable" for e in ev.events)  # the outage really happened
    assert violations == {}
