"""The refund case (docs/design.md#refund-case) through the Stripe adapter (EMULATED: the official stripe SDK
pointed at the local target's Stripe-compatible subset).

Run by real worker subprocesses (``python -m interlock_runtime.cli.worker --module prove.stripe_flows``
with the repository root on PYTHONPATH). The case input carries the target URL, the payment, the
tier and the timings; with ``model_url`` the amount comes from the model stub through the official
anthropic SDK (EMULATED model variance), else it is ``case["amount"]`` (default 2000).

Steps: decide the amount (recorded once, with the premises it saw), wait for the ``approve``
signal (``rt.approve``: a grant bound to the approved payload's hash), then the refund of the
decided amount through ``ctx.effect`` on ``StripeRefunds`` under that grant: the shared refund
body of world/refund_agent.py, as prove/flows.py runs it, on another target.
"""

from __future__ import annotations

from interlock_runtime import workflow
from prove.flows import decide_approve_refund
from world.model_stub import decide_amount
from world.stripe_target import StripeRefunds


def stripe_target(case: dict) -> StripeRefunds:
    return StripeRefunds(
        case["target_url"],
        case["payment"],
        case.get("tier", 1),
        send_timeout=case.get("send_timeout", 3.0),
        settle_margin=case.get("settle_margin", 5.0),
        max_network_retries=case.get("max_network_retries"),
    )


def pick_amount(request: dict) -> dict:
    """The model's amount (through the anthropic SDK against the stub), or the scripted one."""
    if request.get("model_url"):
        return decide_amount(request["model_url"], request["case"],
                             context={"payment": request["payment"]})  # fmt: skip
    return {"amount": int(request.get("amount", 2000)), "model": None}


@workflow(name="stripe_refund", version="1")
def stripe_refund(ctx, case):
    request = {"case": case["id"], "payment": case["payment"],
               "model_url": case.get("model_url"), "amount": case.get("amount", 2000)}  # fmt: skip
    decision, r = decide_approve_refund(ctx, case, stripe_target(case), pick_amount, request)
    if r is None:
        return {"status": "approval expired"}
    return {"status": r.status, "effect_id": r.effect_id, "result": r.result,
            "decided": decision.output["amount"]}  # fmt: skip
