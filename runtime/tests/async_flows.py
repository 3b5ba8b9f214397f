"""`async def` workflows the async tests run in real asyncio worker subprocesses
(`--module async_flows`; docs/async.md)."""

from __future__ import annotations

import asyncio
import json
import os
import time

from interlock_runtime import workflow


def side_log(path: str, step: str, **fields) -> None:
    """One line per body start, fsynced: what ran, judged apart from the runtime's records."""
    with open(path, "a") as f:
        f.write(json.dumps({"step": step, "pid": os.getpid(), **fields}) + "\n")
        f.flush()
        os.fsync(f.fileno())


async def timed(path: str, step: str, seconds: float) -> dict:
    side_log(path, step)
    await asyncio.sleep(seconds)
    return {"step": step, "pid": os.getpid()}


def plain(path: str, step: str) -> dict:
    side_log(path, step)
    return {"step": step, "pid": os.getpid()}


@workflow(name="a_basics", version="1")
async def a_basics(ctx, inp):
    """An async step, a plain step, a durable sleep and a signal."""
    one = await ctx.step("async_one", timed, inp["log"], "async_one", 0.05)
    two = await ctx.step("plain_two", plain, inp["log"], "plain_two")
    await ctx.sleep(0.3)
    ctx.set_status({"waiting": "go"})
    go = await ctx.wait_signal("go", timeout=60)
    return {"one": one["step"], "two": two["step"], "go": go}


@workflow(name="a_gather", version="1")
async def a_gather(ctx, inp):
    """Three steps at once, finishing in the reverse of their call order."""
    s = inp["sleeps"]
    out = await asyncio.gather(*(ctx.step(name, timed, inp["log"], name, s[name])
                                 for name in ("slow", "mid", "fast")))  # fmt: skip
    after = await ctx.step("after", plain, inp["log"], "after")
    return {"gathered": out, "after": after["step"]}


@workflow(name="a_unawaited", version="1")
async def a_unawaited(ctx, inp):
    await ctx.step("first", plain, inp["log"], "first")
    ctx.step("forgotten", plain, inp["log"], "forgotten")  # never awaited
    return "done"


@workflow(name="a_order", version="1")
async def a_order(ctx, inp):
    """Calls a then b; once the flag file exists (a code change), b then a."""
    names = ["b", "a"] if os.path.exists(inp["flag"]) else ["a", "b"]
    for name in names:
        await ctx.step(name, plain, inp["log"], name)
    return await ctx.wait_signal("go")


@workflow(name="a_wall_clock", version="1")
async def a_wall_clock(ctx, inp):
    await ctx.step("first", plain, inp["log"], "first")
    return time.time()  # workflow code reading the clock: non-determinism


async def _helper(ctx, log, name):
    return await ctx.step(name, plain, log, name)


@workflow(name="a_helper_tasks", version="1")
async def a_helper_tasks(ctx, inp):
    """Durable calls from coroutines run concurrently: refused (their places would follow
    completion order)."""
    return await asyncio.gather(_helper(ctx, inp["log"], "x"), _helper(ctx, inp["log"], "y"))


async def blocking(path: str, seconds: float) -> str:
    side_log(path, "blocking")
    time.sleep(seconds)  # a blocking call inside an async step: holds the loop
    return "blocked"


@workflow(name="a_blocking", version="1")
async def a_blocking(ctx, inp):
    return await ctx.step("hold_loop", blocking, inp["log"], inp["seconds"])


@workflow(name="a_parked", version="1")
async def a_parked(ctx, inp):
    """In flight on an async step (a coroutine), then parked on a signal (a row)."""
    await ctx.step("hold", asyncio.sleep, inp["hold"])
    return await ctx.wait_signal("go")


# -- the refund case (docs/design.md#refund-case), async ------------------------------------------

from world import refund_agent  # noqa: E402
from world.target_client import LocalRefunds  # noqa: E402


async def stub_model(request: dict) -> dict:
    """EMULATED model, async: a scripted answer in the shape the runtime records."""
    await asyncio.sleep(0.01)
    return {"model": "stub-emulated", "amount": 2000, "usage": {"input_tokens": 10}}


@workflow(name="a_refund", version="1")
async def a_refund(ctx, case):
    """decide (async model call), wait for a person's approval, refund through the gate."""
    target = refund_agent.refund_target(case, cls=LocalRefunds, send_timeout=2.5,
                                        settle_margin=1.0)  # fmt: skip
    decision = await ctx.decide("decide_amount", stub_model, {"case": case["id"]},
                                premises=target.capture)  # fmt: skip
    payload = refund_agent.payload_for(case, decision.output["amount"])
    approval = await ctx.wait_approval(payload, timeout=600)
    if approval is None:
        return {"status": "approval expired"}
    r = await ctx.effect(target, key=f"refund:{case['id']}", payload=approval["payload"],
                         premises=approval["facts_seen"], grant=approval["grant_id"])  # fmt: skip
    return {"status": r.status, "effect_id": r.effect_id, "result": r.result}


# -- step timeouts (docs/timeouts.md), async ------------------------------------------------------

from interlock_runtime import RetryPolicy, StepTimedOut  # noqa: E402


def _starts(path: str) -> int:
    try:
        with open(path) as f:
            return sum(1 for line in f if json.loads(line)["event"] == "start")
    except FileNotFoundError:
        return 0


async def hang_async(path: str, seconds: float) -> str:
    """The first attempt hangs (and notes its cancellation); later ones answer at once."""
    first = _starts(path) == 0
    side_log(path, "hang", event="start", t=time.monotonic())
    if not first:
        return "fast"
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        side_log(path, "hang", event="cancelled", t=time.monotonic())
        raise
    return "late"


def hang_plain(path: str, seconds: float) -> str:
    """hang_async in a thread: it cannot be cancelled, and returns late."""
    first = _starts(path) == 0
    side_log(path, "hang", event="start", t=time.monotonic())
    if not first:
        return "fast"
    time.sleep(seconds)
    side_log(path, "hang", event="late return", t=time.monotonic())
    return "late"


@workflow(name="a_start_to_close", version="1")
async def a_start_to_close(ctx, inp):
    body = hang_plain if inp["plain"] else hang_async
    if not inp.get("catch"):
        return await ctx.step("hang", body, inp["log"], inp["hang"],
                              retry=RetryPolicy(initial=0.1, start_to_close=inp["limit"]))  # fmt: skip
    try:  # one attempt, its timeout caught: the run goes on for a while
        await ctx.step("hang", body, inp["log"], inp["hang"],
                       retry=RetryPolicy(max_attempts=1, start_to_close=inp["limit"]))  # fmt: skip
    except StepTimedOut as exc:
        await ctx.step("after", asyncio.sleep, 1.0)
        return exc.timeout
    return None


async def slow(path: str, seconds: float) -> str:
    side_log(path, "slow", event="start", t=time.monotonic())
    await asyncio.sleep(seconds)
    return "done"


@workflow(name="a_schedule_to_close", version="1")
async def a_schedule_to_close(ctx, inp):
    policy = RetryPolicy(initial=0.1, schedule_to_close=inp["budget"])
    try:
        await ctx.step("slow", slow, inp["log"], inp["sleep"], retry=policy)
    except StepTimedOut as exc:
        return {"timeout": exc.timeout, "attempt": exc.error["attempt"]}
    return None


async def doubled(x: int) -> int:
    return x * 2


@workflow(name="a_child", version="1")
async def a_child(ctx, inp):
    return await ctx.step("double", doubled, inp["x"])


@workflow(name="a_placed_parent", version="1")
async def a_placed_parent(ctx, inp):
    """A child where the input says (None: this workflow's queue and priority), awaited."""
    kid = await ctx.child(a_child, {"x": inp["x"]}, queue=inp.get("queue"),
                          priority=inp.get("priority"))  # fmt: skip
    return {"child": kid, "result": await ctx.wait_child(kid)}
