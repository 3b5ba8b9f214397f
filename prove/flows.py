"""The Prove harness's runtime workflow: the refund case of docs/design.md#refund-case on interlock_runtime.

Run by real worker subprocesses (`python -m interlock_runtime.worker --module prove.flows`).
The case input carries everything a run needs (target URL, tier, model stub URL, timings), so
one module serves every run of a sweep, each with its own target, stub and database.

The shape matches the Temporal baseline (baselines/refund.py) step for step:
1. decide: the amount, from the model through the official anthropic SDK pointed at the model
   stub (EMULATED model variance, world/model_stub.py), recorded once with the premises it saw;
2. wait for the `approve` signal (rt.approve: a grant bound to the approved payload's hash and
   the facts the approver saw);
3. the refund of the *decided* amount through ctx.effect on the LocalRefunds target (tier
   1/2/3), under the approval's grant; a payload other than the approved one is refused;
4. a shortened sleep (seconds, standing in for the spec's long sleep; labeled in the report).
"""

from __future__ import annotations

from interlock_runtime import workflow
from world.model_stub import decide_amount, warm_sdk
from world.target_client import LocalRefunds

warm_sdk()  # at worker start, before it registers (as the Temporal worker does before ready)


def refund_target(case: dict) -> LocalRefunds:
    return LocalRefunds(
        case["target_url"],
        case["payment"],
        case["tier"],
        send_timeout=case.get("send_timeout", 3.0),
        settle_margin=case.get("settle_margin", 5.0),
        dedup_window=case.get("dedup_window", float("inf")),
        queryable=case.get("queryable"),
    )


def ask_model(request: dict) -> dict:
    """One model call through the anthropic SDK (EMULATED model variance against the stub)."""
    return decide_amount(request["model_url"], request["case"],
                         context={"payment": request["payment"]}, worker=request.get("worker"))  # fmt: skip


def payload_for(case: dict, amount: int) -> dict:
    """The refund payload; rt.approve binds the grant to exactly this shape's hash."""
    return {"payment": case["payment"], "amount": int(amount)}


def decide_approve_refund(ctx, case: dict, target, ask, request: dict):
    """Steps 1-3, shared with the Stripe flow (prove/stripe_flows.py): returns the decision and
    the effect's result, or None for the result when the approval expired."""
    decision = ctx.decide("pick_amount", ask, request, premises=target.capture)
    proposal = payload_for(case, decision.output["amount"])
    approval = ctx.wait_approval(proposal, timeout=case.get("approval_timeout", 600))
    if approval is None:
        return decision, None
    if case.get("timer_seconds"):  # S10: a durable timer between the approval and the effect
        ctx.sleep(float(case["timer_seconds"]), name="timer")
    r = ctx.effect(target, key=f"refund:{case['id']}",
                   payload=payload_for(case, decision.output["amount"]),
                   premises=approval["facts_seen"], grant=approval["grant_id"],
                   decision=decision.ref)  # fmt: skip
    return decision, r


@workflow(name="prove_refund", version="1")
def prove_refund(ctx, case):
    request = {"case": case["id"], "payment": case["payment"], "model_url": case["model_url"]}
    decision, r = decide_approve_refund(ctx, case, refund_target(case), ask_model, request)
    if r is None:
        return {"status": "approval expired"}
    ctx.sleep(float(case.get("sleep_seconds", 1.0)))  # shortened from the spec's long sleep
    return {"status": r.status, "effect_id": r.effect_id, "result": r.result,
            "decided": decision.output["amount"], "decide_seq": decision.ref.get("seq")}  # fmt: skip
