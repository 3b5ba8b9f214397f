"""The runtime's workflows for `python -m prove.bench` (served by real worker subprocesses).

Shape 1, "one step": one durable step that sleeps `ms` milliseconds (20 in the benchmark).
Shape 2, "refund": one step, one decide against the model stub, one tier-1 effect on the local
target (see prove/bench.py for the delays and how the run is driven).

Kept apart from prove/bench.py so that a worker imports only the runtime and the harness's
target client, not DBOS, Absurd or temporalio.
"""

from __future__ import annotations

import time

import anthropic  # noqa: F401  # imported at worker start (seconds here), not in the first decide

from interlock_runtime import workflow
from world import refund_agent
from world.model_stub import decide_amount


def sleep_ms(ms: float) -> str:
    time.sleep(ms / 1000.0)
    return "ok"


@workflow(name="bench_one_step", version="1")
def bench_one_step(ctx, inp):
    return ctx.step("sleep", sleep_ms, float(inp.get("ms", 20)))


def load_case(case: dict) -> dict:
    return {"case": case["id"], "payment": case["payment"]}


def ask_model(request: dict) -> dict:
    return decide_amount(request["model_url"], request["case"],
                         context={"payment": request["payment"]})  # fmt: skip


@workflow(name="bench_refund", version="1")
def bench_refund(ctx, case):
    """load, then the shared refund body under the case's standing grant (no approval)."""
    target = refund_agent.refund_target({**case, "tier": 1}, send_timeout=5.0)
    loaded = ctx.step("load", load_case, case)
    request = {"case": loaded["case"], "payment": loaded["payment"], "model_url": case["model_url"]}
    _, r = refund_agent.run_refund(ctx, case, target=target, decide=ask_model, request=request,
                                   authority="grant")  # fmt: skip
    return {"status": r.status, "effect_id": r.effect_id}
