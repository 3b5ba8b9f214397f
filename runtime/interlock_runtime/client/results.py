"""Results, the client's part that waits for a workflow's end (docs/api.md#results).

Results gives result() and result_now(); ResultWait is the waiting of result() without its
sleeping, so the sync client (a threading.Event) and AsyncRuntime (an asyncio.Event) wait
with the same code: the same checks, looks, marks, pauses and errors.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from .. import codec, db, validate
from ..errors import WorkflowFailed, WorkflowNotFound, is_database_fault
from ..vocabulary import WorkflowStatus
from .connection import TERMINAL, ClientConnection, check_id


class Results(ClientConnection):
    """Wait for a workflow's result, or look at it once."""

    def result(self, wf_id: str, timeout: float | None = None, poll: float = 1.0, *,
               raw: bool = False) -> Any:  # fmt: skip
        """Wait until the workflow ends; return its result or raise WorkflowFailed.

        The wait wakes when the run's end is announced (LISTEN, docs/api.md#results), so it
        returns within a round trip of the end. `poll` (0.001-60 seconds) is the longest
        pause between two looks at the row while that holds; before the run is claimed, or
        when its end cannot be heard (a lost connection, a role that may not mark it), the
        pauses are at most 0.1 s. A run that continued as new is followed to its successor,
        as Temporal does. `timeout` (seconds, finite, >= 0) None waits for ever. A typed
        result comes back as its type (its class must be imported in this process, else
        RecordedTypeError says so); raw=True returns the recorded JSON instead."""
        woken = threading.Event()
        with ResultWait(self, wf_id, timeout, poll, woken.set) as wait:
            while True:
                woken.clear()
                ended, value, pause = wait.look(raw)
                if ended:
                    return value
                woken.wait(pause)

    def result_now(self, wf_id: str, *, raw: bool = False) -> tuple[bool, Any, str]:
        """One look at a workflow for result(): (True, its result, status) when it completed,
        else (False, the id to wait on, status): its successor's when it continued as new.
        Raises WorkflowFailed when it ended otherwise, WorkflowNotFound for no such id."""
        ended, value, status, _ = self._look(wf_id, raw=raw, mark=False)
        return ended, value, status

    def _look(self, wf_id: str, *, raw: bool, mark: bool) -> tuple[bool, Any, str, bool]:
        """result_now(), and with `mark` the run marked awaited if it runs (sql: await_end);
        the fourth value is true when its end from now on will be announced."""
        check_id(wf_id)
        row = None
        if mark and self._can_mark:
            try:
                row = self._execute(db.query("await_end"), {"id": wf_id}).fetchone()
            except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction):
                self._can_mark = False  # a read-only role or server: result() polls
        if row is None:
            row = self._execute(db.query("workflow_outcome"), {"id": wf_id}).fetchone()
        if row is None:
            raise WorkflowNotFound(f"no workflow with id {wf_id!r}")
        heard = bool(row.get("heard"))
        if row["status"] == "completed":
            return True, row["result"] if raw else codec.decode(row["result"]), row["status"], heard
        if row["status"] == "continued":
            successor: str = row["result"]["continued_as"]
            return False, successor, row["status"], heard
        if row["status"] in TERMINAL:
            raise WorkflowFailed(wf_id, row["status"], row["error"])
        return False, wf_id, row["status"], heard


UNHEARD_POLL = 0.1  # seconds: the longest pause of result() while a run's end cannot be heard
FIRST_PAUSE = 0.002  # seconds: its first pause before then, doubled at each look


class ResultWait:
    """The waiting of result(), without its sleeping, for both clients (the sync one waits on
    a threading.Event, AsyncRuntime on an asyncio.Event; `wake` sets it, from the thread that
    hears the end): the checked timeout and poll, the id waited on (a successor's once the
    run continued as new), its watch on the run's end, and the deadline. Close it (or use
    `with`) to stop watching."""

    def __init__(self, rt: Results, wf_id: str, timeout: float | None, poll: float,
                 wake: Callable[[], None]) -> None:  # fmt: skip
        check_id(wf_id)
        self.rt, self.wf_id, self.wake = rt, wf_id, wake
        self.timeout = validate.seconds(timeout, "timeout")
        self.poll = validate.number(poll, "poll", low=0.001, high=60, unit="seconds")
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self.watched: str | None = None
        self.marked = False  # wf_id's row is marked awaited: its end is announced
        self.unheard_pause = FIRST_PAUSE
        self.fault_pause = FIRST_PAUSE  # between looks the database did not answer

    def look(self, raw: bool) -> tuple[bool, Any, float]:
        """One look (it queries, in the caller's thread): (True, the result, 0) when the run
        ended, else (False, None, seconds to wait for a wake before the next look: 0 to look
        again at once). Raises WorkflowFailed, WorkflowNotFound, and TimeoutError past the
        deadline."""
        if self.watched != self.wf_id:  # the first look, or a successor's
            self.close()
            self.rt._notices.watch(self.wf_id, self.wake)
            self.watched, self.marked, self.unheard_pause = self.wf_id, False, FIRST_PAUSE
        # listening before the look: an end committed after it is heard
        listening = self.rt._notices.listening()
        mark = listening and not self.marked
        try:
            ended, value, status, heard = self.rt._look(self.wf_id, raw=raw, mark=mark)
        except Exception as exc:
            if not is_database_fault(exc):
                raise
            return False, None, self._away(exc)
        self.fault_pause = FIRST_PAUSE
        if ended:
            return True, value, 0.0
        if value != self.wf_id:  # continued as new: follow it at once
            self.wf_id = value
            return False, None, 0.0
        if mark:
            if not heard and status == WorkflowStatus.RUNNING and self.rt._can_mark:
                return False, None, 0.0  # it changed under the mark: look again
            self.marked = heard
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise TimeoutError(f"workflow {self.wf_id!r} is still {status} after "
                               f"{self.timeout}s; is a worker running for it? (rt.describe "
                               "shows where it is)")  # fmt: skip
        if self.marked and listening:  # its end will wake this wait
            pause = self.poll
        else:  # not claimed yet, or not heard: look soon, then less often
            pause = min(self.poll, self.unheard_pause)
            self.unheard_pause = min(UNHEARD_POLL, self.unheard_pause * 2)
        if self.deadline is not None:
            pause = min(pause, max(0.0, self.deadline - time.monotonic()))
        return False, None, pause

    def _away(self, fault: BaseException) -> float:
        """The database did not answer the look (a restart, a failover, a killed backend): the
        run goes on, or will once it is back, and so does this wait. Look again after a pause
        that doubles up to a second (the client reconnects at its next statement); past the
        deadline, the fault is raised (docs/api.md#results)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise fault
        self.marked = False  # the mark may be gone with the transaction: mark again
        pause, self.fault_pause = self.fault_pause, min(1.0, self.fault_pause * 2)
        if self.deadline is not None:
            pause = min(pause, max(0.0, self.deadline - time.monotonic()))
        return pause

    def close(self) -> None:
        if self.watched is not None:
            self.rt._notices.unwatch(self.watched, self.wake)
            self.watched = None

    def __enter__(self) -> ResultWait:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
