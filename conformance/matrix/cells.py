"""One cell of the fault matrix: a feature's runs on two real worker subprocesses of one mode,
a real fault at a moment the feature names, then the evidence the checks judge.

A cell runs in a fresh database of the project's cluster (or of ILR_DSN). Its workers serve
conformance.matrix.flows_sync (mode sync) or flows_async (mode async), and the refund flows
of the conformance sources for the effects feature.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from conformance.conftest import REPO, mode_args
from interlock_runtime import (
    AsyncRuntime,
    Runtime,
    WorkflowFailed,
    db,
    local_postgres,
    migrations,
    testing,
)
from interlock_runtime.testing import WorkerProcess, wait_for

FLOWS = REPO / "runtime" / "tests"
LEASE_TTL = 1.5
TERMINAL = ("completed", "failed", "cancelled", "timed_out", "stuck", "continued")
PAYMENT = "pay_matrix"
# Faults that need a database of their own: a primary and a synchronous standby
# (world/pg_pair.py), and for a partition the workers on hosts of their own (world/netns.py).
PAIR_FAULTS = ("partition", "failover", "clock_offset")
NAMESPACES = ("a", "b")
CLOCK_AHEAD = 0.5  # clock_offset: the standby's clock runs this far ahead of the primary's
MAX_CLOCK_SKEW = 0.6  # what the workers are told to allow for (below half the lease)


@dataclass
class Cell:
    feature: str
    fault: str
    mode: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.feature}/{self.fault}/{self.mode}"


@dataclass
class Session:
    """A cell while it runs: its database, log directory, workers, target and runs."""

    cell: Cell
    dsn: str
    log_dir: Path
    stack: ExitStack
    rng: random.Random
    workers: list[WorkerProcess] = field(default_factory=list)
    targets: list[Any] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)  # the workflow ids the feature started
    facts: dict[str, Any] = field(default_factory=dict)  # what the feature noted for its checks
    fault_window: tuple[float, float] | None = None  # wall-clock start and end of the fault
    pair: Any = None  # world.pg_pair.PgPair for the faults that need one (PAIR_FAULTS)
    world: Any = None  # world.netns.NetWorld for a partition: W1 in namespace a, W2 in b
    homes: dict[str, Any] = field(default_factory=dict)  # worker id -> its namespace
    supervised: threading.Event = field(default_factory=threading.Event)
    replaced: set[str] = field(default_factory=set)  # workers a replacement was started for

    def reachable(self, url: str, port: int) -> str:
        """The URL a worker reaches a local service at: itself, or through a relay on a
        gateway when the workers are hosts of their own (the world binds loopback only)."""
        if self.world is None:
            return url
        from world.netns import Relay

        return str(self.stack.enter_context(Relay(self.world["a"].gateway, port)).url)

    @property
    def flows(self) -> ModuleType:
        import importlib

        name = "flows_sync" if self.cell.mode == "sync" else "flows_async"
        return importlib.import_module(f"conformance.matrix.{name}")

    @property
    def refund_flows(self) -> ModuleType:
        from conformance.run_sources import flows_for

        return flows_for(self.cell.mode)

    @property
    def side_log(self) -> str:
        return str(self.log_dir / "side.jsonl")

    def supervise(self) -> None:
        """Start a replacement for each worker process that has exited, as a supervisor
        (systemd, Kubernetes) would: SIGKILLed by the fault, or ended by its send watchdog
        (exit 75 at a send's deadline, docs/design.md#send-deadline). In a thread until the
        cell's runs have ended (self.supervised cleared)."""

        def watch() -> None:
            while self.supervised.is_set():
                for w in list(self.workers):
                    if w.proc.poll() is not None and w.worker_id not in self.replaced:
                        self.replaced.add(w.worker_id)
                        self.worker(f"{w.worker_id}r", home=self.homes.get(w.worker_id))
                time.sleep(0.2)

        self.supervised.set()
        threading.Thread(target=watch, name="supervisor", daemon=True).start()

    def worker(self, worker_id: str, home: Any = None) -> WorkerProcess:
        sync = self.cell.mode == "sync"
        modules = ("conformance.matrix.flows_sync", "flows") if sync else (
            "conformance.matrix.flows_async", "conformance.source_flows_async")  # fmt: skip
        extra = ["--module", modules[1], *mode_args(self.cell.mode)]
        if self.cell.fault == "clock_offset":  # the local deadline runs this much short
            extra += ["--max-clock-skew", str(MAX_CLOCK_SKEW)]
        dsn, popen = self.dsn, subprocess.Popen
        if self.world is not None:  # each worker a host of its own
            space = home or self.world[NAMESPACES[len(self.workers) % len(NAMESPACES)]]
            dsn, popen = self.pair.dsn(host=space.gateway), space.popen
            self.homes[worker_id] = space
        w = WorkerProcess(dsn, worker_id, self.log_dir, modules[0],
                          pythonpath=os.pathsep.join((str(REPO), str(FLOWS))), cwd=str(FLOWS),
                          lease_ttl=LEASE_TTL, poll=0.2, concurrency=4, popen=popen,
                          extra_args=tuple(extra))  # fmt: skip
        self.stack.callback(w.close)
        self.workers.append(w)
        return w

    def events(self) -> list[dict[str, Any]]:
        return [e for w in self.workers for e in w.events()]

    def statuses(self) -> dict[str, str]:
        """The runs' statuses, read by a connection of this harness (retried through a fault)."""

        def read() -> dict[str, str]:
            with db.connect(self.dsn) as conn:
                rows = conn.execute("select id, status from ilr.workflows where id = any(%s)",
                                    (self.runs,)).fetchall()  # fmt: skip
            return {r["id"]: r["status"] for r in rows}

        result: dict[str, str] = _retrying(read)
        return result

    def holder(self, within: float = 3.0) -> WorkerProcess:
        """The live worker that holds the most of the cell's runs (the workflows table's owner
        of running rows), waiting up to `within` seconds for one to hold any; else the last to
        start a step (the fault then lands on a worker whose runs are parked)."""
        live = {w.worker_id: w for w in self.workers if w.proc.poll() is None}
        deadline = time.monotonic() + within
        while True:
            with db.connect(self.dsn) as conn:
                owners = conn.execute("select owner, count(*) n from ilr.workflows where status "
                                      "= 'running' and owner is not null group by owner "
                                      "order by n desc, owner").fetchall()  # fmt: skip
            for row in owners:
                if row["owner"] in live:
                    return live[row["owner"]]
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        starts = [(e["ts"], e.get("worker")) for e in self.events()
                  if e.get("event") == "step_started" and e.get("wf") in self.runs]  # fmt: skip
        for _, worker in sorted(starts, key=lambda s: s[0], reverse=True):
            if worker in live:
                return live[worker]
        return next(iter(live.values()))


def _retrying(read: Callable[[], Any], timeout: float = 60) -> Any:
    """A harness read that goes on through the fault (the harness is not under test)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return read()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# -- faults ----------------------------------------------------------------------------------


def inject(s: Session) -> None:
    """The cell's fault, now. Records its wall-clock window (the timeout check's bound)."""
    fault, t0 = s.cell.fault, time.time()
    if fault == "sigkill":
        s.holder().signal(signal.SIGKILL)
    elif fault == "sigstop":
        victim = s.holder()
        victim.signal(signal.SIGSTOP)
        time.sleep(LEASE_TTL * 2 + s.rng.uniform(0, 1))  # past its lease: another takes over
        victim.signal(signal.SIGCONT)
    elif fault == "pg_restart":
        local_postgres.restart_immediate()
    elif fault == "partition":  # the holder's host cut off from both nodes past its lease
        space = s.homes[s.holder().worker_id]
        space.partition([s.pair.primary.port, s.pair.standby.port])
        try:
            time.sleep(LEASE_TTL * 2 + s.rng.uniform(0, 1))
        finally:
            space.heal()
    elif fault in ("failover", "clock_offset"):  # clock_offset: to a standby whose clock is ahead
        s.pair.failover()
    elif fault == "pg_terminate":
        with db.connect(s.dsn) as conn:
            conn.execute("select pg_terminate_backend(pid) from pg_stat_activity "
                         "where datname = current_database() and pid <> pg_backend_pid()")  # fmt: skip
    elif fault not in ("none", "slow_target"):  # slow_target: the target is slow from the start
        raise ValueError(f"fault {fault!r} is declared but not driven by the runner")
    s.fault_window = (t0, time.time())


# -- one cell --------------------------------------------------------------------------------


def run_cell(cell: Cell, admin: str, template: str, log_dir: Path) -> dict[str, Any]:
    """Run one cell; returns its evidence for the checks (conformance.matrix.checks)."""
    from conformance.matrix import features as feature_code

    code = feature_code.FEATURES[cell.feature]
    log_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        world = pair = None
        if cell.fault in PAIR_FAULTS:
            from world.netns import NetWorld
            from world.pg_pair import PgPair

            world = (
                stack.enter_context(NetWorld(*NAMESPACES)) if cell.fault == "partition" else None
            )
            offset = {"b": CLOCK_AHEAD} if cell.fault == "clock_offset" else {}
            pair = stack.enter_context(PgPair(
                listen=tuple(world.gateways) if world else (),
                trust=tuple(world.subnets) if world else (), clock_offset=offset))  # fmt: skip
            dsn = pair.dsn()
            with db.connect(dsn) as conn:
                migrations.ensure(conn)
        else:
            dsn = stack.enter_context(testing.fresh_database(admin, template))
        s = Session(cell, dsn, log_dir, stack, random.Random(cell.seed), pair=pair, world=world)
        with Runtime(dsn) as rt:
            code.start(s, rt)
            s.worker("W1")
            s.worker("W2")
            s.supervise()
            s.stack.callback(s.supervised.clear)
            code.launched(s, rt)
            wait_for(lambda: code.ready(s), 60, f"{cell.name}: the moment of its fault")
            time.sleep(s.rng.uniform(0, 0.3))  # a seeded jitter around that moment
        waits = Waits(dsn, list(s.runs))  # waits that span the fault, from both clients
        inject(s)
        with Runtime(dsn) as rt:
            code.after_fault(s, rt)
        late = Waits(dsn, [wf for wf in s.runs if wf not in waits.runs])  # started after it
        wait_for(lambda: len(s.runs) > 0 and all(v in TERMINAL for v in s.statuses().values())
                 and len(s.statuses()) == len(s.runs), 120, f"{cell.name}: every run to end")  # fmt: skip
        answers = {**waits.join(WAIT_GRACE), **late.join(WAIT_GRACE)}
        s.supervised.clear()
        return collect(s, answers)


WAIT_GRACE = 20.0  # seconds a wait may take to return once every run has ended


class Waits:
    """rt.result() on each run from the sync client (a thread each) and AsyncRuntime (one event
    loop in a thread), started now; join() says what each wait answered."""

    def __init__(self, dsn: str, runs: list[str]):
        self.runs = runs
        self.answers: dict[tuple[str, str], str] = {}
        self.threads = [threading.Thread(target=self._sync, args=(dsn, wf), daemon=True)
                        for wf in runs]  # fmt: skip
        if runs:
            self.threads.append(threading.Thread(target=asyncio.run, args=(self._async(dsn),),
                                                 daemon=True))  # fmt: skip
        self.opened = threading.Semaphore(0)
        for t in self.threads:
            t.start()
        for _ in self.threads:  # every client connected before the fault lands
            if not self.opened.acquire(timeout=30):
                raise AssertionError("a client could not connect to wait on the runs")

    def _sync(self, dsn: str, wf: str) -> None:
        try:
            with Runtime(dsn, create_schema=False) as rt:
                self.opened.release()
                self.answers[(wf, "sync")] = _answer(lambda: rt.result(wf, timeout=170))
        except Exception as exc:  # the client itself failed (its connection, its listener)
            self.answers[(wf, "sync")] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"

    async def _async(self, dsn: str) -> None:
        async def one(rt: AsyncRuntime, wf: str) -> None:
            try:
                await rt.result(wf, timeout=170)
                self.answers[(wf, "async")] = "returned"
            except WorkflowFailed:
                self.answers[(wf, "async")] = "returned"  # an answer: the run's recorded end
            except Exception as exc:
                self.answers[(wf, "async")] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"

        try:
            async with AsyncRuntime(dsn, create_schema=False) as rt:
                await rt.runtime()  # its client connected now, not at the first wait
                self.opened.release()
                await asyncio.gather(*(one(rt, wf) for wf in self.runs))
        except Exception as exc:
            for wf in self.runs:
                self.answers.setdefault((wf, "async"), f"{type(exc).__name__}: {exc}")

    def join(self, grace: float) -> dict[tuple[str, str], str]:
        deadline = time.monotonic() + grace
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        out = {(wf, c): "no answer within the grace" for wf in self.runs for c in ("sync", "async")}
        out.update(self.answers)
        return out


def _answer(wait: Callable[[], Any]) -> str:
    try:
        wait()
    except WorkflowFailed:
        pass  # an answer: the run's recorded end
    return "returned"


def collect(s: Session, waits: dict[tuple[str, str], str]) -> dict[str, Any]:
    """Everything the checks read: the tables with the database's timestamps, the side log,
    the worker events, the target's ledger and access log."""
    from conformance.matrix import features as feature_code

    out: dict[str, Any] = {"runs": list(s.runs), "facts": dict(s.facts), "dsn": s.dsn,
                           "fault_window": s.fault_window, "side_log": [],
                           "events": s.events(), "targets": list(s.targets),
                           "db_clock": s.pair.db_clock() if s.pair else None}  # fmt: skip
    if os.path.exists(s.side_log):
        out["side_log"] = testing.read_jsonl(Path(s.side_log))
    feature_code.FEATURES[s.cell.feature].collect(s, out)
    out["waits"] = waits
    out["catalog"] = _catalog(s, out)
    return out


def _catalog(s: Session, out: dict[str, Any]) -> dict[str, list[str] | str]:
    """The invariant catalog's code checks (conformance/invariants.py) over the cell's evidence."""
    from conformance.invariants import Evidence, check_all, target_config

    # each target under the URL the runs named it by (a relay's, when workers are hosts apart)
    named = s.facts.get("target_url") or (s.targets[0].url if s.targets else None)
    targets = {named: target_config(s.targets[0].url)} if s.targets else {}
    with db.connect(s.dsn) as conn:
        ev = Evidence(conn, ledger=[dict(r, target=named) for r in out.get("ledger", [])],
                      access_log=[dict(r, target=named) for r in out.get("access_log", [])],
                      events=out["events"], targets=targets, revokes=s.facts.get("revokes"),
                      db_clock=out["db_clock"])  # fmt: skip
        return check_all(ev)
