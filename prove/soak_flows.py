"""The chaos soak's workflow (prove/soak.py): the refund of docs/design.md#refund-case, kept cheap per run.

Run by real worker subprocesses (`python -m interlock_runtime.worker --module prove.soak_flows`).
The shape is the Prove refund's (decide, wait for the approval, the gated refund), without the
model stub's HTTP round trip: the decision is an EMULATED model answer computed in-process, so
the soak spends its CPU on the runtime, Postgres and the target rather than on a model server.
Each case carries its own target URL, tier and payment (one payment per workflow, so a hand
refund on one case never makes another case's premises stale).
"""

from __future__ import annotations

from interlock_runtime import workflow
from world.target_client import LocalRefunds

EMULATED = "EMULATED model: the amount is a fixed answer computed in the worker, not a model call"


def soak_target(case: dict) -> LocalRefunds:
    return LocalRefunds(case["target_url"], case["payment"], case["tier"],
                        send_timeout=case.get("send_timeout", 2.5),
                        settle_margin=case.get("settle_margin", 1.0))  # fmt: skip


def emulated_model(request: dict) -> dict:
    """EMULATED model answer in the shape the runtime records (model, amount, usage)."""
    return {"model": "soak-emulated", "amount": int(request["amount"]), "usage": {}}


@workflow(name="soak_refund", version="1")
def soak_refund(ctx, case):
    target = soak_target(case)
    decision = ctx.decide("pick_amount", emulated_model,
                          {"case": case["id"], "amount": case["amount"]},
                          premises=target.capture)  # fmt: skip
    approval = ctx.wait_signal("approve", timeout=case.get("approval_timeout", 900))
    if approval is None:
        return {"status": "approval expired"}
    r = ctx.effect(target, key=f"refund:{case['id']}", payload=approval["payload"],
                   premises=approval["facts_seen"], grant=approval["grant_id"],
                   decision=decision.ref)  # fmt: skip
    return {"status": r.status, "effect_id": r.effect_id}
