"""Workflows the runtime's tests run in real worker subprocesses (`--module flows`)."""

from __future__ import annotations

import json
import os
import time

from interlock_runtime import workflow


def log_invocation(path: str, step: str, worker: str, epoch: int, first_sleep: float) -> dict:
    """Append one line per body start; sleep only on the first invocation of this step."""
    earlier = 0
    if os.path.exists(path):
        with open(path) as f:
            earlier = sum(1 for line in f if json.loads(line)["step"] == step)
    with open(path, "a") as f:
        f.write(json.dumps({"step": step, "worker": worker, "epoch": epoch, "pid": os.getpid(),
                            "t": time.time()}) + "\n")  # fmt: skip
        f.flush()
        os.fsync(f.fileno())
    if earlier == 0 and first_sleep:
        time.sleep(first_sleep)
    return {"step": step, "worker": worker}


@workflow(name="three_steps", version="1")
def three_steps(ctx, inp):
    sleeps = inp.get("sleep", {})
    return [
        ctx.step(
            name, log_invocation, inp["log"], name, ctx.worker_id, ctx.epoch, sleeps.get(name, 0)
        )
        for name in ("s1", "s2", "s3")
    ]


@workflow(name="echo", version="1")
def echo(ctx, inp):
    return ctx.step("echo", lambda value: value, inp)
