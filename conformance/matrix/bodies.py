"""Step bodies of the fault matrix's workflows: each appends one fsynced line to a side log
when it starts (what ran, judged apart from the runtime's records), then holds."""

from __future__ import annotations

import json
import os
import time


def _log(path: str, wf: str, step: str) -> int:
    """Append this start; return how many starts of (wf, step) came before it."""
    earlier = 0
    if os.path.exists(path):
        with open(path) as f:
            earlier = sum(1 for line in f if _same(line, wf, step))
    with open(path, "a") as f:
        f.write(json.dumps({"wf": wf, "step": step, "pid": os.getpid(), "t": time.time()}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return earlier


def _same(line: str, wf: str, step: str) -> bool:
    row = json.loads(line)
    return bool(row["wf"] == wf and row["step"] == step)


def hold(path: str, wf: str, step: str, seconds: float) -> dict:
    _log(path, wf, step)
    time.sleep(seconds)
    return {"wf": wf, "step": step}


def once_then_fail_first(path: str, wf: str, step: str, seconds: float) -> dict:
    """Fails its first start (a retry the policy takes), then holds as `hold`."""
    if _log(path, wf, step) == 0:
        raise ValueError(f"{step}: first attempt fails on purpose")
    time.sleep(seconds)
    return {"wf": wf, "step": step}


def hang_first(path: str, wf: str, step: str, seconds: float) -> dict:
    """Its first start hangs `seconds` (past the attempt's start_to_close); later ones return."""
    if _log(path, wf, step) == 0:
        time.sleep(seconds)
    return {"wf": wf, "step": step}


def plus_one(n: int) -> int:
    return n + 1
