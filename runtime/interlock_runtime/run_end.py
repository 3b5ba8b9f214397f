"""How a run ended: one pure function both workers call (docs/design.md#run-end).

A worker runs the workflow's code and is left with two facts: the exception the code ended
with, if any, and the unwinding exception the run's context remembered (a Suspend, Fenced,
Release, NonDeterminism, WorkflowTimedOut or DatabaseLost the code may have caught). From
those alone `ending` decides what the worker writes and what it says; the sync worker and the
asyncio worker only carry the decision out, each on its own connections. Written once, so the
two cannot disagree about a run's end.

The rules, first match wins:

1. A database fault (the runtime lost Postgres, or the code ended with psycopg's
   OperationalError) ends nothing: the run is abandoned, nothing is written, its lease expires
   and a later claim replays it from its committed history. A database error is never the
   workflow's failure, whatever the code did with it.
2. A runtime unwinding exception the code let through ends the run as that exception says.
3. An unwinding exception the code caught and then replaced with an error of its own still
   decides: the run's end is the runtime's, not the code's (a caught WorkflowTimedOut ends
   `timed_out`, a caught Release hands the run back).
4. Any other exception: `failed`, with its type and message.
5. A return after the code swallowed an unwinding exception: `stuck` (or, for a Suspend,
   marked stuck by the unchanged epoch, since the suspend already released the row), except
   that a swallowed WorkflowTimedOut still ends `timed_out`.
6. A return: `completed` with the result, if the result can be recorded; else `failed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import codec, stored, timeouts
from .errors import (
    Cancelled,
    ContinuedAsNew,
    DatabaseLost,
    Fenced,
    NonDeterminism,
    Release,
    Suspend,
    WorkflowTimedOut,
    is_database_fault,
    one_line,
)

UNWINDING = (Suspend, Fenced, ContinuedAsNew, Release, NonDeterminism, Cancelled,
             WorkflowTimedOut, DatabaseLost)  # fmt: skip
"""The runtime's own exceptions that end a run (BaseException: `except Exception` misses them)."""

ENDINGS = (Exception, *UNWINDING)
"""What a worker catches around workflow code; anything else (asyncio.CancelledError,
SystemExit, KeyboardInterrupt) propagates."""


@dataclass(frozen=True)
class Ending:
    """What a worker does at a run's end.

    `write`: the status written under the fence (completed, failed, cancelled, stuck,
    timed_out, release), "stuck_unfenced" (a swallowed Suspend, by the unchanged epoch), or
    None (nothing is written: suspended, fenced, continued, abandoned). `event`: the event the
    worker emits, with `fields`."""

    event: str
    write: str | None = None
    result: Any = None
    error: Any = None
    fields: dict[str, Any] = field(default_factory=dict)


def ending(ended: BaseException | None, unwinding: BaseException | None, result: Any,
           execution_deadline: datetime | None) -> Ending:  # fmt: skip
    """The end of a run whose code raised `ended` (None: it returned `result`) while its
    context remembered `unwinding` (None: nothing). Pure: no I/O, no clock."""
    if _database_fault(ended) or isinstance(unwinding, DatabaseLost):
        fault = ended if _database_fault(ended) else unwinding
        return Ending("abandoned", fields={"reason": "database unavailable",
                                           "error": _one_line(fault)})  # fmt: skip
    if isinstance(ended, UNWINDING):
        return _unwound(ended, execution_deadline)
    if ended is not None and isinstance(unwinding, UNWINDING) and unwinding is not ended:
        return _unwound(unwinding, execution_deadline)  # rule 3: caught, then replaced
    if isinstance(ended, Exception):
        error = {"type": type(ended).__qualname__, "message": str(ended)}
        return Ending("failed", "failed", error=error, fields={"error": error})
    if isinstance(unwinding, WorkflowTimedOut):  # caught by workflow code: it ends anyway
        return _timed_out(execution_deadline, "run")
    if unwinding is not None:
        return _swallowed(unwinding)
    try:
        encoded = codec.encode(result, "the workflow's return value")  # types recorded
        stored.to_json_text(encoded, "the workflow's return value")
    except TypeError as exc:
        error = {"type": "TypeError", "message": str(exc)}
        return Ending("failed", "failed", error=error, fields={"error": str(exc)})
    return Ending("completed", "completed", result=encoded)


def timed_out_at_claim(execution_deadline: datetime | None) -> Ending:
    """A run claimed at or past its execution deadline ends before any code runs."""
    return _timed_out(execution_deadline, "claim")


def _unwound(exc: BaseException, execution_deadline: datetime | None) -> Ending:
    if isinstance(exc, Suspend):
        return Ending("suspended", fields={"reason": str(exc)})
    if isinstance(exc, Fenced):
        return Ending("fenced", fields={"by": "write", "reason": str(exc)})
    if isinstance(exc, ContinuedAsNew):
        return Ending("continued", fields={"successor": exc.args[0]})
    if isinstance(exc, Release):
        return Ending("released", "release")
    if isinstance(exc, NonDeterminism):
        error = {"type": "NonDeterminism", "seq": exc.seq, "recorded": exc.recorded,
                 "called": exc.called}  # fmt: skip
        return Ending("stuck", "stuck", error=error, fields={"error": error})
    if isinstance(exc, Cancelled):
        return Ending("cancelled", "cancelled", error={"type": "Cancelled"})
    assert isinstance(exc, WorkflowTimedOut), exc  # DatabaseLost is rule 1
    return _timed_out(execution_deadline, "run")


def _timed_out(execution_deadline: datetime | None, by: str) -> Ending:
    was = "waiting to run" if by == "claim" else "running"
    error = timeouts.execution_error(execution_deadline, by, was)
    return Ending("timed_out", "timed_out", error=error, fields={"by": by})


def _swallowed(caught: BaseException) -> Ending:
    """Workflow code caught one of the runtime's unwinding exceptions and returned."""
    kind = "SuspendSwallowed" if isinstance(caught, Suspend) else "UnwindSwallowed"
    error = {"type": kind,
             "message": f"workflow code caught {type(caught).__name__} and returned; "
                        "do not catch BaseException in workflow code"}  # fmt: skip
    if isinstance(caught, Fenced):  # the claim is gone: nothing of it may be written
        return Ending("fenced", fields={"by": "write", "reason": str(caught)})
    if isinstance(caught, Suspend):  # the suspend already released the row (B13)
        return Ending("stuck", "stuck_unfenced", error=error, fields={"error": error})
    return Ending("stuck", "stuck", error=error, fields={"error": error})


def _database_fault(exc: BaseException | None) -> bool:
    return isinstance(exc, DatabaseLost) or (exc is not None and is_database_fault(exc))


def _one_line(exc: BaseException | None) -> str:
    cause = exc.__cause__ if isinstance(exc, DatabaseLost) and exc.__cause__ else exc
    return one_line(cause) if cause is not None else ""
