"""The context of an `async def` workflow (docs/async.md): the same durable calls as
WorkflowContext, awaited, with concurrency inside a workflow.

A call takes its place (its seq) when it is *called*, not when it is awaited or completes:
`ctx.step(...)` checks the recorded row at the next seq at once and returns a coroutine that
does the rest. So `asyncio.gather(ctx.step("a", f), ctx.step("b", g))` records a at one
place and b at the next whatever finishes first, and a replay returns each recorded result
at its place. The replay cursor, the row checks, the frontier checks (fence, the local lease
deadline C1, the execution deadline, stopping, cancel) and the step rows are WorkflowContext's
own (one instance of it serves as the cursor and holds no connection); the writes go through
async connections lent one transaction at a time; the effect gate is the sync pipeline's
code, its database parts in threads and its send awaited on the loop (effect_send).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, NoReturn, cast

from . import async_db, codec, db, killpoints, timeouts
from .async_db import AConn, AsyncPool, SyncPool
from .context import (
    APPROVAL_SIGNAL,
    STATUS_STEP,
    Decision,
    RetryPolicy,
    Run,
    RunView,
    WorkflowContext,
    _approval,
    _error_record,
    _iso,
    check_step_call,
    child_placement,
    port_of,
    request_hash,
    step_error,
    successor_id,
)
from .effect_send import drive_async
from .effects import EffectResult, Prepared, gate, prepare, run_prepared
from .errors import (
    ContinuedAsNew,
    Fenced,
    InvalidInput,
    NonDeterminism,
    PostconditionFailed,
    StepFailed,
    Suspend,
    WorkflowFailed,
    WorkflowTimedOut,
    database_lost,
    is_database_fault,
)
from .events import emit
from .telemetry import body_span, retry_span, wait_span
from .vocabulary import TimeoutKind
from .workflow import definition

Coro = Coroutine[Any, Any, Any]

# The tasks a run's code creates (gather's included), so the worker can cancel what is left
# when the run ends; set for the run's own task, inherited by every task created under it.
RUN_TASKS: contextvars.ContextVar[set[asyncio.Task[Any]] | None] = contextvars.ContextVar(
    "interlock_run_tasks", default=None
)
# The globals of the workflow's module while workflow code runs (not step bodies): a wall
# clock read from that module is non-determinism (guard_wall_clock).
WORKFLOW_CODE: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "interlock_workflow_code", default=None
)


def task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
    """The asyncio worker's task factory: a task created inside a run is the run's."""
    task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
    tasks = RUN_TASKS.get()
    if tasks is not None:
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    return task


_guard_lock = threading.Lock()


def guard_wall_clock() -> None:
    """Make time.time() and time.time_ns(), called by code of a workflow's module while that
    workflow's code runs, raise NonDeterminism: a replay would read another time. Step bodies
    run outside the guard, so a step may read the clock (its result is recorded). datetime's
    now() cannot be wrapped (a C type): docs/async.md says so."""
    with _guard_lock:
        for attr in ("time", "time_ns"):
            original = getattr(time, attr)
            if getattr(original, "__interlock_guard__", False):
                continue

            def guarded(_original: Callable[[], Any] = original, _attr: str = attr) -> Any:
                code = WORKFLOW_CODE.get()
                if code is not None and sys._getframe(1).f_globals is code:
                    raise NonDeterminism(0, {}, {"wall_clock": f"time.{_attr}()", "hint": (
                        "workflow code read the wall clock; read it in a step "
                        "(await ctx.step('now', time.time)) so a replay sees the same value")})  # fmt: skip
                return _original()

            cast(Any, guarded).__interlock_guard__ = True
            vars(time)[attr] = guarded


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 (a callable object's async __call__)
    )


def _same(value: Any) -> Any:
    return value


class AsyncWorkflowContext(RunView):
    """What `async def` workflow code calls. The durable calls take their place when called
    and are awaited: `await ctx.step(...)`, `await ctx.sleep(...)`, `await ctx.effect(...)`.
    `set_status` and `patched` need no await. One context per run, used on the worker's event
    loop only."""

    def __init__(self, run: Run, pool: AsyncPool, steps: list[db.Row], worker_id: str,
                 stopping: threading.Event, threads: Executor, sync_pool: SyncPool,
                 gate_threads: Executor | None = None):  # fmt: skip
        self._run = run
        self._pool = pool
        self._threads = threads  # plain step bodies and premise readers, plain target reads
        self._gate = gate_threads or threads  # the effect gate's database parts
        self._sync_pool = sync_pool
        # the replay cursor: WorkflowContext's own checks and rows, no connection of its own
        self._cursor = WorkflowContext(run, cast(db.Conn, None), steps, worker_id, stopping)
        self._pending: list[dict[str, Any]] = []  # deferred step records (as WorkflowContext)
        self._calls: list[tuple[int, str, str, Coro]] = []
        self._waiting: int | None = None  # the seq of the one durable wait in flight
        self._bodies = 0  # step bodies and model calls in flight
        self.root: asyncio.Task[Any] | None = None  # the workflow's own task (set by the worker)
        self.worker_id = worker_id

    # -- identity (RunView: workflow_id, epoch, input, cancel_requested, unwinding,
    # is_replaying, read from the cursor) ----------------------------------------------------

    @property
    def _replay(self) -> WorkflowContext:
        return self._cursor

    @property
    def cursor(self) -> WorkflowContext:
        """The replay cursor (for the worker: the input, the unwinding exception)."""
        return self._cursor

    # -- places, and what was never awaited ------------------------------------------------

    def _place(self, kind: str, name: str, fingerprint: str | None = None) -> tuple[int, Any]:
        """Take the next seq now (WorkflowContext._next). Only the workflow's own task takes
        places: a coroutine run concurrently (gather, create_task) that makes durable calls
        would take its later places in completion order, which a replay does not reproduce."""
        self._own_task(kind, name)
        return self._cursor._next(kind, name, fingerprint)

    def _own_task(self, kind: str, name: str) -> None:
        task = asyncio.current_task()
        if self.root is not None and task is not self.root:
            self._cursor._raise(NonDeterminism(self._cursor._seq + 1, {}, {
                "kind": kind, "name": name, "task": task.get_name() if task else None,
                "rule": "durable calls are made by the workflow's own code, not by a coroutine "
                        "it runs concurrently: gather the calls (asyncio.gather(ctx.step(...), "
                        "ctx.step(...))), or await the helper"}))  # fmt: skip

    def _track(self, seq: int, kind: str, name: str, coro: Coro) -> Coro:
        if len(self._calls) > 512:  # forget the finished ones
            self._calls = [c for c in self._calls
                           if inspect.getcoroutinestate(c[3]) != inspect.CORO_CLOSED]  # fmt: skip
        self._calls.append((seq, kind, name, coro))
        return coro

    def check_awaited(self) -> None:
        """At a normal return: every call the workflow made must have finished. One never
        awaited (or still running in a task nobody awaited) is non-determinism: whether its
        row exists depends on timing, not on the code."""
        for seq, kind, name, coro in self._calls:
            state = inspect.getcoroutinestate(coro)
            if state == inspect.CORO_CLOSED:
                continue
            if state == inspect.CORO_CREATED:
                coro.close()  # never started: no "never awaited" warning on top of ours
            how = "never awaited" if state == inspect.CORO_CREATED else "still running"
            self._cursor._raise(NonDeterminism(seq, {"kind": kind, "name": name}, {
                "unawaited": f"{kind} {name!r} was {how} when the workflow returned; await "
                             "every durable call (asyncio.gather for several at once)"}))  # fmt: skip

    def close_unawaited(self) -> None:
        """Close calls that never started (the run ended another way)."""
        for _, _, _, coro in self._calls:
            if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()

    # -- writes -----------------------------------------------------------------------------

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AConn]:
        """A pool connection for one transaction of this run. A database fault in it unwinds
        the run as DatabaseLost, remembered (WorkflowContext's _durable, run_end.py rule 1)."""
        try:
            async with self._pool.connection() as conn:
                yield conn
        except Exception as exc:
            if not is_database_fault(exc):
                raise
            self._cursor._raise(database_lost(exc))

    async def _frontier(self, flush: bool = True) -> None:
        """WorkflowContext's frontier checks (fence, C1, execution deadline, stopping, cancel
        once), then the deferred records, then the checks again: the flush's fence may bring
        news of a cancel."""
        self._cursor._frontier(flush=False)
        if flush and self._pending:
            await self._flush()
            self._cursor._frontier(flush=False)

    async def _flush(self) -> None:
        """Commit the deferred records now: one alone as one statement (one round trip, not
        four), several in one fenced transaction."""
        if len(self._pending) == 1:
            await self._record_one(self._pending.pop())
        elif self._pending:
            async with self._fenced_write():
                pass

    async def _record_one(self, params: dict[str, Any]) -> Any:
        """_fenced_write around one step record, as one statement (db.record_step_fenced)."""
        t0 = time.monotonic()
        try:
            async with self._connection() as conn:
                row = await async_db.record_step_fenced(conn, params, self._run.lease_ttl)
        except Fenced as exc:
            self._cursor._unwinding = exc
            raise
        self._cursor._written(t0, row, [params])
        return row["output"]

    @asynccontextmanager
    async def _fenced_write(self) -> AsyncIterator[tuple[AConn, db.Row]]:
        """WorkflowContext._fenced_write on an async connection: deferred records first (in
        seq order), the local deadline renewed on commit, a cancel noted."""
        t0 = time.monotonic()
        flushed, self._pending = sorted(self._pending, key=lambda p: p["seq"]), []
        try:
            async with self._connection() as conn:
                async with async_db.fenced(conn, self.workflow_id, self.epoch,
                                           self._run.lease_ttl) as fence:  # fmt: skip
                    for params in flushed:
                        await conn.execute(db.query("insert_step"), params)
                    yield conn, fence
        except Fenced as exc:
            self._cursor._unwinding = exc
            raise
        self._cursor._written(t0, fence, flushed)

    async def _record(self, seq: int, kind: str, name: str, output: Any = None,
                      error: Any = None, fingerprint: str | None = None,
                      defer: bool = False) -> Any:  # fmt: skip
        params = self._cursor._step_params(seq, kind, name, output, error, fingerprint)
        if not defer and not self._pending:  # one statement, which returns the output as stored
            return await self._record_one(params)
        self._pending.append(params)
        if not defer:  # committed now, through the flush (so step_after_record fires here too)
            await self._flush()
        if error is not None:
            return None
        local = db.stored_locally(output)
        if local is not db.NEEDS_SERVER:
            return local
        async with self._connection() as conn:
            return await async_db.as_stored(conn, output)

    # -- bodies -----------------------------------------------------------------------------

    async def _call(self, label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) as a body: an async function in a task of its own on the loop
        (named `label`, so a blocking call in it is reported by name), a plain one in the
        worker's threads. Either way outside the wall-clock guard (its result is recorded)."""
        context = contextvars.copy_context()
        context.run(WORKFLOW_CODE.set, None)
        loop = asyncio.get_running_loop()
        if _is_async(fn):
            out = fn(*args, **kwargs)
        else:
            out = await loop.run_in_executor(
                self._threads, functools.partial(context.run, fn, *args, **kwargs)
            )
            if not inspect.isawaitable(out):
                return out
        task = context.run(loop.create_task, _awaited(out))
        task.set_name(label)
        return await task

    async def _bounded(self, body: Callable[[], Awaitable[Any]],
                       clock: timeouts.StepClock | None) -> Any:  # fmt: skip
        """WorkflowContext._bounded, awaited: a body within its attempt's timeouts and the
        workflow's execution deadline (docs/timeouts.md). At the first deadline the attempt is
        abandoned: an async body is cancelled; a plain one, in its thread, cannot be, and is
        left to finish with its outcome dropped (as the sync worker leaves it)."""
        run = self._run
        first = timeouts.first_limit(clock, run.execution_local)
        if first is None:
            return await body()
        deadline, kind = first
        try:
            return await asyncio.wait_for(body(), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            if time.monotonic() < deadline:
                raise  # the body's own timeout, not one of ours
        emit("step_abandoned", wf=self.workflow_id, epoch=self.epoch, seq=self._cursor._seq,
             timeout=str(kind), worker=self.worker_id)  # fmt: skip
        if kind == TimeoutKind.EXECUTION or clock is None:
            self._cursor._raise(WorkflowTimedOut(f"{run.workflow_id}: execution deadline "
                                                 f"{run.execution_deadline} passed during a step"))  # fmt: skip
        raise clock.error(TimeoutKind(kind), clock.attempt)

    @body_span  # a span per attempt (docs/observability.md)
    async def _run_body(self, seq: int, kind: str, name: str,
                        body: Callable[[], Awaitable[Any]], retry: RetryPolicy | None,
                        fingerprint: str | None = None, shape: Callable[[Any], Any] = _same,
                        after_body: str = "step_before_record") -> Any:  # fmt: skip
        """WorkflowContext._run_body, awaited: the retry policy, attempts counted across
        crashes, the output or the failure recorded (deferred, as there)."""
        policy = retry or RetryPolicy()
        await self._hold_until_backoff_due(seq)
        attempt = self._cursor._attempt(seq)
        if policy.max_attempts and attempt > policy.max_attempts:
            error = {"type": "AttemptsExhausted", "attempt": attempt,
                     "message": f"{attempt - 1} attempts used (worker crashes count as attempts)"}  # fmt: skip
            await self._record(seq, kind, name, error=error, fingerprint=fingerprint)
            raise StepFailed(name, error)
        emit("step_started", wf=self.workflow_id, epoch=self.epoch, seq=seq, kind=kind, name=name,
             attempt=attempt, worker=self.worker_id)  # fmt: skip
        self._bodies += 1
        clock: timeouts.StepClock | None = None
        try:
            if policy.timed:  # docs/timeouts.md: the attempt's start, committed before the body
                params = timeouts.timer_params(self.workflow_id, seq, name, policy.start_to_close,
                                               policy.schedule_to_close)  # fmt: skip
                async with self._fenced_write() as (conn, _):
                    row = await async_db.one(conn, "step_timer_start", params)
                    clock = timeouts.clock_of(row, time.monotonic(), name, attempt,
                                              policy.start_to_close, policy.schedule_to_close)  # fmt: skip
                if clock.no_time_for(0):
                    raise clock.error(TimeoutKind.SCHEDULE_TO_CLOSE, attempt)
            output = await self._bounded(body, clock)
        except Exception as exc:
            self._bodies -= 1
            if policy.retries(exc, attempt):
                delay = policy.delay(attempt)
                if clock is not None and clock.no_time_for(delay):
                    # no attempt could start before the step's deadline: it fails now, timed out
                    exc = clock.error(TimeoutKind.SCHEDULE_TO_CLOSE, attempt,
                                      cause=_error_record(exc, attempt))  # fmt: skip
                else:
                    await self._suspend_for_retry(seq, name, attempt, delay)
            await self._fail(seq, kind, name, exc, attempt, fingerprint)
        except BaseException:
            self._bodies -= 1
            raise
        self._bodies -= 1
        try:
            output = json.loads(db.to_json_text(shape(output), f"the result of {kind} {name!r}"))
        except TypeError as exc:
            await self._fail(seq, kind, name, exc, attempt, fingerprint)
        killpoints.hit(after_body)
        # Deferred (committed with the next write) as WorkflowContext does, unless other bodies
        # of the run are still in flight: then the next write may be seconds away, and a crash
        # meanwhile would lose a finished body's result.
        return await self._record(seq, kind, name, output=output, fingerprint=fingerprint,
                                  defer=self._bodies == 0)  # fmt: skip

    async def _fail(self, seq: int, kind: str, name: str, exc: Exception, attempt: int,
                    fingerprint: str | None) -> NoReturn:  # fmt: skip
        error = _error_record(exc, attempt)
        await self._record(seq, kind, name, error=error, fingerprint=fingerprint, defer=True)
        raise step_error(name, error) from exc

    async def _hold_until_backoff_due(self, seq: int) -> None:
        until = self._cursor._waiting_for(seq, "retry").get("until")
        if (
            until
            and self._run.claimed_now
            and self._run.claimed_now < datetime.fromisoformat(until)
        ):
            async with self._fenced_write() as (conn, _):
                await conn.execute(db.query("suspend_until"),
                                   {"wf": self.workflow_id, "status": "pending",
                                    "waiting": db.jsonb(self._run.waiting), "until": until})  # fmt: skip
            self._cursor._raise(
                Suspend(f"{self.workflow_id}: backoff of seq {seq} not due until {until}")
            )

    @retry_span  # counted in interlock.step.retries
    async def _suspend_for_retry(self, seq: int, name: str, attempt: int, delay: float) -> None:
        async with self._fenced_write() as (conn, fence):
            until = fence["now"] + timedelta(seconds=delay)
            waiting = {"seq": seq, "kind": "retry", "name": name, "attempt": attempt + 1,
                       "until": _iso(until)}  # fmt: skip
            await conn.execute(db.query("suspend_until"),
                               {"wf": self.workflow_id, "status": "pending",
                                "waiting": db.jsonb(waiting), "until": until})  # fmt: skip
        self._cursor._raise(
            Suspend(f"{self.workflow_id}: step {name!r} retry {attempt + 1} in {delay}s")
        )

    # -- steps and decisions ------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], *args: Any, retry: RetryPolicy | None = None,
             postcondition: Callable[[Any], bool] | None = None, **kwargs: Any) -> Coro:  # fmt: skip
        """`await ctx.step(name, fn, *args)`: run fn at least once and record its result; a
        replay returns it. fn may be `async def` (awaited on the worker's loop) or plain (run
        in a worker thread). The step takes its place now, when called."""
        check_step_call(name, fn, args, kwargs, postcondition)
        seq, row = self._place("step", name)
        return self._track(seq, "step", name, self._step(seq, row, name, fn, args, kwargs,
                                                         retry, postcondition))  # fmt: skip

    async def _step(self, seq: int, row: db.Row | None, name: str, fn: Callable[..., Any],
                    args: tuple[Any, ...], kwargs: dict[str, Any], retry: RetryPolicy | None,
                    postcondition: Callable[[Any], bool] | None) -> Any:  # fmt: skip
        if row is not None:
            if row["error"] is not None:
                raise step_error(name, row["error"])
            return self._cursor._decoded(row["output"], seq, "step", name)
        await self._frontier()

        async def body() -> Any:
            output = await self._call(f"step {self.workflow_id}#{seq} {name}", fn, *args,
                                      **kwargs)  # fmt: skip
            if postcondition is not None and postcondition(output) is not True:
                raise PostconditionFailed(
                    f"step {name!r}: postcondition does not hold for {output!r}"
                )
            return output

        what = f"the result of step {name!r}"
        output = await self._run_body(seq, "step", name, body, retry,
                                      shape=lambda out: codec.encode(out, what))  # fmt: skip
        return self._cursor._decoded(output, seq, "step", name)

    def decide(self, name: str, call: Callable[[Any], Any], request: Any,
               premises: Callable[[], Any] | None = None,
               retry: RetryPolicy | None = None) -> Coro:  # fmt: skip
        """`await ctx.decide(...)`: WorkflowContext.decide with an async (or plain) model call
        and premise reader; returns a Decision."""
        rhash = request_hash(request)
        seq, row = self._place("decide", name, rhash)
        return self._track(seq, "decide", name,
                           self._decide(seq, row, rhash, name, call, request, premises, retry))  # fmt: skip

    async def _decide(self, seq: int, row: db.Row | None, rhash: str, name: str,
                      call: Callable[[Any], Any], request: Any,
                      premises: Callable[[], Any] | None, retry: RetryPolicy | None) -> Decision:  # fmt: skip
        if row is None:
            self._cursor._frontier(flush=False)
            label = f"decide {self.workflow_id}#{seq} {name}"
            captured = await self._call(label, premises) if premises else None
            async with self._connection() as conn:
                captured_at = _iso(await async_db.db_now(conn))

            async def ask() -> Any:
                self._cursor._frontier_live_only()
                params = {"wf": self.workflow_id, "seq": seq, "epoch": self.epoch,
                          "request_hash": rhash}  # fmt: skip
                if self._pending:  # a deferred step record and the call's log: one commit
                    async with self._fenced_write() as (conn, _):
                        await conn.execute(db.query("log_llm_call"), params)
                else:
                    async with self._connection() as conn:
                        await conn.execute(db.query("log_llm_call"), params)
                return await self._call(label, call, request)  # the model call only

            def shape(response: Any) -> dict[str, Any]:
                meta = response if isinstance(response, dict) else {}
                return {"request_hash": rhash, "response": response, "model": meta.get("model"),
                        "usage": meta.get("usage"), "premises": captured,
                        "captured_at": captured_at}  # fmt: skip

            output = await self._run_body(seq, "decide", name, ask, retry, fingerprint=rhash,
                                          shape=shape, after_body="decide_after_response")  # fmt: skip
        elif row["error"] is not None:
            raise step_error(name, row["error"])
        else:
            output = row["output"]
        ref = {"workflow_id": self.workflow_id, "seq": seq, "request_hash": rhash}
        return Decision(output["response"], output["premises"], output["captured_at"], ref)

    # -- gated effects ----------------------------------------------------------------------

    def effect(self, target: Any, key: str, payload: Any, premises: Any, grant: str,
               name: str | None = None, local_premises: Any = (), compensation: bool = False,
               raise_on_refusal: bool = False, action: str | None = None,
               decision: Any = None, postcondition: Any = None) -> Coro:  # fmt: skip
        """`await ctx.effect(...)`: WorkflowContext.effect. The arguments are checked and the
        call takes its place now. The gate is the sync pipeline's own code (effects.gate),
        driven from the loop (effect_send.drive_async): its database parts in the worker's
        gate threads on a connection lent per part, the send awaited on the loop when the
        target's `apply` is async (a plain one is sent from a thread)."""
        prepared = prepare(target, key, payload, premises, grant, name=name,
                           local_premises=local_premises, action=action,
                           postcondition=postcondition)  # fmt: skip
        seq, row = self._place("effect", prepared.name, prepared.fingerprint)
        options = {"compensation": compensation, "raise_on_refusal": raise_on_refusal,
                   "decision": decision}  # fmt: skip
        return self._track(seq, "effect", prepared.name,
                           self._effect(prepared, seq, row, options))  # fmt: skip

    async def _effect(self, prepared: Prepared, seq: int, row: db.Row | None,
                      options: dict[str, Any]) -> EffectResult:  # fmt: skip
        cursor, run = self._cursor, self._run
        # a WorkflowContext of this run whose connection is lent per stage: its fenced
        # writes, frontier and unwinding are the sync gate's, exactly
        here = WorkflowContext(run, cast(db.Conn, None), [], self.worker_id, cursor._stopping)
        if row is not None:  # recorded: no I/O
            return run_prepared(port_of(here), prepared, seq, row, **options)
        await self._frontier()  # deferred records first: the gate's own frontier finds none
        here._cancel_delivered = cursor._cancel_delivered
        loop = asyncio.get_running_loop()

        async def stage(part: Callable[[], Any]) -> Any:
            def lent() -> Any:
                try:
                    with self._sync_pool.connection() as conn:
                        here._conn = conn
                        try:
                            return part()
                        finally:
                            here._conn = cast(db.Conn, None)
                except Exception as exc:  # as _connection: the run unwinds, remembered
                    if not is_database_fault(exc):
                        raise
                    here._raise(database_lost(exc))

            return await loop.run_in_executor(self._gate, lent)

        def live() -> bool:  # C1, right before the send
            return not run.fenced and time.monotonic() < run.local_deadline

        context = contextvars.copy_context()
        context.run(WORKFLOW_CODE.set, None)
        try:
            io = gate(port_of(here), prepared, seq, None, **options)
            return await drive_async(io, stage, self._threads, live, context)
        finally:
            cursor._cancel_delivered = here._cancel_delivered
            if here.unwinding is not None:
                cursor._unwinding = here.unwinding

    # -- timers and signals -----------------------------------------------------------------

    def sleep(self, seconds: float, name: str = "sleep") -> Coro:
        """`await ctx.sleep(seconds)`: a durable timer (WorkflowContext.sleep)."""
        seq, row = self._place("sleep", name)

        async def go() -> None:
            if row is None:
                await self._frontier()
                await self._wait(seq, "sleep", name,
                                 lambda now: now + timedelta(seconds=seconds), None)  # fmt: skip

        return self._track(seq, "sleep", name, go())

    def wait_signal(self, name: str, timeout: float | None = None) -> Coro:
        """`await ctx.wait_signal(name, timeout)`: the next unconsumed signal's payload, or
        None after `timeout` seconds."""
        seq, row = self._place("signal", name)

        async def go() -> Any:
            if row is not None:
                return self._cursor._decoded(row["output"], seq, "signal", name)
            await self._frontier()
            until = None if timeout is None else (lambda now: now + timedelta(seconds=timeout))
            value = await self._wait(seq, "signal", name, until, name)
            return self._cursor._decoded(value, seq, "signal", name)

        return self._track(seq, "signal", name, go())

    def wait_approval(self, proposal: Any, timeout: float | None = None) -> Coro:
        """`await ctx.wait_approval(proposal, timeout)`: WorkflowContext.wait_approval."""
        try:
            db.to_json_text(proposal, "the proposal")
        except TypeError as exc:
            raise InvalidInput(str(exc)) from None
        seq, row = self._place("signal", APPROVAL_SIGNAL)

        async def go() -> dict[str, Any] | None:
            if row is not None:
                return _approval(row["output"])
            await self._frontier()
            until = None if timeout is None else (lambda now: now + timedelta(seconds=timeout))
            return _approval(await self._wait(seq, "signal", APPROVAL_SIGNAL, until,
                                              APPROVAL_SIGNAL, proposal=proposal))  # fmt: skip

        return self._track(seq, "signal", APPROVAL_SIGNAL, go())

    @wait_span  # interlock.wait: ready or suspended
    async def _wait(self, seq: int, kind: str, name: str,
                    first_until: Callable[[datetime], datetime] | None, signal: str | None,
                    proposal: Any = None) -> Any:  # fmt: skip
        """The one-transaction suspend (WorkflowContext._wait). One durable wait at a time: a
        run's waiting state holds one, so a second wait in flight is refused."""
        if self._waiting is not None:
            raise InvalidInput(f"{kind} {name!r} (seq {seq}) while seq {self._waiting} waits: an "
                               "async workflow waits for one timer or signal at a time; await "
                               "them one after the other")  # fmt: skip
        self._waiting = seq
        try:
            waiting = self._cursor._waiting_for(seq, kind)
            async with self._fenced_write() as (conn, fence):
                now = fence["now"]
                if signal is not None:
                    found = await async_db.first(conn, "take_signal", {
                        "wf": self.workflow_id, "name": signal, "seq": seq})  # fmt: skip
                    if found is not None:
                        params = self._cursor._step_params(seq, kind, name, found["payload"],
                                                           None, None)  # fmt: skip
                        await conn.execute(db.query("insert_step"), params)
                        return found["payload"]
                until: datetime | None
                if waiting.get("until"):
                    until = datetime.fromisoformat(waiting["until"])
                else:
                    until = first_until(now) if first_until else None
                if until is not None and now >= until:
                    out = {"until": _iso(until)} if kind == "sleep" else None
                    params = self._cursor._step_params(seq, kind, name, out, None, None)
                    await conn.execute(db.query("insert_step"), params)
                    return None
                state = {"seq": seq, "kind": kind, "name": name, "signal": signal,
                         "until": _iso(until) if until else None}  # fmt: skip
                if proposal is not None:
                    state["proposal"] = proposal
                await conn.execute(db.query("suspend_until"),
                                   {"wf": self.workflow_id, "status": "sleeping",
                                    "waiting": db.jsonb(state), "until": until or "infinity"})  # fmt: skip
        finally:
            self._waiting = None
        killpoints.hit("wait_after_suspend")
        self._cursor._raise(
            Suspend(f"{self.workflow_id}: waiting ({kind} {name}) until {until or 'a signal'}")
        )

    # -- status, versions, children ---------------------------------------------------------

    def set_status(self, value: Any) -> None:
        """WorkflowContext.set_status (no await: it is committed with the run's next write)."""
        from . import validate

        text = validate.json_text(codec.encode(value, "the status"), "the status")
        seq, row = self._place("step", STATUS_STEP)
        if row is not None:
            return
        self._cursor._frontier(flush=False)
        self._pending.append(
            self._cursor._step_params(seq, "step", STATUS_STEP, json.loads(text), None, None)
        )

    def patched(self, patch_id: str) -> bool:
        """WorkflowContext.patched (no await: a new marker is committed with the next write)."""
        cursor = self._cursor
        self._own_task("patch", patch_id)
        if cursor._unwinding is not None:
            raise cursor._unwinding
        row = cursor._recorded.get(cursor._seq + 1)
        if row is not None:
            if row["kind"] == "patch" and row["name"] == patch_id:
                cursor._seq += 1
                return True
            return False
        seq = cursor._seq = cursor._seq + 1
        cursor._frontier(flush=False)
        self._pending.append(cursor._step_params(seq, "patch", patch_id, True, None, None))
        return True

    def child(self, workflow: Any, input: Any = None, child_id: str | None = None,
              version: str | None = None, *, queue: str | None = None,
              priority: int | None = None) -> Coro:  # fmt: skip
        """`await ctx.child(...)`: start a child workflow (recorded once); returns its id. Its
        queue, priority and trace as WorkflowContext.child's."""
        name, version = (workflow, version) if isinstance(workflow, str) else (
            definition(workflow).name, version or definition(workflow).version)  # fmt: skip
        placement = child_placement(queue, priority)
        seq, row = self._place("child", name)

        async def go() -> str:
            if row is not None:
                recorded: str = row["output"]["id"]
                return recorded
            await self._frontier()
            cid = child_id or f"{self.workflow_id}/{seq}"
            what = f"the input of child {cid}"
            text = db.to_json_text(codec.encode(input, what), what)
            async with self._fenced_write() as (conn, _):
                chosen = version
                if chosen is None:
                    found = await async_db.first(conn, "newest_version", {"name": name})
                    if found is None:
                        raise InvalidInput(f"no deployment serves workflow {name!r}; register "
                                           "it before ctx.child")  # fmt: skip
                    chosen = found["version"]
                await conn.execute(db.query("insert_child"),
                                   {"id": cid, "name": name, "version": chosen,
                                    "input": db.jsonb(json.loads(text)),
                                    "parent": self.workflow_id, **placement})  # fmt: skip
                params = self._cursor._step_params(seq, "child", name,
                                                   {"id": cid, "version": chosen}, None, None)  # fmt: skip
                await conn.execute(db.query("insert_step"), params)
                await conn.execute(db.query("notify_ready"), {"id": cid})
            return cid

        return self._track(seq, "child", name, go())

    def wait_child(self, child_id: str, timeout: float | None = None) -> Coro:
        """`await ctx.wait_child(id)`: the child's result; WorkflowFailed if it failed, None
        on timeout."""
        outcome = self.wait_signal(f"$done:{child_id}", timeout)

        async def go() -> Any:
            done = await outcome
            if done is None:
                return None
            if done["status"] != "completed":
                raise WorkflowFailed(child_id, done["status"], done.get("error"))
            return done["result"]

        return go()

    def continue_as_new(self, input: Any) -> Coro:
        """`await ctx.continue_as_new(input)`: end this run as `continued` and start its
        successor in one transaction."""
        seq, _ = self._place("continue", "continue_as_new")

        async def go() -> NoReturn:
            await self._frontier()
            what = "the continue_as_new input"
            text = db.to_json_text(codec.encode(input, what), what)
            new_id = successor_id(self.workflow_id)
            async with self._fenced_write() as (conn, _):
                await conn.execute(db.query("insert_successor"),
                                   {"id": new_id, "from": self.workflow_id,
                                    "input": db.jsonb(json.loads(text))})  # fmt: skip
                await conn.execute(db.query("finish"),
                                   {"wf": self.workflow_id, "status": "continued",
                                    "result": db.jsonb({"continued_as": new_id}),
                                    "error": None})  # fmt: skip
                await conn.execute(db.query("end_workflow_grants"), {"wf": self.workflow_id})
                await conn.execute(db.query("notify_ready"), {"id": new_id})
            self._cursor._raise(ContinuedAsNew(new_id))

        return self._track(seq, "continue", "continue_as_new", go())

    # -- the end of a run (the worker's) ----------------------------------------------------

    async def finish(self, status: str, result: Any = None, error: Any = None,
                     parent: bool = True) -> None:  # fmt: skip
        """Worker._finish on the async connections: the terminal write (or the release) under
        the fence, with the deferred records, the run's grants and the parent's signal."""
        from .context import ENDS_GRANTS

        if status != "release" and await self._finish_in_one(status, result, error):
            return
        async with self._fenced_write() as (conn, _):
            if status == "release":
                await conn.execute(db.query("release"), {"wf": self.workflow_id})
                await conn.execute(db.query("notify_ready"), {"id": self.workflow_id})
                return
            await conn.execute(db.query("finish"),
                               {"wf": self.workflow_id, "status": status,
                                "result": db.jsonb(result),
                                "error": db.jsonb(error) if error is not None else None})  # fmt: skip
            if status in ENDS_GRANTS:
                await conn.execute(db.query("end_workflow_grants"), {"wf": self.workflow_id})
            if parent and self._run.parent_id:
                done = {"status": status, "result": result, "error": error}
                await conn.execute(db.query("signal_parent"),
                                   {"child": self.workflow_id, "done": db.jsonb(done)})  # fmt: skip

    async def _finish_in_one(self, status: str, result: Any, error: Any) -> bool:
        """context.finish_in_one on an async connection: the completion as one fenced statement
        (query finish_fenced), one round trip where the general form takes six (BEGIN, fence,
        the step record, finish, grants, COMMIT), each a wake-up of the loop. False, with
        nothing written, where it does not apply (a parent to signal, more than one deferred
        record). Raises Fenced, with nothing written, when the claim is gone."""
        from .context import _NO_STEP, ENDS_GRANTS

        if self._run.parent_id or len(self._pending) > 1:
            return False
        flushed, self._pending = self._pending, []
        step = flushed[0] if flushed else _NO_STEP
        params = {"wf": self.workflow_id, "epoch": self.epoch, "status": status,
                  "result": db.jsonb(result), "error": db.jsonb(error) if error is not None else None,
                  "seq": step["seq"], "name": step["name"], "kind": step["kind"],
                  "fingerprint": step["fingerprint"], "output": step["output"],
                  "step_error": step["error"], "ends_grants": status in ENDS_GRANTS}  # fmt: skip
        async with self._connection() as conn:
            row = await async_db.first(conn, "finish_fenced", params)
        if row is None:
            self._cursor._raise(Fenced(f"workflow {self.workflow_id}: epoch {self.epoch} no "
                                       "longer holds a live claim"))  # fmt: skip
        if step["kind"] == "step" and step["name"] != STATUS_STEP:
            killpoints.hit("step_after_record")  # committed, as _fenced_write fires it
        return True

    async def mark_swallowed(self, error: dict[str, Any]) -> None:
        """A swallowed Suspend: guarded by the unchanged epoch (the suspend released the row)."""
        async with self._connection() as conn:
            await conn.execute(db.query("mark_stuck_unfenced"),
                               {"wf": self.workflow_id, "epoch": self.epoch,
                                "error": db.jsonb(error)})  # fmt: skip


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value
