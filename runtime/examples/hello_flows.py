"""The README's example: a three-step workflow that survives a worker SIGKILL.

interlock worker --module hello_flows          (with runtime/examples on PYTHONPATH)
interlock start greet greet-1 --input '{"name": "Ada"}'
"""

from __future__ import annotations

import time

from interlock_runtime import workflow


def slow_upper(text: str) -> str:
    time.sleep(2)  # long enough to SIGKILL the worker in the middle
    return text.upper()


@workflow(name="greet", version="1")
def greet(ctx, inp):
    shout = ctx.step("shout", slow_upper, inp["name"])
    ctx.sleep(1)
    return ctx.step("compose", lambda s: f"Hello, {s}!", shout)
