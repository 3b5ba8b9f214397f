"""The Prove harness's runtime workflow: the refund case of docs/design.md#refund-case on interlock_runtime.

Run by real worker subprocesses (`python -m interlock_runtime.cli.worker --module prove.flows
--only prove_refund@1`).
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

Steps 1-3 are the shared refund body, world/refund_agent.py (run_refund), with S10's durable
timer between the approval and the effect when the case sets `timer_seconds`.

`prove_refund_async` is the same workflow as an `async def` (Prove's system `runtime_async`,
served by `python -m interlock_runtime.cli.worker --async --module prove.flows --only
prove_refund_async@1`): the same body and steps, driven by run_refund_async on the asyncio
worker (docs/async.md). A plain worker here serves `--only prove_refund@1`.
"""

from __future__ import annotations

from interlock_runtime import workflow
from world import refund_agent
from world.model_stub import decide_amount, warm_sdk
from world.refund_agent import payload_for  # noqa: F401  # prove/races.py imports it from here

warm_sdk()  # at worker start, before it registers (as the Temporal worker does before ready)


def refund_target(case: dict):
    """Prove's local target: 3 s send timeout, 5 s settle margin unless the case says."""
    return refund_agent.refund_target(case, send_timeout=3.0, settle_margin=5.0)


def ask_model(request: dict) -> dict:
    """One model call through the anthropic SDK (EMULATED model variance against the stub)."""
    return decide_amount(request["model_url"], request["case"],
                         context={"payment": request["payment"]}, worker=request.get("worker"))  # fmt: skip


def s10_timer(case: dict):
    """S10: a durable timer "timer" between the approval and the effect, when the case sets one
    (in an async workflow the lambda returns the timer's awaitable, which the body awaits)."""
    seconds = case.get("timer_seconds")
    return (lambda ctx: ctx.sleep(float(seconds), name="timer")) if seconds else None


def _refund_options(case: dict, ask, request: dict) -> dict:
    return {"decide": ask, "request": request, "offer": "proposed",
            "before_effect": s10_timer(case),
            "approval_timeout": case.get("approval_timeout", 600)}  # fmt: skip


def decide_approve_refund(ctx, case: dict, target, ask, request: dict):
    """Steps 1-3 (the shared refund body with Prove's options), also the Stripe flow's
    (prove/stripe_flows.py): the decision and the effect's result, None when the approval
    expired. offer="proposed": the effect sends the decided amount; an approval of another
    payload is refused."""
    return refund_agent.run_refund(ctx, case, target=target,
                                   **_refund_options(case, ask, request))  # fmt: skip


def _request(case: dict) -> dict:
    return {"case": case["id"], "payment": case["payment"], "model_url": case["model_url"]}


def _outcome(decision, r) -> dict:
    return {"status": r.status, "effect_id": r.effect_id, "result": r.result,
            "decided": decision.output["amount"], "decide_seq": decision.ref.get("seq")}  # fmt: skip


@workflow(name="prove_refund", version="1")
def prove_refund(ctx, case):
    decision, r = decide_approve_refund(ctx, case, refund_target(case), ask_model, _request(case))
    if r is None:
        return {"status": "approval expired"}
    ctx.sleep(float(case.get("sleep_seconds", 1.0)))  # shortened from the spec's long sleep
    return _outcome(decision, r)


@workflow(name="prove_refund_async", version="1")
async def prove_refund_async(ctx, case):
    """prove_refund as an `async def`: the same steps at the same places."""
    decision, r = await refund_agent.run_refund_async(
        ctx, case, target=refund_target(case), **_refund_options(case, ask_model, _request(case)))  # fmt: skip
    if r is None:
        return {"status": "approval expired"}
    await ctx.sleep(float(case.get("sleep_seconds", 1.0)))  # shortened from the spec's long sleep
    return _outcome(decision, r)
