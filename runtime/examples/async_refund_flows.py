"""The async example's workflow: the refund agent of refund_flows.py written with `async def`.

interlock worker --module async_refund_flows    (with runtime/examples on PYTHONPATH; every
                                                 workflow here is async, so the worker is the
                                                 asyncio one by itself: docs/async.md)

The workflow, `async_refund_agent`, records:

1. two steps at once (``asyncio.gather``): the payment and the refunds already made on it,
   read from the payment target; a replay returns each at its place, whichever came first;
2. ``decide`` "pick_amount": the model's amount through ``anthropic.AsyncAnthropic`` (here
   pointed at world/model_stub.py, EMULATED: Claude cannot be reached from this machine),
   awaited on the worker's event loop, recorded once with the premises read at that moment;
3. ``wait_approval`` of ``{payment, amount}``: a person approves exactly that;
4. ``effect`` "refund:{case id}": the refund, POSTed by `interlock_runtime.AsyncHttpTarget`
   to the payment target (world/target.py, standing in for Stripe: EMULATED) under the
   approval's grant, with the facts the approver saw as premises, re-read before every send;
5. a short durable sleep.

While the model or the target answers, the run is a coroutine on the worker's loop, not a
thread: the gate awaits the target's `apply` there, under the same stopwatch, lease check and
watchdog as any send (docs/async.md#effects). The reads use httpx, which AsyncHttpTarget needs
too (the `async-http` extra).
"""

from __future__ import annotations

import asyncio
import functools
import json
import urllib.request
from typing import Any
from urllib.parse import quote

import anthropic
import httpx
from refund_flows import violations

from interlock_runtime import AsyncHttpTarget, workflow

MODEL = "claude-haiku-4-5-20251001"

# One client per process and base URL, as an application keeps one: the asyncio worker runs
# every run on one event loop for its whole life, and the client's connection pool lives there.
_CLIENTS: dict[str, anthropic.AsyncAnthropic] = {}


def model_client(base_url: str) -> anthropic.AsyncAnthropic:
    client = _CLIENTS.get(base_url)
    if client is None:
        client = _CLIENTS[base_url] = anthropic.AsyncAnthropic(
            base_url=base_url, api_key="emulated", timeout=10.0, max_retries=0
        )
    return client


async def ask_model(request: dict) -> dict:
    """One model call through the async anthropic SDK (the EMULATED stub answers): the refund
    amount for the case, given what the workflow read."""
    facts = {"case": request["case"], "payment": request["payment"],
             "paid": request["paid"], "refunded": request["refunded"]}  # fmt: skip
    prompt = ("Decide the refund amount in cents for this support case. "
              'Answer with JSON only: {"amount": <cents>}.\n' + json.dumps(facts, sort_keys=True))  # fmt: skip
    msg = await model_client(request["model_url"]).messages.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": prompt}]
    )
    text = "".join(getattr(b, "text", "") for b in msg.content)
    amount = json.loads(text)["amount"]
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise ValueError(f"the model's amount is not an integer: {amount!r}")
    return {"amount": amount, "model": msg.model, "id": msg.id,
            "usage": {"input_tokens": msg.usage.input_tokens,
                      "output_tokens": msg.usage.output_tokens}}  # fmt: skip


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5.0) as resp:
        return json.loads(resp.read())


async def get_json(url: str) -> Any:
    """GET url and decode its JSON body."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        resp = await client.get(url)
    resp.raise_for_status()
    return resp.json()


def refund_target(case: dict[str, Any]) -> AsyncHttpTarget:
    """The payment target of one case, as refund_flows.refund_target with an async `apply`:
    tier 1 (the server dedupes Idempotency-Key), a lookup by payment and key, and a premise
    check (a plain function: the worker runs it in a thread) that re-reads the payment."""
    base = case["target_url"].rstrip("/")
    payment = case["payment"]

    def premise_check(premises: Any, effect_id: str) -> list[str]:
        q = quote(payment, safe="")
        p = _get(f"{base}/payments/{q}")
        ours = sum(r["amount"] for r in _get(f"{base}/refunds?payment={q}"
                                                f"&key={quote(effect_id, safe='')}"))  # fmt: skip
        others = p["refunded_total"] - ours  # a refund under our own key is not another's
        now = {"payment": payment, "eligible": p["paid"] - others > 0, "refunded_by_others": others}
        return violations(premises or {}, now)

    return AsyncHttpTarget(
        "payment-refunds",
        f"{base}/refunds",
        1,
        lookup=f"{base}/refunds?payment={{payment}}&key={{effect_id}}",
        action="refund",
        sender_headers=("X-ILR-Worker", "X-ILR-Epoch"),  # what the target's access log records
        send_timeout=float(case.get("send_timeout", 3.0)),
        settle_margin=float(case.get("settle_margin", 5.0)),
        premise_check=premise_check,
    )


async def premises_now(base: str, payment: str) -> dict:
    """The facts the decision rests on: ``{payment, eligible, refunded_by_others}`` (as
    refund_flows.capture, which the target re-reads before the send)."""
    p = await get_json(f"{base}/payments/{quote(payment, safe='')}")
    return {"payment": payment, "eligible": p["paid"] - p["refunded_total"] > 0,
            "refunded_by_others": p["refunded_total"]}  # fmt: skip


@workflow(name="async_refund_agent", version="1")
async def async_refund_agent(ctx, case):
    target = refund_target(case)
    base, payment = case["target_url"].rstrip("/"), case["payment"]
    paid, earlier = await asyncio.gather(  # two reads at once, each recorded at its place
        ctx.step("payment", get_json, f"{base}/payments/{quote(payment, safe='')}"),
        ctx.step("refunds", get_json, f"{base}/refunds?payment={quote(payment, safe='')}"),
    )
    request = {"case": case["id"], "payment": payment, "model_url": case["model_url"],
               "paid": paid["paid"], "refunded": sum(r["amount"] for r in earlier)}  # fmt: skip
    decision = await ctx.decide("pick_amount", ask_model, request,
                                premises=functools.partial(premises_now, base, payment))  # fmt: skip
    proposal = {"payment": payment, "amount": int(decision.output["amount"])}
    approval = await ctx.wait_approval(proposal, timeout=float(case.get("approval_timeout", 600)))
    if approval is None:
        return {"status": "approval expired"}
    r = await ctx.effect(target, key=f"refund:{case['id']}", payload=approval["payload"],
                         premises=approval["facts_seen"], grant=approval["grant_id"],
                         decision=decision.ref)  # fmt: skip
    await ctx.sleep(float(case.get("sleep_seconds", 1.0)))
    return {"status": r.status, "effect_id": r.effect_id, "result": r.result,
            "decided": proposal["amount"]}  # fmt: skip
