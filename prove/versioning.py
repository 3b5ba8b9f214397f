"""S14, versioning (docs/design.md#scenarios): pinned versions, a drain, and a code change without a patch.

Why a driver and not a timeline: S14 drives eleven workflows and five kinds of worker through
a rollout, which the refund timeline's actions cannot say. One round, on each system:

1. `workflows` (10) v1 workflows start; a v1 worker takes each to its durable sleep and is
   stopped (SIGTERM, a clean shutdown): ten v1 workflows sleeping, no v1 worker.
2. v2 is deployed: `v2_workers` (2) workers that serve only v2 (runtime: `--only s14_flow@2`;
   Temporal: Worker Versioning, deployment version `<deployment>.v2`, made the current
   version). A canary started with no version goes to v2 and completes there (the v2 workers
   work). The v1 sleeps fall due while only v2 workers run; then `observe_seconds` more.
   Measured: no v2 worker ever claimed a v1 workflow (runtime: ilr.claims; Temporal: the
   identity on every WorkflowTaskStarted and ActivityTaskStarted of the v1 histories).
3. A v1 worker starts again: the ten drain (complete), each refunding once, code v1.
4. An eleventh v1 workflow (pinned to v1 while v2 is current: runtime `rt.start(version="1")`,
   Temporal a pinned versioning override) reaches its sleep on that worker, which is then
   stopped; a worker whose v1 code changed without a patch (prove/versioning_flows_changed.py,
   baselines.versioning.S14FlowV1Changed under the same build id) takes over. Measured: the
   workflow is stuck, loudly (runtime: status stuck, error NonDeterminism; Temporal: a
   WorkflowTaskFailed with cause NON_DETERMINISTIC_ERROR and a growing task attempt, the
   workflow still running), and nothing of the changed code ran: no request at all reached
   the target after the changed worker started. The runtime also refuses the changed code at
   deploy time (its code hash differs: the worker exits 2 without --allow-code-change), which
   is measured first; the replay refusal is measured with the override.

Each round yields three iterations, one per property: `pinned`, `drain`, `changed_code`.
Ground truth is the target's ledger and access log: every refund carries metadata {wf, code},
so the ledger says which code sent each workflow's effect. The runtime's own checks
(conformance.invariants, VersionPinned and NonDeterminismLoud among all of them) run over
the round's evidence too and must hold.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from contextlib import ExitStack
from typing import Any

from interlock_runtime.testing import wait_for
from prove import driver
from prove.driver import DriverRun, summarize
from prove.runner import PAID, PAYMENT, REPO, RunnerError, _jsonable, child_env, start_ready_process
from world.target import Target
from world.target_client import TargetAdmin

DEFAULTS: dict[str, Any] = {
    "workflows": 10,  # v1 workflows sleeping through the rollout
    "sleep_seconds": 4.0,  # their durable sleep
    "changed_sleep_seconds": 4.0,  # the sleep of the workflow the changed code replays
    "v2_workers": 2,
    "amount": 100,  # cents per refund
    "observe_seconds": 3.0,  # how long to keep watching after a due time, for a wrong claim
    "phase_timeout": 60.0,
}
PROPERTIES = ("pinned", "drain", "changed_code")


def params(run: DriverRun) -> dict:
    return {k: type(v)(run.variant.params.get(k, v)) for k, v in DEFAULTS.items()}


# -- one round ----------------------------------------------------------------------------------


class Round:
    """What both systems share in a round: the target, its ledger, the ids, the timeline."""

    def __init__(self, run: DriverRun, index: int, stack: ExitStack) -> None:
        self.run, self.index, self.stack = run, index, stack
        self.p = params(run)
        suffix = uuid.uuid4().hex[:6]
        base = f"s14-{run.system}-s{run.seed}-r{index}-{suffix}".replace("_", "-")
        self.v1_ids = [f"{base}-v1-{i:02d}" for i in range(self.p["workflows"])]
        self.canary_id = f"{base}-v2-canary"
        self.changed_id = f"{base}-v1-changed"
        self.base = base
        self.target = Target(run.tier, db=str(run.dir / f"ledger-r{index}.sqlite")).start()
        stack.callback(self.target.close)
        self.admin = TargetAdmin(self.target.url)
        self.admin.create_payment(PAYMENT, PAID)
        self.facts: dict[str, Any] = {"round": index}
        self.marks: dict[str, float] = {}

    def note(self, what: str, **fields: Any) -> None:
        self.marks.setdefault(what, time.time())
        self.run.note(what, round=self.index, **fields)

    def case(self, sleep: float) -> dict:
        return {"target_url": self.target.url, "payment": PAYMENT, "tier": self.run.tier,
                "amount": self.p["amount"], "sleep_seconds": sleep,
                "send_timeout": self.run.timing.get("send_timeout", 3.0),
                "settle_margin": self.run.timing.get("settle_margin", 5.0)}  # fmt: skip

    def world(self) -> tuple[list[dict], list[dict]]:
        return self.admin.ledger()["refunds"], self.admin.log()


# -- the runtime --------------------------------------------------------------------------------


def _runtime_round(rd: Round) -> None:
    from conformance import invariants
    from interlock_runtime import Runtime, db
    from interlock_runtime.testing import WorkerProcess, fresh_database
    from prove.versioning_flows import NAME, s14_v1

    run, p, facts = rd.run, rd.p, rd.facts
    dsn = rd.stack.enter_context(fresh_database(run.services.admin_dsn, run.services.template))
    rt = rd.stack.enter_context(Runtime(dsn))
    workers: list[WorkerProcess] = []
    serves: dict[str, str] = {}

    def worker(wid: str, module: str, *extra: str, ready: bool = True) -> WorkerProcess:
        w = WorkerProcess(dsn, f"r{rd.index}-{wid}", run.dir, module, pythonpath=str(REPO),
                          lease_ttl=run.timing["lease_ttl"], poll=run.timing["poll"],
                          concurrency=p["workflows"] + 1, extra_args=extra, cwd=str(REPO))  # fmt: skip
        rd.stack.callback(w.close)
        workers.append(w)
        serves[w.worker_id] = " ".join((module, *extra))
        if ready:
            w.wait_event("registered", timeout=p["phase_timeout"])
        rd.note("worker_start", worker=w.worker_id, pid=w.pid, serves=serves[w.worker_id])
        return w

    def stop(w: WorkerProcess) -> None:
        w.signal(signal.SIGTERM)
        code = w.proc.wait(timeout=p["phase_timeout"])
        rd.note("worker_stop", worker=w.worker_id, exit=code)

    def statuses(ids: list[str]) -> dict[str, str]:
        return {wf: rt.describe(wf)["status"] for wf in ids}

    def sleeping(ids: list[str]) -> bool:
        return all((d := rt.describe(wf))["status"] == "sleeping"
                   and (d["waiting"] or {}).get("kind") == "sleep" for wf in ids)  # fmt: skip

    def due(ids: list[str]) -> bool:
        with db.connect(dsn) as conn:
            row = conn.execute("select count(*) as n from ilr.workflows where id = any(%s) "
                               "and available_at <= now()", (ids,)).fetchone()  # fmt: skip
        return row["n"] == len(ids)

    grant = rt.grant(
        "s14-rollout", "refund", constraints={"amount": {"max": 2 * p["amount"]}}, by="prove-s14"
    )
    rt.register(s14_v1)  # v1 is deployed; v2 is not yet
    timeout = p["phase_timeout"]

    # 1. ten v1 workflows, taken to their sleep by a v1 worker, which then stops
    for wf in rd.v1_ids:
        rt.start(NAME, wf, {**rd.case(p["sleep_seconds"]), "grant": grant}, version="1")
    rd.note("started_v1", n=len(rd.v1_ids))
    w1 = worker("W1-v1", "prove.versioning_flows", "--only", f"{NAME}@1")
    wait_for(lambda: sleeping(rd.v1_ids), timeout, "the v1 workflows to sleep")
    stop(w1)

    # 2. v2-only workers; a canary goes to v2; the v1 sleeps fall due while only v2 serves
    v2 = [worker(f"V2{c}", "prove.versioning_flows", "--only", f"{NAME}@2")
          for c in "abcdefgh"[: p["v2_workers"]]]  # fmt: skip
    rt.start(NAME, rd.canary_id, {**rd.case(0.2), "grant": grant})  # no version: the newest
    rd.note("started_canary", version=rt.describe(rd.canary_id)["version"])
    canary = rt.result(rd.canary_id, timeout=timeout)
    wait_for(lambda: due(rd.v1_ids), timeout, "the v1 sleeps to fall due")
    rd.note("v1_due")
    time.sleep(p["observe_seconds"])
    v2_ids = {w.worker_id for w in v2}
    claims = {wf: rt.claim_history(wf) for wf in rd.v1_ids}
    facts["pinned"] = {
        "v2_workers": sorted(v2_ids),
        "v2_claims_of_v1": {wf: [c["owner"] for c in cl if c["owner"] in v2_ids]
                            for wf, cl in claims.items() if any(c["owner"] in v2_ids for c in cl)},
        "v1_status_while_v2_only": statuses(rd.v1_ids),
        "canary": {"version": rt.describe(rd.canary_id)["version"], "result": canary,
                   "ran_on_v2": canary.get("finished_by") in v2_ids},
    }  # fmt: skip

    # 3. a v1 worker drains them
    w2 = worker("W2-v1", "prove.versioning_flows", "--only", f"{NAME}@1")
    for wf in rd.v1_ids:
        rt.result(wf, timeout=timeout)
    rd.note("drained")
    facts["drain"] = {"status": statuses(rd.v1_ids),
                      "finished_by": {wf: rt.describe(wf)["result"].get("finished_by")
                                      for wf in rd.v1_ids},
                      "v1_workers": [w1.worker_id, w2.worker_id]}  # fmt: skip

    # 4. a v1 workflow sleeps on the v1 worker; the v1 code changes without a patch
    rt.start(NAME, rd.changed_id, {**rd.case(p["changed_sleep_seconds"]), "grant": grant},
             version="1")  # fmt: skip
    wait_for(lambda: sleeping([rd.changed_id]), timeout, "the eleventh workflow to sleep")
    stop(w2)
    refused = worker("C0-changed", "prove.versioning_flows_changed", ready=False)
    exit_code = refused.proc.wait(timeout=timeout)
    deploy = {"exit": exit_code, "stderr": refused.events_path.read_text()[-600:]}
    rd.note("changed_code_refused_at_deploy", exit=exit_code)
    rd.note("changed_worker_start")
    changed = worker("C1-changed", "prove.versioning_flows_changed", "--allow-code-change")
    wait_for(lambda: rt.describe(rd.changed_id)["status"] not in ("sleeping", "pending",
                                                                   "running"),
               timeout + p["changed_sleep_seconds"], "the changed code's replay")  # fmt: skip
    rd.note("changed_workflow_ended", status=rt.describe(rd.changed_id)["status"])
    time.sleep(p["observe_seconds"])
    d = rt.describe(rd.changed_id)
    facts["changed_code"] = {
        "deploy_time_refusal": deploy,
        "status": d["status"], "error": d["error"],
        "loud": d["status"] == "stuck" and (d["error"] or {}).get("type") == "NonDeterminism",
        "stuck_event": next((e for e in changed.events() if e.get("event") == "stuck"), None),
        "steps": [{"seq": s["seq"], "kind": s["kind"], "name": s["name"], "epoch": s["epoch"]}
                  for s in d["steps"]],
        "reached_sleep_on_v1": any(s["name"] == "prepare" for s in d["steps"]),
        "changed_worker": changed.worker_id,
    }  # fmt: skip
    for w in workers:
        if w.proc.poll() is None:
            stop(w)

    # the runtime's own checks over the round's evidence
    ledger, access = rd.world()
    events = [e for w in workers for e in w.events() if e.get("event") != "raw"]
    with db.connect(dsn) as conn:
        url = rd.target.url
        ev = invariants.Evidence(conn, ledger=ledger, access_log=access, events=events,
                                 targets={url: invariants.target_config(url)})  # fmt: skip
        checked = invariants.check_all(ev)
        claim_rows = conn.execute("select workflow_id, epoch, owner, version, claimed_at "
                                  "from ilr.claims order by claimed_at").fetchall()  # fmt: skip
    facts["invariants"] = {k: v for k, v in checked.items() if v}
    facts["invariants_checked"] = sorted(checked)
    facts["artifacts"] = {"claim_history": claim_rows, "serves": serves,
                          "changed_workflow": _jsonable(d),
                          "drain_report": rt.drain_report()}  # fmt: skip


# -- Temporal -----------------------------------------------------------------------------------


class _TemporalWorkers:
    """baselines.versioning worker subprocesses of one round."""

    def __init__(self, rd: Round, address: str, task_queue: str, deployment: str) -> None:
        self.rd, self.address, self.task_queue, self.deployment = (
            rd,
            address,
            task_queue,
            deployment,
        )
        self.procs: dict[str, subprocess.Popen] = {}
        self.identity: dict[str, str] = {}

    def start(self, wid: str, code: str, build_id: str) -> subprocess.Popen:
        rd = self.rd
        wid = f"r{rd.index}-{wid}"
        env = child_env()
        cmd = [sys.executable, "-m", "baselines.versioning", "--address", self.address,
               "--task-queue", self.task_queue, "--deployment", self.deployment,
               "--build-id", build_id, "--code", code, "--target-url", rd.target.url,
               "--payment", PAYMENT, "--mode", rd.run.system, "--id", wid,
               "--sticky-timeout", str(rd.run.timing.get("temporal_sticky_timeout", 2.0))]  # fmt: skip
        proc, ready = start_ready_process(cmd, env, rd.run.dir / f"{wid}.stderr", rd.stack,
                                          f"Temporal worker {wid}")  # fmt: skip
        self.procs[wid] = proc
        self.identity[wid] = ready["identity"]
        rd.note("worker_start", worker=wid, pid=proc.pid, code=code,
                version=f"{self.deployment}.{build_id}")  # fmt: skip
        return proc

    def stop(self, wid: str) -> None:
        wid = f"r{self.rd.index}-{wid}"
        proc = self.procs[wid]
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=self.rd.p["phase_timeout"])
        self.rd.note("worker_stop", worker=wid, exit=code)


def _types(events: list[dict]) -> list[str]:
    return [e["eventType"].removeprefix("EVENT_TYPE_") for e in events]


def _temporal_round(rd: Round) -> None:
    from baselines.versioning import VersioningClient, event_attrs

    run, p, facts = rd.run, rd.p, rd.facts
    if run.services.temporal is None:
        raise RunnerError("the Temporal dev server is not running")
    client = VersioningClient(run.services.temporal.address)
    rd.stack.callback(client.close)
    deployment = rd.base  # no dots: a version's canonical name is <deployment>.<build id>
    tq = f"tq-{rd.base}"
    ws = _TemporalWorkers(rd, run.services.temporal.address, tq, deployment)
    timeout = p["phase_timeout"]

    def has(wf: str, kind: str) -> bool:
        return any(e["eventType"] == kind for e in client.events(wf))

    def started_by(wf: str) -> list[str]:
        """Who started each workflow and activity task of `wf` (worker identities)."""
        return [event_attrs(e).get("identity", "") for e in client.events(wf)
                if e["eventType"] in ("EVENT_TYPE_WORKFLOW_TASK_STARTED",
                                      "EVENT_TYPE_ACTIVITY_TASK_STARTED")]  # fmt: skip

    def status(wf: str) -> str:
        return client.versioning(wf)["status"]

    # 1. ten v1 workflows (v1 current), taken to their timer; the v1 worker stops
    ws.start("T1-v1", "v1", "v1")
    facts["set_current"] = [client.set_current(deployment, "v1")]
    for wf in rd.v1_ids:
        client.start_s14(wf, tq, rd.case(p["sleep_seconds"]))
    rd.note("started_v1", n=len(rd.v1_ids))
    wait_for(lambda: all(has(wf, "EVENT_TYPE_TIMER_STARTED") for wf in rd.v1_ids), timeout,
               "the v1 workflows' timers", every=0.3)  # fmt: skip
    ws.stop("T1-v1")

    # 2. v2 deployed and made current; a canary runs on v2; the v1 timers fire meanwhile
    v2 = [f"V2{c}" for c in "abcdefgh"[: p["v2_workers"]]]
    for wid in v2:
        ws.start(wid, "v2", "v2")
    facts["set_current"].append(client.set_current(deployment, "v2"))
    rd.note("current_v2")
    client.start_s14(rd.canary_id, tq, rd.case(0.2))
    canary = client.wait_result(rd.canary_id, timeout=timeout)
    wait_for(lambda: all(has(wf, "EVENT_TYPE_TIMER_FIRED") for wf in rd.v1_ids), timeout,
               "the v1 timers to fire", every=0.3)  # fmt: skip
    rd.note("v1_due")
    time.sleep(p["observe_seconds"])
    v2_idents = {ws.identity[f"r{rd.index}-{w}"] for w in v2}
    taken = {wf: [i for i in started_by(wf) if i in v2_idents] for wf in rd.v1_ids}
    facts["pinned"] = {
        "v2_workers": sorted(v2_idents),
        "v2_claims_of_v1": {wf: t for wf, t in taken.items() if t},
        "v1_status_while_v2_only": {wf: status(wf) for wf in rd.v1_ids},
        "v1_versioning": {wf: client.versioning(wf) for wf in rd.v1_ids[:1]},
        "canary": {"version": client.versioning(rd.canary_id)["version"], "result": canary,
                   "ran_on_v2": canary.get("prepared_by", "").removeprefix(f"r{rd.index}-")
                   in v2},
    }  # fmt: skip

    # 3. a v1 worker drains them (v1 is no longer current: pinned workflows still go there)
    ws.start("T2-v1", "v1", "v1")
    results = {wf: client.wait_result(wf, timeout=timeout) for wf in rd.v1_ids}
    rd.note("drained")
    facts["drain"] = {"status": {wf: status(wf) for wf in rd.v1_ids},
                      "finished_by": {wf: _finisher(client.events(wf), event_attrs)
                                      for wf in rd.v1_ids},
                      "results": results}  # fmt: skip

    # 4. an eleventh workflow pinned to v1 sleeps there; then v1's code changes, no patch
    client.start_s14(rd.changed_id, tq, rd.case(p["changed_sleep_seconds"]),
                     pin=(deployment, "v1"))  # fmt: skip
    wait_for(lambda: has(rd.changed_id, "EVENT_TYPE_TIMER_STARTED"), timeout,
               "the eleventh workflow's timer", every=0.3)  # fmt: skip
    ws.stop("T2-v1")
    rd.note("changed_worker_start")
    ws.start("C1-changed", "changed", "v1")

    def nde() -> dict | None:
        for e in client.events(rd.changed_id):
            a = event_attrs(e)
            if e["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_FAILED":
                return {"eventId": e.get("eventId"), "cause": a.get("cause"),
                        "identity": a.get("identity"),
                        "message": (a.get("failure") or {}).get("message", "")[:600]}  # fmt: skip
        return None

    failed = wait_for(nde, timeout + p["changed_sleep_seconds"], "a failed workflow task",
                        every=0.3)  # fmt: skip
    rd.note("changed_workflow_task_failed", cause=failed["cause"])
    time.sleep(p["observe_seconds"])
    info = client.versioning(rd.changed_id)
    events = client.events(rd.changed_id)
    facts["changed_code"] = {
        "status": info["status"],
        "error": failed,
        "pending_task_attempt": info["pending_task_attempt"],
        "versioning": info,
        "loud": (failed["cause"] == "WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR"
                 and info["status"] == "RUNNING"
                 and (info["pending_task_attempt"] or 0) >= 2),
        "events": _types(events),
        "reached_sleep_on_v1": "TIMER_STARTED" in _types(events),
        "changed_worker": ws.identity[f"r{rd.index}-C1-changed"],
    }  # fmt: skip
    for wid, proc in ws.procs.items():
        if proc.poll() is None:
            ws.stop(wid.removeprefix(f"r{rd.index}-"))
    facts["artifacts"] = {
        "identities": ws.identity,
        "history_v1_example": _excerpt(client.events(rd.v1_ids[0])),
        "history_changed": _excerpt(events),
    }


def _finisher(events: list[dict], event_attrs: Any) -> str | None:
    done = [event_attrs(e).get("identity") for e in events
            if e["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_COMPLETED"]  # fmt: skip
    return done[-1] if done else None


def _excerpt(events: list[dict]) -> list[dict]:
    """Each event's id, type and the attributes that say who and which version."""
    keep = ("identity", "cause", "workerDeploymentVersion", "deploymentVersion",
            "versioningBehavior", "activityType", "startToFireTimeout")  # fmt: skip
    from baselines.versioning import event_attrs

    out = []
    for e in events:
        a = event_attrs(e)
        row = {"id": e.get("eventId"), "type": e["eventType"].removeprefix("EVENT_TYPE_")}
        row.update({k: a[k] for k in keep if k in a})
        if "failure" in a:
            row["failure"] = (a["failure"].get("message") or "")[:300]
        out.append(row)
    return out


# -- the oracle: the target's ledger and access log, plus what each system recorded ----------


def judge(rd: Round, ledger: list[dict], access: list[dict]) -> list[dict]:
    """The round's three iterations (pinned, drain, changed_code), each {property, correct,
    failures, counters...}."""
    f, p = rd.facts, rd.p
    by_wf: dict[str, list[dict]] = defaultdict(list)
    for r in ledger:
        by_wf[(r.get("metadata") or {}).get("wf")].append(r)
    invariants = f.get("invariants") or {}

    # pinned
    fails = []
    pin = f["pinned"]
    if pin["v2_claims_of_v1"]:
        fails.append(f"v2 workers claimed v1 workflows: {pin['v2_claims_of_v1']}")
    done_early = [wf for wf, s in pin["v1_status_while_v2_only"].items()
                  if s.lower() in ("completed", "failed", "stuck")]  # fmt: skip
    if done_early:
        fails.append(f"{len(done_early)} v1 workflows ended while only v2 workers ran")
    canary_refunds = by_wf.get(rd.canary_id, [])
    if not pin["canary"]["ran_on_v2"] or [r["metadata"]["code"] for r in canary_refunds] != ["v2"]:
        fails.append(f"the v2 canary did not run once on a v2 worker ({pin['canary']}, ledger "
                     f"{[r['metadata'] for r in canary_refunds]}): the v2 window is vacuous")  # fmt: skip
    if "VersionPinned" in invariants:
        fails.append(f"VersionPinned: {invariants['VersionPinned']}")
    pinned = {"property": "pinned", "correct": not fails, "failures": fails,
              "v2_claims_of_v1": sum(len(v) for v in pin["v2_claims_of_v1"].values()),
              "v1_workflows": len(rd.v1_ids)}  # fmt: skip

    # drain
    fails, dup, wrong, unsent = [], 0, 0, 0
    not_done = {wf: s for wf, s in f["drain"]["status"].items() if s.lower() != "completed"}
    if not_done:
        fails.append(f"not completed after the drain: {not_done}")
    for wf in rd.v1_ids:
        rows = by_wf.get(wf, [])
        dup += max(0, len(rows) - 1)
        wrong += sum(1 for r in rows if r["amount"] != p["amount"] or r["metadata"]["code"] != "v1")
        unsent += int(not rows)
    if dup or wrong or unsent:
        fails.append(f"v1 refunds: {dup} duplicate, {wrong} wrong (amount or code), "
                     f"{unsent} missing")  # fmt: skip
    others = sorted(k for k, v in invariants.items() if k not in ("VersionPinned",
                                                                  "NonDeterminismLoud"))  # fmt: skip
    if others:
        fails.append(f"runtime invariants failing: {[(k, invariants[k]) for k in others]}")
    drain = {"property": "drain", "correct": not fails, "failures": fails,
             "duplicate_applications": dup, "wrong_amount": wrong, "blocked_never_sent": unsent,
             "completed": len(rd.v1_ids) - len(not_done)}  # fmt: skip

    # changed code
    fails = []
    ch = f["changed_code"]
    if not ch["reached_sleep_on_v1"]:
        fails.append("the eleventh workflow never reached its sleep on v1: nothing to replay")
    if not ch["loud"]:
        fails.append(f"the changed code's replay was not refused loudly: status {ch['status']}, "
                     f"error {ch['error']}")  # fmt: skip
    sent = by_wf.get(rd.changed_id, [])
    t_changed = rd.marks["changed_worker_start"]
    after = [
        {"method": a["method"], "path": a["path"], "worker": a.get("worker")}
        for a in access
        if a["arrival"] >= t_changed and not a["path"].startswith("/admin")
    ]  # fmt: skip (the harness's own reads)
    if sent:
        fails.append(f"the changed workflow refunded: {sent}")
    if after:
        fails.append(f"requests reached the target after the changed worker started: {after[:5]}")
    deploy = ch.get("deploy_time_refusal")
    if deploy is not None and deploy["exit"] != 2:
        fails.append(f"the runtime accepted the changed code hash at deploy time (exit "
                     f"{deploy['exit']}, expected 2)")  # fmt: skip
    if "NonDeterminismLoud" in invariants:
        fails.append(f"NonDeterminismLoud: {invariants['NonDeterminismLoud']}")
    changed = {"property": "changed_code", "correct": not fails, "failures": fails,
               "sent_after_change": len(after), "changed_refunds": len(sent)}  # fmt: skip
    return [pinned, drain, changed]


def status_word(iterations: list[dict]) -> str:
    """'pinned; drained; stuck' when every property held in every round, otherwise which did
    not."""
    words = {"pinned": ("pinned", "unpinned"), "drain": ("drained", "not drained"),
             "changed_code": ("stuck", "not stuck")}  # fmt: skip
    held = {p: all(it["correct"] for it in iterations if it["property"] == p) for p in PROPERTIES}
    return "; ".join(words[p][0 if held[p] else 1] for p in PROPERTIES)


# -- the driver -----------------------------------------------------------------------------


def versioning(run: DriverRun) -> dict:
    """S14 on run.system: run.iterations rounds, three iterations (properties) each."""
    t0 = time.time()

    def play_round(index: int) -> dict:
        # a round is the unit of the checkpoint (and of the lateness retry): on resume an
        # interrupted round is played again from its start, with fresh workers and ledger
        with ExitStack() as stack:
            rd = Round(run, index, stack)
            try:
                (_runtime_round if run.system == "runtime" else _temporal_round)(rd)
            finally:
                ledger, access = rd.world()
            its = judge(rd, ledger, access)
            for it in its:
                it["round"] = index
            return {"round": index, "iterations": its, "correct": all(it["correct"] for it in its),
                    "facts": _jsonable({k: v for k, v in rd.facts.items()}),
                    "ledger": {"round": index, "refunds": ledger, "access_log": access}}  # fmt: skip

    played = run.iterate(play_round)
    iterations: list[dict] = []
    for r in played:
        for it in r["iterations"]:  # a late round's three properties measured nothing
            it["harness_error"] = r.get("harness_error")
            iterations.append(it)
    rounds = [r["facts"] for r in played]
    ledgers = [r["ledger"] for r in played]
    ok = driver.counted(played)  # the prediction is per measured round
    outcome = summarize(iterations)
    total = sum(r["amount"] for rd in ok for r in rd["ledger"]["refunds"])
    status = status_word(driver.counted(iterations))
    observed = f"${total / 100:.0f} {status}"
    pred = run.scn.prediction(run.system, run.tier, run.variant.name)
    expected = None
    if pred:
        expected = f"${pred['total_cents'] / 100:.0f} {pred.get('status', '')}".strip()
    rounds_n = max(1, len(ok))
    outcome.update({
        "expected": expected, "observed": observed,
        "prediction_held": None if not pred else (total == pred["total_cents"] * rounds_n
                                                  and pred.get("status", status) == status),
        "quantities": {"total_cents": total, "rounds": len(ok)},
    })  # fmt: skip
    return {
        "outcome": outcome,
        "iterations": iterations,
        "artifacts": {"rounds": rounds},
        "ground_truth": {"ledgers": ledgers},
        "faults": {
            "kind": "rollout: v1 workers stopped, v2-only workers, v1 drain, "
            "changed v1 code without a patch (no crash)"
        },
        "timings": {"rounds_wall": round(time.time() - t0, 3)},
    }
