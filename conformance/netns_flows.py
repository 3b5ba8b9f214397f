"""The workflows of conformance/test_netns_workers.py (workers: `--module
conformance.netns_flows`, beside runtime/tests/flows.py for the refunds).

A run's last step is slow. After a workflow's last step the next write is the finishing
transaction, which is fenced by the database alone (a worker checks its local lease deadline
before a step body, not before it finishes), so a worker cut off from Postgres inside that step
sends its write as soon as the body returns, and the network holds it until the partition
heals: the database's fence is what must refuse it. The step's result is a plain string, so
recording it needs no round trip to the database before that write.

`netns_hold_async` and `netns_alone_async` are the same two workflows as `async def` (the test's
async mode: asyncio workers, `--async`); the last step's body runs in the worker's thread pool
and its result, like the plain workflow's, goes out with the finishing write.
"""

from __future__ import annotations

import json
import os
import time

from interlock_runtime import workflow


def note(path: str, step: str, worker: str, epoch: int, first: float, again: float) -> str:
    """Append one line per body start, then sleep `first` seconds on this step's first
    invocation and `again` on every later one."""
    earlier = 0
    if os.path.exists(path):
        with open(path) as f:
            earlier = sum(1 for line in f if json.loads(line)["step"] == step)
    with open(path, "a") as f:
        f.write(json.dumps({"step": step, "worker": worker, "epoch": epoch, "t": time.time()}))
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    time.sleep(first if earlier == 0 else again)
    return f"{worker}@{epoch}"


def _slow_last(ctx, inp):
    ctx.step("first", note, inp["log"], "first", ctx.worker_id, ctx.epoch, 0, 0)
    return ctx.step("slow", note, inp["log"], "slow", ctx.worker_id, ctx.epoch, inp["first"],
                    inp["again"])  # fmt: skip


@workflow(name="netns_hold", version="1")
def hold(ctx, inp):
    """Served by both groups: taken over by group B."""
    return _slow_last(ctx, inp)


@workflow(name="netns_alone", version="1")
def alone(ctx, inp):
    """Served by one worker of group A only: nobody takes it over while A is cut off."""
    return _slow_last(ctx, inp)


async def _slow_last_async(ctx, inp):
    await ctx.step("first", note, inp["log"], "first", ctx.worker_id, ctx.epoch, 0, 0)
    return await ctx.step("slow", note, inp["log"], "slow", ctx.worker_id, ctx.epoch,
                          inp["first"], inp["again"])  # fmt: skip


@workflow(name="netns_hold_async", version="1")
async def hold_async(ctx, inp):
    return await _slow_last_async(ctx, inp)


@workflow(name="netns_alone_async", version="1")
async def alone_async(ctx, inp):
    return await _slow_last_async(ctx, inp)
