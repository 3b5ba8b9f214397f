"""A payload re-decided after its approval (issue 22, mutants PayloadBindingUnchecked and
ApprovalUnbound).

rt.approve makes a grant bound to the hash of exactly the payload the person approved. A
workflow that re-decides after the approval and offers another payload under that grant must be
refused at T_dispatch with the binding's reason, before anything reaches the target.
"""

from __future__ import annotations

import flows

from interlock_runtime import Runtime, receipts
from interlock_runtime.journal import payload_hash
from interlock_runtime.testing import wait_for

PAYMENT = "pay_881"


def test_a_payload_redecided_after_approval_is_refused_and_nothing_is_sent(
    dsn, workers, target_factory
) -> None:
    target, admin = target_factory(2)
    approved = {"payment": PAYMENT, "amount": 2000}
    with Runtime(dsn) as rt:
        workers("W1")
        rt.start(flows.redecided_refund, "wf-bind", {"id": "case-bind", "target_url": target.url,
                 "payment": PAYMENT, "tier": 2, "amount": 2000, "redecided": 3000})  # fmt: skip
        wait_for(lambda: (rt.describe("wf-bind")["waiting"] or {}).get("proposal") == approved,
                 30, "the approval wait")  # fmt: skip
        grant = rt.approve("wf-bind", approved, {"payment": PAYMENT, "refunded_by_others": 0},
                           by="alice")  # fmt: skip
        out = rt.result("wf-bind", timeout=30)
        bundle = rt.receipt(out["effect_id"])
    assert out["status"] == "REFUSED:authority", out
    assert out["reason"].startswith(f"payload_not_approved: grant {grant!r} approves one exact "
                                    "payload and this is another"), out  # fmt: skip
    assert admin.log(path="/refunds", method="POST") == []
    assert admin.ledger()["refunds"] == []
    entries = bundle["entries"]
    assert [e["kind"] for e in entries] == ["PROPOSED", "REFUSED"]
    assert entries[0]["effect"] == {"payment": PAYMENT, "amount": 3000}
    assert entries[1]["checks"]["lease"]["payload_hash"] == payload_hash(approved)
    v = receipts.verify(bundle)
    assert v["valid"] and v["happened"] is False and v["refused"]
