"""Verified completion (Ratchet's fourth guarantee): the target's own "ok" is never enough
where a post-condition is given; a failing or raising post-condition is never success."""

from __future__ import annotations

import flows
import pytest

from interlock_runtime import InvalidInput, Runtime, WorkflowFailed, receipts
from world.target import Target
from world.target_client import TargetAdmin


@pytest.fixture
def target(tmp_path):
    t = Target(2, db=str(tmp_path / "ledger.db")).start()
    TargetAdmin(t.url).create_payment("pay_881", 10000)
    yield t, TargetAdmin(t.url)
    t.stop()


def refund(rt, t, grant, cid, post, lie=False):
    rt.start(flows.verified_refund, cid, {"id": cid, "target_url": t.url, "payment": "pay_881",
             "tier": 2, "amount": 2000, "grant": grant, "post": post, "lie": lie})  # fmt: skip
    return rt.result(cid, timeout=30)


def test_an_honest_target_commits_verified(dsn, workers, target) -> None:
    t, admin = target
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", by="policy")
        workers("W")
        out = refund(rt, t, grant, "v1", "landed")
        bundle = rt.receipt(out["effect_id"])
    assert out["status"] == "COMMITTED"
    assert bundle["entries"][-1]["verified"] is True
    v = receipts.verify(bundle)
    assert v["valid"] and v["happened"] is True and v["verified"] is True


def test_a_target_that_says_ok_but_did_not_apply_is_caught(dsn, workers, target) -> None:
    t, admin = target
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", by="policy")
        workers("W")
        out = refund(rt, t, grant, "v2", "landed", lie=True)
        bundle = rt.receipt(out["effect_id"])
        ambiguous = [e["effect_id"] for e in rt.ambiguous()]
    assert out["status"] == "POSTCONDITION_FAILED"  # never success
    assert admin.ledger()["refunds"] == []  # indeed nothing happened
    assert ambiguous == [out["effect_id"]]  # a human must look
    last = bundle["entries"][-1]
    assert last["kind"] == "AMBIGUOUS" and "postcondition" in last["reason"]
    assert receipts.verify(bundle)["happened"] == "unknown"


def test_a_raising_postcondition_fails_closed(dsn, workers, target) -> None:
    t, admin = target
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", by="policy")
        workers("W")
        out = refund(rt, t, grant, "v3", "explode")
        bundle = rt.receipt(out["effect_id"])
    assert out["status"] == "POSTCONDITION_FAILED"
    assert "raised RuntimeError" in bundle["entries"][-1]["reason"]


def test_step_postconditions(dsn, workers, tmp_path) -> None:
    with Runtime(dsn) as rt:
        for wf, check in (("even", "even"), ("never", "never"), ("boom", "explode")):
            rt.start(flows.verified_step, wf, {"path": str(tmp_path / wf), "check": check})
        workers("W", poll=0.1)
        assert rt.result("even", timeout=30) == 2  # attempt 1 gave 1 (odd): not accepted
        for wf, kind in (("never", "PostconditionFailed"), ("boom", "ZeroDivisionError")):
            with pytest.raises(WorkflowFailed):
                rt.result(wf, timeout=30)
            step = rt.describe(wf)["steps"][0]
            assert step["error"]["type"] == kind and step["output"] is None
    assert (tmp_path / "never").read_text() == "3"  # retried to max_attempts, never recorded ok


def test_a_postcondition_that_is_not_callable_is_refused(dsn) -> None:
    from interlock_runtime.context import Run, WorkflowContext
    from interlock_runtime.db import connect
    from world.target_client import LocalRefunds

    with connect(dsn) as conn:
        ctx = WorkflowContext(Run("wf", "x", "1", {}, 1, None, 0, None, 5, 1e18), conn, [], "t")
        with pytest.raises(InvalidInput, match="not callable"):
            ctx.effect(LocalRefunds("http://127.0.0.1:9", "p", 2), key="k", payload={"amount": 1},
                       premises={}, grant="g", postcondition="yes please")  # fmt: skip
        with pytest.raises(TypeError, match="not callable"):
            ctx.step("s", lambda: 1, postcondition=42)
