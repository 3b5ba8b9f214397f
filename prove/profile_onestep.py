"""Where the one-step workflow's time goes (issue 23, item 5): phases, round trips, py-spy.

    python -m prove.profile_onestep                 # writes results/profile_onestep.md and .json
    python -m prove.profile_onestep --reps 1 --seq 50 --tput 400 --json /tmp/p.json  # quick look

The workflow is the bench's shape 1 (prove/bench_flows.bench_one_step: one step that sleeps
20 ms), served by one worker subprocess as `make bench` runs it (concurrency 32, LISTEN
wake-ups, lease_ttl 30 s), in a fresh database of the project's cluster. Three passes per
repetition, each on a worker of its own:

1. Phases (sequential starts, as the bench's latency phase): the worker subprocess is the
   runtime's own Worker with timing wrappers around its claim, its run and its completion
   (`time.monotonic()`, one clock for every process on Linux); the client records the call
   of rt.start, its return, and the poll that sees `completed` (every 1 ms, as the bench).
   Each workflow's end-to-end latency is split into: start (rt.start's round trips and
   commit), wake (NOTIFY delivery to the claim statement), claim (its round trips and
   commit), dispatch (to the pool thread), body (the step's 20 ms sleep, measured around the
   body itself), record (the step's record and the completion: one fenced transaction),
   observe (until the client's poll sees it).
2. Round trips: the same, with libpq's protocol trace on every connection of the worker and
   of the client; a round trip is one ReadyForQuery from the server. Counted per connection
   role (the claim loop's listener, the run threads, the heartbeat, the client's start and
   its poller) and per named query (sql/queries*.sql), over sequential workflows and over a
   batch started at once.
3. py-spy (`record --idle --threads --nonblocking`, raw stacks) on the worker during the
   throughput batch (N started at once by 8 client threads): where the worker's threads
   spend their samples, blocked or not.

Timings are not comparable across machines; the load average at each pass's start and end is
recorded, with the commit and whether the tree was dirty.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
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
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg

from prove import checkouts
from prove.bench import (
    RESULTS,
    ROOT,
    STARTERS,
    STEP_MS,
    git_facts,
    machine_facts,
    pct,
    pg_settings,
    scratch_database,
    version,
)
from prove.bench_proc import loadavg1

PHASES = ("start", "wake", "claim", "dispatch", "pre_body", "body", "record", "observe")
CONCURRENCY = 32


# -- the instrumented worker (a subprocess) ----------------------------------------------------


def _traced_connect(orig: Any, trace_dir: Path) -> Any:
    """db.connect, with libpq's protocol trace on the new connection, one file per connection
    named after the thread that opened it."""
    from psycopg import pq

    def connect(*args: Any, **kwargs: Any) -> Any:
        conn = orig(*args, **kwargs)
        name = threading.current_thread().name
        f = open(trace_dir / f"{os.getpid()}-{name}-{uuid.uuid4().hex[:6]}.trace", "w")
        conn.pgconn.trace(f.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        conn._ilr_trace_file = f  # kept open as long as the connection
        return conn

    return connect


def worker_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="prove.profile_onestep worker")
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--timings", default="")
    ap.add_argument("--trace-dir", default="")
    ap.add_argument("--concurrency", type=int, default=CONCURRENCY)
    args = ap.parse_args(argv)
    from interlock_runtime import context, db, worker
    from prove import bench_flows

    if args.trace_dir:
        db.connect = _traced_connect(db.connect, Path(args.trace_dir))  # type: ignore[assignment]
    marks: dict[str, dict[str, float]] = collections.defaultdict(dict)
    if args.timings:
        orig_claim = worker.Worker._claim

        def claim(self: Any, conn: Any, limit: int) -> Any:
            t0 = time.monotonic()
            rows = orig_claim(self, conn, limit)
            t1 = time.monotonic()
            for r in rows:
                marks[r["id"]].update(claim_begin=t0, claim_end=t1)
            return rows

        orig_run = worker.Worker._execute_run

        def execute_run(self: Any, run: Any) -> Any:
            marks[run.workflow_id]["run_begin"] = time.monotonic()
            try:
                return orig_run(self, run)
            finally:
                marks[run.workflow_id]["run_end"] = time.monotonic()

        # the run's end: worker.end_run (the run engine), Worker._finish before it (--before)
        older = hasattr(worker.Worker, "_finish")
        orig_finish = worker.Worker._finish if older else worker.end_run  # type: ignore[attr-defined]

        def finish(*a: Any, **k: Any) -> Any:
            ctx = a[1] if older else a[0]
            marks[ctx.workflow_id]["finish_begin"] = time.monotonic()
            try:
                return orig_finish(*a, **k)
            finally:
                marks[ctx.workflow_id]["finish_end"] = time.monotonic()

        orig_step = context.WorkflowContext.step

        def step(self: Any, name: str, fn: Any, *a: Any, **k: Any) -> Any:
            wf = self.workflow_id

            def timed(*aa: Any, **kk: Any) -> Any:
                marks[wf]["body_begin"] = time.monotonic()
                try:
                    return fn(*aa, **kk)
                finally:
                    marks[wf]["body_end"] = time.monotonic()

            return orig_step(self, name, timed, *a, **k)

        worker.Worker._claim = claim  # type: ignore[method-assign]
        worker.Worker._execute_run = execute_run  # type: ignore[method-assign]
        if older:
            worker.Worker._finish = finish  # type: ignore[attr-defined]
        else:
            worker.end_run = finish
        context.WorkflowContext.step = step  # type: ignore[method-assign]
    w = worker.Worker(args.dsn, [bench_flows.bench_one_step], worker_id=f"prof-{os.getpid()}",
                      concurrency=args.concurrency, lease_ttl=30.0, poll=1.0)  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: w.stop())
    threading.Thread(target=w.run, name="claim-loop", daemon=True).start()
    print("ready", flush=True)
    while not w.stopping.is_set():
        time.sleep(0.05)
    time.sleep(0.5)  # the loop's last statements
    if args.timings:
        Path(args.timings).write_text(json.dumps(marks))
    sys.stdout.flush()
    os._exit(0)


class ProfWorker:
    def __init__(self, dsn: str, timings: Path | None = None, trace_dir: Path | None = None):
        cmd = [sys.executable, "-m", "prove.profile_onestep", "worker", "--dsn", dsn]
        if timings:
            cmd += ["--timings", str(timings)]
        if trace_dir:
            cmd += ["--trace-dir", str(trace_dir)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (os.environ.get("PYTHONPATH", ""), str(ROOT / "runtime"), str(ROOT)) if p))  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.PIPE, text=True,
                                     stderr=subprocess.DEVNULL, env=env)  # fmt: skip
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if "ready" not in line:
            raise RuntimeError(f"profiling worker did not start: {line!r}")
        time.sleep(1.0)  # registered and listening

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the client ------------------------------------------------------------------------------


class Client:
    """The bench's runtime client: rt.start, and a poller reading the status every 1 ms."""

    def __init__(self, dsn: str):
        from interlock_runtime import Runtime

        self.rt = Runtime(dsn, create_schema=False)
        self.starters = [Runtime(dsn, create_schema=False) for _ in range(STARTERS)]
        self.poll = psycopg.connect(dsn, autocommit=True)
        self.tag = uuid.uuid4().hex[:6]

    def one(self, i: int) -> dict[str, float]:
        wf = f"p{self.tag}-{i}"
        t0 = time.monotonic()
        self.rt.start("bench_one_step", wf, {"ms": STEP_MS})
        t1 = time.monotonic()
        while True:
            st = self.poll.execute("select status from ilr.workflows where id = %s", (wf,))
            status = st.fetchone()[0]  # type: ignore[index]
            if status == "completed":
                break
            if status in ("failed", "stuck", "cancelled"):
                raise RuntimeError(f"{wf} ended {status}")
            time.sleep(0.001)
        return {"wf": wf, "call": t0, "started": t1, "seen": time.monotonic()}  # type: ignore[dict-item]

    def batch(self, n: int, timeout: float = 300) -> float:
        ids = [f"p{self.tag}-b{i}" for i in range(n)]
        chunks = [ids[k::STARTERS] for k in range(STARTERS)]

        def go(k: int) -> None:
            for wf in chunks[k]:
                self.starters[k].start("bench_one_step", wf, {"ms": STEP_MS})

        t0 = time.monotonic()
        with ThreadPoolExecutor(STARTERS) as ex:
            list(ex.map(go, range(STARTERS)))
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            n_done = self.poll.execute("select count(*) from ilr.workflows where id = any(%s) "
                                       "and status = 'completed'", (ids,)).fetchone()[0]  # type: ignore[index]  # fmt: skip
            if n_done == n:
                break
            time.sleep(0.005)
        return n / (time.monotonic() - t0)

    def close(self) -> None:
        self.rt.close()
        for s in self.starters:
            s.close()
        self.poll.close()


# -- passes ----------------------------------------------------------------------------------


def phases_of(client: dict[str, Any], w: dict[str, float]) -> dict[str, float] | None:
    need = ("claim_begin", "claim_end", "run_begin", "body_begin", "body_end", "finish_end")
    if not all(k in w for k in need):
        return None
    ms = 1000.0
    return {
        "start": (client["started"] - client["call"]) * ms,
        "wake": (w["claim_begin"] - client["started"]) * ms,
        "claim": (w["claim_end"] - w["claim_begin"]) * ms,
        "dispatch": (w["run_begin"] - w["claim_end"]) * ms,
        "pre_body": (w["body_begin"] - w["run_begin"]) * ms,
        "body": (w["body_end"] - w["body_begin"]) * ms,
        "record": (w["finish_end"] - w["body_end"]) * ms,
        "observe": (client["seen"] - w["finish_end"]) * ms,
        "total": (client["seen"] - client["call"]) * ms,
    }


def pass_phases(dsn: str, seq: int, warmup: int, tmp: Path) -> dict[str, Any]:
    timings = tmp / "timings.json"
    w = ProfWorker(dsn, timings=timings)
    c = Client(dsn)
    try:
        for i in range(warmup):
            c.one(1_000_000 + i)
        load0 = loadavg1()
        rows = [c.one(i) for i in range(seq)]
        load1 = loadavg1()
    finally:
        c.close()
        w.stop()
    marks = json.loads(timings.read_text())
    per = [p for r in rows if (p := phases_of(r, marks.get(r["wf"], {}))) is not None]
    out: dict[str, Any] = {"n": len(per), "load1_start": load0, "load1_end": load1}
    for k in (*PHASES, "total"):
        vals = [p[k] for p in per]
        out[k] = {"p50": pct(vals, 50), "mean": statistics.fmean(vals) if vals else None,
                  "p90": pct(vals, 90)}  # fmt: skip
    out["overhead_p50"] = (out["total"]["p50"] or 0) - STEP_MS
    return out


def _query_names() -> dict[str, str]:
    from interlock_runtime import db

    return {" ".join(sql.split()): name for name, sql in db._queries().items()}


_MSG = re.compile(r"^(?=[FB]\t\d+\t)", re.M)
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
SETUP = (
    "to_regclass",
    "ilr.schema_version",
    "register_deployment",
    "get_deployment",
    "listen ilr_ready",
    "pg_advisory",
    "show ",
    "current_setting",
)  # once per connection


def read_trace(path: Path, names: dict[str, str]) -> tuple[int, collections.Counter[str]]:
    """Round trips (ReadyForQuery messages, less those of one-time setup statements) and the
    statements sent, by query name (a statement text spans lines in the trace)."""
    rtt, stmts = 0, collections.Counter[str]()
    prepared: dict[str, str] = {}
    for msg in _MSG.split(path.read_text(errors="replace")):
        parts = msg.split("\t", 3)
        if len(parts) < 3:
            continue
        side, kind = parts[0], parts[2].strip()
        rest = parts[3] if len(parts) > 3 else ""
        if side == "B" and kind == "ReadyForQuery":
            rtt += 1
            continue
        if side != "F":
            continue
        quoted = _QUOTED.findall(rest)
        if kind == "Query" and quoted:
            text = quoted[0]
        elif kind == "Parse" and len(quoted) >= 2:
            prepared[quoted[0]] = quoted[1]
            continue
        elif kind == "Bind" and len(quoted) >= 2:
            text = prepared.get(quoted[1], "?")
        else:
            continue
        text = " ".join(text.split())
        if any(x in text for x in SETUP):
            rtt -= 1  # one round trip each, not per workflow
            continue
        stmts[_name_of(text, names)] += 1
    return rtt, stmts


def _name_of(text: str, names: dict[str, str]) -> str:
    if text in names:
        return names[text]
    flat = re.sub(r"\$\d+", "$", text)
    for sql, name in names.items():  # psycopg sends %(x)s as $n
        if re.sub(r"%\(\w+\)s", "$", sql) == flat:
            return name
    return text[:40]


def role_of(path: Path) -> str:
    name = path.name.split("-", 1)[1].rsplit("-", 1)[0]
    if name.startswith("run_"):
        return "worker: run threads"
    if name == "claim-loop":
        return "worker: claim loop (listener)"
    if name == "heartbeat":
        return "worker: heartbeat"
    if name.startswith("client-"):
        return f"client: {name[7:]}"
    return f"worker: {name}"


def pass_round_trips(dsn: str, seq: int, batch: int, tmp: Path) -> dict[str, Any]:
    """Round trips per workflow by connection role and by statement, sequential then batch."""
    from interlock_runtime import db

    names = _query_names()
    out: dict[str, Any] = {}
    for label, n in (("sequential", seq), ("batch", batch)):
        tdir = tmp / f"trace-{label}"
        tdir.mkdir()
        w = ProfWorker(dsn, trace_dir=tdir)
        orig = db.connect
        db.connect = _traced_connect(orig, tdir)  # type: ignore[assignment]
        threading.current_thread().name = "client-start"
        try:
            c = Client(dsn)  # rt and the batch starters: role client: start
            threading.current_thread().name = "MainThread"
            c.one(999_999)  # warm (counted: n + 1 workflows)
            if label == "sequential":
                for i in range(n):
                    c.one(i)
            else:
                c.batch(n)
            c.close()
        finally:
            db.connect = orig  # type: ignore[assignment]
            w.stop()
        by_role: dict[str, int] = collections.Counter()
        by_stmt: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for f in sorted(tdir.glob("*.trace")):
            rtt, stmts = read_trace(f, names)
            role = role_of(f)
            if role == "client: poll":
                continue  # the harness's waiting, not the runtime's (reported apart below)
            by_role[role] += rtt
            by_stmt[role].update(stmts)
        wfs = n + 1
        out[label] = {
            "workflows": wfs,
            "round_trips_per_wf": {r: v / wfs for r, v in sorted(by_role.items())},
            "total_per_wf": sum(by_role.values()) / wfs,
            "statements_per_wf": {
                r: {k: v / wfs for k, v in s.most_common()} for r, s in sorted(by_stmt.items())
            },  # fmt: skip
        }
        shutil.rmtree(tdir, ignore_errors=True)
    return out


def pass_pyspy(dsn: str, n: int, tmp: Path, rate: int) -> dict[str, Any]:
    exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if not exe:
        return {"error": "py-spy is not installed (pip install py-spy; the bench extra has it)"}
    w = ProfWorker(dsn)
    c = Client(dsn)
    raw = tmp / "pyspy.txt"
    spy = subprocess.Popen([exe, "record", "--pid", str(w.proc.pid), "--format", "raw", "--idle",
                            "--threads", "--nonblocking", "--rate", str(rate), "-o", str(raw)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        time.sleep(1.5)  # py-spy attached
        load0 = loadavg1()
        t0 = time.monotonic()
        wf_s = c.batch(n)
        seconds = time.monotonic() - t0
        load1 = loadavg1()
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
        c.close()
        w.stop()
    if not raw.exists():
        return {"error": (spy.stderr.read() if spy.stderr else "")[-500:]}
    out = summarize_pyspy(raw.read_text())
    out.update({"wf_per_s": wf_s, "batch_seconds": seconds, "load1_start": load0,
                "load1_end": load1, "rate_hz": rate})  # fmt: skip
    return out


def _frame_fn(frame: str) -> str:
    # "function (path/to/module.py:123)" -> "module.py:function"
    m = re.match(r"^(.*) \((.*?):\d+\)$", frame.strip())
    if not m:
        return frame.strip()
    return f"{Path(m.group(2)).name}:{m.group(1)}"


def classify(stack: list[str]) -> str:
    """What a sampled run thread was doing, from its stack (outermost first)."""
    fns = [_frame_fn(f) for f in stack]
    text = ";".join(fns)
    if "bench_flows.py:sleep_ms" in text:
        return "step body (the 20 ms sleep)"
    if not fns or fns[-1] in ("thread.py:_worker", "threading.py:Condition.wait"):
        return "idle: waiting for work"
    in_db = any(f.split(":")[0] in ("connection.py", "cursor.py", "transaction.py", "waiting.py",
                                    "_connection_base.py", "_cursor_base.py", "generators.py")
                for f in fns)  # fmt: skip
    where = "in psycopg (round trips, commit)" if in_db else "python"
    if "Worker._finish" in text or "RunEngine.finish" in text:
        return f"completion (step record + finish, one fenced write): {where}"
    if "Worker._connection" in text:
        return f"connecting: {where}"
    if in_db:
        return f"other database calls: {where}"
    return "python (workflow and runtime code, events)"


def summarize_pyspy(raw: str) -> dict[str, Any]:
    by_thread: dict[str, int] = collections.Counter()
    run_kinds: dict[str, int] = collections.Counter()
    loop_leaf: dict[str, int] = collections.Counter()
    self_fn: dict[str, int] = collections.Counter()
    incl_fn: dict[str, int] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack_text.split(";")
        thread = frames[0]
        stack = frames[1:]
        text = ";".join(stack)
        if any(_frame_fn(f).startswith("thread.py:") for f in stack):
            kind = "run threads"  # the pool's (ThreadPoolExecutor) threads
        elif "_heartbeat_loop" in text:
            kind = "heartbeat"
        elif "Worker.run " in text or "(claim-loop)" in thread or "Worker.run (" in text:
            kind = "claim loop"
        elif "worker_main" in text:
            kind = "main (idle)"
        else:
            kind = "other"
        by_thread[kind] += count
        total += count
        fns = [_frame_fn(f) for f in stack]
        if kind == "run threads":
            run_kinds[classify(stack)] += count
        elif fns:
            loop_leaf[f"{kind}: {fns[-1]}"] += count
        busy = fns and not any(x in fns[-1] for x in ("sleep_ms",))
        if busy and fns:
            self_fn[fns[-1]] += count
        for f in set(fns):
            if "interlock_runtime" in stack_text or True:
                incl_fn[f] += count
    return {
        "samples": total,
        "by_thread": dict(by_thread.most_common()),
        "run_threads": dict(run_kinds.most_common()),
        "other_threads_leaf": dict(loop_leaf.most_common(12)),
        "leaf_frames": dict(self_fn.most_common(25)),
        "inclusive_runtime_frames": dict(
            (k, v) for k, v in incl_fn.most_common(200)
            if any(k.startswith(p) for p in ("worker.py:", "context.py:", "db.py:", "queues.py:",
                                             "timeouts.py:", "telemetry.py:", "events.py:",
                                             "schedules.py:", "codec.py:"))
        ),
    }  # fmt: skip


# -- the report ------------------------------------------------------------------------------


def pass_main(argv: list[str]) -> int:
    """One pass in a process of its own, so its client is the variant's runtime too."""
    ap = argparse.ArgumentParser(prog="prove.profile_onestep pass")
    ap.add_argument("name", choices=("phases", "round_trips", "pyspy"))
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--cfg", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    cfg, tmp = json.loads(args.cfg), Path(args.tmp)
    if args.name == "phases":
        out = pass_phases(args.dsn, cfg["seq"], cfg["warmup"], tmp)
    elif args.name == "round_trips":
        out = pass_round_trips(args.dsn, cfg["rt_seq"], cfg["rt_batch"], tmp)
    else:
        out = pass_pyspy(args.dsn, cfg["tput"], tmp, cfg["rate"])
    import interlock_runtime

    out["runtime_path"] = str(Path(interlock_runtime.__file__).parent)
    Path(args.out).write_text(json.dumps(out))
    return 0


def run(cfg: dict[str, Any], variants: dict[str, Path]) -> dict[str, Any]:
    """Every pass of every variant (name -> a checkout's root), interleaved per repetition."""
    from interlock_runtime.testing import admin_dsn, template_database

    admin = admin_dsn()
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "config": cfg,
                              "git": git_facts(), "machine": machine_facts(),
                              "postgres": pg_settings(admin),
                              "variants": {v: checkouts.commit_of(root) for v, root in variants.items()},
                              "versions": {d: version(d) for d in ("interlock-runtime", "psycopg",
                                                                   "py-spy")}}  # fmt: skip
    reps: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    with ExitStack() as stack:
        template = stack.enter_context(template_database(admin))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ilr-prof-")))
        for rep in range(cfg["reps"]):
            for variant, root in variants.items():
                r: dict[str, Any] = {}
                for name in ("phases", "round_trips", "pyspy"):
                    if (name == "round_trips" and rep > 0) or (
                        name == "pyspy" and not cfg["pyspy"]
                    ):
                        continue  # round trips are counts, not timings: one pass is enough
                    sub = tmp / f"{variant}-{rep}-{name}"
                    sub.mkdir()
                    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                        (str(root / "runtime"), str(ROOT), os.environ.get("PYTHONPATH", ""))))  # fmt: skip
                    with scratch_database(admin, "ilr_prof", template) as (dsn, _):
                        print(f"[profile] rep {rep + 1}/{cfg['reps']} {variant}: {name} ...",
                              flush=True)  # fmt: skip
                        subprocess.run([sys.executable, "-m", "prove.profile_onestep", "pass", name,
                                        "--dsn", dsn, "--tmp", str(sub), "--cfg", json.dumps(cfg),
                                        "--out", str(sub / "out.json")], cwd=str(ROOT), env=env,
                                       check=True, timeout=1800)  # fmt: skip
                    r[name] = json.loads((sub / "out.json").read_text())
                reps[variant].append(r)
                ph = r["phases"]
                print(f"[profile]   {variant}: p50 {ph['total']['p50']:.2f} ms (overhead "
                      f"{ph['overhead_p50']:.2f})" + (f", batch {r['pyspy'].get('wf_per_s', 0):.0f} "
                      "wf/s" if "pyspy" in r else ""), flush=True)  # fmt: skip
    report["reps"] = reps
    return report


def _n(x: Any, nd: int = 2) -> str:
    return "n/a" if x is None else f"{x:,.{nd}f}"


def _mmm(vals: list[float], nd: int = 2) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "n/a"
    return f"{_n(statistics.median(vals), nd)} [{_n(min(vals), nd)}-{_n(max(vals), nd)}]"


def render(report: dict[str, Any], command: str) -> str:
    g, m, pg, cfg = report["git"], report["machine"], report["postgres"], report["config"]
    allreps: dict[str, list[dict[str, Any]]] = report["reps"]
    names = list(allreps)
    head = " | ".join(names)
    L = ["# Where the one-step workflow's time goes (issue 23, item 5)", "",
         f"Generated by `{command}` (prove/profile_onestep.py; never edited by hand). Date "
         f"{report['date']}; harness git {g['commit'][:12]}{' (dirty)' if g['dirty'] else ' (clean)'}; "
         + "; ".join(f"{v}: runtime at {c['commit'][:12]}{' (dirty)' if c['dirty'] else ' (clean)'}"
                     for v, c in report["variants"].items())
         + f". {m['cores']} cores ({m['cpu']}), shared with other work (load average at start "
         f"{', '.join(f'{x:.2f}' for x in m['loadavg_at_start'])}); Postgres "
         f"{pg['server_version']} (fsync={pg['fsync']}, synchronous_commit="
         f"{pg['synchronous_commit']}); versions: "
         + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v) + ".", "",
         "The workflow is the bench's shape 1: one step whose body sleeps 20 ms, one worker "
         f"subprocess (concurrency {CONCURRENCY}, LISTEN wake-ups), the client polling the "
         f"status every 1 ms. {cfg['reps']} repetitions, each pass in a fresh database and in "
         "processes of its own (client and worker import the variant's runtime); the variants "
         "alternate within each repetition, so they share the machine's state. Cells are "
         "median [min-max] over repetitions.", ""]  # fmt: skip
    L += ["## Phases of one workflow (sequential starts)", "",
          f"{cfg['seq']} workflows per repetition after {cfg['warmup']} warm-up; each cell is "
          "the median [min-max] over repetitions of a repetition's p50 in ms. start: rt.start "
          "(its round trips and the commit of the insert and its NOTIFY); wake: from rt.start's "
          "return to the claim statement (NOTIFY delivery, the claim loop waking); claim: the "
          "claim's round trips and commit; dispatch: to the pool thread; pre_body: the run "
          "thread up to the step body; body: the step body; record: from the body's end to the "
          "completion's commit (the step's record and the completion, one transaction); "
          "observe: until the client's 1 ms poll sees it. Phase p50s need not add up to the "
          "total's p50.", "",
          f"| phase | {head} |", "|---|" + "---|" * len(names)]  # fmt: skip
    for k in (*PHASES, "total"):
        L.append(f"| {k} | " + " | ".join(_mmm([r["phases"][k]["p50"] for r in allreps[v]])
                                          for v in names) + " |")  # fmt: skip
    L.append(
        f"| overhead (total p50 - {STEP_MS:.0f} ms) | "
        + " | ".join(_mmm([r["phases"]["overhead_p50"] for r in allreps[v]]) for v in names)
        + " |"
    )

    def loads(v: str) -> str:
        return ", ".join("{:.2f} -> {:.2f}".format(r["phases"]["load1_start"],
                                                   r["phases"]["load1_end"]) for r in allreps[v])  # fmt: skip

    L += ["", "Load average (1 min) at each phases pass, start -> end: "
          + "; ".join(f"{v} {loads(v)}" for v in names) + ".", ""]  # fmt: skip
    rts = {v: allreps[v][0].get("round_trips") for v in names if allreps[v][0].get("round_trips")}
    if rts:
        any_rt = next(iter(rts.values()))
        L += ["## Round trips per workflow", "",
              "libpq's protocol trace on every connection of the worker and of the client "
              "(one round trip = one ReadyForQuery; the one-time statements of connection "
              "setup and registration are left out). The client's status poller is the "
              "harness's waiting and is not traced. Sequential: "
              f"{any_rt['sequential']['workflows']} workflows one after another; batch: "
              f"{any_rt['batch']['workflows']} started at once by {STARTERS} threads.", "",
              "| connection | " + " | ".join(f"{v} sequential | {v} batch" for v in rts) + " |",
              "|---|" + "---|---|" * len(rts)]  # fmt: skip
        roles = sorted({r for x in rts.values() for lab in ("sequential", "batch")
                        for r in x[lab]["round_trips_per_wf"]})  # fmt: skip
        for role in roles:
            L.append(
                f"| {role} | "
                + " | ".join(
                    f"{_n(x['sequential']['round_trips_per_wf'].get(role))} | "
                    f"{_n(x['batch']['round_trips_per_wf'].get(role))}"
                    for x in rts.values()
                )
                + " |"
            )
        L.append("| total | " + " | ".join(f"{_n(x['sequential']['total_per_wf'])} | "
                                          f"{_n(x['batch']['total_per_wf'])}" for x in rts.values()) + " |")  # fmt: skip
        for v, x in rts.items():
            L += ["", f"Statements per workflow, {v} (sequential; BEGIN, COMMIT, SAVEPOINT and "
                  "RELEASE are round trips of their own):", ""]  # fmt: skip
            for role, stmts in x["sequential"]["statements_per_wf"].items():
                L.append(
                    f"- {role}: " + ", ".join(f"{k} {n:.2f}" for k, n in stmts.items() if n >= 0.01)
                )
        L.append("")
    spies = {v: [r["pyspy"] for r in allreps[v] if "samples" in r.get("pyspy", {})] for v in names}
    if any(spies.values()):
        L += ["## py-spy: the worker under the throughput batch", "",
              f"`py-spy record --idle --threads --nonblocking --rate {cfg['rate']}` on the worker "
              f"process while {cfg['tput']} workflows are started at once by {STARTERS} client "
              "threads (the bench's throughput phase). Shares of the samples of the worker's "
              "threads, idle ones included (a thread blocked on a socket or waiting for work is "
              "sampled too), median [min-max] over repetitions. Batch throughput under the "
              "profiler: " + "; ".join(f"{v} {_mmm([x['wf_per_s'] for x in spies[v]], 0)} wf/s"
                                       for v in names if spies[v]) + ".", ""]  # fmt: skip

        def shares(key: str, x: dict[str, Any]) -> dict[str, float]:
            tot = sum(x[key].values()) or 1
            return {k: 100.0 * n / tot for k, n in x[key].items()}

        for key, title in (("by_thread", "Threads (% of all samples)"),
                           ("run_threads", "Run threads: what they were doing (% of their samples)"),
                           ("other_threads_leaf", "Other threads: innermost frame (% of those threads' samples)")):  # fmt: skip
            keys = list(dict.fromkeys(k for v in names for x in spies[v] for k in x[key]))
            L += [f"{title}:", "", f"| | {head} |", "|---|" + "---|" * len(names)]
            for k in keys[:12]:
                L.append(
                    f"| {k} | "
                    + " | ".join(
                        _mmm([shares(key, x).get(k, 0.0) for x in spies[v]], 1) for v in names
                    )
                    + " |"
                )
            L.append("")
        for v in names:
            if not spies[v]:
                continue
            x0 = spies[v][0]
            L += [f"Runtime frames, inclusive, {v} (% of all samples, first repetition):", "",
                  "| frame | % |", "|---|---|"]  # fmt: skip
            for k, n in list(x0["inclusive_runtime_frames"].items())[:16]:
                L.append(f"| {k} | {100.0 * n / x0['samples']:.1f} |")
            L.append("")
    return "\n".join(L)


FULL = {"reps": 3, "seq": 200, "warmup": 5, "tput": 1000, "rt_seq": 50, "rt_batch": 200,
        "rate": 250, "pyspy": True}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "worker":
        return worker_main(argv[1:])
    if argv and argv[0] == "pass":
        return pass_main(argv[1:])
    if argv and argv[0] == "render":  # render JSON MD [COMMAND]: the markdown of a stored run
        report = json.loads(Path(argv[1]).read_text())
        command = report.get("command") or (
            argv[3] if len(argv) > 3 else "python -m prove.profile_onestep"
        )
        Path(argv[2]).write_text(render(report, command))
        return 0
    args, cfg = checkouts.parse("prove.profile_onestep", __doc__ or "", FULL, "profile", argv)
    report = run(cfg, checkouts.variants(args.before, ROOT))
    command = checkouts.command("prove.profile_onestep", argv, report["variants"])  # no paths
    report["command"] = command
    checkouts.save(report, render(report, command), "profile_onestep", RESULTS, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
