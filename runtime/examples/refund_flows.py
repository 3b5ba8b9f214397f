"""The end-to-end example's workflow: an agent refunds a customer through `HttpTarget`.

interlock worker --module refund_flows          (with runtime/examples on PYTHONPATH)

The workflow, `refund_agent`, records:

1. ``decide`` "pick_amount": the model's amount (through the official anthropic SDK; here
   pointed at world/model_stub.py, EMULATED: Claude cannot be reached from this machine),
   recorded once with the premises read from the payment target at that moment;
2. ``wait_approval`` of the payload ``{payment, amount}``: a person approves exactly that
   (``interlock approve WF --by alice``), which makes a grant bound to it;
3. ``effect`` "refund:{case id}": the refund, POSTed by `interlock_runtime.HttpTarget` to the
   payment target (world/target.py, standing in for Stripe: EMULATED) under the approval's
   grant, with the facts the approver saw as premises, re-read before every send;
4. a short durable sleep.

The target is tier 1: the server dedupes the ``Idempotency-Key`` header (the effect id), so a
worker that takes over resends and gets the stored refund back. Its lookup
(``GET /refunds?payment=...&key=...``) and its premise check read the target's own API; the
``X-ILR-Worker`` / ``X-ILR-Epoch`` headers put the sending worker and its claim epoch in the
target's access log.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from interlock_runtime import HttpTarget, workflow
from interlock_runtime.effects.targets import HttpTargetError
from world.model_stub import decide_amount, warm_sdk

warm_sdk()  # import the anthropic SDK at worker start, not inside the first decision


def refund_target(case: dict[str, Any]) -> HttpTarget:
    """The payment target of one case (``case["target_url"]``, ``case["payment"]``)."""
    base = case["target_url"].rstrip("/")
    payment = case["payment"]

    def premise_check(premises: Any, effect_id: str) -> list[str]:
        return violations(premises or {}, capture(target, base, payment, effect_id))

    target = HttpTarget(
        "payment-refunds",
        f"{base}/refunds",
        1,  # the server dedupes Idempotency-Key: a resend replays the stored refund
        lookup=f"{base}/refunds?payment={{payment}}&key={{effect_id}}",
        action="refund",
        sender_headers=("X-ILR-Worker", "X-ILR-Epoch"),  # what the target's access log records
        send_timeout=float(case.get("send_timeout", 3.0)),
        settle_margin=float(case.get("settle_margin", 5.0)),
        premise_check=premise_check,
    )
    return target


def _get(target: HttpTarget, url: str) -> Any:
    status, body = target.request("GET", url)
    if status != 200:
        raise HttpTargetError(status, body, f"GET {url}")
    return body


def capture(target: HttpTarget, base: str, payment: str, effect_id: str | None = None) -> dict:
    """The premises now: ``{payment, eligible, refunded_by_others}``.

    ``refunded_by_others`` is the payment's ``refunded_total`` minus the refunds made under our
    own effect id (the target records the Idempotency-Key as a refund's ``key``), so a refund
    that already landed does not make its own premises look stale when a worker takes over."""
    p = _get(target, f"{base}/payments/{quote(payment, safe='')}")
    ours = 0
    if effect_id is not None:
        found = _get(target, f"{base}/refunds?payment={quote(payment, safe='')}"
                             f"&key={quote(effect_id, safe='')}")  # fmt: skip
        ours = sum(r["amount"] for r in found)
    others = p["refunded_total"] - ours
    return {"payment": payment, "eligible": p["paid"] - others > 0, "refunded_by_others": others}


def violations(premises: dict, now: dict) -> list[str]:
    """What no longer holds of ``premises``, given the facts ``now`` (empty: they hold)."""
    out = []
    if premises.get("payment") not in (None, now["payment"]):
        out.append(f"payment changed: {premises['payment']} -> {now['payment']}")
    was = premises.get("refunded_by_others")
    if was is not None and was != now["refunded_by_others"]:
        out.append(f"refunded_by_others changed: {was} -> {now['refunded_by_others']}")
    if not now["eligible"] and premises.get("eligible", True):
        out.append(f"payment {now['payment']} is no longer eligible")
    return out


def ask_model(request: dict) -> dict:
    """One model call through the anthropic SDK (the EMULATED stub answers)."""
    return decide_amount(request["model_url"], request["case"],
                         context={"payment": request["payment"]})  # fmt: skip


@workflow(name="refund_agent", version="1")
def refund_agent(ctx, case):
    target = refund_target(case)
    base, payment = case["target_url"].rstrip("/"), case["payment"]
    request = {"case": case["id"], "payment": payment, "model_url": case["model_url"]}
    decision = ctx.decide("pick_amount", ask_model, request,
                          premises=lambda: capture(target, base, payment))  # fmt: skip
    proposal = {"payment": payment, "amount": int(decision.output["amount"])}
    approval = ctx.wait_approval(proposal, timeout=float(case.get("approval_timeout", 600)))
    if approval is None:
        return {"status": "approval expired"}
    r = ctx.effect(target, key=f"refund:{case['id']}", payload=approval["payload"],
                   premises=approval["facts_seen"], grant=approval["grant_id"],
                   decision=decision.ref)  # fmt: skip
    ctx.sleep(float(case.get("sleep_seconds", 1.0)))
    return {"status": r.status, "effect_id": r.effect_id, "result": r.result,
            "decided": proposal["amount"]}  # fmt: skip
