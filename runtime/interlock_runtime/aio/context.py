"""The context of an `async def` workflow (docs/async.md): the run engine's asyncio shell
(docs/design.md#run-engine), with concurrency inside a workflow.

A call takes its place (its seq) when it is *called*, not when it is awaited or completes:
`ctx.step(...)` checks the recorded row at the next seq at once and returns a coroutine that
does the rest. So `asyncio.gather(ctx.step("a", f), ctx.step("b", g))` records a at one
place and b at the next whatever finishes first, and a replay returns each recorded result
at its place. Every durable call is the engine's (run_engine.py), as in the sync shell; this
shell serves its requests on the event loop: statements and fenced transactions on async
connections lent one transaction at a time, bodies as tasks on the loop (`async def`) or in
the worker's threads (plain), the effect gate's database parts in threads and its send
awaited on the loop (effects.send.drive_async).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, cast

from .. import db, timeouts
from ..context import RunView
from ..effects import gate, prepare
from ..effects.send import drive as drive_gate
from ..effects.send import drive_async
from ..errors import NonDeterminism
from ..run_end import Ending
from ..run_engine import EnginePort, RunEngine
from ..run_requests import Body, Calling, Gate, Io, Query, Transaction
from ..run_state import RetryPolicy, Run
from . import db as async_db
from .db import AsyncPool, SyncPool

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


class AsyncWorkflowContext(RunView):
    """What `async def` workflow code calls. The durable calls take their place when called
    and are awaited: `await ctx.step(...)`, `await ctx.sleep(...)`, `await ctx.effect(...)`.
    `set_status` and `patched` need no await. One context per run, used on the worker's event
    loop only."""

    def __init__(self, run: Run, pool: AsyncPool, steps: list[db.Row], worker_id: str,
                 stopping: threading.Event, threads: Executor, sync_pool: SyncPool,
                 gate_threads: Executor | None = None):  # fmt: skip
        self._engine = RunEngine(run, steps, worker_id, stopping)
        self._engine.placing = self._own_task
        self._pool = pool
        self._threads = threads  # plain step bodies and premise readers, plain target reads
        self._gate = gate_threads or threads  # the effect gate's database parts
        self._sync_pool = sync_pool
        self._calls: list[tuple[int, str, str, Coro]] = []
        self.root: asyncio.Task[Any] | None = None  # the workflow's own task (set by the worker)
        self.worker_id = worker_id

    # -- places, and what was never awaited ------------------------------------------------

    def _own_task(self, kind: str, name: str) -> None:
        """Only the workflow's own task takes places: a coroutine run concurrently (gather,
        create_task) that makes durable calls would take its later places in completion
        order, which a replay does not reproduce."""
        task = asyncio.current_task()
        if self.root is not None and task is not self.root:
            self._engine.unwind(NonDeterminism(self._engine.seq + 1, {}, {
                "kind": kind, "name": name, "task": task.get_name() if task else None,
                "rule": "durable calls are made by the workflow's own code, not by a coroutine "
                        "it runs concurrently: gather the calls (asyncio.gather(ctx.step(...), "
                        "ctx.step(...))), or await the helper"}))  # fmt: skip

    def _track(self, io: Io[Any]) -> Coro:
        """The coroutine that drives the call just placed, remembered for check_awaited."""
        if len(self._calls) > 512:  # forget the finished ones
            self._calls = [c for c in self._calls
                           if inspect.getcoroutinestate(c[3]) != inspect.CORO_CLOSED]  # fmt: skip
        coro = self._drive(io, self._serve)
        self._calls.append((*self._engine.placed, coro))
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
            self._engine.unwind(NonDeterminism(seq, {"kind": kind, "name": name}, {
                "unawaited": f"{kind} {name!r} was {how} when the workflow returned; await "
                             "every durable call (asyncio.gather for several at once)"}))  # fmt: skip

    def close_unawaited(self) -> None:
        """Close calls that never started (the run ended another way)."""
        for _, _, _, coro in self._calls:
            if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()

    # -- the driver ---------------------------------------------------------------------------

    async def _drive(self, io: Io[Any], serve: Callable[[Any], Awaitable[Any]]) -> Any:
        """run_engine.drive, awaited: each request answered by `serve` on the loop."""
        call = Calling(io, self._engine.thrown)
        while call.running:
            call.answer(*await _outcome(serve(call.request)))
        return call.value

    async def _serve(self, request: Any) -> Any:
        if isinstance(request, Body):
            return await self._body(request)
        if isinstance(request, Gate):
            return await self._effect(request)
        async with self._pool.connection() as conn:
            if not isinstance(request, Transaction):
                return await _query(conn, request)
            fence = request.fence
            async with async_db.fenced(conn, fence["wf"], fence["epoch"], fence["ttl"]) as row:
                for params in request.records:
                    await conn.execute(db.query("insert_step"), params)
                body = request.body
                value = None if body is None else await self._drive(
                    body(row), functools.partial(_query, conn))  # fmt: skip
            return row, value

    async def _body(self, request: Body) -> Any:
        """Workflow code: an async function in a task of its own on the loop (named by the
        request's label, so a blocking call in it is reported by name), a plain one in the
        worker's threads; either way outside the wall-clock guard. At its deadline an async
        body is cancelled; a plain one, in its thread, cannot be, and is left to finish with
        its outcome dropped (as the sync worker leaves it)."""

        async def call() -> Any:
            out = await self._call(request.label, request.fn, *request.args, **request.kwargs)
            return request.check(out) if request.check is not None else out

        if request.deadline is None:
            return await call()
        try:
            return await asyncio.wait_for(call(), max(0.0, request.deadline - time.monotonic()))
        except asyncio.TimeoutError:
            if time.monotonic() < request.deadline:
                raise  # the body's own timeout, not one of ours
        raise timeouts.Abandoned()

    async def _call(self, label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
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

    async def _effect(self, request: Gate) -> Any:
        """The gate (the sync pipeline's own code, effects.gate) driven from the loop
        (effects.send.drive_async): its database parts in the worker's gate threads on a
        connection lent per part, the send awaited on the loop when the target's `apply` is
        async (a plain one is sent from a thread)."""
        port = EnginePort(self._engine, cast(db.Conn, None))
        io = gate(port, request.prepared, request.seq, request.row, **request.options)
        if request.row is not None:  # recorded: the result, no I/O
            return drive_gate(io)
        loop = asyncio.get_running_loop()

        async def stage(part: Callable[[], Any]) -> Any:
            def lent() -> Any:
                with self._sync_pool.connection() as conn:
                    port.conn = conn
                    try:
                        return part()
                    finally:
                        port.conn = cast(db.Conn, None)

            return await loop.run_in_executor(self._gate, lent)

        context = contextvars.copy_context()
        context.run(WORKFLOW_CODE.set, None)
        return await drive_async(io, stage, self._threads, self._engine.live, context)

    # -- the durable calls ----------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], *args: Any, retry: RetryPolicy | None = None,
             postcondition: Callable[[Any], bool] | None = None, **kwargs: Any) -> Coro:  # fmt: skip
        """`await ctx.step(name, fn, *args)`: run fn at least once and record its result; a
        replay returns it. fn may be `async def` (awaited on the worker's loop) or plain (run
        in a worker thread). The step takes its place now, when called."""
        return self._track(self._engine.step(name, fn, args, kwargs, retry, postcondition))

    def decide(self, name: str, call: Callable[[Any], Any], request: Any,
               premises: Callable[[], Any] | None = None,
               retry: RetryPolicy | None = None) -> Coro:  # fmt: skip
        """`await ctx.decide(...)`: WorkflowContext.decide with an async (or plain) model call
        and premise reader; returns a Decision."""
        return self._track(self._engine.decide(name, call, request, premises, retry))

    def effect(self, target: Any, key: str, payload: Any, premises: Any, grant: str,
               name: str | None = None, local_premises: Any = (), compensation: bool = False,
               raise_on_refusal: bool = False, action: str | None = None,
               decision: Any = None, postcondition: Any = None) -> Coro:  # fmt: skip
        """`await ctx.effect(...)`: WorkflowContext.effect. The arguments are checked and the
        call takes its place now."""
        prepared = prepare(target, key, payload, premises, grant, name=name,
                           local_premises=local_premises, action=action,
                           postcondition=postcondition)  # fmt: skip
        options = {"compensation": compensation, "raise_on_refusal": raise_on_refusal,
                   "decision": decision}  # fmt: skip
        return self._track(self._engine.effect(prepared, options))

    def sleep(self, seconds: float, name: str = "sleep") -> Coro:
        """`await ctx.sleep(seconds)`: a durable timer (WorkflowContext.sleep)."""
        return self._track(self._engine.sleep(seconds, name))

    def wait_signal(self, name: str, timeout: float | None = None) -> Coro:
        """`await ctx.wait_signal(name, timeout)`: the next unconsumed signal's payload, or
        None after `timeout` seconds."""
        return self._track(self._engine.wait_signal(name, timeout))

    def wait_approval(self, proposal: Any, timeout: float | None = None) -> Coro:
        """`await ctx.wait_approval(proposal, timeout)`: WorkflowContext.wait_approval."""
        return self._track(self._engine.wait_approval(proposal, timeout))

    def child(self, workflow: Any, input: Any = None, child_id: str | None = None,
              version: str | None = None, *, queue: str | None = None,
              priority: int | None = None) -> Coro:  # fmt: skip
        """`await ctx.child(...)`: start a child workflow (recorded once); returns its id. Its
        queue, priority and trace as WorkflowContext.child's."""
        return self._track(self._engine.child(workflow, input, child_id, version, queue, priority))

    def wait_child(self, child_id: str, timeout: float | None = None) -> Coro:
        """`await ctx.wait_child(id)`: the child's result; WorkflowFailed if it failed, None
        on timeout."""
        return self._track(self._engine.wait_child(child_id, timeout))

    def continue_as_new(self, input: Any) -> Coro:
        """`await ctx.continue_as_new(input)`: end this run as `continued` and start its
        successor in one transaction."""
        return self._track(self._engine.continue_as_new(input))

    # -- the end of a run (the worker's) ----------------------------------------------------

    async def end(self, ending: Ending) -> None:
        """Carry out what run_end decided, on the async connections."""
        await self._drive(self._engine.end(ending), self._serve)


async def _query(conn: async_db.AConn, request: Query) -> Any:
    cursor = await conn.execute(db.query(request.name), request.params)
    if request.fetch == "all":
        return await cursor.fetchall()
    row = await cursor.fetchone() if request.fetch else None
    if request.fetch == "one" and row is None:
        raise LookupError("the statement returned no row where one was expected")
    return row


async def _outcome(answer: Awaitable[Any]) -> tuple[Any, BaseException | None]:
    """run_engine.outcome, awaited."""
    try:
        return await answer, None
    except BaseException as exc:
        return None, exc


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value
