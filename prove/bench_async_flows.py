"""The runtime's `async def` workflows for `python -m prove.bench` (served by real asyncio worker
subprocesses, docs/async.md): the async rows of the benchmark.

Shape 1, "one step": one durable step, an `async def` that awaits asyncio.sleep(ms / 1000)
(20 ms in the benchmark): a coroutine on the worker's loop while it sleeps, not a thread.
Shape 2, "refund": prove/bench_flows.py's bench_refund as a coroutine (a step "load", then the
shared refund body: a decide, a tier-1 effect "refund:{id}" under the case's standing grant),
with the model call through `anthropic.AsyncAnthropic` and the refund through
`interlock_runtime.AsyncHttpTarget` (RefundTarget below), both awaited on the worker's loop (the
EMULATED model stub and the local target answer).
"parked": a run that waits for its signal "go" and returns its payload: parked, it is a row.

Apart from prove/bench_flows.py because a worker serves either plain or async workflows.
"""

from __future__ import annotations

import asyncio
import json

import anthropic

from interlock_runtime import AsyncHttpTarget, workflow
from world import refund_agent
from world.model_stub import MODEL
from world.target_client import LocalRefunds


async def sleep_ms(ms: float) -> str:
    await asyncio.sleep(ms / 1000.0)
    return "ok"


@workflow(name="bench_one_step_async", version="1")
async def bench_one_step_async(ctx, inp):
    return await ctx.step("sleep", sleep_ms, float(inp.get("ms", 20)))


async def load_case(case: dict) -> dict:
    return {"case": case["id"], "payment": case["payment"]}


# One client per process and base URL (the worker's one event loop holds its pool), as the sync
# harness keeps one anthropic.Anthropic per process (world.model_stub._client).
_CLIENTS: dict[str, anthropic.AsyncAnthropic] = {}


async def ask_model(request: dict) -> dict:
    """The refund amount through the async anthropic SDK: the request world.model_stub's
    decide_amount sends, the same parsed answer (EMULATED: the stub answers)."""
    url = request["model_url"]
    client = _CLIENTS.get(url)
    if client is None:
        client = _CLIENTS[url] = anthropic.AsyncAnthropic(base_url=url, api_key="emulated",
                                                          timeout=10.0, max_retries=0)  # fmt: skip
    facts = {"case": request["case"], "payment": request["payment"]}
    prompt = ("Decide the refund amount in cents for this support case. "
              'Answer with JSON only: {"amount": <cents>}.\n' + json.dumps(facts, sort_keys=True))  # fmt: skip
    msg = await client.messages.create(model=MODEL, max_tokens=64,
                                       messages=[{"role": "user", "content": prompt}])  # fmt: skip
    amount = json.loads("".join(getattr(b, "text", "") for b in msg.content))["amount"]
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise ValueError(f"the model's amount is not an integer: {amount!r}")
    return {"amount": amount, "model": msg.model, "id": msg.id,
            "usage": {"input_tokens": msg.usage.input_tokens,
                      "output_tokens": msg.usage.output_tokens}}  # fmt: skip


class RefundTarget(AsyncHttpTarget):
    """The local target's refunds on one payment through AsyncHttpTarget: what the sync row's
    LocalRefunds does (tier 1, Idempotency-Key, a lookup by payment and key, the same
    premises), with `apply` a coroutine. The premise reads (`capture` for the decision, the
    premise check before the send) are LocalRefunds' own plain reads: the worker runs them in
    a thread."""

    def __init__(self, case: dict, send_timeout: float = 5.0) -> None:
        self.reads = LocalRefunds(case["target_url"], case["payment"], 1,
                                  send_timeout=send_timeout)  # fmt: skip
        base = case["target_url"].rstrip("/")
        super().__init__("local-refunds", f"{base}/refunds", 1, action="refund",
                         lookup=f"{base}/refunds?payment={{payment}}&key={{effect_id}}",
                         sender_headers=("X-ILR-Worker", "X-ILR-Epoch"),
                         send_timeout=send_timeout, settle_margin=5.0,
                         premise_check=self.reads.validate_premises)  # fmt: skip

    def capture(self, effect_id: str | None = None) -> dict:
        return self.reads.capture(effect_id)


@workflow(name="bench_refund_async", version="1")
async def bench_refund_async(ctx, case):
    """load, then the shared refund body (world/refund_agent.py, driven by run_refund_async: the
    same steps at the same places as bench_refund's) under the case's standing grant."""
    target = RefundTarget(case)
    loaded = await ctx.step("load", load_case, case)
    request = {"case": loaded["case"], "payment": loaded["payment"], "model_url": case["model_url"]}
    _, r = await refund_agent.run_refund_async(ctx, case, target=target, decide=ask_model,
                                               request=request, authority="grant")  # fmt: skip
    return {"status": r.status, "effect_id": r.effect_id}


@workflow(name="bench_parked", version="1")
async def bench_parked(ctx, inp):
    return await ctx.wait_signal("go")
