"""Workflows for test_timeouts.py (docs/timeouts.md), served by worker subprocesses.

Step bodies log each start to a JSON-lines file, so a test can tell which attempts ran, on
which worker and when, without reading anything the runtime wrote about itself."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from interlock_runtime import RetryPolicy, StepTimedOut, workflow


def _log(path: str, **fields: Any) -> int:
    """Append one line; returns how many lines the file holds now."""
    with open(path, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "t": time.time(), **fields}) + "\n")
    return len(Path(path).read_text().splitlines())


def hang_first(log: str, hang: float) -> str:
    """The first attempt hangs for `hang` seconds, then returns "late"; later ones are fast."""
    lines = Path(log).read_text().splitlines() if Path(log).exists() else []
    n = sum('"start"' in line for line in lines) + 1
    _log(log, event="start", attempt=n)
    if n == 1:
        time.sleep(hang)
        _log(log, event="late return", attempt=n)
        return "late"
    return "fast"


def hang(log: str, seconds: float) -> str:
    _log(log, event="start")
    time.sleep(seconds)
    _log(log, event="returned")
    return "returned"


@workflow(name="to_start_to_close", version="1")
def start_to_close(ctx: Any, inp: dict[str, Any]) -> Any:
    policy = RetryPolicy(initial=0.1, max_attempts=3, start_to_close=inp["limit"])
    return ctx.step("s", hang_first, inp["log"], inp["hang"], retry=policy)


@workflow(name="to_schedule_to_close", version="1")
def schedule_to_close(ctx: Any, inp: dict[str, Any]) -> Any:
    policy = RetryPolicy(initial=0.1, schedule_to_close=inp["budget"])
    try:
        ctx.step("slow", hang, inp["log"], inp["sleep"], retry=policy)
    except StepTimedOut as exc:
        return {"timeout": exc.timeout, "attempt": exc.error["attempt"]}
    return None


@workflow(name="to_replay", version="1")
def replay_after_timeout(ctx: Any, inp: dict[str, Any]) -> Any:
    caught = None
    try:
        ctx.step("hang", hang, inp["log"], 5.0,
                 retry=RetryPolicy(max_attempts=1, start_to_close=inp["limit"]))  # fmt: skip
    except StepTimedOut as exc:
        caught = {"type": type(exc).__name__, "timeout": exc.timeout}
    ctx.sleep(0.2)  # a suspend: what follows runs after a replay of the timed-out step
    return caught


@workflow(name="to_busy", version="1")
def busy(ctx: Any, inp: dict[str, Any]) -> Any:
    return ctx.step("forever", hang, inp["log"], 30.0)


@workflow(name="to_sleeper", version="1")
def sleeper(ctx: Any, inp: dict[str, Any]) -> Any:
    ctx.sleep(30)
    return "woke"


@workflow(name="to_parked", version="1")
def parked(ctx: Any, inp: dict[str, Any]) -> Any:
    return ctx.wait_signal("go")


@workflow(name="to_parent", version="1")
def parent(ctx: Any, inp: dict[str, Any]) -> Any:
    child = ctx.child("to_sleeper", {})
    return ctx.wait_child(child)


@workflow(name="to_logged", version="1")
def logged(ctx: Any, inp: dict[str, Any]) -> Any:
    return ctx.step("first", _log, inp["log"], event="start")
