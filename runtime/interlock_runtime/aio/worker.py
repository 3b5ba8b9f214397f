"""The asyncio worker (docs/async.md): `async def` workflows, each claimed run a coroutine.

It is the Worker with one change of place: claimed runs execute on an event loop in a thread
of its own instead of a thread each. The claim loop (LISTEN, claims, schedules, the timeout
sweep) and the heartbeat are the Worker's, unchanged, each in its own thread with its own
connection, so a busy event loop cannot starve the heartbeat (the `heartbeat` event logs the
gap between renewals). A run waiting on a step body, a model call or a target is a
coroutine; a suspended run is a row in the database and costs nothing here.

On the loop: the runs' writes on a few async connections (async_db.AsyncPool), async step
bodies, the sends of async targets, and a ticker. Off it: plain step bodies and premise
readers in a thread pool; the effect gate's database parts (the sync pipeline's code,
effects.send.drive_async) in GATE_THREADS threads; the watchdog of the async sends (one
thread, effects.send.WATCHDOG); and a monitor thread that reports a loop blocked longer than
`block_warn` seconds, naming the task (a step body's task is named
`step <workflow>#<seq> <name>`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import db, run_end
from ..effects import send as effect_send
from ..events import emit
from ..run_state import Run, workflow_input
from ..telemetry import run_span
from ..worker import Worker
from . import db as async_db
from .context import (
    RUN_TASKS,
    WORKFLOW_CODE,
    AsyncWorkflowContext,
    guard_wall_clock,
    task_factory,
)


class AsyncWorker(Worker):
    """A worker for `async def` workflows: `concurrency` runs in flight at once on one event
    loop (a coroutine each). `pool_size`: async connections the runs share, each lent for one
    transaction; `block_warn`: seconds the loop may stay blocked before it is reported
    (event `loop_blocked`, naming the task that held it)."""

    serves_async = True

    def __init__(self, dsn: str, workflows: list[Any], *, pool_size: int = 8,
                 block_warn: float = 0.5, **kwargs: Any):  # fmt: skip
        super().__init__(dsn, workflows, **kwargs)
        if pool_size < 1 or not block_warn > 0:
            raise ValueError("pool_size must be >= 1 and block_warn > 0")
        self.pool_size = pool_size
        self.block_warn = block_warn

    def _executor(self) -> _Loop:
        return _Loop(self)

    def _launch(self, pool: Any, run: Run) -> None:
        pool.submit(run)

    # -- one run ------------------------------------------------------------------------------

    @run_span  # the run's span, in its task's context (docs/observability.md)
    async def _execute_async(self, run: Run, env: _Loop) -> None:
        RUN_TASKS.set(set())  # every task this run's code creates is the run's (task_factory)
        with self._running(run):
            await self._run_async(run, env)

    async def _run_async(self, run: Run, env: _Loop) -> None:
        def context(steps: list[db.Row]) -> AsyncWorkflowContext:
            return AsyncWorkflowContext(run, env.pool, steps, self.worker_id, self.stopping,
                                        env.threads, env.sync_pool, env.gate)  # fmt: skip

        if run.claimed_past_deadline:  # docs/timeouts.md: it ends, no code runs
            await context([]).end(run_end.timed_out_at_claim(run.execution_deadline))
            return
        steps: list[db.Row] = []
        if run.has_steps:
            async with env.pool.connection() as conn:
                steps = await async_db.rows(conn, "load_steps", {"wf": run.workflow_id})
        ctx = context(steps)
        wf = self.defs[(run.name, run.version)]
        ended: BaseException | None = None
        result: Any = None
        try:
            inp = workflow_input(ctx, wf.fn)
            ctx.root = asyncio.current_task()
            token = WORKFLOW_CODE.set(getattr(wf.fn, "__globals__", None))
            try:
                result = await wf.fn(ctx, inp)
            finally:
                WORKFLOW_CODE.reset(token)
            ctx.check_awaited()
        except run_end.ENDINGS as exc:
            ended = exc
        await _settle()  # what the run left running ends with it, before its last write
        ctx.close_unawaited()
        await ctx.end(run_end.ending(ended, ctx.unwinding, result, run.execution_deadline))


async def _settle() -> None:
    """Cancel the tasks the current run created that are still running, and wait for them."""
    current = asyncio.current_task()
    left = [t for t in (RUN_TASKS.get() or ()) if not t.done() and t is not current]
    for task in left:
        task.cancel()
    if left:
        await asyncio.gather(*left, return_exceptions=True)


GATE_THREADS = 4  # threads for the effect gate's database parts (_Loop.gate)


class _Loop:
    """The event loop of an AsyncWorker in its own thread, its pools, and the monitor that
    reports a blocked loop. Used as the worker's executor: `with` it, submit runs; leaving
    waits for every run to end (after SIGTERM each hands its row back at its next call)."""

    TICK = 0.05

    def __init__(self, worker: AsyncWorker):
        self.worker = worker
        self.loop = asyncio.new_event_loop()
        self.loop.set_task_factory(task_factory)
        options = worker._session_options
        self.pool = async_db.AsyncPool(worker.dsn, worker.pool_size, options=options)
        self.sync_pool = async_db.SyncPool(worker.dsn, options=options)
        self.threads = ThreadPoolExecutor(max(4, min(64, worker.concurrency)),
                                          thread_name_prefix="body")  # fmt: skip
        # the effect gate's database parts (T_dispatch, T_commit, recovery): a few threads,
        # started with the loop, whatever the number of sends out (those are coroutines)
        self.gate = ThreadPoolExecutor(GATE_THREADS, thread_name_prefix="gate")
        self.runs: set[concurrent.futures.Future[None]] = set()
        self.tick = time.monotonic()
        self.done = threading.Event()
        self.worst_lag = 0.0

    def __enter__(self) -> _Loop:
        guard_wall_clock()
        effect_send.WATCHDOG.start()  # the async sends' watchdog: one thread for all
        started = threading.Barrier(GATE_THREADS + 1)
        for _ in range(GATE_THREADS):  # each waits, so each submit starts a thread
            self.gate.submit(started.wait, 10)
        started.wait(10)
        threading.Thread(target=self.loop.run_forever, name="loop", daemon=True).start()
        self.ticker = asyncio.run_coroutine_threadsafe(self._ticker(), self.loop)
        threading.Thread(target=self._monitor, name="loop-monitor", daemon=True).start()
        return self

    def submit(self, run: Run) -> None:
        future = asyncio.run_coroutine_threadsafe(self.worker._execute_async(run, self), self.loop)
        self.runs.add(future)
        future.add_done_callback(self.runs.discard)

    def __exit__(self, *exc: object) -> None:
        concurrent.futures.wait(list(self.runs))
        asyncio.run_coroutine_threadsafe(self.pool.close(), self.loop).result(timeout=10)
        self.done.set()
        self.ticker.result(timeout=5)  # its next tick ends it: no task left pending at stop
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.threads.shutdown(wait=False)
        self.gate.shutdown(wait=False)
        self.sync_pool.close()
        emit("loop_lag", worker=self.worker.worker_id, worst=round(self.worst_lag, 4))

    async def _ticker(self) -> None:
        while not self.done.is_set():
            self.tick = time.monotonic()
            await asyncio.sleep(self.TICK)

    def _monitor(self) -> None:
        """A loop that has not ticked for block_warn seconds is held by a blocking call: say
        which task holds it (once per stall), and how long the stall lasted when it ends."""
        warn = self.worker.block_warn
        stalled_since: float | None = None
        while not self.done.wait(self.TICK):
            tick = self.tick
            lag = time.monotonic() - tick - self.TICK
            self.worst_lag = max(self.worst_lag, lag)
            if lag >= warn and stalled_since != tick:
                stalled_since = tick
                task = asyncio.current_task(self.loop)
                emit("loop_blocked", worker=self.worker.worker_id, blocked_for=round(lag, 3),
                     task=task.get_name() if task is not None else None)  # fmt: skip
            elif stalled_since is not None and tick != stalled_since:
                emit("loop_unblocked", worker=self.worker.worker_id,
                     blocked_for=round(tick - stalled_since, 3))  # fmt: skip
                stalled_since = None
