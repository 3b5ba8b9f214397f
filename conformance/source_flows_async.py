"""The `async def` twins of the workflows conformance/run_sources.py runs (mode "async").

Served by the asyncio worker: `python -m interlock_runtime.cli.worker --async --module
conformance.source_flows_async` with the repository root and runtime/tests on PYTHONPATH. Each
twin has the name and version of its plain original in runtime/tests/flows.py and records the
same steps in the same order, with the same step bodies (imported from there: plain functions,
run in the worker's thread pool); the refund flows are the shared refund body
(world/refund_agent.py) driven by run_refund_async. A database serves one mode: the sources
start each run in a fresh one.
"""

from __future__ import annotations

from flows import local_premises, log_invocation, refund_target, stub_model

from interlock_runtime import Cancelled, workflow
from world import refund_agent


async def _three(ctx, inp):
    sleeps = inp.get("sleep", {})
    return [await ctx.step(name, log_invocation, inp["log"], name, ctx.worker_id, ctx.epoch,
                           sleeps.get(name, 0))
            for name in ("s1", "s2", "s3")]  # fmt: skip


@workflow(name="three_steps", version="1")
async def three_steps(ctx, inp):
    return await _three(ctx, inp)


@workflow(name="zombie_steps", version="1")
async def zombie_steps(ctx, inp):
    """three_steps under its own name, for a worker that must hold this run and no other."""
    return await _three(ctx, inp)


@workflow(name="sleeper", version="1")
async def sleeper(ctx, inp):
    before = await ctx.step("before", log_invocation, inp["log"], "before", ctx.worker_id,
                            ctx.epoch, 0)  # fmt: skip
    await ctx.sleep(inp["seconds"])
    after = await ctx.step("after", log_invocation, inp["log"], "after", ctx.worker_id,
                           ctx.epoch, 0)  # fmt: skip
    return [before, after]


@workflow(name="waiter", version="1")
async def waiter(ctx, inp):
    first = await ctx.wait_signal("go")
    second = await ctx.wait_signal("go")
    late = await ctx.wait_signal("never", timeout=inp.get("timeout", 0.5))
    return [first, second, late]


def _plus_one(n: int) -> int:
    return n + 1


@workflow(name="counter", version="1")
async def counter(ctx, inp):
    n = await ctx.step("count", _plus_one, inp["n"])
    if n < inp["until"]:
        await ctx.continue_as_new({"n": n, "until": inp["until"]})
    return n


@workflow(name="forkable", version="1")
async def forkable(ctx, inp):
    return [(await ctx.step(name, log_invocation, inp["log"], name, ctx.worker_id,
                            ctx.epoch, 0))["step"]
            for name in ("a", "b", "c")]  # fmt: skip


@workflow(name="refund", version="1")
async def refund(ctx, case):
    """decide, wait for approval, refund through the gate (flows.refund's body)."""
    decision, r = await refund_agent.run_refund_async(
        ctx, case, target=refund_target(case), decide=stub_model,
        approval_timeout=case.get("approval_timeout", 600), local_premises=local_premises(case))  # fmt: skip
    if r is None:
        return {"status": "approval expired"}
    return {"status": r.status, "effect_id": r.effect_id, "result": r.result}


async def wait_for_cancel(ctx) -> None:
    try:
        await ctx.wait_signal("never")
    except Cancelled:
        pass


@workflow(name="cancel_then_refund", version="1")
async def cancel_then_refund(ctx, case):
    """Cancelled while it waits, it still sends its refund (under the standing grant)."""
    _, r = await refund_agent.run_refund_async(
        ctx, case, target=refund_target(case), payload=case["payload"], authority="grant",
        premises={"payment": case["payment"]}, before_effect=wait_for_cancel)  # fmt: skip
    return {"status": r.status}


@workflow(name="policy_refund", version="1")
async def policy_refund(ctx, case):
    """A refund under a standing policy grant (no approval step): the payload is the input's
    (flows.policy_refund's body; conformance/test_netns_workers.py in async mode)."""
    _, r = await refund_agent.run_refund_async(
        ctx, case, target=refund_target(case), capture=True, payload=case["payload"],
        authority="grant", local_premises=local_premises(case), action=case.get("action"),
        compensation=case.get("compensation", False))  # fmt: skip
    return {"status": r.status, "effect_id": r.effect_id, "reason": r.reason}
