"""The run engine: what happens to a run, written once (docs/design.md#run-engine).

A workflow is replayed from the top with its step cache (docs/design.md#durable-replay). Each
durable call takes the next seq. If a step row exists at that seq, its kind and name (and
fingerprint) must match the call, else NonDeterminism; the recorded output is returned (or the
recorded error re-raised) and nothing runs. With no row the call is at the frontier: the claim
is checked (fence, the local lease deadline C1, the execution deadline, stopping, cancel), the
call runs for real and is recorded in one fenced transaction. A call that cannot finish now
(timer not due, no signal, backoff) writes its waiting state and releases the row in one fenced
transaction, then raises Suspend.

The engine does no I/O. Like the effect gate (effects/send.py), each durable call is a
generator that yields requests (run_requests.py) and receives their answers:

    Query        one named statement on the run's connection
    Transaction  a fenced transaction: the fence, the deferred step records, then Queries
    Body         workflow code (a step body, a premise reader, a model call), under a deadline
    Gate         the effect gate (effects.gate) at the frontier

Two shells drive it: WorkflowContext (context.py) serves each request in the run's thread on
its connection; AsyncWorkflowContext (aio/context.py) on the event loop with pooled
connections. A database fault a driver meets unwinds the run as DatabaseLost (run_end.py,
rule 1); exceptions a driver raises are thrown in where the request was made.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

from . import codec, db, killpoints, stored, timeouts
from .effects import Prepared
from .errors import (
    Cancelled,
    ContinuedAsNew,
    DatabaseLost,
    Fenced,
    InvalidInput,
    NonDeterminism,
    PostconditionFailed,
    RecordedTypeError,
    Release,
    StepFailed,
    Suspend,
    WorkflowFailed,
    WorkflowTimedOut,
    database_lost,
    is_database_fault,
)
from .events import emit
from .run_end import Ending
from .run_requests import Body, Gate, Io, Query, Request, Transaction, Write, serve_queries
from .run_state import (
    APPROVAL_SIGNAL,
    ENDS_GRANTS,
    STATUS_STEP,
    Decision,
    RetryPolicy,
    Run,
    approval,
    check_step_call,
    checked_proposal,
    child_placement,
    error_record,
    request_hash,
    step_error,
    successor_id,
)
from .telemetry import body_span, retry_span, wait_span
from .vocabulary import TimeoutKind
from .workflow import definition

T = TypeVar("T")


def _until(seconds: float | None) -> Callable[[datetime], datetime] | None:
    return None if seconds is None else (lambda now: now + timedelta(seconds=seconds))


def _iso(ts: datetime) -> str:
    return ts.isoformat()


_UNREAD = object()  # the input not decoded yet
_NO_STEP = {"seq": None, "name": None, "kind": None, "fingerprint": None, "output": None,
            "error": None}  # fmt: skip


class RunEngine:
    """One claimed run's replay state and its durable calls. One per run; a call's requests are
    served one at a time (the asyncio shell may interleave calls between requests)."""

    def __init__(self, run: Run, steps: list[db.Row], worker_id: str,
                 stopping: threading.Event | None = None):  # fmt: skip
        self.run = run
        self.worker_id = worker_id
        self.stopping = stopping or threading.Event()
        self.recorded = {row["seq"]: row for row in steps}
        self.seq = 0
        self.unwinding: BaseException | None = None  # re-raised if workflow code swallows it
        self.cancel_delivered = False
        # A step's record waits here until the next write or the next real call, whichever
        # comes first: a workflow that returns right after its last step commits that step and
        # its completion in one transaction (one fsync fewer). The window is workflow code only
        # (no body, no send runs in it), so a crash there looks exactly like a crash just
        # before the record: the step runs again, as it may after any crash before its record.
        self.pending: list[dict[str, Any]] = []
        self.bodies = 0  # step bodies and model calls in flight (the asyncio shell runs several)
        self.waiting_seq: int | None = None  # the one durable wait in flight
        self.input: Any = _UNREAD
        self.placed: tuple[int, str, str] = (0, "", "")  # the last call placed
        # the asyncio shell checks here that the workflow's own task takes each place
        self.placing: Callable[[str, str], None] = lambda kind, name: None

    @property
    def workflow_id(self) -> str:
        return self.run.workflow_id

    @property
    def epoch(self) -> int:
        return self.run.epoch

    # -- the replay cursor (no I/O) ---------------------------------------------------------

    def unwind(self, exc: BaseException) -> NoReturn:
        """Raise `exc` as what ends the run: re-raised at every later call, even if workflow
        code catches it."""
        self.unwinding = exc
        raise exc

    def lost(self, exc: BaseException) -> DatabaseLost:
        """A driver's database fault, remembered as what ends the run (run_end.py, rule 1)."""
        self.unwinding = database_lost(exc)
        return self.unwinding

    def thrown(self, request: Request, exc: BaseException) -> BaseException:
        """What a driver throws in for the exception serving `request` raised: the exception
        itself, except that a database fault in the runtime's own I/O (not in workflow code's
        Body, whose failures are recorded) unwinds the run as DatabaseLost, remembered."""
        return self.lost(exc) if is_database_fault(exc) and not isinstance(request, Body) else exc

    def decoded(self, value: Any, seq: int, kind: str, name: str) -> Any:
        """A recorded value with its types rebuilt. One that cannot be rebuilt (its class gone,
        changed or not imported by this worker) is history this code cannot replay: the run
        ends stuck, as for NonDeterminism, with the codec's message saying what to restore."""
        try:
            return codec.decode(value)
        except RecordedTypeError as exc:
            recorded = {"kind": kind, "name": name, "type": codec.type_of(value)}
            self.unwind(NonDeterminism(seq, recorded, {"unreadable": str(exc)}))

    def workflow_input(self) -> Any:
        if self.input is _UNREAD:
            self.input = self.decoded(self.run.input, 0, "input", "input")
        return self.input

    def place(self, kind: str, name: str, fingerprint: str | None = None) -> tuple[int, Any]:
        """Take the next seq; return its recorded row (checked against this call) or None."""
        self.placing(kind, name)
        if self.unwinding is not None:
            raise self.unwinding
        self.seq += 1
        self.placed = (self.seq, kind, name)
        row = self.recorded.get(self.seq)
        if row is not None:
            recorded = {"kind": row["kind"], "name": row["name"], "fingerprint": row["fingerprint"]}
            called = {"kind": kind, "name": name, "fingerprint": fingerprint}
            if recorded != called:
                self.unwind(NonDeterminism(self.seq, recorded, called))
        return self.seq, row

    def check_claim(self) -> None:
        """Before a call runs for real: the claim must still be ours, locally and remotely."""
        run = self.run
        # The local deadline first: it needs nobody's answer, so when both hold it is the one
        # said (the heartbeat's news of a fence may arrive in any order with a stalled load).
        if time.monotonic() >= run.local_deadline:
            self.unwind(
                Fenced(f"{run.workflow_id}: local lease deadline passed (epoch {run.epoch})")
            )
        if run.fenced:
            self.unwind(Fenced(f"{run.workflow_id}: heartbeat found epoch {run.epoch} fenced"))
        if run.execution_local is not None and time.monotonic() >= run.execution_local:
            self.unwind(WorkflowTimedOut(f"{run.workflow_id}: execution deadline "
                                         f"{run.execution_deadline} passed"))  # fmt: skip
        if self.stopping.is_set():
            self.unwind(Release(f"{run.workflow_id}: worker stopping"))

    def deliver_cancel(self) -> None:
        """A pending cancel is raised once, at the frontier, where workflow code may catch it."""
        if self.run.cancel_requested_at is not None and not self.cancel_delivered:
            self.cancel_delivered = True
            raise Cancelled(f"{self.workflow_id} was cancelled")

    def live(self) -> bool:
        """The claim is ours as far as this worker knows (C1): checked right before a model call
        and a send."""
        return not self.run.fenced and time.monotonic() < self.run.local_deadline

    def waiting_for(self, seq: int, kind: str) -> dict[str, Any]:
        waiting = self.run.waiting or {}
        return waiting if waiting.get("seq") == seq and waiting.get("kind") == kind else {}

    def attempt(self, seq: int) -> int:
        """docs/design.md#durable-replay: attempt = waiting.attempt + takeovers, so a crash loop spends retries."""
        attempt: int = self.waiting_for(seq, "retry").get("attempt", 1)
        return attempt + self.run.takeovers

    def step_params(self, seq: int, kind: str, name: str, output: Any, error: Any,
                    fingerprint: str | None) -> dict[str, Any]:  # fmt: skip
        return {"wf": self.workflow_id, "seq": seq, "name": name, "kind": kind,
                "fingerprint": fingerprint, "output": db.jsonb(output) if error is None else None,
                "error": db.jsonb(error) if error is not None else None, "epoch": self.epoch}  # fmt: skip

    # -- fenced writes ------------------------------------------------------------------------

    def opened(self) -> tuple[float, list[dict[str, Any]]]:
        """A fenced write begins: its start (the local deadline renews from it) and the
        deferred records it carries, in seq order."""
        flushed, self.pending = sorted(self.pending, key=lambda p: p["seq"]), []
        return time.monotonic(), flushed

    def written(self, t0: float, fence: db.Row, flushed: list[dict[str, Any]]) -> None:
        """After a fenced write committed: the local deadline renewed from its start, a cancel
        noted, the kill point of each step record it carried."""
        self.run.renewed(t0)
        if fence["cancel_requested_at"] is not None:
            self.run.cancel_requested_at = fence["cancel_requested_at"]
        for params in flushed:
            if params["kind"] == "step" and params["name"] != STATUS_STEP:
                killpoints.hit("step_after_record")

    def fence_params(self) -> dict[str, Any]:
        return {"wf": self.workflow_id, "epoch": self.epoch, "ttl": self.run.lease_ttl}

    def write(self, body: Write[T] | None = None) -> Io[T]:
        """A fenced transaction around `body`'s statements, with the deferred records first;
        renews the local deadline when it commits."""
        t0, flushed = self.opened()
        try:
            fence, value = yield Transaction(self.fence_params(), flushed, body)
        except Fenced as exc:
            self.unwind(exc)
        self.written(t0, fence, flushed)
        result: T = value
        return result

    @contextmanager
    def fenced(self, conn: db.Conn) -> Iterator[db.Row]:
        """write() for sync code holding a connection (the effect gate's stages)."""
        t0, flushed = self.opened()
        try:
            with db.fenced(conn, self.workflow_id, self.epoch, self.run.lease_ttl) as fence:
                for params in flushed:
                    conn.execute(db.query("insert_step"), params)
                yield fence
        except Fenced as exc:
            self.unwind(exc)
        self.written(t0, fence, flushed)

    def record_one(self, params: dict[str, Any]) -> Io[Any]:
        """write() around one step record, as one statement (one round trip, not four);
        returns the output as stored."""
        t0 = time.monotonic()
        row = yield Query("record_step_fenced", {**params, "ttl": self.run.lease_ttl}, "first")
        if row is None:
            self.unwind(db.fence_lost(self.workflow_id, self.epoch))
        self.written(t0, row, [params])
        return row["output"]

    def flush(self) -> Io[None]:
        """Commit the deferred records now: one alone as one statement, several in one write."""
        if len(self.pending) == 1:
            yield from self.record_one(self.pending.pop())
        elif self.pending:
            yield from self.write()

    def frontier(self, flush: bool = True) -> Io[None]:
        """Before a call runs for real: the claim checks, the deferred records committed (unless
        the caller commits them itself), the checks again, then a pending cancel delivered (a
        flush's fence may bring news of one)."""
        self.check_claim()
        if flush and self.pending:
            yield from self.flush()
            self.check_claim()
        self.deliver_cancel()

    def record(self, seq: int, kind: str, name: str, output: Any = None, error: Any = None,
               fingerprint: str | None = None, defer: bool = False) -> Io[Any]:  # fmt: skip
        """Record a call's row; returns the output as stored (what a replay will return).
        defer=True keeps the row for the next fenced write (see pending)."""
        params = self.step_params(seq, kind, name, output, error, fingerprint)
        if not defer and not self.pending:  # one statement, which returns the output as stored
            return (yield from self.record_one(params))
        self.pending.append(params)
        if not defer:  # committed now, through the flush (so step_after_record fires here too)
            yield from self.flush()
        if error is not None:
            return None
        local = stored.stored_locally(output)
        if local is not stored.NEEDS_SERVER:
            return local
        return (yield Query("as_stored", {"value": db.jsonb(output)}, "one"))["value"]

    # -- bodies, retries and timeouts ---------------------------------------------------------

    @body_span  # a span per attempt (docs/observability.md)
    def run_body(self, seq: int, kind: str, name: str,
                 body: Callable[[timeouts.StepClock | None], Io[Any]], retry: RetryPolicy | None,
                 fingerprint: str | None = None, shape: Callable[[Any], Any] = lambda out: out,
                 after_body: str = "step_before_record") -> Io[Any]:  # fmt: skip
        """Run a body with the retry policy and record its (shaped) output or its failure."""
        policy = retry or RetryPolicy()
        yield from self.hold_until_backoff_due(seq)
        attempt = self.attempt(seq)
        if policy.max_attempts and attempt > policy.max_attempts:
            error = {"type": "AttemptsExhausted", "attempt": attempt,
                     "message": f"{attempt - 1} attempts used (worker crashes count as attempts)"}  # fmt: skip
            yield from self.record(seq, kind, name, error=error, fingerprint=fingerprint)
            raise StepFailed(name, error)
        emit("step_started", wf=self.workflow_id, epoch=self.epoch, seq=seq, kind=kind, name=name,
             attempt=attempt, worker=self.worker_id)  # fmt: skip
        self.bodies += 1
        clock: timeouts.StepClock | None = None
        try:
            if policy.timed:  # docs/timeouts.md: the attempt's start, committed before the body
                params = timeouts.timer_params(self.workflow_id, seq, name, policy.start_to_close,
                                               policy.schedule_to_close)  # fmt: skip
                row = yield from self.write(lambda _: _one("step_timer_start", params))
                clock = timeouts.clock_of(row, time.monotonic(), name, attempt,
                                          policy.start_to_close, policy.schedule_to_close)  # fmt: skip
                if clock.no_time_for(0):
                    raise clock.error(TimeoutKind.SCHEDULE_TO_CLOSE, attempt)
            output = yield from body(clock)
        except Exception as exc:  # the body failed: retry later, or record the failure
            self.bodies -= 1
            if policy.retries(exc, attempt):
                delay = policy.delay(attempt)
                if clock is not None and clock.no_time_for(delay):
                    # no attempt could start before the step's deadline: it fails now, timed out
                    exc = clock.error(TimeoutKind.SCHEDULE_TO_CLOSE, attempt,
                                      cause=error_record(exc, attempt))  # fmt: skip
                else:
                    yield from self.suspend_for_retry(seq, name, attempt, delay)
            yield from self.fail(seq, kind, name, exc, attempt, fingerprint)
        except BaseException:
            self.bodies -= 1
            raise
        self.bodies -= 1
        try:
            output = json.loads(
                stored.to_json_text(shape(output), f"the result of {kind} {name!r}")
            )
        except TypeError as exc:  # a bug in the body, not a transient failure: no retry
            yield from self.fail(seq, kind, name, exc, attempt, fingerprint)
        killpoints.hit(after_body)
        # Deferred: committed by the next write (the completion, if the workflow returns now);
        # step_after_record fires once it is committed. Not deferred while other bodies of the
        # run are in flight (asyncio): the next write may be seconds away, and a crash
        # meanwhile would lose a finished body's result. Returns exactly what a replay returns.
        return (yield from self.record(seq, kind, name, output=output, fingerprint=fingerprint,
                                       defer=self.bodies == 0))  # fmt: skip

    def fail(self, seq: int, kind: str, name: str, exc: Exception, attempt: int,
             fingerprint: str | None) -> Io[NoReturn]:  # fmt: skip
        error = error_record(exc, attempt)
        yield from self.record(seq, kind, name, error=error, fingerprint=fingerprint, defer=True)
        raise step_error(name, error) from exc

    def bounded(self, body: Body, clock: timeouts.StepClock | None) -> Io[Any]:
        """A body within the current attempt's timeouts and the workflow's execution deadline
        (docs/timeouts.md); with none, as it is. Past the first deadline the attempt is
        abandoned: StepTimedOut for a step limit (a failed attempt), WorkflowTimedOut for the
        workflow's."""
        run = self.run
        first = timeouts.first_limit(clock, run.execution_local)
        if first is None:
            return (yield body)
        deadline, kind = first
        try:
            return (yield Body(body.fn, body.args, body.kwargs, body.label, deadline, body.check))
        except timeouts.Abandoned:
            pass
        emit("step_abandoned", wf=self.workflow_id, epoch=self.epoch, seq=self.seq,
             timeout=str(kind), worker=self.worker_id)  # fmt: skip
        if kind == TimeoutKind.EXECUTION or clock is None:
            self.unwind(WorkflowTimedOut(f"{run.workflow_id}: execution deadline "
                                         f"{run.execution_deadline} passed during a step"))  # fmt: skip
        raise clock.error(TimeoutKind(kind), clock.attempt)

    def hold_until_backoff_due(self, seq: int) -> Io[None]:
        """A signal may wake a workflow early; its retry backoff still holds (docs/design.md#refinements)."""
        until = self.waiting_for(seq, "retry").get("until")
        run = self.run
        if until and run.claimed_now and run.claimed_now < datetime.fromisoformat(until):
            params = {"wf": self.workflow_id, "status": "pending",
                      "waiting": db.jsonb(run.waiting), "until": until}  # fmt: skip
            yield from self.write(lambda _: _none("suspend_until", params))
            self.unwind(Suspend(f"{self.workflow_id}: backoff of seq {seq} not due until {until}"))

    @retry_span  # counted in interlock.step.retries
    def suspend_for_retry(self, seq: int, name: str, attempt: int, delay: float) -> Io[None]:
        def suspend(fence: db.Row) -> Generator[Query, Any, None]:
            until = fence["now"] + timedelta(seconds=delay)
            waiting = {"seq": seq, "kind": "retry", "name": name, "attempt": attempt + 1,
                       "until": _iso(until)}  # fmt: skip
            yield Query("suspend_until", {"wf": self.workflow_id, "status": "pending",
                                          "waiting": db.jsonb(waiting), "until": until})  # fmt: skip

        yield from self.write(suspend)
        self.unwind(Suspend(f"{self.workflow_id}: step {name!r} retry {attempt + 1} in {delay}s"))

    # -- steps and decisions --------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any], retry: RetryPolicy | None,
             postcondition: Callable[[Any], bool] | None) -> Io[Any]:  # fmt: skip
        """ctx.step: checked and placed now, run when driven."""
        check_step_call(name, fn, args, kwargs, postcondition)
        seq, row = self.place("step", name)
        return self._step(seq, row, name, fn, args, kwargs, retry, postcondition)

    def _step(self, seq: int, row: db.Row | None, name: str, fn: Callable[..., Any],
              args: tuple[Any, ...], kwargs: dict[str, Any], retry: RetryPolicy | None,
              postcondition: Callable[[Any], bool] | None) -> Io[Any]:  # fmt: skip
        if row is not None:
            if row["error"] is not None:
                raise step_error(name, row["error"])
            return self.decoded(row["output"], seq, "step", name)
        yield from self.frontier()

        def checked(output: Any) -> Any:
            # Verified completion: the body's own answer is not enough; the runner checks the
            # fact. A post-condition that fails or raises fails the attempt (retried, then
            # recorded as the step's error): never recorded as success.
            if postcondition is not None and postcondition(output) is not True:
                raise PostconditionFailed(
                    f"step {name!r}: postcondition does not hold for {output!r}"
                )
            return output

        label = f"step {self.workflow_id}#{seq} {name}"
        body = Body(fn, args, kwargs, label, check=checked)
        what = f"the result of step {name!r}"
        output = yield from self.run_body(seq, "step", name, lambda clock: self.bounded(body, clock),
                                          retry, shape=lambda out: codec.encode(out, what))  # fmt: skip
        return self.decoded(output, seq, "step", name)

    def decide(self, name: str, call: Callable[[Any], Any], request: Any,
               premises: Callable[[], Any] | None, retry: RetryPolicy | None) -> Io[Decision]:  # fmt: skip
        """ctx.decide: ask a model once and record the answer first-writer-wins, with the
        premises it saw. Each model call is logged in ilr.llm_calls before it is made, so calls
        whose answers were discarded by a crash can be counted (llm_calls minus decide rows)."""
        rhash = request_hash(request)
        seq, row = self.place("decide", name, rhash)
        return self._decide(seq, row, rhash, name, call, request, premises, retry)

    def _decide(self, seq: int, row: db.Row | None, rhash: str, name: str,
                call: Callable[[Any], Any], request: Any, premises: Callable[[], Any] | None,
                retry: RetryPolicy | None) -> Io[Decision]:  # fmt: skip
        if row is None:
            self.check_claim()  # the deferred records go with the call's log, below
            self.deliver_cancel()
            label = f"decide {self.workflow_id}#{seq} {name}"
            captured = (yield Body(premises, label=label)) if premises else None
            captured_at = _iso((yield Query("db_now", None, "one"))["now"])

            def ask(clock: timeouts.StepClock | None) -> Io[Any]:
                if not self.live():
                    self.unwind(Fenced(f"{self.workflow_id}: claim lost before the model call"))
                params = {"wf": self.workflow_id, "seq": seq, "epoch": self.epoch,
                          "request_hash": rhash}  # fmt: skip
                if self.pending:  # a deferred step record and the call's log: one commit
                    yield from self.write(lambda _: _none("log_llm_call", params))
                else:
                    yield Query("log_llm_call", params)
                return (yield from self.bounded(Body(call, (request,), label=label), clock))

            def shape(response: Any) -> dict[str, Any]:
                meta = response if isinstance(response, dict) else {}
                return {"request_hash": rhash, "response": response, "model": meta.get("model"),
                        "usage": meta.get("usage"), "premises": captured,
                        "captured_at": captured_at}  # fmt: skip

            output = yield from self.run_body(seq, "decide", name, ask, retry, fingerprint=rhash,
                                              shape=shape, after_body="decide_after_response")  # fmt: skip
        elif row["error"] is not None:
            raise step_error(name, row["error"])
        else:
            output = row["output"]
        ref = {"workflow_id": self.workflow_id, "seq": seq, "request_hash": rhash}
        return Decision(output["response"], output["premises"], output["captured_at"], ref)

    def effect(self, prepared: Prepared, options: dict[str, Any]) -> Io[Any]:
        """ctx.effect (docs/design.md#gated-effects): placed now; at the frontier, the deferred
        records are committed first, then the gate runs (its own frontier finds none)."""
        seq, row = self.place("effect", prepared.name, prepared.fingerprint)
        return self._effect(prepared, seq, row, options)

    def _effect(self, prepared: Prepared, seq: int, row: db.Row | None,
                options: dict[str, Any]) -> Io[Any]:  # fmt: skip
        if row is None:
            yield from self.frontier()
        return (yield Gate(prepared, seq, row, options))

    # -- timers and signals -------------------------------------------------------------------

    def sleep(self, seconds: float, name: str) -> Io[None]:
        """A durable timer: the step is recorded only at database time >= the recorded until."""
        seq, row = self.place("sleep", name)
        return self._wait(seq, row, "sleep", name, _until(seconds), None)

    def wait_signal(self, name: str, timeout: float | None) -> Io[Any]:
        """The next unconsumed signal `name` (its payload), or None after `timeout` seconds."""
        seq, row = self.place("signal", name)
        return self._wait(seq, row, "signal", name, _until(timeout), name)

    def wait_approval(self, proposal: Any, timeout: float | None) -> Io[dict[str, Any] | None]:
        """ctx.wait_approval: an approval signal carrying a grant bound to a payload."""
        checked_proposal(proposal)
        seq, row = self.place("signal", APPROVAL_SIGNAL)
        wait = self._wait(seq, row, "signal", APPROVAL_SIGNAL, _until(timeout), APPROVAL_SIGNAL,
                          proposal=proposal, decode=False)  # fmt: skip
        return _then(wait, approval)

    def wait_child(self, child_id: str, timeout: float | None) -> Io[Any]:
        """ctx.wait_child: the child's result; WorkflowFailed if it failed, None on timeout."""
        return _then(self.wait_signal(f"$done:{child_id}", timeout), _child_outcome(child_id))

    def _wait(self, seq: int, row: db.Row | None, kind: str, name: str,
              first_until: Callable[[datetime], datetime] | None, signal: str | None,
              proposal: Any = None, decode: bool = True) -> Io[Any]:  # fmt: skip
        if row is not None:
            value = row["output"] if kind == "signal" else None
        else:
            yield from self.frontier()
            value = yield from self.suspend(seq, kind, name, first_until, signal, proposal)
        return self.decoded(value, seq, kind, name) if decode else value

    @wait_span  # interlock.wait: ready or suspended
    def suspend(self, seq: int, kind: str, name: str,
                first_until: Callable[[datetime], datetime] | None, signal: str | None,
                proposal: Any = None) -> Io[Any]:  # fmt: skip
        """The one-transaction suspend (docs/design.md#suspend). The fence locks the workflow row
        first, so a concurrent signal either committed before (the mailbox check sees it) or
        waits for this commit and then wakes the row: no wakeup is lost. One durable wait at a
        time: a run's waiting state holds one, so a second wait in flight is refused."""
        if self.waiting_seq is not None:
            raise InvalidInput(f"{kind} {name!r} (seq {seq}) while seq {self.waiting_seq} waits: "
                               "an async workflow waits for one timer or signal at a time; "
                               "await them one after the other")  # fmt: skip
        waiting = self.waiting_for(seq, kind)
        until: datetime | None = None

        def ready(fence: db.Row) -> Generator[Query, Any, tuple[bool, Any]]:
            nonlocal until
            if signal is not None:
                found = yield Query("take_signal", {"wf": self.workflow_id, "name": signal,
                                                    "seq": seq}, "first")  # fmt: skip
                if found is not None:
                    yield Query("insert_step", self.step_params(seq, kind, name, found["payload"],
                                                                None, None))  # fmt: skip
                    return True, found["payload"]
            if waiting.get("until"):
                until = datetime.fromisoformat(waiting["until"])
            elif first_until is not None:
                until = first_until(fence["now"])
            if until is not None and fence["now"] >= until:
                out = {"until": _iso(until)} if kind == "sleep" else None
                yield Query("insert_step", self.step_params(seq, kind, name, out, None, None))
                return True, None
            state = {"seq": seq, "kind": kind, "name": name, "signal": signal,
                     "until": _iso(until) if until else None}  # fmt: skip
            if proposal is not None:
                state["proposal"] = proposal
            yield Query("suspend_until", {"wf": self.workflow_id, "status": "sleeping",
                                          "waiting": db.jsonb(state),
                                          "until": until or "infinity"})  # fmt: skip
            return False, None

        self.waiting_seq = seq
        try:
            done, value = yield from self.write(ready)
        finally:
            self.waiting_seq = None
        if done:
            return value
        killpoints.hit("wait_after_suspend")
        self.unwind(
            Suspend(f"{self.workflow_id}: waiting ({kind} {name}) until {until or 'a signal'}")
        )

    # -- status and versions (no I/O: committed with the run's next write) -------------------------

    def set_status(self, value: Any) -> None:
        """ctx.set_status: a durable call recorded with the run's next write."""
        text = stored.json_text(codec.encode(value, "the status"), "the status")
        seq, row = self.place("step", STATUS_STEP)
        if row is None:
            self.check_claim()
            self.deliver_cancel()
            self.pending.append(
                self.step_params(seq, "step", STATUS_STEP, json.loads(text), None, None)
            )

    def patched(self, patch_id: str) -> bool:
        """ctx.patched: True on new code paths; False when replaying history recorded before
        the patch. A new marker is committed with the run's next write."""
        self.placing("patch", patch_id)
        if self.unwinding is not None:
            raise self.unwinding
        row = self.recorded.get(self.seq + 1)
        if row is not None:
            if row["kind"] == "patch" and row["name"] == patch_id:
                self.seq += 1
                return True
            return False  # old history: no marker here, and the seq is not consumed
        seq = self.seq = self.seq + 1
        self.check_claim()
        self.deliver_cancel()
        self.pending.append(self.step_params(seq, "patch", patch_id, True, None, None))
        return True

    # -- children and continue-as-new ---------------------------------------------------------

    def child(self, workflow: Any, input: Any, child_id: str | None, version: str | None,
              queue: str | None, priority: int | None) -> Io[str]:  # fmt: skip
        """ctx.child: start a child workflow (recorded once); returns its id, `<parent>/<seq>`
        by default, on this workflow's queue at its priority unless told otherwise."""
        name, version = (workflow, version) if isinstance(workflow, str) else (
            definition(workflow).name, version or definition(workflow).version)  # fmt: skip
        placement = child_placement(queue, priority)
        seq, row = self.place("child", name)
        return self._child(seq, row, name, input, child_id, version, placement)

    def _child(self, seq: int, row: db.Row | None, name: str, input: Any, child_id: str | None,
               version: str | None, placement: dict[str, Any]) -> Io[str]:  # fmt: skip
        if row is not None:
            recorded: str = row["output"]["id"]
            return recorded
        yield from self.frontier()
        cid = child_id or f"{self.workflow_id}/{seq}"
        what = f"the input of child {cid}"
        text = stored.to_json_text(codec.encode(input, what), what)

        def start(_: db.Row) -> Generator[Query, Any, None]:
            chosen = version
            if chosen is None:
                found = yield Query("newest_version", {"name": name}, "first")
                if found is None:
                    raise InvalidInput(f"no deployment serves workflow {name!r}; register it "
                                       "before ctx.child")  # fmt: skip
                chosen = found["version"]
            yield Query("insert_child", {"id": cid, "name": name, "version": chosen,
                                         "input": db.jsonb(json.loads(text)),
                                         "parent": self.workflow_id, **placement})  # fmt: skip
            out = {"id": cid, "version": chosen}
            yield Query("insert_step", self.step_params(seq, "child", name, out, None, None))
            yield Query("notify_ready", {"id": cid})

        yield from self.write(start)
        return cid

    def continue_as_new(self, input: Any) -> Io[NoReturn]:
        """ctx.continue_as_new: end this run as `continued` and start its successor `<id>#<n>`
        in one transaction."""
        self.place("continue", "continue_as_new")
        return self._continue_as_new(input)

    def _continue_as_new(self, input: Any) -> Io[NoReturn]:
        yield from self.frontier()
        what = "the continue_as_new input"
        text = stored.to_json_text(codec.encode(input, what), what)
        new_id = successor_id(self.workflow_id)
        wf = self.workflow_id

        def successor(_: db.Row) -> Generator[Query, Any, None]:
            yield Query("insert_successor", {"id": new_id, "from": wf,
                                             "input": db.jsonb(json.loads(text))})  # fmt: skip
            yield Query("finish", {"wf": wf, "status": "continued",
                                   "result": db.jsonb({"continued_as": new_id}), "error": None})  # fmt: skip
            yield Query("end_workflow_grants", {"wf": wf})
            yield Query("notify_ready", {"id": new_id})

        yield from self.write(successor)
        self.unwind(ContinuedAsNew(new_id))

    # -- the end of a run (the worker's) ------------------------------------------------------

    def finish(self, status: str, result: Any = None, error: Any = None) -> Io[None]:
        """The run's end under the fence: the outcome (or the release), the deferred records,
        the end of its grants (ENDS_GRANTS), the parent's signal. Raises Fenced, with nothing
        written, when the claim is gone."""
        if status != "release" and not self.run.parent_id and len(self.pending) <= 1:
            yield from self._finish_in_one(status, result, error)
            return
        wf = self.workflow_id

        def end(_: db.Row) -> Generator[Query, Any, None]:
            if status == "release":
                yield Query("release", {"wf": wf})
                yield Query("notify_ready", {"id": wf})
                return
            yield Query("finish", {"wf": wf, "status": status, "result": db.jsonb(result),
                                   "error": db.jsonb(error) if error is not None else None})  # fmt: skip
            if status in ENDS_GRANTS:  # its approvals end with it, in this transaction
                yield Query("end_workflow_grants", {"wf": wf})
            if self.run.parent_id:  # the child's completion signals `$done:<id>` to its parent
                done = {"status": status, "result": result, "error": error}
                yield Query("signal_parent", {"child": wf, "done": db.jsonb(done)})

        yield from self.write(end)

    def _finish_in_one(self, status: str, result: Any, error: Any) -> Io[None]:
        """The completion as one fenced statement (query finish_fenced: one round trip where the
        general form takes six), where it applies: no parent to signal, at most one deferred
        record."""
        flushed, self.pending = self.pending, []
        step = flushed[0] if flushed else _NO_STEP
        params = {"wf": self.workflow_id, "epoch": self.epoch, "status": status,
                  "result": db.jsonb(result), "error": db.jsonb(error) if error is not None else None,
                  "seq": step["seq"], "name": step["name"], "kind": step["kind"],
                  "fingerprint": step["fingerprint"], "output": step["output"],
                  "step_error": step["error"], "ends_grants": status in ENDS_GRANTS}  # fmt: skip
        if (yield Query("finish_fenced", params, "first")) is None:
            self.unwind(db.fence_lost(self.workflow_id, self.epoch))
        if step["kind"] == "step" and step["name"] != STATUS_STEP:
            killpoints.hit("step_after_record")  # committed, as written() fires it

    def end(self, ending: Ending) -> Io[None]:
        """Carry out what run_end decided: the write, then the event. A lost
        claim is said as `fenced`, with nothing written."""
        if ending.write == "stuck_unfenced":
            # The suspend already released the row: guard by the unchanged epoch (B13).
            yield Query("mark_stuck_unfenced", {"wf": self.workflow_id, "epoch": self.epoch,
                                                "error": db.jsonb(ending.error)})  # fmt: skip
        elif ending.write is not None:
            try:
                yield from self.finish(ending.write, ending.result, ending.error)
            except Fenced as exc:
                emit("fenced", worker=self.worker_id, wf=self.workflow_id, epoch=self.epoch,
                     by="write", reason=str(exc))  # fmt: skip
                return
        emit(ending.event, worker=self.worker_id, wf=self.workflow_id, epoch=self.epoch,
             **ending.fields)  # fmt: skip


def _one(name: str, params: dict[str, Any]) -> Generator[Query, Any, Any]:
    return (yield Query(name, params, "one"))


def _none(name: str, params: dict[str, Any]) -> Generator[Query, Any, None]:
    yield Query(name, params)


def _then(io: Io[Any], fn: Callable[[Any], T]) -> Io[T]:
    return fn((yield from io))


def _child_outcome(child_id: str) -> Callable[[Any], Any]:
    def outcome(done: Any) -> Any:
        if done is None:
            return None
        if done["status"] != "completed":
            raise WorkflowFailed(child_id, done["status"], done.get("error"))
        return done["result"]

    return outcome


class EnginePort:
    """A run's RunPort (run_port.py lists and documents every member) over a connection: what
    the effect gate, the worker and orphan recovery use of a run, and nothing else. The sync
    shell gives the run's connection; the asyncio shell one lent for each stage of the gate."""

    __slots__ = ("_engine", "conn", "workflow_id", "workflow_name", "epoch", "worker_id",
                 "parent_id")  # fmt: skip

    def __init__(self, engine: RunEngine, conn: db.Conn):
        self._engine, self.conn, run = engine, conn, engine.run
        self.workflow_id, self.workflow_name, self.epoch = run.workflow_id, run.name, run.epoch
        self.worker_id, self.parent_id = engine.worker_id, run.parent_id

    def next_call(self, kind: str, name: str, fingerprint: str | None = None) -> tuple[int, Any]:
        return self._engine.place(kind, name, fingerprint)

    def frontier(self) -> None:
        serve_queries(self._engine.frontier(), self.conn)

    def fenced_write(self) -> Any:
        return self._engine.fenced(self.conn)

    def insert_step(self, seq: int, kind: str, name: str, output: Any = None,
                    error: Any = None, fingerprint: str | None = None) -> Any:  # fmt: skip
        params = self._engine.step_params(seq, kind, name, output, error, fingerprint)
        return db.one(self.conn.execute(db.query("insert_step"), params))["output"]

    def unwind(self, exc: BaseException) -> NoReturn:
        self._engine.unwind(exc)
