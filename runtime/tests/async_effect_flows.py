"""Workflows of test_async_effects.py: effects of `async def` workflows sent through
AsyncHttpTarget (an async `apply`, awaited on the worker's event loop) to the local payment
target (world/target.py). Each input names the target's URL, its tier and the grant."""

from __future__ import annotations

import asyncio
import time

from interlock_runtime import AsyncHttpTarget, HttpTarget, workflow
from world.target_client import TargetAdmin


def refunds(case: dict, cls: type = AsyncHttpTarget):
    """The generic HTTP target pointed at the local target's refund endpoint. Lookups at tier
    2, and at tier 1 when the case says `queryable`; a case may set the tier-1 window
    (`dedup_window`, `dedup_margin`), else the runtime's defaults apply."""
    lookup = case["url"] + "/refunds?payment={payment}&key={effect_id}"
    queryable = case.get("queryable", case["tier"] == 2)
    return cls("async-refunds", case["url"] + "/refunds", case["tier"],
               lookup=lookup if queryable else None, action="refund",
               send_timeout=case.get("send_timeout", 2.5), settle_margin=1.0,
               dedup_window=case.get("dedup_window"), dedup_margin=case.get("dedup_margin"),
               sender_headers=("X-ILR-Worker", "X-ILR-Epoch"))  # fmt: skip


def _effect(ctx, case: dict, cls: type = AsyncHttpTarget):
    payload = {"payment": case["payment"], "amount": case.get("amount", 100),
               "metadata": {"case": ctx.workflow_id}}  # fmt: skip
    return ctx.effect(refunds(case, cls), key=f"refund:{ctx.workflow_id}", payload=payload,
                      premises={"payment": case["payment"]}, grant=case["grant"])  # fmt: skip


@workflow(name="ae_refund", version="1")
async def ae_refund(ctx, case):
    """One refund through the async target."""
    r = await _effect(ctx, case)
    return {"status": r.status, "result": r.result}


@workflow(name="ae_plain_target", version="1")
async def ae_plain_target(ctx, case):
    """A plain HttpTarget in an async workflow: sent from a thread, same gate."""
    r = await _effect(ctx, case, HttpTarget)
    return {"status": r.status, "result": r.result}


async def hold_loop_once_sent(url: str, seconds: float) -> str:
    """Wait (on the loop) until the target has the POST, then block the event loop."""
    admin = TargetAdmin(url)
    while not await asyncio.to_thread(admin.log, path="/refunds", method="POST"):
        await asyncio.sleep(0.02)
    time.sleep(seconds)  # blocks the loop on purpose: the watchdog is a thread
    return "unblocked"


@workflow(name="ae_send_with_loop_blocked", version="1")
async def ae_send_with_loop_blocked(ctx, case):
    """A send the target holds past its deadline while the loop is blocked."""
    r, held = await asyncio.gather(
        _effect(ctx, case), ctx.step("hold", hold_loop_once_sent, case["url"], case["block"])
    )
    return {"status": r.status, "held": held}
