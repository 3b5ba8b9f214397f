"""Separation of duties at the database: what the worker role can never do, and a refund that
still completes with workers running under it (sql/roles.sql)."""

from __future__ import annotations

import flows
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from conftest import wait_for
from interlock_runtime import Runtime, db
from interlock_runtime.runtime import cancel_in, revoke_in, signal_in
from world.target import Target
from world.target_client import TargetAdmin

LOGINS = {"ilr_t_worker": "worker", "ilr_t_operator": "operator", "ilr_t_auditor": "auditor"}


def as_user(dsn: str, user: str) -> str:
    return make_conninfo(**{**conninfo_to_dict(dsn), "user": user})


@pytest.fixture
def roles(dsn, conn):
    db.apply_roles(conn, LOGINS)
    db.apply_roles(conn, LOGINS)  # idempotent
    conn.execute("insert into ilr.deployments values ('w', '1', 'sha', now(), null)")
    conn.execute("insert into ilr.workflows (id, name, version, input, status) "
                 "values ('wf', 'w', '1', '{}', 'sleeping')")  # fmt: skip
    conn.execute("insert into ilr.steps (workflow_id, seq, name, kind, output, epoch) "
                 "values ('wf', 1, 's', 'step', '1', 1)")  # fmt: skip
    conn.execute("insert into ilr.effects (effect_id, workflow_id, target, tier, payload, payload_hash) "
                 "values ('e1', 'wf', 't', 1, '{}', 'h')")  # fmt: skip
    conn.execute("insert into ilr.journal (effect_id, kind, body, prev, hash) "
                 "values ('e1', 'PROPOSED', '{}', null, 'h0')")  # fmt: skip
    conn.execute("insert into ilr.grants (id, principal, action, granted_by) "
                 "values ('g1', 'agent', 'refund', 'policy')")  # fmt: skip
    return {role: as_user(dsn, user) for user, role in LOGINS.items()}


WORKER_DENIED = [
    ("insert a grant", "insert into ilr.grants (id, principal, action, granted_by) values "
                       "('g2', 'agent', 'refund', 'agent')"),
    ("widen a grant", "update ilr.grants set constraints = null"),
    ("revoke", "update ilr.grants set revoked_at = now()"),
    ("forge an approval signal", "insert into ilr.signals (workflow_id, name, payload) "
                                 "values ('wf', 'approve', '{\"grant_id\": \"g1\"}')"),
    ("cancel", "update ilr.workflows set cancel_requested_at = now()"),
    ("reconcile", "update ilr.effects set reconciled = '{}'"),
    ("update a journal row", "update ilr.journal set body = '{}'"),
    ("delete a journal row", "delete from ilr.journal"),
    ("update a step row", "update ilr.steps set output = '2'"),
    ("delete a step row", "delete from ilr.steps"),
]  # fmt: skip


@pytest.mark.parametrize("what,statement", WORKER_DENIED, ids=[w for w, _ in WORKER_DENIED])
def test_the_worker_role_is_refused_by_the_database(roles, what, statement) -> None:
    with psycopg.connect(roles["worker"], autocommit=True) as worker:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker.execute(statement)


def test_the_worker_role_cannot_approve_revoke_or_cancel_through_the_client(roles) -> None:
    with db.connect(roles["worker"]) as worker:
        for body in (lambda c: signal_in(c, "wf", "approve", {"grant_id": "g1"}),
                     lambda c: revoke_in(c, "g1", "agent"), lambda c: cancel_in(c, "wf", "agent")):  # fmt: skip
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                with worker.transaction():
                    body(worker)
    with Runtime(roles["worker"]) as rt, pytest.raises(psycopg.errors.InsufficientPrivilege):
        rt.approve("wf", {"amount": 1}, {}, by="agent")


def test_operator_and_auditor(roles) -> None:
    with Runtime(roles["operator"]) as rt:
        assert rt.revoke("g1", by="alice") == []
        rt.cancel("wf", by="alice")
    with psycopg.connect(roles["auditor"], autocommit=True) as auditor:
        assert auditor.execute("select count(*) from ilr.journal").fetchone()[0] == 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            auditor.execute("update ilr.workflows set status = 'failed'")
    with psycopg.connect(roles["operator"], autocommit=True) as operator:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            operator.execute("update ilr.journal set body = '{}'")


def test_a_refund_completes_with_workers_under_the_worker_role(roles, workers, tmp_path) -> None:
    target = Target(2, db=str(tmp_path / "ledger.db")).start()
    try:
        TargetAdmin(target.url).create_payment("pay_881", 10000)
        case = {"id": "case-r", "target_url": target.url, "payment": "pay_881", "tier": 2}
        with Runtime(roles["operator"]) as rt:
            rt.register(flows.refund, flows.child_flow, flows.parent_flow)
            rt.start(flows.refund, "wf-r", case)
            rt.start(flows.parent_flow, "wf-p", {"x": 2})
            workers("W", dsn=roles["worker"])
            wait_for(lambda: (rt.describe("wf-r")["waiting"] or {}).get("signal") == "approve", 30,
                     "the approval wait")  # fmt: skip
            premises = rt.describe("wf-r")["steps"][0]["output"]["premises"]
            rt.approve("wf-r", {"payment": "pay_881", "amount": 2000}, premises, by="alice")
            assert rt.result("wf-r", timeout=30)["status"] == "COMMITTED"
            assert rt.result("wf-p", timeout=30) == {"child": "wf-p/1", "result": 4}
        assert [r["amount"] for r in TargetAdmin(target.url).ledger()["refunds"]] == [2000]
    finally:
        target.stop()
