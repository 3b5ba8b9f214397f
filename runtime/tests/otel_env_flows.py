"""Workflows for runtime/tests/test_otel_env.py, served by a real `interlock worker`: a gated
effect to the test's HTTP server, then a wait for the signal the test sends with `interlock
signal`; one plain and one `async def` (selected with --only)."""

from __future__ import annotations

from interlock_runtime import HttpTarget, workflow


def _target(inp: dict) -> HttpTarget:
    return HttpTarget("otel-env-payments", inp["url"], 1, action="refund")


@workflow(name="otel_env_pay", version="1")
def otel_env_pay(ctx, inp):
    paid = ctx.effect(_target(inp), key="refund-1", payload={"amount": 100},
                      premises={"checked": True}, grant=inp["grant"])  # fmt: skip
    ctx.wait_signal("go")
    return paid.status


@workflow(name="otel_env_apay", version="1")
async def otel_env_apay(ctx, inp):
    paid = await ctx.effect(_target(inp), key="refund-1", payload={"amount": 100},
                            premises={"checked": True}, grant=inp["grant"])  # fmt: skip
    await ctx.wait_signal("go")
    return paid.status
