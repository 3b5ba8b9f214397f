"""The worker: claim loop, heartbeat, execution of claimed runs, and its CLI (docs/design.md#claims, 6).

One process claims due workflows for the (name, version) pairs it registered, runs each one
from the top in a thread of its pool, renews every lease it holds with one heartbeat
statement every lease_ttl/3, and wakes on LISTEN ilr_ready or every `poll` seconds.

SIGTERM stops claiming; each running workflow finishes its current step, hands its row back
(status pending, no lease) and the process exits 0.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg

from . import db, durability, killpoints, migrations, run_end, timeouts
from .context import WorkflowContext, end_run
from .errors import DatabaseLost, is_database_fault
from .events import emit, log
from .queues import Claimer
from .run_state import Run, workflow_input
from .runtime import register_deployment
from .schedules import Scheduler
from .telemetry import claimed, run_span, watch_database
from .telemetry import setup as telemetry_setup
from .workflow import WorkflowDef, definition


class Backoff:
    """Capped exponential backoff with jitter for reconnecting to the database."""

    def __init__(self, first: float = 0.1, cap: float = 2.0):
        self.first, self.cap, self.failures = first, cap, 0

    def next(self) -> float:
        self.failures += 1
        delay: float = min(self.cap, self.first * 2 ** (self.failures - 1))
        return delay * (0.5 + random.random() / 2)

    def reset(self) -> None:
        self.failures = 0


class Worker:
    """Runs plain (`def`) workflows: claims due runs from the database and runs each in a
    thread of its own, at most `concurrency` at once (docs/design.md#claims). `async def`
    workflows need `AsyncWorker`, which takes the same arguments and two of its own.

    - `workflows`: the `@workflow` functions served. `run()` registers each (name, version) as
      a deployment; a pair already deployed with other code raises `CodeChanged` unless
      `allow_code_change`.
    - `worker_id`: this worker's name in claims, logs and the target's
      `X-Interlock-Worker` header (default: host-pid).
    - `lease_ttl`: seconds a claim lasts unrenewed. A heartbeat thread renews it every third
      of that; no other worker can claim the run before it expires by the database's clock,
      and this one stops writing for the run once it could have.
    - `poll`: the longest pause, in seconds, between two looks for due work.
    - `queues`: the queues served (docs/queues.md); None serves every queue.
    - `schedules`: also fire the due schedules (docs/schedules.md).
    - `max_clock_skew`: how far the clocks of the database servers may differ across a
      failover, in seconds, below half the lease (docs/deployment.md#clocks).

    Promises: a recorded step never runs again; a run has one live claim at a time and a
    worker whose claim is gone writes nothing for it; a database outage never ends a workflow
    (the worker waits it out with capped backoff); SIGTERM or `stop()` finishes the steps in
    flight and hands the runs back at once."""

    # docs/async.md: a worker serves either plain or `async def` workflows (AsyncWorker)
    serves_async = False

    def __init__(
        self,
        dsn: str,
        workflows: list[Any],
        worker_id: str | None = None,
        concurrency: int = 4,
        lease_ttl: float = 30.0,
        poll: float = 1.0,
        allow_code_change: bool = False,
        queues: list[str] | None = None,
        schedules: bool = True,
        max_clock_skew: float = 0.0,
    ):
        if lease_ttl <= 0 or poll <= 0 or concurrency < 1:
            raise ValueError("lease_ttl and poll must be > 0 and concurrency >= 1")
        if not 0 <= max_clock_skew < lease_ttl / 2:
            raise ValueError(
                "max_clock_skew must be >= 0 and below half of lease_ttl: raise "
                "lease_ttl, or bound the clock difference between database servers"
            )
        self.dsn = dsn
        self.defs: dict[tuple[str, str], WorkflowDef] = {}
        for wf in map(definition, workflows):
            if wf.is_async != self.serves_async:
                raise ValueError(_wrong_worker(wf, self.serves_async))
            self.defs[(wf.name, wf.version)] = wf
        if not self.defs:
            raise ValueError("a worker needs at least one @workflow to serve")
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        telemetry_setup()  # spans only when a tracer provider is set (docs/observability.md)
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self.max_clock_skew = max_clock_skew
        self.poll = poll
        self.allow_code_change = allow_code_change
        self._claimer = Claimer(queues)
        self.stopping = threading.Event()
        self._active: dict[str, Run] = {}
        self._active_lock = threading.Lock()
        self._slot_freed = threading.Event()
        self._local = threading.local()
        self._next_sweep = 0.0  # monotonic time of the next timeouts.expire pass
        # A worker paused (SIGSTOP, a VM freeze) inside a transaction would hold its row locks,
        # and claims skip locked rows: the workflow could not be taken over while the zombie
        # sleeps. The server aborts such a transaction once it is idle for a lease.
        idle_ms = max(1000, int(lease_ttl * 1000))
        self._session_options = f"-c idle_in_transaction_session_timeout={idle_ms}"
        self._scheduler = (Scheduler(dsn, self.worker_id, poll, self._session_options)
                           if schedules else None)  # fmt: skip

    # -- lifecycle --------------------------------------------------------------------------

    def register(self) -> None:
        """Check the database, then record the served workflows as deployments, in one
        transaction. An empty database gets the schema; an older one raises SchemaMismatch
        (run `interlock db upgrade`); a setting that can lose commits raises UnsafeDatabase.
        `run()` calls this first; call it yourself to fail fast at start-up."""
        with db.connect(self.dsn) as conn:
            migrations.ensure(conn)
            durability.check(conn)
            with conn.transaction():
                for wf in self.defs.values():
                    register_deployment(conn, wf, self.allow_code_change)
        emit(
            "registered", worker=self.worker_id, workflows=sorted(w.key for w in self.defs.values())
        )

    def stop(self) -> None:
        """Ask the worker to finish its current steps and exit (what SIGTERM does)."""
        self.stopping.set()
        self._slot_freed.set()

    def run(self) -> None:
        """Serve until stop() (or SIGTERM). Survives the database going away: every loop
        reconnects with capped exponential backoff, never a crash loop."""
        backoff = Backoff()
        while not self.stopping.is_set():
            try:
                self.register()
                break
            except psycopg.OperationalError as exc:
                emit(
                    "db_unavailable",
                    worker=self.worker_id,
                    error=str(exc).strip(),
                    during="register",
                )
                self.stopping.wait(backoff.next())
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        heartbeat.start()
        unwatch = watch_database(self.dsn)  # the queue depth and AMBIGUOUS gauges
        with self._executor() as pool:
            listener = None
            while not self.stopping.is_set():
                try:
                    if listener is None or listener.closed:
                        listener = db.connect(self.dsn)
                        listener.execute("listen ilr_ready")
                        if backoff.failures:
                            emit("db_available", worker=self.worker_id, after=backoff.failures)
                        backoff.reset()
                    self._claim_and_wait(listener, pool)
                except psycopg.OperationalError as exc:
                    if backoff.failures == 0:
                        emit("db_unavailable", worker=self.worker_id, error=str(exc).strip())
                    if listener is not None:
                        listener.close()
                    listener = None
                    self.stopping.wait(backoff.next())
            if listener is not None:
                listener.close()
        if self._scheduler is not None:
            self._scheduler.close()
        unwatch()
        emit("stopped", worker=self.worker_id)

    def _executor(self) -> AbstractContextManager[Any]:
        """Where claimed runs execute: a thread each (AsyncWorker: its event loop)."""
        return ThreadPoolExecutor(self.concurrency, thread_name_prefix="run")

    def _launch(self, pool: Any, run: Run) -> None:
        pool.submit(self._execute, run)

    def _claim_and_wait(self, listener: db.Conn, pool: Any) -> None:
        if self._scheduler is not None:
            self._scheduler.run_if_due()  # on its own connection; never raises for the database
        free = self.concurrency - len(self._active)
        if free <= 0:
            self._sweep(listener)
            self._slot_freed.wait(self._until_schedules(self.poll))
            self._slot_freed.clear()
            return
        t0 = time.monotonic()  # read before the claim: the local deadline starts here (C1)
        rows = self._claim(listener, free)
        t_after = time.monotonic()  # after: a local execution deadline can only fall late
        for row in rows:
            deadline = row.get("execution_deadline")
            local = None if deadline is None else timeouts.local_deadline(
                deadline, row["claimed_now"], t_after)  # fmt: skip
            run = Run(
                workflow_id=row["id"],
                name=row["name"],
                version=row["version"],
                input=row["input"],
                epoch=row["epoch"],
                waiting=row["waiting"],
                takeovers=row["takeovers"],
                cancel_requested_at=row["cancel_requested_at"],
                lease_ttl=self.lease_ttl,
                local_deadline=t0 + self.lease_ttl - self.max_clock_skew,
                clock_skew=self.max_clock_skew,
                parent_id=row["parent_id"],
                claimed_now=row["claimed_now"],
                has_steps=row["has_steps"],
                execution_deadline=deadline,
                execution_local=local,
            )
            with self._active_lock:
                self._active[run.workflow_id] = run
            emit("claimed", worker=self.worker_id, wf=run.workflow_id, epoch=run.epoch,
                 prev_status=row["prev_status"], takeovers=run.takeovers)  # fmt: skip
            killpoints.hit("claimed")
            claimed(listener, row, t0)  # its run span, a child of the stored trace context
            self._launch(pool, run)
        self._sweep(listener)  # after the claim: what this worker serves it ends itself
        if len(rows) == free or (rows and self._claimer.limited):
            return  # there may be more due work (or a limit's room not yet used): claim again
        # Wait for a wakeup (start, signal, ...), the next timer or lease expiry, or the poll
        # interval, whichever comes first.
        due = self._claimer.next_due(listener, self._pairs())
        # A due row we could not claim (locked by another transaction) must not spin us.
        wait = self.poll if due is None else min(self.poll, max(due + 0.005, 0.05))
        for _ in listener.notifies(timeout=self._until_schedules(wait), stop_after=1):
            pass

    def _sweep(self, conn: db.Conn) -> None:
        """At most once a poll: end the runs past their execution deadline that nobody holds,
        whatever their workflow (docs/timeouts.md), so a run no worker serves still ends."""
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self.poll
            timeouts.expire(conn, self.worker_id)

    def _until_schedules(self, wait: float) -> float:
        """The wait, cut short when a schedule's next tick comes first."""
        if self._scheduler is None:
            return wait
        return min(wait, max(self._scheduler.wait(), 0.005))

    def _pairs(self) -> dict[str, list[str]]:
        return {"names": [n for n, _ in self.defs], "versions": [v for _, v in self.defs]}

    def _claim(self, conn: db.Conn, limit: int) -> list[db.Row]:
        params = {**self._pairs(), "limit": limit, "owner": self.worker_id, "ttl": self.lease_ttl}
        return self._claimer.claim(conn, params)

    # -- heartbeat ----------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        conn = None
        interval = self.lease_ttl / 3
        last = None  # monotonic time of the last renewal: the gap between two bounds a safe TTL
        while True:
            time.sleep(interval)
            with self._active_lock:
                runs = list(self._active.values())
            if not runs:
                continue
            try:
                if conn is None or conn.closed:
                    conn = db.connect(self.dsn)
                t0 = time.monotonic()  # read before the renewing write (C1)
                params = {"ids": [r.workflow_id for r in runs], "epochs": [r.epoch for r in runs],
                          "ttl": self.lease_ttl}  # fmt: skip
                rows = conn.execute(db.query("heartbeat"), params).fetchall()
            except psycopg.OperationalError as exc:
                emit("heartbeat_failed", worker=self.worker_id, error=str(exc).strip())
                if conn is not None:
                    conn.close()
                conn = None
                continue
            done = time.monotonic()
            emit("heartbeat", worker=self.worker_id, runs=len(runs), took=round(done - t0, 4),
                 gap=None if last is None else round(done - last, 4))  # fmt: skip
            last = done
            answers = {row["id"]: row for row in rows}
            for run in runs:
                answer = answers[run.workflow_id]
                if answer["renewed"]:
                    run.renewed(t0)
                    if answer["cancel_requested_at"] is not None:
                        run.cancel_requested_at = answer["cancel_requested_at"]
                    continue
                run.fenced = True  # nothing more of it may run here, ended or fenced
                if not answer["ended"]:  # ended: the run's own last write beat this renewal
                    emit("fenced", worker=self.worker_id, wf=run.workflow_id, epoch=run.epoch,
                         by="heartbeat")  # fmt: skip

    # -- execution ------------------------------------------------------------------------------

    def _connection(self) -> db.Conn:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = self._local.conn = db.connect(self.dsn, options=self._session_options)
        return conn

    @run_span  # interlock.run around the whole claim (docs/observability.md)
    def _execute(self, run: Run) -> None:
        with self._running(run):
            self._execute_run(run)

    @contextmanager
    def _running(self, run: Run) -> Iterator[None]:
        """Around one run's execution, in either worker: a lost database ends it `abandoned`,
        an internal error is logged, and the run leaves _active (its slot freed) whatever
        happened."""
        try:
            yield
        except (DatabaseLost, Exception) as exc:
            if not isinstance(exc, DatabaseLost) and not is_database_fault(exc):
                log.exception("internal error running %s", run.workflow_id)
                return
            # The database went away while the run's history was read or its end written.
            # Nothing is lost: every recorded step is committed, the lease will expire, and a
            # later claim replays from the top (run_end.py, rule 1).
            end = run_end.ending(exc, None, None, None)
            emit(end.event, worker=self.worker_id, wf=run.workflow_id, epoch=run.epoch,
                 **end.fields)  # fmt: skip
            conn = getattr(self._local, "conn", None)  # this thread's (none on the loop's)
            if conn is not None:
                conn.close()
        finally:
            with self._active_lock:
                self._active.pop(run.workflow_id, None)
            self._slot_freed.set()

    def _execute_run(self, run: Run) -> None:
        conn = self._connection()
        if run.claimed_past_deadline:  # docs/timeouts.md: it ends, no code runs
            ctx = WorkflowContext(run, conn, [], self.worker_id, self.stopping)
            end_run(ctx, run_end.timed_out_at_claim(run.execution_deadline))
            return
        steps = []  # a fresh workflow's first claim: no history to read
        if run.has_steps:
            steps = conn.execute(db.query("load_steps"), {"wf": run.workflow_id}).fetchall()
        ctx = WorkflowContext(run, conn, steps, self.worker_id, self.stopping)
        wf = self.defs[(run.name, run.version)]
        ended: BaseException | None = None
        result: Any = None
        try:
            result = wf.fn(ctx, workflow_input(ctx, wf.fn))  # typed values rebuilt (codec.py)
        except run_end.ENDINGS as exc:
            ended = exc
        end_run(ctx, run_end.ending(ended, ctx.unwinding, result, run.execution_deadline))


def _wrong_worker(wf: WorkflowDef, serves_async: bool) -> str:
    if wf.is_async:
        return (f"workflow {wf.key} is `async def`: serve it with an asyncio worker "
                "(`interlock worker --async`, or interlock_runtime.aio.worker.AsyncWorker)")  # fmt: skip
    return (f"workflow {wf.key} is a plain function: the asyncio worker serves `async def` "
            "workflows only; serve it with `interlock worker` (without --async)")  # fmt: skip
