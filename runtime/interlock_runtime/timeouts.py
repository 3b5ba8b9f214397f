"""Timeouts (docs/timeouts.md): a step's start-to-close and schedule-to-close, a workflow's
execution deadline.

Every deadline is a database time: a workflow's is fixed by rt.start (now() + the timeout, in
the start transaction), a step's schedule-to-close runs from its first attempt's start as
recorded in ilr.step_timers before that attempt's body ran. A worker turns each into a local
monotonic deadline from the database's now() read in the same statement, taking its local
reference after the statement returned, so a local deadline can only fall late, never early.

A step body is Python running in the worker, and a thread cannot be killed. A body bounded by
a timeout therefore runs in a helper thread and the workflow waits for it at most until the
first deadline; then the attempt is abandoned: the thread is left to finish on its own and
whatever it returns or raises is dropped, never recorded.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import db, validate
from .errors import StepTimedOut
from .events import emit
from .vocabulary import TimeoutKind

SWEEP_BATCH = 100
"""Runs the sweep ends per statement; the next pass takes the rest."""


def check_seconds(value: Any, what: str, *, from_text: bool = False) -> float | None:
    """A timeout: None (no limit) or a finite number of seconds above 0, at most ten years."""
    if value is None:
        return None
    seconds = validate.seconds(value, what, allow_zero=False, from_text=from_text)
    return seconds


def local_deadline(deadline: datetime, db_now: datetime, t_after: float) -> float:
    """The monotonic time at which the database clock reaches `deadline`, given its now() as
    read by a statement that returned at local time `t_after` (so never early)."""
    return t_after + (deadline - db_now).total_seconds()


# -- a step's clocks -------------------------------------------------------------------------


@dataclass
class StepClock:
    """One attempt's deadlines as local monotonic times (None: no such limit)."""

    name: str
    attempt: int
    start_to_close: float | None
    schedule_to_close: float | None
    first_started_at: datetime
    attempt_deadline: float | None
    step_deadline: float | None

    def error(self, kind: TimeoutKind, attempts: int, cause: dict[str, Any] | None = None
              ) -> StepTimedOut:  # fmt: skip
        """The failure of this step by `kind`, as recorded and raised."""
        if kind == TimeoutKind.START_TO_CLOSE:
            limit = self.start_to_close
            message = (f"step {self.name!r}: attempt {self.attempt} ran past its start_to_close "
                       f"timeout of {limit:g} s and was abandoned (a result it returns later "
                       "is discarded)")  # fmt: skip
        else:
            limit = self.schedule_to_close
            message = (f"step {self.name!r} ran past its schedule_to_close timeout of {limit:g} s "
                       f"(counted from its first attempt's start at "
                       f"{self.first_started_at.isoformat()}, {attempts} attempt(s) started)")  # fmt: skip
        error: dict[str, Any] = {"type": "StepTimedOut", "timeout": str(kind), "limit": limit,
                                 "message": message, "attempt": self.attempt,
                                 "first_started_at": self.first_started_at.isoformat()}  # fmt: skip
        if cause is not None:
            error["cause"] = cause
        return StepTimedOut(self.name, error)

    def no_time_for(self, delay: float) -> bool:
        """True when a retry after `delay` seconds could not start before the step's deadline."""
        return self.step_deadline is not None and time.monotonic() + delay >= self.step_deadline


def start_attempt(conn: db.Conn, wf_id: str, seq: int, name: str, attempt: int,
                  start_to_close: float | None, schedule_to_close: float | None) -> StepClock:  # fmt: skip
    """Record an attempt's start (inside the caller's fenced transaction, so it is committed
    before the body runs) and return its clock."""
    row = db.one(conn.execute(db.query("step_timer_start"),
                              timer_params(wf_id, seq, name, start_to_close, schedule_to_close)))  # fmt: skip
    return clock_of(row, time.monotonic(), name, attempt, start_to_close, schedule_to_close)


def timer_params(wf_id: str, seq: int, name: str, start_to_close: float | None,
                 schedule_to_close: float | None) -> dict[str, Any]:  # fmt: skip
    """The parameters of the query step_timer_start (the async context runs it too)."""
    return {"wf": wf_id, "seq": seq, "name": name, "start_to_close": start_to_close,
            "schedule_to_close": schedule_to_close}  # fmt: skip


def clock_of(row: db.Row, t_after: float, name: str, attempt: int,
             start_to_close: float | None, schedule_to_close: float | None) -> StepClock:  # fmt: skip
    """An attempt's clock from step_timer_start's row, read by a statement that returned at
    local time `t_after`."""
    step_deadline = None
    if schedule_to_close is not None:
        remaining = (row["first_started_at"] - row["now"]).total_seconds() + schedule_to_close
        step_deadline = t_after + remaining
    return StepClock(name=name, attempt=attempt, start_to_close=start_to_close,
                     schedule_to_close=schedule_to_close,
                     first_started_at=row["first_started_at"],
                     attempt_deadline=None if start_to_close is None else t_after + start_to_close,
                     step_deadline=step_deadline)  # fmt: skip


# -- running a body under a deadline -----------------------------------------------------------


class Abandoned(Exception):
    """The body did not finish by the deadline; it runs on in its thread, its outcome dropped."""


def first_limit(clock: StepClock | None, execution_local: float | None
                ) -> tuple[float, str] | None:  # fmt: skip
    """The first deadline a body runs under (local monotonic time) and which timeout it is:
    its attempt's start_to_close, its step's schedule_to_close, the workflow's execution
    deadline; None without any."""
    limits: list[tuple[float, str]] = []
    if clock is not None and clock.attempt_deadline is not None:
        limits.append((clock.attempt_deadline, TimeoutKind.START_TO_CLOSE))
    if clock is not None and clock.step_deadline is not None:
        limits.append((clock.step_deadline, TimeoutKind.SCHEDULE_TO_CLOSE))
    if execution_local is not None:
        limits.append((execution_local, TimeoutKind.EXECUTION))
    return min(limits) if limits else None


def run_until(body: Callable[[], Any], deadline: float) -> Any:
    """Run body() in a helper thread and wait for it until the monotonic `deadline`: its value,
    or its exception raised again here, or Abandoned. The helper runs in a copy of this
    thread's contextvars (so tracing context and the like follow the body)."""
    box: dict[str, Any] = {}
    done = threading.Event()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            box["value"] = context.run(body)
        except BaseException as exc:  # handed to the waiting thread, or dropped if it left
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="step-body", daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        raise Abandoned()
    if "error" in box:
        raise box["error"]
    return box["value"]


# -- the workflow's execution deadline -------------------------------------------------------------


def execution_error(deadline: datetime | None, by: str, was: str) -> dict[str, Any]:
    """The error a timed-out workflow records. `by`: claim, run (its worker saw it at a
    durable call) or sweep; `was`: what it was doing."""
    shown = deadline.isoformat() if deadline is not None else "?"
    return {"type": "WorkflowTimedOut", "timeout": str(TimeoutKind.EXECUTION), "by": by,
            "deadline": shown, "was": was,
            "message": f"the execution deadline {shown} passed while the workflow was {was}; "
                       "start it again with a longer execution timeout if it needs more time"}  # fmt: skip


def set_deadline(conn: db.Conn, wf_id: str, seconds: float) -> None:
    """In rt.start's transaction, right after the insert."""
    conn.execute(db.query("set_execution_deadline"), {"id": wf_id, "seconds": seconds})


def recorded_timeout(conn: db.Conn, wf_id: str) -> float | None:
    """The execution timeout a workflow was started with (None: none)."""
    row = conn.execute(db.query("workflow_timeouts"), {"id": wf_id}).fetchone()
    return None if row is None else row["execution_timeout_s"]


def expire(conn: db.Conn, worker_id: str) -> list[str]:
    """The sweep: end live runs past their deadline that no worker holds (one transaction per
    batch: each ends its grants and tells its parent, as a finish by a worker does)."""
    ended: list[str] = []
    with conn.transaction():
        rows = conn.execute(db.query("expire_workflows"), {"limit": SWEEP_BATCH}).fetchall()
        for row in rows:
            conn.execute(db.query("end_workflow_grants"), {"wf": row["id"]})
            if row["parent_id"] is not None:
                done = {"status": "timed_out", "result": None, "error": row["error"]}
                conn.execute(db.query("signal_parent"),
                             {"child": row["id"], "done": db.jsonb(done)})  # fmt: skip
            ended.append(row["id"])
    for wf_id in ended:
        emit("timed_out", worker=worker_id, wf=wf_id, by="sweep")
    return ended


def describe(conn: db.Conn, wf_id: str, steps: list[db.Row], status: str,
             error: Any) -> dict[str, Any]:  # fmt: skip
    """What rt.describe adds: the execution timeout and deadline (and the seconds left, negative
    once past), each timed step's clocks, and which timeouts fired."""
    row = db.one(conn.execute(db.query("workflow_timeouts"), {"id": wf_id}))
    deadline = row["execution_deadline"]
    left = None if deadline is None else round((deadline - row["now"]).total_seconds(), 3)
    fired = [{"seq": s["seq"], "name": s["name"], "timeout": s["error"].get("timeout"),
              "limit": s["error"].get("limit")}
             for s in steps
             if isinstance(s["error"], dict) and s["error"].get("type") == "StepTimedOut"]  # fmt: skip
    if status == "timed_out" and isinstance(error, dict):
        fired.append({"seq": None, "name": None, "timeout": error.get("timeout"),
                      "limit": row["execution_timeout_s"]})  # fmt: skip
    return {"execution_timeout": row["execution_timeout_s"],
            "execution_deadline": deadline, "execution_seconds_left": left,
            "step_timers": conn.execute(db.query("step_timers"), {"wf": wf_id}).fetchall(),
            "timed_out": fired}  # fmt: skip
