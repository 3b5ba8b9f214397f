"""The `async def` twins of flows_sync.py (mode "async"): the same names, steps and bodies
(plain functions, run in the asyncio worker's threads)."""

from __future__ import annotations

from conformance.matrix.bodies import hang_first, hold, once_then_fail_first, plus_one
from conformance.matrix.flows_sync import RETRY, STEP_LIMIT
from interlock_runtime import workflow


@workflow(name="m_steps", version="1")
async def m_steps(ctx, inp):
    out = [await ctx.step("s1", hold, inp["log"], ctx.workflow_id, "s1", inp["hold"],
                          retry=RETRY)]  # fmt: skip
    out.append(await ctx.step("s2", once_then_fail_first, inp["log"], ctx.workflow_id, "s2",
                              inp["hold"], retry=RETRY))  # fmt: skip
    out.append(await ctx.step("s3", hold, inp["log"], ctx.workflow_id, "s3", inp["hold"],
                              retry=RETRY))  # fmt: skip
    return out


@workflow(name="m_timer", version="1")
async def m_timer(ctx, inp):
    before = await ctx.step("before", hold, inp["log"], ctx.workflow_id, "before", 0, retry=RETRY)
    await ctx.sleep(inp["seconds"])
    after = await ctx.step("after", hold, inp["log"], ctx.workflow_id, "after", 0, retry=RETRY)
    return [before, after]


@workflow(name="m_signals", version="1")
async def m_signals(ctx, inp):
    first = await ctx.wait_signal("go")
    second = await ctx.wait_signal("go")
    return [first, second]


@workflow(name="m_queued", version="1")
async def m_queued(ctx, inp):
    return await ctx.step("work", hold, inp["log"], ctx.workflow_id, "work", inp["hold"],
                          retry=RETRY)  # fmt: skip


@workflow(name="m_deadline", version="1")
async def m_deadline(ctx, inp):
    for i in range(inp["steps"]):
        await ctx.step(f"s{i}", hold, inp["log"], ctx.workflow_id, f"s{i}", inp["hold"],
                       retry=RETRY)  # fmt: skip
    return "finished"


@workflow(name="m_scheduled", version="1")
async def m_scheduled(ctx, inp):
    await ctx.step(
        "tick",
        hold,
        inp["input"]["log"],
        ctx.workflow_id,
        "tick",
        inp["input"].get("hold", 0),
        retry=RETRY,
    )
    return inp["scheduled_at"]


@workflow(name="m_child", version="1")
async def m_child(ctx, inp):
    return await ctx.step("work", hold, inp["log"], ctx.workflow_id, "work", inp["hold"],
                          retry=RETRY)  # fmt: skip


@workflow(name="m_parent", version="1")
async def m_parent(ctx, inp):
    out = []
    for _ in range(2):
        kid = await ctx.child(m_child, {"log": inp["log"], "hold": inp["hold"]})
        out.append(await ctx.wait_child(kid))
    return out


@workflow(name="m_chain", version="1")
async def m_chain(ctx, inp):
    n = await ctx.step("count", plus_one, inp["n"], retry=RETRY)
    hold_for = inp["hold"]
    await ctx.step("work", hold, inp["log"], ctx.workflow_id, "work", hold_for, retry=RETRY)
    if n < inp["until"]:
        await ctx.continue_as_new({"n": n, "until": inp["until"], "log": inp["log"],
                                   "hold": hold_for})  # fmt: skip
    return n


@workflow(name="m_step_timeout", version="1")
async def m_step_timeout(ctx, inp):
    return await ctx.step("slow", hang_first, inp["log"], ctx.workflow_id, "slow", inp["hang"],
                          retry=STEP_LIMIT)  # fmt: skip


@workflow(name="m_published", version="1")
async def m_published(ctx, inp):
    out = []
    for i in range(3):
        ctx.set_status({"phase": i})
        out.append(await ctx.step(f"s{i}", hold, inp["log"], ctx.workflow_id, f"s{i}",
                                  inp["hold"], retry=RETRY))  # fmt: skip
    ctx.set_status({"phase": "done"})
    return out
