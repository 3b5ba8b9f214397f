"""The workflow context: replay from the top with the step cache (docs/design.md#durable-replay, 5.5, 5.6, 5.8).

A workflow is a plain function f(ctx, input). Each durable call takes the next seq. If a step
row exists at that seq, its kind and name (and fingerprint) must match the call, else
NonDeterminism; the recorded output is returned (or the recorded error re-raised) and nothing
runs. With no row the call is at the frontier: it runs for real and is recorded in one fenced
transaction. A call that cannot finish now (timer not due, no signal, backoff) writes its
waiting state and releases the row in one fenced transaction, then raises Suspend.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar, cast

from . import codec, db, killpoints, queues, telemetry, timeouts, validate
from .effects import run_effect
from .errors import (
    Cancelled,
    ContinuedAsNew,
    Fenced,
    InvalidInput,
    NonDeterminism,
    PostconditionFailed,
    RecordedTypeError,
    Release,
    StepFailed,
    StepTimedOut,
    Suspend,
    WorkflowFailed,
    WorkflowTimedOut,
    database_lost,
    is_database_fault,
)
from .events import emit
from .run_port import RunPort
from .telemetry import body_span, retry_span, wait_span
from .vocabulary import TimeoutKind
from .workflow import definition


@dataclass(frozen=True)
class RetryPolicy:
    """Temporal's retry defaults: 1 s initial, x2 backoff, cap 100 x initial, unlimited attempts.

    non_retryable holds exception classes or class names; a matching error fails the step at once.

    Timeouts (seconds, None: no limit; docs/timeouts.md): `start_to_close` bounds one attempt
    (an attempt past it is abandoned and counts as failed, StepTimedOut, retried like any
    failure), `schedule_to_close` bounds the whole step, all attempts and backoffs, from its
    first attempt's start as recorded in the database (a crash does not restart it); past it
    the step fails with StepTimedOut, not retried.
    """

    initial: float = 1.0
    backoff: float = 2.0
    max_interval: float | None = None
    max_attempts: int = 0
    non_retryable: tuple[type[BaseException] | str, ...] = ()
    start_to_close: float | None = None
    schedule_to_close: float | None = None

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.backoff < 1 or self.max_attempts < 0:
            raise ValueError("RetryPolicy needs initial > 0, backoff >= 1 and max_attempts >= 0")
        # InvalidInput is a ValueError too: NaN, negative, zero, over ten years, not a number
        object.__setattr__(self, "start_to_close",
                           timeouts.check_seconds(self.start_to_close, "start_to_close"))  # fmt: skip
        object.__setattr__(self, "schedule_to_close",
                           timeouts.check_seconds(self.schedule_to_close, "schedule_to_close"))  # fmt: skip

    @property
    def timed(self) -> bool:
        return self.start_to_close is not None or self.schedule_to_close is not None

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        cap = self.max_interval if self.max_interval is not None else 100 * self.initial
        return min(self.initial * self.backoff ** (attempt - 1), cap)

    def retries(self, exc: BaseException, attempt: int) -> bool:
        if self.max_attempts and attempt >= self.max_attempts:
            return False
        if isinstance(exc, StepTimedOut) and exc.timeout == "schedule_to_close":
            return False  # the step's whole budget is spent
        for item in self.non_retryable:
            if isinstance(item, str):
                if any(item in (c.__name__, c.__qualname__) for c in type(exc).__mro__):
                    return False
            elif isinstance(exc, item):
                return False
        return True


@dataclass
class Run:
    """One claim of one workflow by this worker, shared with the heartbeat thread."""

    workflow_id: str
    name: str
    version: str
    input: Any
    epoch: int
    waiting: dict[str, Any] | None
    takeovers: int
    cancel_requested_at: Any
    lease_ttl: float
    # docs/design.md#model-findings C1: t0 + lease_ttl, with t0 read before the claim and before every renewing
    # write. Checked before every step body and model call, so a stalled load can never start
    # a body after the lease (as the database sees it) may have expired.
    local_deadline: float
    # The clock jump a failover may bring (Worker max_clock_skew): the local deadline runs this
    # much short of the lease, so a new primary whose clock is ahead takes over only after
    # this worker stopped (docs/deployment.md#clocks).
    clock_skew: float = 0.0
    parent_id: str | None = None
    claimed_now: datetime | None = None  # database time of the claim
    # docs/timeouts.md: the workflow's execution deadline (database time) and the same as a
    # local monotonic time, set from the claim's now() (so it can only fall late)
    execution_deadline: datetime | None = None
    execution_local: float | None = None
    has_steps: bool = True  # False when the claim saw no recorded steps (nothing to replay)
    fenced: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def renewed(self, t0: float) -> None:
        with self.lock:
            self.local_deadline = max(self.local_deadline, t0 + self.lease_ttl - self.clock_skew)


@dataclass(frozen=True)
class Decision:
    """A recorded model decision: its output, the premises it was made on, and where it lives."""

    output: Any
    premises: Any
    captured_at: str | None
    ref: dict[str, Any]


def _error_record(exc: BaseException, attempt: int) -> dict[str, Any]:
    if isinstance(exc, StepTimedOut):  # which limit fired, not a traceback of the waiting
        return {**exc.error, "attempt": attempt}
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {
        "type": type(exc).__qualname__,
        "message": str(exc),
        "attempt": attempt,
        "traceback": "".join(tb[-12:]),
    }


def check_step_call(name: str, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                    postcondition: Any) -> None:  # fmt: skip
    """A step call's arguments, checked before it takes its place (sync and async contexts)."""
    for value in (fn, *args, *kwargs.values()):
        if hasattr(value, "apply"):
            raise TypeError(
                f"step {name!r} was given an effect target ({value!r}); external effects must "
                "go through ctx.effect(target, key, payload, ...)"
            )
    if postcondition is not None and not callable(postcondition):
        raise TypeError(f"step {name!r}: postcondition {postcondition!r} is not callable")
    if name == STATUS_STEP:
        raise InvalidInput(f"step name {STATUS_STEP!r} is the runtime's own (ctx.set_status); "
                           "choose another")  # fmt: skip


def step_error(name: str, error: dict[str, Any]) -> StepFailed:
    """The exception a recorded step failure raises, on the first run and on every replay."""
    if isinstance(error, dict) and error.get("type") == "StepTimedOut":
        return StepTimedOut(name, error)
    return StepFailed(name, error)


def request_hash(request: Any) -> str:
    return hashlib.sha256(db.to_json_text(request, "the decide request").encode()).hexdigest()


def child_placement(queue: Any, priority: Any) -> dict[str, Any]:
    """insert_child's queue, priority (None: the parent's) and trace context (the current
    span's: the parent's run; None: the parent's stored one)."""
    return {"queue": None if queue is None else queues.queue_name(queue, "queue"),
            "priority": None if priority is None else queues.priority(priority),
            "traceparent": telemetry.traceparent()}  # fmt: skip


def successor_id(wf_id: str) -> str:
    """continue_as_new names the next run <id>#<n> (docs/design.md#refinements)."""
    m = re.match(r"^(.*)#(\d+)$", wf_id)
    return f"{m.group(1)}#{int(m.group(2)) + 1}" if m else f"{wf_id}#1"


_UNREAD = object()  # ctx.input not decoded yet


def _iso(ts: datetime) -> str:
    return ts.isoformat()


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _durable(method: _Method) -> _Method:
    """A durable call of WorkflowContext: a database fault in the runtime's own I/O unwinds
    the run as DatabaseLost, remembered, so workflow code that catches it cannot make it the
    workflow's failure (run_end.py, rule 1). A step body's own errors never get here: the
    body's failures are recorded (StepFailed)."""

    @functools.wraps(method)
    def call(self: WorkflowContext, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            if not is_database_fault(exc):
                raise
            self._raise(database_lost(exc))

    return cast(_Method, call)


class RunView:
    """What workflow code reads of its run, written once for both APIs: a WorkflowContext
    reads its own replay state, an AsyncWorkflowContext its cursor's (a WorkflowContext)."""

    _run: Run

    @property
    def _replay(self) -> WorkflowContext:
        raise NotImplementedError  # pragma: no cover

    @property
    def workflow_id(self) -> str:
        return self._run.workflow_id

    @property
    def epoch(self) -> int:
        return self._run.epoch

    @property
    def input(self) -> Any:
        """The workflow's input, typed values rebuilt (codec.py)."""
        cursor = self._replay
        if cursor._input is _UNREAD:
            cursor._input = cursor._decoded(self._run.input, 0, "input", "input")
        return cursor._input

    @property
    def cancel_requested(self) -> bool:
        return self._run.cancel_requested_at is not None

    @property
    def unwinding(self) -> BaseException | None:
        """The Suspend/Fenced/Release/NonDeterminism that must end this run, if any."""
        return self._replay._unwinding

    @property
    def is_replaying(self) -> bool:
        """True while the next call has a recorded row (useful to silence duplicate logs)."""
        cursor = self._replay
        return (cursor._seq + 1) in cursor._recorded


class WorkflowContext(RunView):
    """What workflow code calls. One context per run; not shared between threads."""

    def __init__(
        self,
        run: Run,
        conn: db.Conn,
        steps: list[db.Row],
        worker_id: str,
        stopping: threading.Event | None = None,
    ):
        self._run = run
        self._conn = conn
        self._recorded = {row["seq"]: row for row in steps}
        self._seq = 0
        self._stopping = stopping or threading.Event()
        self._unwinding: BaseException | None = None  # re-raised if workflow code swallows it
        self._cancel_delivered = False
        # A step's record waits here until the next write or the next real call, whichever comes
        # first: a workflow that returns right after its last step commits that step and its
        # completion in one transaction (one fsync fewer). The window is workflow code only (no
        # body, no send runs in it), so a crash there looks exactly like a crash just before the
        # record: the step runs again, as it may after any crash before its record.
        self._pending: list[dict[str, Any]] = []
        self.worker_id = worker_id
        self._port = _ContextPort(self)
        self._input: Any = _UNREAD
        self._clock: timeouts.StepClock | None = None  # the running attempt's timeouts

    # -- identity (RunView: workflow_id, epoch, input, cancel_requested, unwinding,
    # is_replaying) ------------------------------------------------------------------------

    @property
    def _replay(self) -> WorkflowContext:
        return self

    # -- the replay cursor ----------------------------------------------------------------

    def _raise(self, exc: BaseException) -> NoReturn:
        self._unwinding = exc
        raise exc

    def _decoded(self, value: Any, seq: int, kind: str, name: str) -> Any:
        """A recorded value with its types rebuilt. One that cannot be rebuilt (its class gone,
        changed or not imported by this worker) is history this code cannot replay: the run
        ends stuck, as for NonDeterminism, with the codec's message saying what to restore."""
        try:
            return codec.decode(value)
        except RecordedTypeError as exc:
            recorded = {"kind": kind, "name": name, "type": codec.type_of(value)}
            self._raise(NonDeterminism(seq, recorded, {"unreadable": str(exc)}))

    def _next(
        self, kind: str, name: str, fingerprint: str | None = None
    ) -> tuple[int, db.Row | None]:
        """Take the next seq; return its recorded row (checked against this call) or None."""
        if self._unwinding is not None:
            raise self._unwinding
        self._seq += 1
        row = self._recorded.get(self._seq)
        if row is not None:
            recorded = {"kind": row["kind"], "name": row["name"], "fingerprint": row["fingerprint"]}
            called = {"kind": kind, "name": name, "fingerprint": fingerprint}
            if recorded != called:
                self._raise(NonDeterminism(self._seq, recorded, called))
        return self._seq, row

    def _frontier(self, flush: bool = True) -> None:
        """Before a call runs for real: the claim must still be ours, locally and remotely,
        and a pending cancel is delivered (once) here. A deferred step record is committed
        first unless the caller commits it itself (flush=False: decide, before its model call)."""
        run = self._run
        if run.fenced:
            self._raise(Fenced(f"{run.workflow_id}: heartbeat found epoch {run.epoch} fenced"))
        if time.monotonic() >= run.local_deadline:
            self._raise(
                Fenced(f"{run.workflow_id}: local lease deadline passed (epoch {run.epoch})")
            )
        if run.execution_local is not None and time.monotonic() >= run.execution_local:
            self._raise(WorkflowTimedOut(f"{run.workflow_id}: execution deadline "
                                         f"{run.execution_deadline} passed"))  # fmt: skip
        if self._stopping.is_set():
            self._raise(Release(f"{run.workflow_id}: worker stopping"))
        if flush:
            self._flush()  # its fence may bring news of a cancel, delivered just below
        if run.cancel_requested_at is not None and not self._cancel_delivered:
            self._cancel_delivered = True
            raise Cancelled(f"{run.workflow_id} was cancelled")

    @contextmanager
    def _fenced_write(self) -> Iterator[db.Row]:
        """A fenced transaction (db.fenced) that renews the local deadline when it commits.

        Yields the fence row (cancel_requested_at, now, lease_expires_at)."""
        t0 = time.monotonic()
        flushed, self._pending = self._pending, []
        try:
            with db.fenced(self._conn, self.workflow_id, self.epoch, self._run.lease_ttl) as fence:
                for params in flushed:  # deferred step records first, in seq order
                    self._conn.execute(db.query("insert_step"), params)
                yield fence
        except Fenced as exc:
            self._unwinding = exc
            raise
        self._written(t0, fence, flushed)

    def _record_one(self, params: dict[str, Any]) -> Any:
        """_fenced_write around one step record with nothing deferred before it, as one
        statement (one round trip, not four); returns the output as stored."""
        t0 = time.monotonic()
        try:
            row = db.record_step_fenced(self._conn, params, self._run.lease_ttl)
        except Fenced as exc:
            self._unwinding = exc
            raise
        self._written(t0, row, [params])
        return row["output"]

    def _written(self, t0: float, fence: db.Row, flushed: list[dict[str, Any]]) -> None:
        """After a fenced write committed: the local deadline renewed from its start, a cancel
        noted, the kill point of each step record it carried."""
        self._run.renewed(t0)
        if fence["cancel_requested_at"] is not None:
            self._run.cancel_requested_at = fence["cancel_requested_at"]
        for params in flushed:
            if params["kind"] == "step" and params["name"] != STATUS_STEP:
                killpoints.hit("step_after_record")

    def _flush(self) -> None:
        """Commit a deferred step record now (before a body runs or the workflow waits)."""
        if len(self._pending) == 1:
            self._record_one(self._pending.pop())
        elif self._pending:
            with self._fenced_write():
                pass

    def _step_params(self, seq: int, kind: str, name: str, output: Any, error: Any,
                     fingerprint: str | None) -> dict[str, Any]:  # fmt: skip
        return {
            "wf": self.workflow_id,
            "seq": seq,
            "name": name,
            "kind": kind,
            "fingerprint": fingerprint,
            "output": db.jsonb(output) if error is None else None,
            "error": db.jsonb(error) if error is not None else None,
            "epoch": self.epoch,
        }

    def _insert_step(self, seq: int, kind: str, name: str, output: Any = None,
                     error: Any = None, fingerprint: str | None = None) -> Any:  # fmt: skip
        """Insert a step row inside an open fenced transaction; returns the output as stored."""
        params = self._step_params(seq, kind, name, output, error, fingerprint)
        return db.one(self._conn.execute(db.query("insert_step"), params))["output"]

    def _record(self, seq: int, kind: str, name: str, output: Any = None, error: Any = None,
                fingerprint: str | None = None, defer: bool = False) -> Any:  # fmt: skip
        """Record a call's row; returns the output as stored (what a replay will return).

        defer=True keeps the row for the next fenced write (see _pending)."""
        if defer:
            self._pending.append(self._step_params(seq, kind, name, output, error, fingerprint))
            return db.as_stored(self._conn, output) if error is None else None
        if not self._pending:
            return self._record_one(self._step_params(seq, kind, name, output, error, fingerprint))
        with self._fenced_write():
            return self._insert_step(seq, kind, name, output, error, fingerprint)

    def _waiting_for(self, seq: int, kind: str) -> dict[str, Any]:
        waiting = self._run.waiting or {}
        return waiting if waiting.get("seq") == seq and waiting.get("kind") == kind else {}

    # -- steps ------------------------------------------------------------------------------

    @_durable
    def step(self, name: str, fn: Callable[..., Any], *args: Any, retry: RetryPolicy | None = None,
             postcondition: Callable[[Any], bool] | None = None, **kwargs: Any) -> Any:  # fmt: skip
        """Run fn(*args, **kwargs) at least once and record its JSON result; replay returns it.

        A step body may run again after a crash before its record (like a Temporal activity), so
        anything with an external side effect belongs in ctx.effect, never in a step.
        """
        check_step_call(name, fn, args, kwargs, postcondition)
        seq, row = self._next("step", name)
        if row is not None:
            if row["error"] is not None:
                raise step_error(name, row["error"])
            return self._decoded(row["output"], seq, "step", name)
        self._frontier()

        def checked() -> Any:
            output = fn(*args, **kwargs)
            # Verified completion: the body's own answer is not enough; the runner checks the
            # fact. A post-condition that fails or raises fails the attempt (retried, then
            # recorded as the step's error): never recorded as success.
            if postcondition is not None and postcondition(output) is not True:
                raise PostconditionFailed(
                    f"step {name!r}: postcondition does not hold for {output!r}"
                )
            return output

        def body() -> Any:
            return self._bounded(checked)

        what = f"the result of step {name!r}"
        output = self._run_body(seq, "step", name, body, retry,
                                shape=lambda out: codec.encode(out, what))  # fmt: skip
        return self._decoded(output, seq, "step", name)

    @body_span  # a span per attempt (docs/observability.md)
    def _run_body(self, seq: int, kind: str, name: str, body: Callable[[], Any],
                  retry: RetryPolicy | None, fingerprint: str | None = None,
                  shape: Callable[[Any], Any] = lambda out: out,
                  after_body: str = "step_before_record") -> Any:  # fmt: skip
        """Run a body with the retry policy and record its (shaped) output or its failure."""
        policy = retry or RetryPolicy()
        self._hold_until_backoff_due(seq)
        attempt = self._attempt(seq)
        if policy.max_attempts and attempt > policy.max_attempts:
            error = {
                "type": "AttemptsExhausted",
                "message": f"{attempt - 1} attempts used (worker crashes count as attempts)",
                "attempt": attempt,
            }
            self._record(seq, kind, name, error=error, fingerprint=fingerprint)
            raise StepFailed(name, error)
        emit("step_started", wf=self.workflow_id, epoch=self.epoch, seq=seq, kind=kind, name=name,
             attempt=attempt, worker=self.worker_id)  # fmt: skip
        self._clock = None
        try:
            if policy.timed:  # docs/timeouts.md: the attempt's start, committed before the body
                with self._fenced_write():
                    self._clock = timeouts.start_attempt(
                        self._conn, self.workflow_id, seq, name, attempt,
                        policy.start_to_close, policy.schedule_to_close)  # fmt: skip
                if self._clock.no_time_for(0):
                    raise self._clock.error(TimeoutKind.SCHEDULE_TO_CLOSE, attempt)
            output = body()
        except Exception as exc:  # the body failed: retry later, or record the failure
            if policy.retries(exc, attempt):
                delay = policy.delay(attempt)
                if self._clock is not None and self._clock.no_time_for(delay):
                    # no attempt could start before the step's deadline: it fails now, timed out
                    exc = self._clock.error(TimeoutKind.SCHEDULE_TO_CLOSE, attempt,
                                            cause=_error_record(exc, attempt))  # fmt: skip
                else:
                    self._suspend_for_retry(seq, name, attempt, delay)
            self._fail(seq, kind, name, exc, attempt, fingerprint)
        try:
            output = json.loads(db.to_json_text(shape(output), f"the result of {kind} {name!r}"))
        except TypeError as exc:  # a bug in the body, not a transient failure: no retry
            self._fail(seq, kind, name, exc, attempt, fingerprint)
        killpoints.hit(after_body)
        # Deferred: committed by the next write (the completion, if the workflow returns now);
        # step_after_record fires once it is committed. Returns exactly what a replay returns.
        return self._record(seq, kind, name, output=output, fingerprint=fingerprint, defer=True)

    def _fail(self, seq: int, kind: str, name: str, exc: Exception, attempt: int,
              fingerprint: str | None) -> None:  # fmt: skip
        error = _error_record(exc, attempt)
        self._record(seq, kind, name, error=error, fingerprint=fingerprint, defer=True)
        raise step_error(name, error) from exc

    def _bounded(self, body: Callable[[], Any]) -> Any:
        """Run a step's body (or a model call) within the current attempt's timeouts and the
        workflow's execution deadline (docs/timeouts.md); with none, inline as always. Past the
        first deadline the attempt is abandoned: StepTimedOut for a step limit (a failed
        attempt), WorkflowTimedOut for the workflow's."""
        clock, run = self._clock, self._run
        first = timeouts.first_limit(clock, run.execution_local)
        if first is None:
            return body()
        deadline, kind = first
        try:
            return timeouts.run_until(body, deadline)
        except timeouts.Abandoned:
            pass
        emit("step_abandoned", wf=self.workflow_id, epoch=self.epoch, seq=self._seq,
             timeout=str(kind), worker=self.worker_id)  # fmt: skip
        if kind == TimeoutKind.EXECUTION or clock is None:
            self._raise(WorkflowTimedOut(f"{run.workflow_id}: execution deadline "
                                         f"{run.execution_deadline} passed during a step"))  # fmt: skip
        raise clock.error(TimeoutKind(kind), clock.attempt)

    def _attempt(self, seq: int) -> int:
        """docs/design.md#durable-replay: attempt = waiting.attempt + takeovers, so a crash loop spends retries."""
        attempt: int = self._waiting_for(seq, "retry").get("attempt", 1)
        return attempt + self._run.takeovers

    def _hold_until_backoff_due(self, seq: int) -> None:
        """A signal may wake a workflow early; its retry backoff still holds (docs/design.md#refinements)."""
        until = self._waiting_for(seq, "retry").get("until")
        if (
            until
            and self._run.claimed_now
            and self._run.claimed_now < datetime.fromisoformat(until)
        ):
            with self._fenced_write():
                self._conn.execute(db.query("suspend_until"),
                                   {"wf": self.workflow_id, "status": "pending",
                                    "waiting": db.jsonb(self._run.waiting), "until": until})  # fmt: skip
            self._raise(Suspend(f"{self.workflow_id}: backoff of seq {seq} not due until {until}"))

    @retry_span  # counted in interlock.step.retries
    def _suspend_for_retry(self, seq: int, name: str, attempt: int, delay: float) -> None:
        with self._fenced_write() as fence:
            until = fence["now"] + timedelta(seconds=delay)
            waiting = {"seq": seq, "kind": "retry", "name": name, "attempt": attempt + 1,
                       "until": _iso(until)}  # fmt: skip
            self._conn.execute(db.query("suspend_until"),
                               {"wf": self.workflow_id, "status": "pending",
                                "waiting": db.jsonb(waiting), "until": until})  # fmt: skip
        self._raise(Suspend(f"{self.workflow_id}: step {name!r} retry {attempt + 1} in {delay}s"))

    # -- decisions --------------------------------------------------------------------------

    @_durable
    def decide(self, name: str, call: Callable[[Any], Any], request: Any,
               premises: Callable[[], Any] | None = None,
               retry: RetryPolicy | None = None) -> Decision:  # fmt: skip
        """Ask a model once and record the answer first-writer-wins, with the premises it saw.

        Each model call is logged in ilr.llm_calls before it is made, so calls whose answers
        were discarded by a crash can be counted (llm_calls minus decide rows)."""
        rhash = request_hash(request)
        seq, row = self._next("decide", name, rhash)
        if row is None:
            self._frontier(flush=False)
            captured = premises() if premises else None
            captured_at = _iso(db.db_now(self._conn))

            def ask() -> Any:
                self._frontier_live_only()
                params = {"wf": self.workflow_id, "seq": seq, "epoch": self.epoch,
                          "request_hash": rhash}  # fmt: skip
                if self._pending:  # a deferred step record and the call's log: one commit
                    with self._fenced_write():
                        self._conn.execute(db.query("log_llm_call"), params)
                else:
                    self._conn.execute(db.query("log_llm_call"), params)
                return self._bounded(lambda: call(request))  # the model call only

            def shape(response: Any) -> dict[str, Any]:
                meta = response if isinstance(response, dict) else {}
                return {"request_hash": rhash, "response": response, "model": meta.get("model"),
                        "usage": meta.get("usage"), "premises": captured,
                        "captured_at": captured_at}  # fmt: skip

            output = self._run_body(seq, "decide", name, ask, retry, fingerprint=rhash,
                                    shape=shape, after_body="decide_after_response")  # fmt: skip
        elif row["error"] is not None:
            raise step_error(name, row["error"])
        else:
            output = row["output"]
        ref = {"workflow_id": self.workflow_id, "seq": seq, "request_hash": rhash}
        return Decision(output["response"], output["premises"], output["captured_at"], ref)

    def _frontier_live_only(self) -> None:
        run = self._run
        if run.fenced or time.monotonic() >= run.local_deadline:
            self._raise(Fenced(f"{run.workflow_id}: claim lost before the model call"))

    # -- gated effects ----------------------------------------------------------------------

    @_durable
    def effect(self, target: Any, key: str, payload: Any, premises: Any, grant: str,
               name: str | None = None, local_premises: Any = (), compensation: bool = False,
               raise_on_refusal: bool = False, action: str | None = None,
               decision: Any = None, postcondition: Any = None) -> Any:  # fmt: skip
        """Send an external effect through the gate (docs/design.md#gated-effects); returns an EffectResult.

        At most once per `key` at tiers 1 and 2, only under the live `grant`, only while
        `premises` (what the decision assumed) still hold, journaled in a verifiable receipt."""
        return run_effect(self._port, target, key, payload, premises, grant, name=name,
                          local_premises=local_premises, compensation=compensation,
                          raise_on_refusal=raise_on_refusal, action=action,
                          decision=decision, postcondition=postcondition)  # fmt: skip

    # -- timers and signals -----------------------------------------------------------------

    @_durable
    def sleep(self, seconds: float, name: str = "sleep") -> None:
        """A durable timer: the step is recorded only at database time >= the recorded until."""
        seq, row = self._next("sleep", name)
        if row is not None:
            return
        self._frontier()
        self._wait(seq, "sleep", name, lambda now: now + timedelta(seconds=seconds), None)

    @_durable
    def wait_signal(self, name: str, timeout: float | None = None) -> Any:
        """The next unconsumed signal `name` (its payload), or None after `timeout` seconds."""
        seq, row = self._next("signal", name)
        if row is not None:
            return self._decoded(row["output"], seq, "signal", name)
        self._frontier()
        until = None if timeout is None else (lambda now: now + timedelta(seconds=timeout))
        return self._decoded(self._wait(seq, "signal", name, until, name), seq, "signal", name)

    @_durable
    def wait_approval(self, proposal: Any, timeout: float | None = None) -> dict[str, Any] | None:
        """Wait for a person to approve `proposal` (the payload this workflow will offer its
        effect), shown as such by `interlock describe`, `interlock approve` and the console.
        Returns the approval {grant_id, payload, facts_seen} (rt.approve / `interlock approve`
        make it: a grant bound to exactly that payload), or None after `timeout` seconds. The
        payload approved may differ from the proposal; the effect then offers what was
        approved or is refused."""
        try:
            db.to_json_text(proposal, "the proposal")
        except TypeError as exc:
            raise InvalidInput(str(exc)) from None
        seq, row = self._next("signal", APPROVAL_SIGNAL)
        if row is not None:
            return _approval(row["output"])
        self._frontier()
        until = None if timeout is None else (lambda now: now + timedelta(seconds=timeout))
        return _approval(self._wait(seq, "signal", APPROVAL_SIGNAL, until, APPROVAL_SIGNAL,
                                    proposal=proposal))  # fmt: skip

    # -- status, for queries -------------------------------------------------------------------

    def set_status(self, value: Any) -> None:
        """Publish `value` as this workflow's status: rt.query(id), `interlock query ID` and the
        console read it from the database, without a worker and without waking the workflow.

        A durable call like a step: it takes the next place in the history (adding one to
        code that runs already is a change for ctx.patched or a new version) and a replay
        passes over it. It is committed with the run's next write (the next step's record,
        the suspend of a wait, the completion), so a reader never sees a status that the
        committed history does not lead to. A typed value keeps its type (codec.py); a value
        that cannot be recorded is refused here, before anything is written (NotRecordable)."""
        text = validate.json_text(codec.encode(value, "the status"), "the status")
        seq, row = self._next("step", STATUS_STEP)
        if row is not None:
            return
        self._frontier(flush=False)
        # deferred like a step's record (no as_stored round trip: nothing reads it back here)
        self._pending.append(
            self._step_params(seq, "step", STATUS_STEP, json.loads(text), None, None)
        )

    @wait_span  # interlock.wait: ready or suspended
    def _wait(self, seq: int, kind: str, name: str, first_until: Callable[[datetime], datetime] | None,
              signal: str | None, proposal: Any = None) -> Any:  # fmt: skip
        """The one-transaction suspend (docs/design.md#suspend). The fence locks the workflow row first, so a
        concurrent signal either committed before (the mailbox check sees it) or waits for this
        commit and then wakes the row: no wakeup is lost."""
        waiting = self._waiting_for(seq, kind)
        with self._fenced_write() as fence:
            now = fence["now"]
            if signal is not None:
                found = self._conn.execute(db.query("take_signal"),
                                           {"wf": self.workflow_id, "name": signal,
                                            "seq": seq}).fetchone()  # fmt: skip
                if found is not None:
                    self._insert_step(seq, kind, name, output=found["payload"])
                    return found["payload"]
            until: datetime | None
            if waiting.get("until"):
                until = datetime.fromisoformat(waiting["until"])
            else:
                until = first_until(now) if first_until else None
            if until is not None and now >= until:
                self._insert_step(
                    seq, kind, name, output={"until": _iso(until)} if kind == "sleep" else None
                )
                return None
            state = {"seq": seq, "kind": kind, "name": name, "signal": signal,
                     "until": _iso(until) if until else None}  # fmt: skip
            if proposal is not None:
                state["proposal"] = proposal
            self._conn.execute(db.query("suspend_until"),
                               {"wf": self.workflow_id, "status": "sleeping",
                                "waiting": db.jsonb(state), "until": until or "infinity"})  # fmt: skip
        killpoints.hit("wait_after_suspend")
        self._raise(
            Suspend(f"{self.workflow_id}: waiting ({kind} {name}) until {until or 'a signal'}")
        )

    # -- versioning -------------------------------------------------------------------------

    @_durable
    def patched(self, patch_id: str) -> bool:
        """True on new code paths; False when replaying history recorded before the patch."""
        if self._unwinding is not None:
            raise self._unwinding
        row = self._recorded.get(self._seq + 1)
        if row is not None:
            if row["kind"] == "patch" and row["name"] == patch_id:
                self._seq += 1
                return True
            return False  # old history: no marker here, and the seq is not consumed
        seq = self._seq = self._seq + 1
        self._frontier()
        self._record(seq, "patch", patch_id, output=True)
        return True

    # -- children and continue-as-new ----------------------------------------------------------

    @_durable
    def child(self, workflow: Any, input: Any = None, child_id: str | None = None,
              version: str | None = None, *, queue: str | None = None,
              priority: int | None = None) -> str:  # fmt: skip
        """Start a child workflow (recorded once); returns its id, `<parent>/<seq>` by default.
        It runs on this workflow's queue at its priority unless `queue` / `priority` say
        otherwise, and its spans continue this run's trace (docs/queues.md#children)."""
        name, version = (workflow, version) if isinstance(workflow, str) else (
            definition(workflow).name, version or definition(workflow).version)  # fmt: skip
        placement = child_placement(queue, priority)
        seq, row = self._next("child", name)
        if row is not None:
            child: str = row["output"]["id"]
            return child
        self._frontier()
        cid = child_id or f"{self.workflow_id}/{seq}"
        text = db.to_json_text(
            codec.encode(input, f"the input of child {cid}"), f"the input of child {cid}"
        )
        with self._fenced_write():
            version = version or _newest_version(self._conn, name)
            self._conn.execute(db.query("insert_child"),
                               {"id": cid, "name": name, "version": version,
                                "input": db.jsonb(json.loads(text)), "parent": self.workflow_id,
                                **placement})  # fmt: skip
            self._insert_step(seq, "child", name, output={"id": cid, "version": version})
            self._conn.execute(db.query("notify_ready"), {"id": cid})
        return cid

    def wait_child(self, child_id: str, timeout: float | None = None) -> Any:
        """The child's result; raises WorkflowFailed if it failed, None on timeout."""
        outcome = self.wait_signal(f"$done:{child_id}", timeout)
        if outcome is None:
            return None
        if outcome["status"] != "completed":
            raise WorkflowFailed(child_id, outcome["status"], outcome.get("error"))
        return outcome["result"]

    @_durable
    def continue_as_new(self, input: Any) -> None:
        """End this run as `continued` and start its successor `<id>#<n>` in one transaction."""
        self._next("continue", "continue_as_new")
        self._frontier()
        what = "the continue_as_new input"
        text = db.to_json_text(codec.encode(input, what), what)
        new_id = successor_id(self.workflow_id)
        with self._fenced_write():
            self._conn.execute(db.query("insert_successor"),
                               {"id": new_id, "from": self.workflow_id,
                                "input": db.jsonb(json.loads(text))})  # fmt: skip
            self._conn.execute(db.query("finish"),
                               {"wf": self.workflow_id, "status": "continued",
                                "result": db.jsonb({"continued_as": new_id}), "error": None})  # fmt: skip
            self._conn.execute(db.query("end_workflow_grants"), {"wf": self.workflow_id})
            self._conn.execute(db.query("notify_ready"), {"id": new_id})
        self._raise(ContinuedAsNew(new_id))


class _ContextPort:
    """A context's RunPort (run_port.py lists and documents every member): what the effect
    gate, the worker and orphan recovery use of a run, and nothing else."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: WorkflowContext):
        self._ctx = ctx

    @property
    def conn(self) -> db.Conn:
        return self._ctx._conn

    @property
    def workflow_id(self) -> str:
        return self._ctx.workflow_id

    @property
    def workflow_name(self) -> str:
        return self._ctx._run.name

    @property
    def epoch(self) -> int:
        return self._ctx.epoch

    @property
    def worker_id(self) -> str:
        return self._ctx.worker_id

    @property
    def parent_id(self) -> str | None:
        return self._ctx._run.parent_id

    def next_call(
        self, kind: str, name: str, fingerprint: str | None = None
    ) -> tuple[int, db.Row | None]:
        return self._ctx._next(kind, name, fingerprint)

    def frontier(self) -> None:
        self._ctx._frontier()

    def fenced_write(self) -> AbstractContextManager[db.Row]:
        return self._ctx._fenced_write()

    def insert_step(self, seq: int, kind: str, name: str, output: Any = None,
                    error: Any = None, fingerprint: str | None = None) -> Any:  # fmt: skip
        return self._ctx._insert_step(seq, kind, name, output, error, fingerprint)

    def unwind(self, exc: BaseException) -> NoReturn:
        self._ctx._raise(exc)


def workflow_input(ctx: WorkflowContext, fn: Callable[..., Any]) -> Any:
    """The input the worker hands `fn(ctx, input)`: typed values rebuilt, and a plain document
    read as the type `fn` declares for its input (a dataclass or a pydantic model), so a
    workflow started from the CLI with JSON gets its declared type."""
    value = ctx.input
    hint = codec.input_hint(fn)
    return value if hint is None else codec.convert(value, hint, "the workflow input")


def port_of(ctx: WorkflowContext) -> RunPort:
    """The run's internal interface (run_port.RunPort), for the worker and orphan recovery;
    ctx.effect hands it to the gate. Not for workflow code."""
    return ctx._port


_NO_STEP = {"seq": None, "name": None, "kind": None, "fingerprint": None, "output": None,
            "error": None}  # fmt: skip


def finish_in_one(ctx: Any, status: str, result: Any, error: Any) -> bool:
    """The worker's completion as one fenced statement (query finish_fenced: one round trip):
    the outcome, the step record the run deferred, the end of its grants (ENDS_GRANTS). False,
    with nothing written, where it does not apply (another context class, a parent to signal,
    more than one deferred record): the caller then writes it under db.fenced. Raises Fenced,
    with nothing written, when the claim is gone."""
    if type(ctx) is not WorkflowContext or ctx._run.parent_id or len(ctx._pending) > 1:
        return False
    flushed, ctx._pending = ctx._pending, []
    step = flushed[0] if flushed else _NO_STEP
    params = {"wf": ctx.workflow_id, "epoch": ctx.epoch, "status": status,
              "result": db.jsonb(result), "error": db.jsonb(error) if error is not None else None,
              "seq": step["seq"], "name": step["name"], "kind": step["kind"],
              "fingerprint": step["fingerprint"], "output": step["output"],
              "step_error": step["error"], "ends_grants": status in ENDS_GRANTS}  # fmt: skip
    if ctx._conn.execute(db.query("finish_fenced"), params).fetchone() is None:
        ctx._raise(Fenced(f"workflow {ctx.workflow_id}: epoch {ctx.epoch} no longer holds a "
                          "live claim"))  # fmt: skip
    if step["kind"] == "step" and step["name"] != STATUS_STEP:
        killpoints.hit("step_after_record")  # committed, as _fenced_write fires it
    return True


def _newest_version(conn: db.Conn, name: str) -> str:
    row = conn.execute(db.query("newest_version"), {"name": name}).fetchone()
    if row is None:
        raise InvalidInput(f"no deployment serves workflow {name!r}; register it before ctx.child")
    version: str = row["version"]
    return version


APPROVAL_SIGNAL = "approve"  # the signal rt.approve sends with its grant
# ctx.set_status records a step of this name; rt.query reads the latest one. ctx.step refuses
# the name, so no workflow's own step can pass for a status.
STATUS_STEP = "$status"
# A workflow ending so ends its own grants (its approvals: principal workflow:<id>), revoked as
# 'workflow finished' in the transaction that ends it (query end_workflow_grants). A stuck one
# keeps them: an operator may still resolve its open effects (rt.recover_orphans) under them.
ENDS_GRANTS = ("completed", "failed", "cancelled", "continued", "timed_out")


def _approval(payload: Any) -> dict[str, Any] | None:
    """An approval signal's payload, checked: a bare `approve` signal carries no grant."""
    if payload is None:
        return None
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("grant_id"), str)
        or ("payload" not in payload)
    ):
        raise InvalidInput(
            "the 'approve' signal this workflow received carries no grant_id and payload: "
            "approvals go through rt.approve() or `interlock approve WF --by WHO`, which create "
            "the grant the effect needs"
        )
    return payload
