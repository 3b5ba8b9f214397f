"""Run Prove cells: (scenario, system, tier, variant) x seeds, with real processes (docs/design.md#prove).

One run = one seed of one cell. Each run gets its own payment target (in-process, its own
SQLite ledger and port), its own model stub (EMULATED model variance), its own Postgres
database (the runtime's schema; for Temporal it holds ilr.grants for the (b) check), its own
workflow id and task queue, and its own worker subprocesses. Crashes are real OS signals: an
instrumented kill point (ILR_KILL_AT, the worker SIGKILLs itself) or an external SIGKILL from
the runner (`down`). The Temporal dev server is shared by the sweep (one process).

The timeline of a scenario is played by `Run.a_<action>`, one method per row of
prove.scenario.ACTIONS (which range-checks their arguments when the scenario loads), each
calling the system driver (RuntimeSystem, TemporalSystem) or acting on the run. The oracle
reads only the target's ledger and access log. One JSON file per run goes to the sweep's runs
directory (published: .data/prove/runs/; a working run: .data/prove/scratch/runs/).
"""

from __future__ import annotations

import json
import os
import platform
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from prove import lateness
from prove.scenario import FAMILY, Scenario, Variant
from world import gitstate
from world.model_stub import ModelStub
from world.target import Target
from world.target_client import TargetAdmin

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / ".data" / "prove"
PAYMENT = "pay_881"
PAID = 10000
APPROVER = "alice"
APIS = ("local", "stripe")  # the target's own API, or its Stripe-compatible subset (EMULATED)
STRIPE_SCENARIOS = (
    "S01",
    "S02",
    "S03",
)  # the Stripe table (docs/results.md#runtime-prove item 3): tier 1 only
EXTERNAL_KILL_WINDOW = 2.0  # seconds after the approval; see crash_plan()
PARTITION_AFTERMATH = 2.0  # seconds after a partition heals before the ground truth is read


class RunnerError(RuntimeError):
    """A run could not be set up (a service is missing, a worker never got ready)."""


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


# -- shared services ------------------------------------------------------------------------


@dataclass
class Services:
    """What a sweep shares: the Postgres admin DSN and schema template, the Temporal server."""

    admin_dsn: str
    template: str
    temporal: Any = None  # TemporalDevServer
    runs_dir: Path = DATA / "runs"
    versions: dict = field(default_factory=dict)
    # "seeded" (docs/design.md#prove: half the seeds an external SIGKILL), or force "instrumented" or
    # "external" for every run that has a crash plan (tests use "instrumented")
    crash_plans: str = "seeded"
    size: str = "quick"  # the sweep size: a loop scenario's iterations per run
    # the sweep's scheduling-lateness monitor (prove/lateness.py); None: not judged
    lateness: Any = None
    # the fork server that starts worker subprocesses (prove/zygote.py); None: plain exec
    zygote: Any = None
    # --resume: reuse finished run files and, inside a loop run, its finished iterations
    resume: bool = False
    # where a loop run reports each finished iteration (the sweep's printer); None: silent
    progress: Callable[[str], None] | None = None


def versions(admin_dsn: str) -> dict:
    import importlib.metadata as md

    with psycopg.connect(admin_dsn) as conn:
        pg = conn.execute("show server_version").fetchone()[0]
    try:
        from world.temporal_server import cli_version

        tcli = cli_version()
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        tcli = f"unknown ({e})"
    return {
        "git_commit": gitstate.commit(),
        "git_dirty": gitstate.dirty(),  # results/ does not make the code dirty
        "postgres": pg,
        "postgres_port": psycopg.conninfo.conninfo_to_dict(admin_dsn).get("port"),
        "temporalio": md.version("temporalio"),
        "temporal_cli": tcli,
        "anthropic": md.version("anthropic"),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


# -- system drivers -------------------------------------------------------------------------


class RuntimeSystem:
    """interlock_runtime: prove.flows.prove_refund on real worker subprocesses."""

    family = "runtime"
    flow_name = "prove_refund"  # the workflow of prove.flows this system runs
    worker_args: tuple[str, ...] = ()

    def __init__(self, run: Run) -> None:
        from interlock_runtime import Runtime

        self.run = run
        self.rt = run.stack.enter_context(Runtime(run.dsn))
        self.workers: list[Any] = []
        self.grant: str | None = None
        self.revokes: list[dict] = []  # what each rt.revoke() returned (RevokeLinearizable)
        __import__(self.module)  # import the flow now, not inside the measured start

    @property
    def module(self) -> str:
        return "prove.stripe_flows" if self.run.api == "stripe" else "prove.flows"

    def spawn(self, kill_at: str | None, via_proxy: bool = False,
              stop_at: str | None = None) -> Any:  # fmt: skip
        from interlock_runtime.testing import WorkerProcess

        t = self.run.timing
        wid = f"W{len(self.workers) + 1}"
        env = {"ILR_KILL_AT": kill_at or "", "ILR_STOP_AT": stop_at or ""}
        dsn = self.run.dsn
        if via_proxy:  # this worker's Postgres sessions go through the run's fault proxy
            dsn = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1",
                                                 port=str(self.run.proxy_for(self.pg_address())))  # fmt: skip
        only = () if self.run.api == "stripe" else ("--only", f"{self.flow_name}@1")
        w = WorkerProcess(dsn, wid, self.run.dir, self.module, pythonpath=str(REPO),
                          lease_ttl=t["lease_ttl"], poll=t["poll"], env=env, cwd=str(REPO),
                          extra_args=(*self.worker_args, *only),
                          popen=spawner(self.run.services))  # fmt: skip
        w.kill_at = kill_at
        self.run.stack.callback(w.close)
        self.workers.append(w)
        return w

    def wait_ready(self, workers: list[Any]) -> float:
        """Until every worker registered; returns when the first one did (it works at once)."""
        return min(w.wait_event("registered", timeout=120)["ts"] for w in workers)

    def case(self) -> dict:
        t, r = self.run.timing, self.run
        case = {"id": r.case_id, "target_url": r.target.url, "payment": PAYMENT, "tier": r.tier,
                "model_url": r.stub.url, "send_timeout": t["send_timeout"],
                "settle_margin": t["settle_margin"], "sleep_seconds": t["sleep_seconds"],
                "timer_seconds": t.get("timer_seconds", 0.0)}  # fmt: skip
        for k in ("queryable", "dedup_window"):
            if k in r.variant.params:
                case[k] = r.variant.params[k]
        return case

    def pg_address(self) -> tuple[str, int]:
        info = psycopg.conninfo.conninfo_to_dict(self.run.dsn)
        return str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432)

    @property
    def flow(self) -> Any:
        if self.run.api == "stripe":
            from prove.stripe_flows import stripe_refund

            return stripe_refund
        import prove.flows

        return getattr(prove.flows, self.flow_name)

    def start(self) -> None:
        self.rt.start(self.flow, self.run.wf_id, self.case())

    def fork(self, approve: int | None) -> dict:
        """rt.fork at the decision's seq (S05): the fork re-decides and runs the rest; the
        person approves it as before (Temporal's reset reapplies the approve signal)."""
        wf = self.run.wf_id
        steps = self.rt.describe(wf)["steps"]
        seq = next(s["seq"] for s in steps if s["kind"] == "decide")
        new_id = self.rt.fork(wf, seq, f"{wf}-fork")
        self.run.forked_from.append(wf)
        self.run.wf_id = new_id
        if approve is not None:
            self.approve(int(approve))
        return {"forked": wf, "fork": new_id, "at_seq": seq, "approved": approve}

    def wait_decided(self) -> None:
        from interlock_runtime.testing import wait_for

        wf = self.run.wf_id
        wait_for(lambda: (self.rt.describe(wf)["waiting"] or {}).get("signal") == "approve",
                 self.run.timing["run_timeout"], "the approval wait")  # fmt: skip

    def approve(self, amount: int, wait: bool = True) -> None:
        wf = self.run.wf_id
        if wait:
            self.wait_decided()
        steps = self.rt.describe(wf)["steps"]
        decided = next(s for s in steps if s["kind"] == "decide")["output"]
        from prove.flows import payload_for

        self.grant = self.rt.approve(wf, payload_for({"payment": PAYMENT}, amount),
                                     decided["premises"], by=APPROVER)  # fmt: skip

    def revoke(self) -> dict:
        if self.grant is None:
            return {"grant": None, "skipped": "no approval yet"}
        from conformance.invariants import record_revoke

        returned = record_revoke(self.rt, self.grant, APPROVER, self.revokes)
        return {"grant": self.grant, "may_still_land": returned}

    def cancel(self) -> dict:
        self.rt.cancel(self.run.wf_id, by=APPROVER)
        return {"workflow": self.run.wf_id}

    def duplicate_start(self) -> dict:
        """The same workflow id started again (a client retry): must not run a second copy."""
        try:
            out = self.rt.start(self.flow, self.run.wf_id, self.case())
            return {"accepted": True, "returned": _jsonable(out)}
        except Exception as e:  # noqa: BLE001 - the refusal is the measurement
            return {"accepted": False, "refused": f"{type(e).__name__}: {e}"}

    def server_restart(self) -> dict:
        """Postgres crashes (`pg_ctl stop -m immediate`) and starts again: the run's own
        cluster (`servers: private`), so no other run is hit."""
        from interlock_runtime import Runtime

        if self.run.private_pg is None:
            raise RunnerError("server_restart needs `servers: private` in the scenario")
        out = self.run.private_pg.restart_immediate()
        self.rt = self.run.stack.enter_context(Runtime(self.run.dsn))  # the old session died
        return out

    def result(self, timeout: float) -> tuple[str, Any]:
        from interlock_runtime import WorkflowFailed

        try:
            out = self.rt.result(self.run.wf_id, timeout=timeout)
            return "completed", out
        except WorkflowFailed as e:
            return e.status, _jsonable(e.error)
        except TimeoutError as e:
            return "timeout", str(e)

    def status_of(self, out: Any) -> str | None:
        return out.get("status") if isinstance(out, dict) else None

    def artifacts(self, ledger: list[dict], access_log: list[dict]) -> dict:
        from conformance import invariants
        from interlock_runtime import db, receipts

        wf = self.run.wf_id
        d = self.rt.describe(wf)
        arts: dict[str, Any] = {"status": d["status"], "describe": _jsonable(d)}
        if self.run.forked_from:  # S05: the original too
            arts["forked_from"] = [_jsonable(self.rt.describe(w)) for w in self.run.forked_from]
        effects = self.rt.effects(wf)
        arts["effects"] = _jsonable(effects)
        if effects:
            eid = effects[0]["effect_id"]
            bundle = self.rt.receipt(eid, key=b"prove-receipt-key")
            arts["receipt"] = _jsonable(bundle)
            v = receipts.verify(bundle, b"prove-receipt-key")
            arts["receipt_verify"] = _jsonable(v)
        # every effect of the run (S05: the fork's and the original's), for the audit
        all_ids = [e["effect_id"] for w in [wf, *self.run.forked_from] for e in self.rt.effects(w)]
        arts["receipts"] = {e: _jsonable(self.rt.receipt(e, key=b"prove-receipt-key"))
                            for e in dict.fromkeys(all_ids)}  # fmt: skip
        arts["claim_history"] = _jsonable(self.rt.claim_history(wf))
        events = []
        for w in self.workers:
            events.extend(e for e in w.events() if e.get("event") != "raw")
        with db.connect(self.run.dsn) as conn:
            n_calls = conn.execute("select count(*) as n from ilr.llm_calls").fetchone()["n"]
            arts["llm_calls"] = n_calls
            case = self.case()
            url = case["target_url"]
            cfg = invariants.target_config(url, case.get("queryable"), case.get("dedup_window"))
            ev = invariants.Evidence(conn, ledger=ledger, access_log=access_log, events=events,
                                     revokes=self.revokes, targets={url: cfg})  # fmt: skip
            checked = invariants.check_all(ev)
        arts["invariants"] = {k: v for k, v in checked.items() if v}  # failing or missing
        arts["invariants_checked"] = len(checked)
        return arts


class TemporalSystem:
    """Temporal (a) temporal_idem or (b) temporal_check: the baseline workflow on the dev
    server, with real worker subprocesses (python -m baselines.worker)."""

    family = "temporal"

    def __init__(self, run: Run) -> None:
        from baselines.client import BaselineClient

        server = run.private_temporal or run.services.temporal
        if server is None:
            raise RunnerError("the Temporal dev server is not running")
        self.run = run
        self.mode = run.system
        self.address = server.address
        self.client = BaselineClient(self.address)
        run.stack.callback(self.client.close)
        self.task_queue = f"tq-{run.run_id}-{uuid.uuid4().hex[:6]}"
        self.attempt_log = run.dir / "attempts.jsonl"
        self.workers: list[subprocess.Popen] = []
        self.grant = f"grant-{uuid.uuid4().hex[:12]}"
        self.run_ids: list[str] = []

    def spawn(self, kill_at: str | None, via_proxy: bool = False,
              stop_at: str | None = None) -> subprocess.Popen:  # fmt: skip
        r, t = self.run, self.run.timing
        wid = f"T{len(self.workers) + 1}"
        address = self.address
        if via_proxy:  # this worker reaches the Temporal server through the run's fault proxy
            host, port = self.address.rsplit(":", 1)
            address = f"127.0.0.1:{r.proxy_for((host, int(port)))}"
        env = dict(child_env(), ILR_KILL_AT=kill_at or "", ILR_STOP_AT=stop_at or "")
        cmd = [sys.executable, "-m", "baselines.worker", "--address", address,
               "--task-queue", self.task_queue, "--mode", self.mode, "--target-url", r.target.url,
               "--payment", PAYMENT, "--tier", str(r.tier), "--model-url", r.stub.url,
               "--grants-dsn", r.dsn, "--attempt-log", str(self.attempt_log), "--id", wid,
               "--http-timeout", str(t["send_timeout"]),
               "--sticky-timeout", str(t["temporal_sticky_timeout"]), "--api", r.api]  # fmt: skip
        if not r.variant.params.get("queryable", True):
            cmd.append("--no-lookup")
        proc, ready = start_ready_process(cmd, env, r.dir / f"{wid}.stderr", r.stack,
                                          f"Temporal worker {wid}", on_start=self.workers.append,
                                          popen=spawner(r.services))  # fmt: skip
        proc.kill_at = kill_at  # type: ignore[attr-defined]
        r.note("worker_ready", worker=wid, pid=ready.get("pid"), kill_at=kill_at)
        return proc

    def start(self) -> None:
        r = self.run
        rid = self.client.start_refund(r.wf_id, self.task_queue, case=r.case_id, payment=PAYMENT,
                                       sleep_seconds=r.timing["sleep_seconds"],
                                       timer_seconds=r.timing.get("timer_seconds", 0.0))  # fmt: skip
        self.run_ids.append(rid)

    def wait_decided(self) -> None:
        from interlock_runtime.testing import wait_for

        # The approver approves after the decision is visible, as in the runtime.
        def decided() -> bool:
            kinds = [e["eventType"] for e in self.client.history(self.run.wf_id)["events"]]
            return "EVENT_TYPE_ACTIVITY_TASK_COMPLETED" in kinds

        wait_for(decided, self.run.timing["run_timeout"], "the decision", every=0.2)

    def approve(self, amount: int, wait: bool = True) -> None:
        if wait:
            self.wait_decided()
        with psycopg.connect(self.run.dsn, autocommit=True) as conn:
            conn.execute(
                "insert into ilr.grants (id, principal, action, constraints, granted_by)"
                " values (%s, %s, 'refund', jsonb_build_object('amount', jsonb_build_object('max', %s::bigint)), %s) on conflict (id) do nothing",
                (self.grant, f"workflow:{self.run.wf_id}", amount, APPROVER),
            )
        self.client.approve(self.run.wf_id, amount, self.grant)

    def cancel(self) -> dict:
        self.client.cancel(self.run.wf_id)
        return {"workflow": self.run.wf_id}

    def duplicate_start(self) -> dict:
        r = self.run
        try:
            rid = self.client.start_refund(r.wf_id, self.task_queue, case=r.case_id,
                                           payment=PAYMENT,
                                           sleep_seconds=r.timing["sleep_seconds"],
                                           timer_seconds=r.timing.get("timer_seconds", 0.0))  # fmt: skip
            return {"accepted": True, "run_id": rid}
        except Exception as e:  # noqa: BLE001 - the refusal is the measurement
            return {"accepted": False, "refused": f"{type(e).__name__}: {e}"}

    def server_restart(self) -> dict:
        """The dev server is SIGKILLed and started again on the same SQLite file (the run's
        own server under `servers: private`)."""
        if self.run.private_temporal is None:
            raise RunnerError("server_restart needs `servers: private` in the scenario")
        t0 = time.time()
        self.run.private_temporal.restart(crash=True)
        return {"server": "temporal dev server", "sigkill_and_start_s": round(time.time() - t0, 3)}

    def fork(self, approve: int | None) -> dict:
        """`temporal workflow reset --type FirstWorkflowTask` (S05): the new run re-runs the
        decision; Temporal reapplies the approve signal itself, so `approve` is not sent."""
        from baselines.client import reset_to_before_decision_cli

        new_run = reset_to_before_decision_cli(self.address, self.run.wf_id)
        self.run_ids.append(new_run)
        return {"reset": self.run.wf_id, "new_run_id": new_run, "via": "temporal workflow reset"}

    def revoke(self) -> dict:
        with psycopg.connect(self.run.dsn, autocommit=True) as conn:
            n = conn.execute("update ilr.grants set revoked_at = now() where id = %s",
                             (self.grant,)).rowcount  # fmt: skip
        return {"grant": self.grant, "rows": n}

    def result(self, timeout: float) -> tuple[str, Any]:
        try:
            # the run this harness started (or reset to), not a later duplicate start's
            rid = self.run_ids[-1] if self.run_ids else None
            return "completed", self.client.wait_result(self.run.wf_id, timeout=timeout,
                                                        run_id=rid or None)  # fmt: skip
        except TimeoutError as e:
            return "timeout", str(e) or "timed out"
        except Exception as e:  # noqa: BLE001 - a failed workflow: record its cause
            cause = e
            while getattr(cause, "cause", None) is not None:
                cause = cause.cause
            if type(e).__name__ in ("TimeoutError", "CancelledError"):
                return "timeout", repr(e)
            return "failed", f"{type(e).__name__}: {e}; cause: {cause}"

    def status_of(self, out: Any) -> str | None:
        return None

    def artifacts(self, ledger: list[dict], access_log: list[dict]) -> dict:
        from baselines.refund import read_attempts

        arts: dict[str, Any] = {}
        try:
            arts["describe"] = self.client.describe(self.run.wf_id)
            arts["status"] = arts["describe"]["status"]
            arts["history"] = self.client.history(self.run.wf_id)
        except Exception as e:  # noqa: BLE001
            arts["status"] = f"unknown ({e})"
        arts["attempts"] = [a for a in read_attempts(self.attempt_log)
                            if a.get("workflow_id") == self.run.wf_id]  # fmt: skip
        return arts


def child_env() -> dict[str, str]:
    """The environment of a harness subprocess: ours, with the repository importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def spawner(services: Services) -> Callable[..., Any]:
    """How worker subprocesses start: forked by the sweep's zygote (prove/zygote.py: real
    processes without a fresh interpreter each), or plain subprocess.Popen."""
    return services.zygote.popen if services.zygote is not None else subprocess.Popen


def start_ready_process(cmd: list[str], env: dict, stderr_path: Path, stack: ExitStack,
                        what: str, on_start: Callable[[Any], Any] | None = None,
                        timeout: float = 90.0,
                        popen: Callable[..., Any] = subprocess.Popen) -> tuple[Any, dict]:  # fmt: skip
    """Start a worker subprocess that prints one JSON line when it is ready (the Temporal
    workers); killed when `stack` closes. Returns the process and that line, or raises
    RunnerError with the tail of its stderr. `popen`: see spawner()."""
    err = open(stderr_path, "w")
    proc = popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=REPO)

    def cleanup() -> None:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        err.close()

    stack.callback(cleanup)
    if on_start is not None:
        on_start(proc)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    try:
        return proc, json.loads(lines.get(timeout=timeout))
    except (queue.Empty, ValueError):
        tail = stderr_path.read_text(errors="replace")[-2000:]
        raise RunnerError(f"{what} never got ready:\n{tail}") from None


class AsyncRuntimeSystem(RuntimeSystem):
    """interlock_runtime with an `async def` workflow: prove.flows.prove_refund_async (the same
    body and steps as prove_refund) on asyncio workers (`interlock worker --async`). Everything
    the harness does to it, and everything it reads back, is RuntimeSystem's."""

    flow_name = "prove_refund_async"
    worker_args = ("--async",)

    def __init__(self, run: Run) -> None:
        if run.api == "stripe":
            raise RunnerError("runtime_async runs the local target only (no Stripe flow twin)")
        super().__init__(run)


SYSTEMS: dict[str, Callable[[Run], Any]] = {
    "runtime": RuntimeSystem,
    "runtime_async": AsyncRuntimeSystem,
    "temporal_idem": TemporalSystem,
    "temporal_check": TemporalSystem,
}


# -- one run --------------------------------------------------------------------------------


def run_name(scn_id: str, variant: str, system: str, tier: int, seed: int,
             api: str = "local") -> str:  # fmt: skip
    """The run id (and run file name) of one seed of one cell."""
    return f"{scn_id}-{variant}-{system}-t{tier}{'-stripe' if api == 'stripe' else ''}-s{seed}"


def crash_plan(scn: Scenario, variant: Variant, system: str, tier: int, seed: int,
               api: str = "local", mode: str = "seeded") -> dict:  # fmt: skip
    """The seeded crash plan of one run (docs/design.md#prove).

    A scenario whose timeline arms a kill point and approves before it waits for the crash
    gets, for half of its seeds (the odd ones), an external SIGKILL of the armed workers at a
    uniform random time in [0, EXTERNAL_KILL_WINDOW) s after the approval instead of the
    instrumented point; seed 0 always keeps the instrumented point, so a one-seed sweep checks
    every prediction. Scenarios that crash before the approval (S05b) or crash nothing (S08)
    keep their instrumented plan."""
    steps = scn.steps(system, variant)
    names = [n for n, _ in steps]
    points = [a.get("kill_at") for n, a in steps if n == "workers" and a.get("kill_at")]
    plan: dict[str, Any] = {"kind": "instrumented" if points else "none", "points": points}
    eligible = (points and "approve" in names and "wait_crash" in names
                and names.index("approve") < names.index("wait_crash"))  # fmt: skip
    if not eligible or mode == "instrumented":
        return plan
    cell = f"{scn.id}-{variant.name}-{system}-t{tier}-{api}"
    if mode == "external" or seed % 2 == 1:
        rng = random.Random(f"{cell}-s{seed}")
        window = float(variant.timing.get("external_kill_window", EXTERNAL_KILL_WINDOW))
        plan = {"kind": "external", "replaces": points, "window": window,
                "at": round(rng.uniform(0.0, window), 3), "rng_seed": f"{cell}-s{seed}"}  # fmt: skip
    return plan


class Run:
    def __init__(self, services: Services, scn: Scenario, variant: Variant, system: str,
                 tier: int, seed: int, out_dir: Path, api: str = "local") -> None:  # fmt: skip
        if api not in APIS:
            raise RunnerError(f"api must be one of {APIS}, not {api!r}")
        self.services, self.scn, self.variant = services, scn, variant
        self.system, self.tier, self.seed, self.api = system, tier, seed, api
        self.timing = variant.timing
        self.run_id = run_name(scn.id, variant.name, system, tier, seed, api)
        suffix = uuid.uuid4().hex[:8]
        self.wf_id = f"wf-{self.run_id}-{suffix}"
        self.forked_from: list[str] = []
        self.case_id = f"case-4471-{suffix}"
        self.dir = out_dir / self.run_id
        # A run that is run again (after a harness error) starts from nothing: its old ledger
        # and logs would otherwise be read as this run's ground truth.
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        self.stack = ExitStack()
        self.t0 = time.time()
        self.log: list[dict] = []  # faults, world events, signals: what happened when
        self.world: dict[str, float] = {}  # world event name -> time it took effect
        self.plan = crash_plan(scn, variant, system, tier, seed, api, services.crash_plans)
        self.proxy: Any = None  # the run's fault proxy (S08a), made on first use
        self.private_pg: PrivatePostgres | None = None  # `servers: private` (S10)
        self.private_temporal: Any = None
        self._timers: list[threading.Thread] = []

    def note(self, what: str, **fields: Any) -> None:
        self.log.append({"t": round(time.time() - self.t0, 3), "what": what, **fields})

    def proxy_for(self, upstream: tuple[str, int]) -> int:
        """The port of this run's fault proxy in front of `upstream` (one per run)."""
        from world.fault_proxy import FaultProxy

        if self.proxy is None:
            self.proxy = FaultProxy(upstream).start()
            self.stack.callback(self.proxy.stop)
            self.note("proxy_start", upstream=f"{upstream[0]}:{upstream[1]}",
                      port=self.proxy.port)  # fmt: skip
        return self.proxy.port

    def _procs(self, armed_only: bool = False) -> list[Any]:
        out = []
        for w in self.sys.workers:
            if armed_only and not getattr(w, "armed", False):
                continue
            out.append(getattr(w, "proc", w))
        return out

    # -- actions (the scenario's timeline) --

    def a_workers(self, kill_at: str | None = None, count: int | None = None,
                  via_proxy: bool = False, stop_at: str | None = None) -> None:  # fmt: skip
        n = int(count or self.timing[f"{self.sys.family}_workers"])
        external = self.plan["kind"] == "external" and kill_at
        started = []
        for i in range(n):
            p = self.sys.spawn(None if external else kill_at, via_proxy=bool(via_proxy),
                               stop_at=stop_at)  # fmt: skip
            started.append(p)
            p.armed = bool(kill_at)  # type: ignore[attr-defined]
            p.stop_at = stop_at  # type: ignore[attr-defined]
            self.note("worker_start", pid=p.pid, kill_at=None if external else kill_at, index=i,
                      external_kill=bool(external), via_proxy=bool(via_proxy),
                      stop_at=stop_at)  # fmt: skip
        # Like Temporal's spawn (which waits for `ready`), the runtime's workers are waited for
        # until they registered, so no measured time includes a worker's interpreter start.
        self.t_first_ready = time.time()  # Temporal's spawn returned once its worker was ready
        if hasattr(self.sys, "wait_ready"):
            self.t_first_ready = self.sys.wait_ready(started)
            self.note("workers_ready", pids=[p.pid for p in started],
                      first_ready=round(self.t_first_ready - self.t0, 3))  # fmt: skip

    def a_start(self) -> None:
        self.t_start = time.time()
        self.sys.start()
        self.note("start", wf=self.wf_id)

    def a_approve(self, amount: int | None = None) -> None:
        amount = 2000 if amount is None else amount  # a per-family value left out: the default
        self.approved_amount = int(amount)
        self.sys.approve(int(amount))
        self.note("approve", amount=amount)
        if self.plan["kind"] == "external" and not self._timers:
            t = threading.Thread(target=self._external_kill, args=(time.time(),), daemon=True)
            t.start()
            self._timers.append(t)

    def _external_kill(self, since: float) -> None:
        """The seeded external SIGKILL: every armed worker, at plan['at'] after the approval."""
        time.sleep(max(0.0, since + self.plan["at"] - time.time()))
        killed = []
        for proc in self._procs(armed_only=True):
            if proc.poll() is None:
                proc.kill()
                killed.append(proc.pid)
        self.plan["fired_at"] = round(time.time() - self.t0, 3)
        self.plan["killed"] = killed
        self.note("external_sigkill", pids=killed, after_approve=self.plan["at"])

    def a_wait_crash(self) -> None:
        if self.plan["kind"] == "external":
            for t in self._timers:
                t.join(self.timing["run_timeout"])
            procs = self._procs(armed_only=True)
            for proc in procs:
                proc.wait(timeout=10)
            self.crashed = bool(self.plan.get("killed"))
            return
        # a crash already reported (an earlier wait_crash) is not this one
        seen = {e["pid"] for e in self.log if e["what"] == "crashed"}
        armed = [w for w in self.sys.workers if getattr(w, "kill_at", None)
                 and getattr(w, "proc", w).pid not in seen]  # fmt: skip
        deadline = time.monotonic() + self.timing["run_timeout"]
        while time.monotonic() < deadline:
            for w in armed:
                proc = getattr(w, "proc", w)
                rc = proc.poll()
                if rc is not None:
                    self.note("crashed", pid=proc.pid, returncode=rc, kill_at=w.kill_at,
                              real_sigkill=rc == -signal.SIGKILL)  # fmt: skip
                    self.crashed = rc == -signal.SIGKILL
                    return
            time.sleep(0.05)
        self.crashed = False
        self.note("crash_never_happened")

    def a_down(self) -> None:
        for proc in self._procs():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()  # SIGKILL
                proc.wait(timeout=10)
                self.note("sigkill", pid=proc.pid)

    def a_restart(self, count: int | None = None) -> None:
        self.t_restart = time.time()
        self.a_workers(None, count)
        self.t_ready = self.t_first_ready  # the first fresh worker ready (it starts at once)

    def a_sleep(self, seconds: float) -> None:
        time.sleep(float(seconds))

    def a_hand_refund(self, amount: int) -> None:
        out = self.admin.hand_refund(PAYMENT, int(amount))
        self.world["hand_refund"] = time.time()
        self.note("hand_refund", amount=amount, refund=out.get("id"))

    def a_revoke(self) -> None:
        out = self.sys.revoke()
        self.world["revoke"] = time.time()
        self.note("revoke", **out)

    def a_prune_keys(self) -> None:
        out = self.admin.prune_keys()
        self.note("prune_keys", emulated=True, result=out)

    def a_target_delay(self, ms: float, count: int | None = None) -> None:
        out = self.admin.set_delay(float(ms), None if count is None else int(count))
        self.note("target_delay", ms=ms, count=count, result=out)

    def a_redecide(self, on: bool = True) -> None:
        self.stub.configure(redecide=bool(on))
        self.note("redecide", on=bool(on), emulated=True)

    def a_fork(self, approve: int | None = None) -> None:
        out = self.sys.fork(approve)
        self.note("fork", **out)

    def a_wait_decided(self) -> None:
        self.sys.wait_decided()
        self.note("decided")

    def a_cancel(self) -> None:
        try:
            out = self.sys.cancel()
        except Exception as e:  # noqa: BLE001 - e.g. the workflow already ended: no cancel
            self.note("cancel_refused", error=f"{type(e).__name__}: {e}")
            return
        self.world["cancel"] = time.time()
        self.note("cancel", **out)

    def a_reapprove(self) -> None:
        """The person approves again (a duplicate signal), with the amount approved before;
        it does not wait for the workflow to be waiting (the first approval may be consumed)."""
        try:
            self.sys.approve(self.approved_amount, wait=False)
        except Exception as e:  # noqa: BLE001 - e.g. the workflow already ended
            self.note("reapprove_refused", error=f"{type(e).__name__}: {e}")
            return
        self.note("reapprove", amount=self.approved_amount)

    def a_duplicate_start(self) -> None:
        out = self.sys.duplicate_start()
        self.note("duplicate_start", **out)

    def a_server_restart(self) -> None:
        self.note("server_crash")
        out = self.sys.server_restart()
        self.note("server_restarted", **(out or {}))

    def a_wait_stopped(self, resume_after: float | None = None) -> None:
        """Until the worker armed with stop_at has SIGSTOPped itself at its point. With
        resume_after, a timer sends SIGCONT that many seconds after the stop, whatever the
        timeline does meanwhile (starting successors takes seconds); `resume` waits for it."""
        armed = [w for w in self.sys.workers if getattr(w, "stop_at", None)]
        deadline = time.monotonic() + self.timing["run_timeout"]
        while time.monotonic() < deadline:
            for w in armed:
                proc = getattr(w, "proc", w)
                if _proc_state(proc.pid) == "T":
                    self.t_stopped = time.time()
                    self.note("stopped", pid=proc.pid, stop_at=w.stop_at)
                    if resume_after is not None:
                        self._resume_timer = threading.Thread(
                            target=self.a_resume, args=(float(resume_after),), daemon=True
                        )
                        self._resume_timer.start()
                    return
            time.sleep(0.02)
        raise RunnerError("no armed worker reached its stop point")

    def a_resume(self, after: float | None = None) -> None:
        timer = getattr(self, "_resume_timer", None)
        if timer is not None and timer is not threading.current_thread():
            timer.join(self.timing["run_timeout"])  # the SIGCONT wait_stopped scheduled
            return
        if after is not None and getattr(self, "t_stopped", None):
            time.sleep(max(0.0, self.t_stopped + float(after) - time.time()))
        for proc in self._procs():
            if proc.poll() is None and _proc_state(proc.pid) == "T":
                proc.send_signal(signal.SIGCONT)
                self.note("sigcont", pid=proc.pid, stopped_for=round(
                    time.time() - getattr(self, "t_stopped", time.time()), 3))  # fmt: skip

    def a_wait_send(self) -> None:
        """Until the first agent POST arrived at the target (t_send: S08a's time origin)."""
        deadline = time.monotonic() + self.timing["run_timeout"]
        while time.monotonic() < deadline:
            posts = [a for a in self.admin.log() if _is_refund_post(a)]
            if posts:
                self.t_send = posts[0]["arrival"]
                self.note("send_arrived", arrival=round(self.t_send - self.t0, 3))
                return
            time.sleep(0.02)
        raise RunnerError("no refund POST reached the target")

    def a_partition(self, after: float, until: float) -> None:
        """Blackhole the run's fault proxy (the sender's link to Postgres or the Temporal
        server) from t_send + after to t_send + until; returns at once (timers do it)."""
        if self.proxy is None:
            raise RunnerError("partition needs a worker started with via_proxy: true")
        origin = getattr(self, "t_send", None) or time.time()

        def at(when: float, mode: str) -> None:
            time.sleep(max(0.0, origin + when - time.time()))
            try:
                self.proxy.set_mode(mode)
                self.note("proxy_mode", mode=mode, since_send=round(time.time() - origin, 3))
            except Exception as e:  # noqa: BLE001 - the run is ending; recorded
                self.note("proxy_mode_failed", mode=mode, error=repr(e))

        for when, mode in ((float(after), "blackhole"), (float(until), "pass")):
            t = threading.Thread(target=at, args=(when, mode), daemon=True)
            t.start()
            self._timers.append(t)
        # the successors must start after the sender is cut off
        time.sleep(max(0.0, origin + float(after) - time.time()) + 0.05)

    def _wait_inflight(self) -> None:
        """Until every refund POST the target received has finished processing: a slow
        request (S08c: beyond settle) may still land after the workflow ended, and the oracle
        must see it."""
        deadline = time.monotonic() + self.timing["run_timeout"]
        while time.monotonic() < deadline:
            open_posts = [a for a in self.admin.log() if _is_refund_post(a) and a["end"] is None]
            if not open_posts:
                return
            self.note("waiting_for_inflight", requests=[a["id"] for a in open_posts])
            while time.monotonic() < deadline and any(
                a["end"] is None
                for a in self.admin.log()
                if a["id"] in {o["id"] for o in open_posts}
            ):
                time.sleep(0.1)
        self.note("inflight_never_finished")

    def a_wait_result(self) -> None:
        self.result_kind, self.result = self.sys.result(self.timing["run_timeout"])
        self.t_end = time.time()
        self.note("result", kind=self.result_kind, workflow=self.wf_id)

    # -- the whole run --

    def execute(self) -> dict:
        t = self.timing
        self.crashed = None
        self.result_kind, self.result = "not_run", None
        self.t_start = self.t_end = self.t_restart = None
        self.approved_amount = 2000
        error = None
        from interlock_runtime.testing import fresh_database

        pg_started = postgres_started(self.services.admin_dsn)
        with self.stack:
            queryable = bool(self.variant.params.get("queryable", True))
            self.target = Target(self.tier, db=str(self.dir / "ledger.sqlite"),
                                 lookup=queryable).start()  # fmt: skip
            self.stack.callback(self.target.close)
            self.admin = TargetAdmin(self.target.url)
            self.admin.create_payment(PAYMENT, PAID)
            self.stub = ModelStub(log_path=str(self.dir / "model_calls.jsonl")).start()
            self.stack.callback(self.stub.stop)
            private = self.scn.servers == "private"
            if private and FAMILY[self.system] == "runtime":
                from interlock_runtime import db, migrations
                from interlock_runtime.testing import with_dbname

                self.private_pg = PrivatePostgres(self.dir / "pg")
                self.stack.callback(self.private_pg.close)
                self.dsn = with_dbname(self.private_pg.start(), "ilr")
                with db.connect(self.dsn) as conn:
                    migrations.ensure(conn)
                self.note("private_postgres", port=self.private_pg.port)
            else:
                self.dsn = self.stack.enter_context(
                    fresh_database(self.services.admin_dsn, self.services.template)
                )
            if private and FAMILY[self.system] == "temporal":
                from world.temporal_server import TemporalDevServer

                self.private_temporal = TemporalDevServer(self.dir / "temporal.db", port=0)
                self.stack.callback(self.private_temporal.kill)
                self.private_temporal.start()
                self.note("private_temporal", address=self.private_temporal.address)
            try:
                self.sys = SYSTEMS[self.system](self)
                for name, args in self.scn.steps(self.system, self.variant):
                    getattr(self, f"a_{name}")(**args)
            except Exception as e:  # noqa: BLE001 - recorded; the run counts as not correct
                error = f"{type(e).__name__}: {e}"
                self.note("error", error=error, tb=traceback.format_exc()[-3000:])
            if self.proxy is not None:
                # Let the partition run its course (the cut-off sender's late commit is part
                # of S08a), then heal in any case: nothing stays blackholed.
                for timer in self._timers:
                    timer.join(self.timing["run_timeout"])
                self.proxy.set_mode("pass")
                time.sleep(PARTITION_AFTERMATH)
                self.note("partition_over")
            self._wait_inflight()
            ledger_all = self.admin.ledger()
            ledger = ledger_all["refunds"]
            access = self.admin.log()
            try:
                artifacts = self.sys.artifacts(ledger, access) if hasattr(self, "sys") else {}
            except Exception as e:  # noqa: BLE001
                artifacts = {"error": f"{type(e).__name__}: {e}"}
            model_calls = self.stub.calls()
        # Postgres restarted under the run by something outside it (on a shared machine,
        # another user's crash test): not a measurement of this scenario; run it again.
        try:
            pg_now = postgres_started(self.services.admin_dsn)
        except psycopg.Error as e:
            pg_now = f"unreachable ({e})"
        if pg_now != pg_started and error is None:
            error = (f"Postgres restarted during the run by something outside it (postmaster "
                     f"start {pg_started} -> {pg_now}); not a measurement")  # fmt: skip
            self.note("error", error=error)
        late = harness_lateness(self.services, self.t0)
        bound = self.timing.get("max_harness_lateness", lateness.DEFAULT_BOUND)
        late_error = lateness.verdict(late, bound)
        if late_error and error is None:
            error = late_error
            self.note("error", error=error)
        outcome = evaluate(self.scn, self.variant, self.system, self.tier, ledger, access,
                           self.world, self.approved_amount, self.sys.status_of(self.result)
                           if hasattr(self, "sys") else None, error,
                           external_crash=self.plan["kind"] == "external")  # fmt: skip
        record = {
            "identity": {
                "run_id": self.run_id,
                "scenario": self.scn.id,
                "variant": self.variant.name,
                "system": self.system,
                "tier": self.tier,
                "seed": self.seed,
                "api": self.api,
                "workflow_id": self.wf_id,
                "forked_from": self.forked_from,
                "case": self.case_id,
            },  # fmt: skip
            "versions": self.services.versions,
            "timing_constants": t,
            "faults": {
                "crash_plan": self.plan,
                "crashed_by_kill_point": self.crashed
                if self.plan["kind"] == "instrumented"
                else None,
                "crashed": self.crashed,
                "timeline": self.log,
                "emulated": list(self.scn.emulated)
                + (["stripe: " + STRIPE_EMULATED] if self.api == "stripe" else []),
            },  # fmt: skip
            "ground_truth": {
                "ledger": ledger,
                "payments": ledger_all["payments"],
                "access_log": access,
            },  # fmt: skip
            "model_calls": model_calls,
            "result": {"kind": self.result_kind, "value": _jsonable(self.result)},
            "outcome": outcome,
            "artifacts": artifacts,
            "timings": {
                "started_at": round(self.t0, 3),
                "wall": round(time.time() - self.t0, 3),
                "end_to_end": round(self.t_end - self.t_start, 3)
                if self.t_end and self.t_start
                else None,
                "resume_after_restart": round(self.t_end - self.t_restart, 3)
                if self.t_end and self.t_restart
                else None,
                "workers_restarted_at": round(self.t_restart, 3) if self.t_restart else None,
                "workers_ready_at": round(self.t_ready, 3)
                if getattr(self, "t_ready", None)
                else None,
                "timers": timer_lateness(artifacts),
                "harness_lateness": late,
            },  # fmt: skip
            "error": error,
        }
        return _jsonable(record)


STRIPE_EMULATED = (
    "the official stripe SDK (runtime: world.stripe_target.StripeRefunds; Temporal: the same "
    "StripeRefunds calls inside both activities) pointed at the local target's Stripe-compatible "
    "/v1 subset; Stripe cannot be reached from this machine"
)


def postgres_started(admin_dsn: str) -> str:
    """The postmaster's start time: it changes when Postgres restarts."""
    with psycopg.connect(admin_dsn, connect_timeout=10) as conn:
        return str(conn.execute("select pg_postmaster_start_time()").fetchone()[0])


def wait_for_postgres(admin_dsn: str, timeout: float = 120.0) -> bool:
    """True once Postgres answers (it may be restarting); False after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            postgres_started(admin_dsn)
            return True
        except psycopg.Error:
            time.sleep(1.0)
    return False


def _proc_state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped), or '?' when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


class PrivatePostgres:
    """A Postgres cluster of one run's own (`servers: private`), driven through `interlock pg`
    with its own port and data directory, so S10's crash hits no other run."""

    def __init__(self, root: Path) -> None:
        from world.temporal_server import free_port

        self.root = root
        self.port = free_port()
        self.env = dict(os.environ, ILR_PG_PORT=str(self.port), ILR_DATA=str(root))
        self.env.pop("ILR_DSN", None)

    def _pg(self, *args: str) -> str:
        cmd = [sys.executable, "-c", "import sys; from interlock_runtime.cli import main; "
               "sys.exit(main())", "pg", *args]  # fmt: skip
        out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            raise RunnerError(f"interlock pg {' '.join(args)} (port {self.port}) failed: "
                              f"{out.stdout[-1000:]}{out.stderr[-2000:]}")  # fmt: skip
        return out.stdout.strip()

    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> str:
        self._pg("start")
        return self.admin_dsn()

    def restart_immediate(self) -> dict:
        t0 = time.time()
        self._pg("restart-immediate")
        return {"server": f"postgres (private, port {self.port})",
                "stop_immediate_and_start_s": round(time.time() - t0, 3)}  # fmt: skip

    def close(self) -> None:
        try:
            self._pg("stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def harness_lateness(services: Services, t0: float, t1: float | None = None) -> dict:
    """The sweep monitor's lateness between t0 and t1 (prove/lateness.py); no samples when
    the run is outside a sweep."""
    mon = services.lateness
    return mon.window(t0, t1) if mon is not None else {"samples": 0, "max": None, "p99": None}


def _ts(text: str) -> float:
    from datetime import datetime

    text = text.replace("Z", "+00:00").replace(" ", "T")
    if "." in text:  # Temporal writes nanoseconds; fromisoformat takes up to microseconds
        head, frac = text.split(".", 1)
        digits = "".join(ch for ch in frac if ch.isdigit())
        text = f"{head}.{digits[:6]}{frac[len(digits) :]}"
    return datetime.fromisoformat(text).timestamp()


def timer_lateness(artifacts: dict) -> list[dict]:
    """How late each durable timer of the workflow fired, from the system's own records:
    the runtime's sleep step (written at database time when the timer fired) against its
    `until`; Temporal's TimerFired event against TimerStarted + startToFireTimeout."""
    out = []
    for step in (artifacts.get("describe") or {}).get("steps") or []:
        if step.get("kind") == "sleep" and isinstance(step.get("output"), dict):
            due = _ts(step["output"]["until"])
            fired = _ts(str(step["created_at"]))
            out.append({"timer": step["name"], "due": due, "fired": fired,
                        "late_s": round(fired - due, 3)})  # fmt: skip
    events = ((artifacts.get("history") or {}).get("events")) or []
    started = {}
    for e in events:
        if e["eventType"] == "EVENT_TYPE_TIMER_STARTED":
            a = e["timerStartedEventAttributes"]
            started[e["eventId"]] = (
                _ts(e["eventTime"]),
                float(a["startToFireTimeout"].rstrip("s")),
            )
        elif e["eventType"] == "EVENT_TYPE_TIMER_FIRED":
            t0, dur = started.get(e["timerFiredEventAttributes"]["startedEventId"], (None, 0.0))
            if t0 is not None:
                fired = _ts(e["eventTime"])
                out.append({"timer": f"{dur:g}s", "due": t0 + dur, "fired": fired,
                            "late_s": round(fired - t0 - dur, 3)})  # fmt: skip
    return out


def _is_refund_post(a: dict) -> bool:
    """A refund send in the access log: POST /refunds, or POST /v1/refunds (the Stripe path)."""
    return a["method"] == "POST" and a["path"].rstrip("/") in ("/refunds", "/v1/refunds")


# -- the oracle: the target's ledger and access log only ------------------------------------


def evaluate(scn: Scenario, variant: Variant, system: str, tier: int, ledger: list[dict],
             access: list[dict], world: dict[str, float], approved: int,
             status: str | None, error: str | None, external_crash: bool = False) -> dict:  # fmt: skip
    agent = [r for r in ledger if r["source"] != "hand"]
    hand = [r for r in ledger if r["source"] == "hand"]
    posts = [a for a in access if _is_refund_post(a)]
    q = {
        "total_cents": sum(r["amount"] for r in ledger),
        "agent_cents": sum(r["amount"] for r in agent),
        "hand_cents": sum(r["amount"] for r in hand),
        "agent_applications": len(agent),
        "agent_sends": len(posts),
    }
    oracle = scn.oracle_for(variant, tier)
    failed = []
    for name, conds in oracle["require"].items():
        for cmp, n in conds.items():
            ok = {"eq": q[name] == n, "le": q[name] <= n, "ge": q[name] >= n}[cmp]
            if not ok:
                failed.append(f"{name} = {q[name]}, expected {cmp} {n}")

    def applied_after(t: float | None) -> int:
        # a send that the target processed (applied) after the world changed
        if t is None:
            return 0
        return sum(1 for a in posts if a["arrival"] > t and a.get("status") == 200
                   and not (a.get("response") or {}).get("replayed"))  # fmt: skip

    # An external SIGKILL at a random time may strike after the refund was already applied;
    # a world event the timeline then plays "during the outage" came after the effect, which
    # the scenario's oracle (written for an outage before the send) would wrongly call a
    # failure. Such a run is judged by the event order, as MIX judges every run: at most one
    # application, of the approved amount, none after the world changed.
    applied = sorted(a["arrival"] for a in posts if a.get("status") == 200
                     and not (a.get("response") or {}).get("replayed"))  # fmt: skip
    world_at = min((t for k, t in world.items() if k in ("hand_refund", "revoke", "cancel")),
                   default=None)  # fmt: skip
    basis = "scenario oracle"
    if external_crash and world_at is not None and applied and applied[0] < world_at:
        basis = "event order (the external SIGKILL came after the effect was applied)"
        failed = [f for f in (
            f"agent_applications = {len(agent)}, expected le 1" if len(agent) > 1 else None,
            "an amount other than the approved one" if any(r["amount"] != approved
                                                           for r in agent) else None,
            "applied after the world changed" if applied_after(world_at) else None) if f]  # fmt: skip

    pred = scn.prediction(system, tier, variant.name)
    observed = f"${q['total_cents'] / 100:.0f}" + (f" {status}" if status else "")
    expected = None
    if pred:
        expected = f"${pred['total_cents'] / 100:.0f}" + (f" {pred['status']}"
                                                          if pred.get("status") else "")  # fmt: skip
    held = None
    # A prediction is for the scenario's instrumented crash point; a run whose crash was an
    # external SIGKILL at a random time is not checked against it (only against the oracle).
    if pred and not external_crash:
        held = q["total_cents"] == pred["total_cents"] and (
            not pred.get("status") or pred["status"] == status
        )
    return {
        "quantities": q,
        "oracle": oracle,
        "oracle_failures": failed,
        "oracle_basis": basis,
        "correct": not failed,
        "expected": expected,
        "observed": observed,
        "prediction_held": held,
        "duplicate_applications": max(0, len(agent) - 1),
        "wrong_amount": sum(1 for r in agent if r["amount"] != approved),
        "sent_under_revoked_grant": applied_after(world.get("revoke")),
        "sent_on_changed_premise": applied_after(world.get("hand_refund")),
        "blocked_never_sent": int(oracle["refund_expected"] and not agent),
        "harness_error": error,
    }


def run_driver(services: Services, scn: Scenario, variant: Variant, system: str, tier: int,
               seed: int, out_dir: Path) -> dict:  # fmt: skip
    """One run of a loop scenario (prove/driver.py): the driver plays its iterations."""
    from prove import driver

    run_id = run_name(scn.id, variant.name, system, tier, seed)
    run_dir = out_dir / run_id
    resume = bool(getattr(services, "resume", False))
    if resume and run_dir.exists():
        # the finished iterations' checkpoint stays; the driver plays only the others
        driver.set_aside(run_dir)
    else:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
    n = int(variant.params.get("iterations") or scn.iterations.get(services.size) or 1)
    dr = driver.DriverRun(services=services, scn=scn, variant=variant, system=system, tier=tier,
                          seed=seed, iterations=n, run_id=run_id, dir=run_dir,
                          stack=ExitStack(), timing=variant.timing, resume=resume)  # fmt: skip
    if services.progress is not None:
        dr.progress = services.progress
    error, body = None, {}
    pg_started = postgres_started(services.admin_dsn)
    with dr.stack:
        try:
            body = driver.load(scn.driver)(dr) or {}
        except Exception as e:  # noqa: BLE001 - recorded; the run counts as not correct
            error = f"{type(e).__name__}: {e}"
            dr.note("error", error=error, tb=traceback.format_exc()[-3000:])
    try:
        pg_now = postgres_started(services.admin_dsn)
    except psycopg.Error as e:
        pg_now = f"unreachable ({e})"
    if pg_now != pg_started and error is None:
        error = (f"Postgres restarted during the run by something outside it (postmaster "
                 f"start {pg_started} -> {pg_now}); not a measurement")  # fmt: skip
    outcome = dict(body.get("outcome") or driver.summarize(body.get("iterations") or []))
    outcome.setdefault("n", len(body.get("iterations") or []))
    if error is None and outcome["n"] == 0 and outcome.get("harness_error_iterations"):
        # nothing was measured: the run is a harness error too, so the sweep runs it again
        error = (f"every iteration was a harness error (iterations "
                 f"{outcome['harness_error_iterations']}); not a measurement")  # fmt: skip
    outcome["correct"] = (error is None and outcome["n"] > 0
                          and outcome.get("correct_n") == outcome["n"])  # fmt: skip
    outcome["harness_error"] = error
    rec = {
        "identity": {"run_id": run_id, "scenario": scn.id, "variant": variant.name,
                     "system": system, "tier": tier, "seed": seed, "api": "local",
                     "driver": scn.driver, "iterations_planned": n},
        "versions": services.versions,
        "timing_constants": variant.timing,
        "faults": {**(body.get("faults") or {}), "timeline": dr.log,
                   "emulated": list(scn.emulated)},
        "ground_truth": body.get("ground_truth") or {},
        "iterations": body.get("iterations") or [],
        "outcome": outcome,
        "artifacts": body.get("artifacts") or {},
        "timings": {"started_at": round(dr.t0, 3), "wall": round(time.time() - dr.t0, 3),
                    "resumed_iterations": dr.resumed,  # wall covers only this attempt's part
                    **(body.get("timings") or {})},
        "error": error,
    }  # fmt: skip
    return _jsonable(rec)


def run_one(services: Services, scn: Scenario, variant: Variant, system: str, tier: int,
            seed: int, out_dir: Path, api: str = "local") -> dict:  # fmt: skip
    # Postgres may be restarting (a shared cluster): do not start a run that cannot measure.
    wait_for_postgres(services.admin_dsn)
    if scn.driver:
        rec = run_driver(services, scn, variant, system, tier, seed, out_dir)
    else:
        rec = Run(services, scn, variant, system, tier, seed, out_dir, api).execute()
    path = out_dir / f"{rec['identity']['run_id']}.json"
    path.write_text(json.dumps(rec, indent=1, sort_keys=True))
    return rec


# -- a sweep --------------------------------------------------------------------------------


def plan(scns: list[Scenario], seeds: int | None, size: str, systems: list[str] | None,
         tiers: list[int] | None, stripe: bool = False,
         apis: tuple[str, ...] = ("local",)) -> list[tuple]:  # fmt: skip
    """(scenario, variant, system, tier, seed, api) for every run. `stripe` adds the Stripe
    table's runs: S01-S03 at tier 1 for every system through the Stripe subset (EMULATED).
    `apis` = ("stripe",) plans only those."""
    out = []
    for scn in scns:
        for vname, system, tier in scn.cells():
            if (systems and system not in systems) or (tiers and tier not in tiers):
                continue
            n = seeds or scn.runs_per_cell(scn.variant(vname), size)
            for api in apis:
                if api == "stripe" and not (scn.id in STRIPE_SCENARIOS and tier == 1
                                            and system != "runtime_async"):  # fmt: skip
                    continue
                for seed in range(n):
                    out.append((scn, scn.variant(vname), system, tier, seed, api))
    if stripe and "stripe" not in apis:
        out += plan(scns, seeds, size, systems, tiers, apis=("stripe",))
    return out


def sweep(services: Services, runs: list[tuple], out_dir: Path, jobs: int = 2,
          resume: bool = False, progress: Callable[[str], None] = print,
          retries: int = 2) -> list[dict]:  # fmt: skip
    """Run every planned run, `jobs` at a time; finished run files are reused with resume.
    A run that ends in a harness error (a service failed, Postgres restarted under it) is not a
    measurement: it is run again, up to `retries` more times, once Postgres answers."""
    results = _sweep_once(services, runs, out_dir, jobs, resume, progress)
    for attempt in range(retries):
        again = [r for r in results if r.get("error")]
        if not again:
            break
        progress(f"re-running {len(again)} run(s) that ended in a harness error "
                 f"(retry {attempt + 1} of {retries})")  # fmt: skip
        if services.admin_dsn and not wait_for_postgres(services.admin_dsn):
            progress("Postgres does not answer; not retrying")
            break
        keys = {r["identity"]["run_id"] for r in again}
        items = [it for it in map(_item, runs)
                 if run_name(it[0].id, it[1].name, it[2], it[3], it[4], it[5]) in keys]  # fmt: skip
        redone = {r["identity"]["run_id"]: r for r in
                  _sweep_once(services, items, out_dir, jobs, False, progress)}  # fmt: skip
        results = [redone.get(r["identity"]["run_id"], r) for r in results]
    return results


def _sweep_once(services: Services, runs: list[tuple], out_dir: Path, jobs: int,
                resume: bool, progress: Callable[[str], None]) -> list[dict]:  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    todo = []
    for item in runs:
        scn, variant, system, tier, seed, api = _item(item)
        path = out_dir / f"{run_name(scn.id, variant.name, system, tier, seed, api)}.json"
        done_before = json.loads(path.read_text()) if resume and path.exists() else None
        if done_before and not done_before.get("error"):  # a harness error is run again
            results.append(done_before)
        else:
            todo.append(_item(item))
    todo.sort(key=expected_cost, reverse=True)  # longest first: the jobs finish together
    t0, done, bad = time.time(), 0, 0
    total = len(todo)
    cost_all, cost_done = sum(expected_cost(it) for it in todo), 0.0

    def one(item: tuple) -> dict:
        scn, variant, system, tier, seed, api = item
        try:
            return run_one(services, scn, variant, system, tier, seed, out_dir, api)
        except Exception as e:  # noqa: BLE001 - setup failure: record and go on
            return {"identity": {"run_id": run_name(scn.id, variant.name, system, tier, seed, api),
                                 "scenario": scn.id, "variant": variant.name, "system": system,
                                 "tier": tier, "seed": seed, "api": api},
                    "outcome": {"correct": False, "harness_error": repr(e)},
                    "error": repr(e)}  # fmt: skip

    for item, rec in run_weighted(todo, one, slots=jobs, weight=lambda it: it[0].weight):
        results.append(rec)
        done += 1
        cost_done += expected_cost(item)
        oc = rec["outcome"]
        el = time.time() - t0
        # weighted by each run's expected cost: the long runs go first, so a plain
        # average over the runs done so far would overstate what is left
        eta = el / cost_done * (cost_all - cost_done) if cost_done else 0.0
        if rec.get("error"):  # neither correct nor incorrect: not a measurement
            word = f"HARNESS ERROR ({rec['error']})"
        else:
            bad += 0 if oc.get("correct") else 1
            word = "ok" if oc.get("correct") else "INCORRECT"
        progress(f"[{done}/{total}] {rec['identity']['run_id']}: "
                 f"{oc.get('observed', '?')} {word}"
                 f" | incorrect so far {bad} | {el:.0f}s elapsed, ~{eta:.0f}s left")  # fmt: skip
    return results


def run_weighted(
    items: list, work: Callable[[Any], Any], slots: int, weight: Callable[[Any], int]
) -> Any:
    """Yield (item, work(item)) as each finishes, running items on threads so that the weights
    of the running ones never exceed `slots` (a weight above `slots` counts as `slots`). Items
    start strictly in the given order: when the next one does not fit, nothing starts until it
    does (letting lighter ones jump ahead, each taking the one slot just freed, starved a
    heavy run to the very end of a sweep)."""
    slots = max(1, slots)
    pending = list(items)
    finished: queue.Queue = queue.Queue()
    used, running = 0, 0

    def body(item: Any, w: int) -> None:
        try:
            finished.put((item, w, work(item), None))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            finished.put((item, w, None, e))

    while pending or running:
        while pending:
            w = min(slots, max(1, int(weight(pending[0]))))
            if used + w > slots:
                break
            item = pending.pop(0)
            used, running = used + w, running + 1
            threading.Thread(target=body, args=(item, w), daemon=True).start()
        item, w, out, err = finished.get()
        used, running = used - w, running - 1
        if err is not None:
            raise err
        yield item, out


def expected_cost(item: tuple) -> float:
    """A rough wall time of one planned run, only to order the queue (longest first): a loop
    run plays many iterations; a private server or a long pause costs extra seconds."""
    scn, variant = item[0], item[1]
    if scn.driver:
        return 20.0 * float(variant.params.get("iterations") or scn.iterations.get("quick") or 1)
    cost = 10.0 + (20.0 if scn.servers == "private" else 0.0)
    for item in scn.timeline:
        for name, args in item.items():
            cost += 10.0 if name == "wait_stopped" else 0.0
            if name == "sleep" and isinstance(args, dict):
                cost += float(args.get("seconds") or 0)
    return cost


def _item(item: tuple) -> tuple:
    """A planned run as a 6-tuple (older callers pass 5: the local API)."""
    return tuple(item) if len(item) == 6 else (*item, "local")


def family(system: str) -> str:
    return FAMILY[system]
