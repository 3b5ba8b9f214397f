"""The two race loops of docs/design.md#scenarios as driver scenarios (prove/driver.py): S11r and S12.

Why a loop and not a timeline: a race is only evidence when it is run many times with the
timing spread across the window where it can go wrong. One run of a cell keeps ONE target
(in-process, so its access-log clock is this process's clock), ONE model stub, ONE database and
long-lived worker subprocesses (built with prove.runner's RuntimeSystem / TemporalSystem), and
plays many short iterations, each with a fresh workflow id, case id and payment.

S11r `signal_race`: the approval is sent at a random offset in [-50 ms, +50 ms] around the moment
the workflow commits its wait for it (runtime: the suspend transaction of ctx.wait_signal;
Temporal: the workflow task that reaches `wait_condition`, i.e. the first WorkflowTaskCompleted
after the decide activity's completion). That moment cannot be known in advance, so warm-up
iterations (not counted) measure the delay from the model stub's arrival (the decision call,
slowed by a fixed stub delay so the window opens after the anchor) to the wait's commit; the
approve is then fired at anchor + predicted delay + uniform(-50, +50) ms from a seeded RNG. The
aim is re-made every iteration: the predicted delay is the median of the last AIM_MEMORY
measured delays (warm-ups first, then each iteration's own), so a drift in the machine's pace
moves the aim with it instead of biasing every iteration of the run the same way. After
the iteration the real wait commit time is read back (runtime: the worker's `suspended` event,
or the signal step's row when the mailbox check consumed the approval and no suspend happened;
Temporal: history event times) and the measured offset is recorded. Oracle per iteration, from
the ledger and access log: the refund was applied exactly once for the approved amount, and the
send reached the target within WAKE_BOUND of the approval (a lost wakeup would sit until the
wait's timeout). The systems' own records (signal rows, history) are artifacts.

S12 `revoke_race`: the approval's revoke is fired at a random offset in [-20 ms, +20 ms] around
the refund POST's arrival at the target, aimed in each iteration on that iteration's own
events (docs/results.md#aim): a planned offset >= 0 is anchored on the POST's arrival itself,
which the in-process target reports as it happens (`Target.on_arrival`), so it cannot miss;
a planned offset < 0 must fire before the arrival, so it is aimed at approve return +
predicted delay + offset, the prediction being the median of the last AIM_MEMORY measured
approve -> arrival delays (warm-ups first). Such an iteration misses when the POST arrived
before the revoke was fired, or more than the window before it; it is played again with the
same planned offset and, if every attempt missed, dropped and listed (prove/driver.py). An
iteration where nothing was sent (the revoke came first) has no arrival to measure against and
is counted. The target has a fixed service delay
(TARGET_DELAY_MS, inside POST /refunds before the ledger write, like the spec's 20 ms latency
setup) so a send that arrived before the revoke can still be processed after it. Runtime:
rt.revoke(grant) returns the effects that may still land; Temporal: the same `revoked_at` update
on ilr.grants (only (b) reads it). Counted per iteration: refund sends the target applied (200,
not a replay) after the revoke returned, whose effect id is not in the revoke's returned list
(runtime) or at all (Temporal): `sent_under_revoked_grant`. The application time is the ledger
row's `created` (carried in the POST's response in the access log), else the log's `end`.
An iteration is correct when that count is 0 and there is at most one agent application.
"""

from __future__ import annotations

import json
import random
import re
import statistics
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from prove import driver
from prove.driver import DriverRun
from prove.scenario import FAMILY

AMOUNT = 2000
PAID = 10000
APPROVER = "alice"
WARMUPS = 8  # iterations that calibrate the delay (not counted)
COLD = 3  # the first warm-ups are not used: each worker's first workflow is slow (imports)
AIM_MEMORY = 8  # the aim is the median of this many most recent measured delays
S11R_WINDOW = 0.050  # seconds either side of the wait's commit
S12_WINDOW = 0.020  # seconds either side of the refund POST's arrival
STUB_DELAY_MS = 60.0  # S11r: the decision call takes this long, so -50 ms lies after the anchor
TARGET_DELAY_MS = (
    20.0  # S12: service delay inside POST /refunds (docs/design.md#metrics's latency setup)
)
APPROVAL_TIMEOUT = 30.0  # S11r runtime: the approval wait's timeout (a lost wakeup ends here)
WAKE_BOUND = 5.0  # S11r: the send must reach the target this soon after the approval


# -- the building blocks: prove.runner's system drivers on one long-lived setup ----------------


@dataclass
class _Shim:
    """The attributes of prove.runner.Run that RuntimeSystem and TemporalSystem read."""

    services: Any
    system: str
    tier: int
    timing: dict
    variant: Any
    dir: Path
    stack: Any
    run_id: str
    dsn: str
    target: Any
    stub: Any
    dr: DriverRun
    api: str = "local"
    wf_id: str = ""
    case_id: str = ""
    forked_from: list = field(default_factory=list)
    private_temporal: Any = None  # the race loops use the sweep's shared servers
    private_pg: Any = None

    def note(self, what: str, **fields: Any) -> None:
        self.dr.note(what, **fields)

    def proxy_for(self, upstream: tuple[str, int]) -> int:
        raise RuntimeError("the race loops use no fault proxy")


def _sleep_until(t: float) -> None:
    """Sleep until time.time() >= t (coarse sleep, then a short spin for ~0.1 ms accuracy)."""
    while True:
        left = t - time.time()
        if left <= 0:
            return
        if left > 0.002:
            time.sleep(left - 0.0015)


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class _Events:
    """Reads a worker's JSON-lines event log incrementally (the logs grow for the whole run)."""

    def __init__(self, paths: list[Path]) -> None:
        self.offsets = {p: 0 for p in paths}
        self.seen: list[dict] = []

    def poll(self) -> list[dict]:
        for p in self.offsets:
            with open(p, "rb") as f:
                f.seek(self.offsets[p])
                data = f.read()
            end = data.rfind(b"\n") + 1
            self.offsets[p] += end
            for line in data[:end].splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("event") in ("suspended", "failed", "stuck", "fenced"):
                    self.seen.append(e)
        return self.seen


class _Bench:
    """One cell's long-lived setup: target, model stub, database, worker subprocesses."""

    def __init__(self, dr: DriverRun, target_delay_ms: float = 0.0,
                 stub_delay_ms: float = 0.0) -> None:  # fmt: skip
        from interlock_runtime.testing import fresh_database
        from prove.runner import SYSTEMS
        from world.model_stub import ModelStub
        from world.target import Target

        self.dr = dr
        self.family = FAMILY[dr.system]  # runtime_async is the runtime family
        self.target = Target(dr.tier, db=str(dr.dir / "ledger.sqlite"),
                             delay_ms=target_delay_ms).start()  # fmt: skip
        dr.stack.callback(self.target.close)
        self.stub = ModelStub(delay_ms=stub_delay_ms).start()
        dr.stack.callback(self.stub.stop)
        self.dsn = dr.stack.enter_context(
            fresh_database(dr.services.admin_dsn, dr.services.template)
        )
        self.shim = _Shim(services=dr.services, system=dr.system, tier=dr.tier,
                          timing=dict(dr.timing), variant=dr.variant, dir=dr.dir,
                          stack=dr.stack, run_id=dr.run_id, dsn=self.dsn, target=self.target,
                          stub=self.stub, dr=dr)  # fmt: skip
        self.sys = SYSTEMS[dr.system](self.shim)
        self.conn = psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row)
        dr.stack.callback(self.conn.close)
        n = int(dr.timing[f"{self.family}_workers"])
        self.workers = [self.sys.spawn(None) for _ in range(n)]
        pids = [w.pid for w in self.workers]
        dr.note("workers", system=dr.system, pids=pids, target_delay_ms=target_delay_ms,
                stub_delay_ms=stub_delay_ms)  # fmt: skip
        self.events = _Events([w.events_path for w in self.workers]) if self.family == (
            "runtime") else None  # fmt: skip
        self.log_since = 0

    # -- one iteration's case

    def new_case(self, i: int, tag: str) -> dict:
        suffix = uuid.uuid4().hex[:6]
        c = {"i": i, "tag": tag, "wf": f"wf-{self.dr.run_id}-{tag}{i:04d}-{suffix}",
             "case": f"case-{tag}{i:04d}-{suffix}", "payment": f"pay_{tag}{i:04d}_{suffix}"}  # fmt: skip
        self.target.ledger.create_payment(c["payment"], PAID)
        self.shim.wf_id, self.shim.case_id = c["wf"], c["case"]
        return c

    def facts_seen(self, payment: str) -> dict:
        """The premises the decision captures (read now: the payment is fresh and unchanged)."""
        from world.target_client import LocalRefunds

        return LocalRefunds(self.target.url, payment, self.dr.tier).capture()

    def start(self, c: dict) -> None:
        t = self.dr.timing
        if self.family == "runtime":
            case = {"id": c["case"], "target_url": self.target.url, "payment": c["payment"],
                    "tier": self.dr.tier, "model_url": self.stub.url,
                    "send_timeout": t["send_timeout"], "settle_margin": t["settle_margin"],
                    "sleep_seconds": t["sleep_seconds"], "approval_timeout": APPROVAL_TIMEOUT}  # fmt: skip
            self.sys.rt.start(self.sys.flow, c["wf"], case)  # prove_refund or its async twin
        else:
            self.sys.client.start_refund(c["wf"], self.sys.task_queue, case=c["case"],
                                         payment=c["payment"],
                                         sleep_seconds=t["sleep_seconds"])  # fmt: skip
        c["t_start"] = time.time()

    def wait_waiting(self, c: dict, timeout: float = 120.0) -> float:
        """Until the workflow waits for the approval; returns when that was observed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.family == "runtime":
                row = self.conn.execute("select waiting from ilr.workflows where id = %s",
                                        (c["wf"],)).fetchone()  # fmt: skip
                if row and (row["waiting"] or {}).get("signal") == "approve":
                    return time.time()
                time.sleep(0.002)
            else:
                if self.temporal_wait_reached(c["wf"]) is not None:
                    return time.time()
                time.sleep(0.01)
        raise TimeoutError(f"{c['wf']} never waited for its approval: {self.diagnose(c)}")

    def diagnose(self, c: dict) -> dict:
        """What the system shows for a stuck iteration (for the run file's error)."""
        alive = [w.poll() is None for w in (w if hasattr(w, "poll") else w.proc
                                            for w in self.workers)]  # fmt: skip
        out: dict[str, Any] = {"workers_alive": alive,
                               "model_calls": self.stub.calls(c["case"])}  # fmt: skip
        try:
            if self.family == "runtime":
                out["workflow"] = self.conn.execute(
                    "select status, waiting, owner, available_at from ilr.workflows"
                    " where id = %s", (c["wf"],)).fetchone()  # fmt: skip
            else:
                out["history"] = [e["eventType"].removeprefix("EVENT_TYPE_")
                                  for e in self.sys.client.history(c["wf"])["events"]]  # fmt: skip
        except Exception as e:  # noqa: BLE001 - a diagnosis only
            out["error"] = repr(e)
        return out

    def temporal_wait_reached(self, wf: str) -> float | None:
        """Server time of the first WorkflowTaskCompleted after the decide activity completed:
        the workflow task that ran the code up to `wait_condition`."""
        events = self.sys.client.history(wf)["events"]
        decided = False
        for e in events:
            kind = e["eventType"]
            if kind == "EVENT_TYPE_ACTIVITY_TASK_COMPLETED" and not decided:
                decided = True
            elif decided and kind == "EVENT_TYPE_WORKFLOW_TASK_COMPLETED":
                return _ts(e["eventTime"])
        return None

    def anchor_model_call(self, c: dict, timeout: float = 60.0) -> float:
        """The model stub's arrival time of this case's decision call (S11r's anchor)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            calls = self.stub.calls(c["case"])
            if calls:
                return float(calls[0]["arrival"])
            time.sleep(0.0005)
        raise TimeoutError(f"{c['case']}: no decision call reached the model stub")

    def approve(self, c: dict, facts: dict) -> str:
        """The person approves AMOUNT: runtime rt.approve (grant + signal in one transaction);
        Temporal a grant row in ilr.grants plus the `approve` signal (as TemporalSystem)."""
        if self.family == "runtime":
            from prove.flows import payload_for

            grant = self.sys.rt.approve(c["wf"], payload_for({"payment": c["payment"]}, AMOUNT),
                                        facts, by=APPROVER)  # fmt: skip
        else:
            grant = f"grant-{uuid.uuid4().hex[:12]}"
            self.conn.execute(
                "insert into ilr.grants (id, principal, action, constraints, granted_by)"
                " values (%s, %s, 'refund', jsonb_build_object('amount', jsonb_build_object('max', %s::bigint)), %s)",
                (grant, f"workflow:{c['wf']}", AMOUNT, APPROVER),
            )
            self.sys.client.approve(c["wf"], AMOUNT, grant)
        c["t_approve"] = time.time()
        c["grant"] = grant
        return grant

    def revoke(self, grant: str) -> list[str] | None:
        """Runtime: rt.revoke, the effects that may still land. Temporal: the revoked_at update
        (as TemporalSystem.revoke, on this run's open connection); no list."""
        if self.family == "runtime":
            return list(self.sys.rt.revoke(grant, by=APPROVER))
        self.conn.execute("update ilr.grants set revoked_at = now() where id = %s", (grant,))
        return None

    def result(self, c: dict, timeout: float) -> dict:
        if self.family == "runtime":
            from interlock_runtime import WorkflowFailed

            try:
                out = self.sys.rt.result(c["wf"], timeout=timeout, poll=0.01)
                kind, status = "completed", (out or {}).get("status")
            except WorkflowFailed as e:
                kind, out, status = e.status, str(e.error), None
            except TimeoutError as e:
                kind, out, status = "timeout", str(e), None
        else:
            self.shim.wf_id = c["wf"]
            kind, out = self.sys.result(timeout)
            status = None
        c["t_end"] = time.time()
        return {"kind": kind, "status": status, "value": out}

    def target_reads(self, payment: str, timeout: float = 30.0) -> tuple[list[dict], list[dict]]:
        """This iteration's refund POSTs (access log, after every one finished processing) and
        ledger rows, for its payment only."""
        from prove.runner import _is_refund_post

        deadline = time.monotonic() + timeout
        while True:
            log = self.target.ledger.access_log(self.log_since)
            posts = [a for a in log if _is_refund_post(a)
                     and (a.get("payload") or {}).get("payment") == payment]  # fmt: skip
            if all(a["end"] is not None for a in posts) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if log and all(a["end"] is not None for a in log):
            self.log_since = log[-1]["id"]
        refunds = self.target.ledger.find_refunds(payment, None)
        return posts, refunds


def _post_row(a: dict) -> dict:
    resp = a.get("response") if isinstance(a.get("response"), dict) else {}
    return {"id": a["id"], "arrival": a["arrival"], "start": a["start"], "end": a["end"],
            "status": a["status"], "key": a["key"], "worker": a["worker"], "epoch": a["epoch"],
            "refund": resp.get("id"), "created": resp.get("created"),
            "replayed": resp.get("replayed")}  # fmt: skip


def _applied(posts: list[dict]) -> list[dict]:
    """POSTs the target applied: 200 and not a tier-1 replay."""
    return [p for p in posts if p["status"] == 200 and not p.get("replayed")]


def _stats(xs: list[float]) -> dict:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "min": round(min(xs), 4), "median": round(statistics.median(xs), 4),
            "max": round(max(xs), 4), "negative": sum(1 for x in xs if x < 0),
            "positive": sum(1 for x in xs if x > 0)}  # fmt: skip


def _prediction(dr: DriverRun) -> dict | None:
    return dr.scn.prediction(dr.system, dr.tier, dr.variant.name)


_COUNT = re.compile(r"sent_under_revoked_grant\s*(=|>)\s*(\d+)")


# -- S11r: the approval racing the wait's commit -------------------------------------------------


class _Aim:
    """The delay a loop aims with, re-made every iteration: the median of the last AIM_MEMORY
    measured delays (the warm-ups', then each iteration's own)."""

    def __init__(self, delays: list[float]) -> None:
        self.recent = list(delays[-AIM_MEMORY:])

    def delay(self) -> float:
        return statistics.median(self.recent)

    def measured(self, d: float | None) -> None:
        if d is not None:
            self.recent = [*self.recent, d][-AIM_MEMORY:]


class _Arrivals:
    """Refund POST arrivals at the in-process target as they happen (S12's anchor)."""

    def __init__(self, target: Any) -> None:
        self._cond = threading.Condition()
        self._times: list[float] = []
        target.on_arrival = self._seen

    def _seen(self, t: float, method: str, path: str) -> None:
        if method == "POST" and path in ("/refunds", "/v1/refunds"):
            with self._cond:
                self._times.append(t)
                self._cond.notify_all()

    def mark(self) -> int:
        with self._cond:
            return len(self._times)

    def first_since(self, mark: int, timeout: float) -> float | None:
        """The first arrival after `mark`, waiting up to `timeout` seconds for it."""
        with self._cond:
            self._cond.wait_for(lambda: len(self._times) > mark, timeout)
            return self._times[mark] if len(self._times) > mark else None


def _calibrate(
    dr: DriverRun, b: Any, warmup: Any, anchor: str, name: str
) -> tuple[_Aim, list[float]]:
    """Run WARMUPS uncounted iterations (the first COLD are left out of the aim: each worker's
    first workflow is slow). Returns the aim they start and every warm-up's delay."""
    delays = [d for w in range(WARMUPS) if (d := warmup(b.new_case(w, "w"))) is not None]
    if not delays:
        raise RuntimeError(f"no warm-up iteration measured {name}: cannot calibrate")
    aim = _Aim(delays[COLD:] or delays)
    dr.note("calibrated", anchor=anchor, **{name: round(aim.delay(), 4)},
            warmups=[round(d, 4) for d in delays])  # fmt: skip
    return aim, delays


def signal_race(dr: DriverRun) -> dict:
    """S11r: `dr.iterations` approvals, each at a seeded offset in +/-50 ms of the wait's
    commit; correct when the refund lands once, promptly (no lost wakeup)."""
    b = _Bench(dr, stub_delay_ms=STUB_DELAY_MS)

    def warmup(c: dict) -> float | None:
        facts = b.facts_seen(c["payment"])
        b.start(c)
        anchor = b.anchor_model_call(c)
        b.wait_waiting(c)
        b.approve(c, facts)
        b.result(c, dr.timing["run_timeout"])
        t_wait, _ = _wait_commit(b, c)
        b.target_reads(c["payment"])
        return None if t_wait is None else t_wait - anchor

    # per-run setup: on resume the warm-ups run again (a new bench needs its own calibration)
    aim, delays = _calibrate(dr, b, warmup, "model stub arrival", "delay_to_wait_commit")
    calib = aim.delay()

    def play_one(i: int) -> dict:
        rng = random.Random(f"{dr.run_id}-i{i}")  # iteration i's offset, however it is reached
        c = b.new_case(i, "i")
        facts = b.facts_seen(c["payment"])
        planned = rng.uniform(-S11R_WINDOW, S11R_WINDOW)
        b.start(c)
        anchor = b.anchor_model_call(c)
        predicted = aim.delay()
        fire = anchor + predicted + planned
        late = time.time() - fire
        _sleep_until(fire)
        b.approve(c, facts)
        res = b.result(c, dr.timing["run_timeout"])
        t_wait, source = _wait_commit(b, c)
        posts, refunds = b.target_reads(c["payment"])
        consumed = _consumed(b, c)
        it = _judge_signal(dr, c, res, posts, refunds, consumed)
        measured = None if t_wait is None else c["t_approve"] - t_wait
        aim.measured(None if t_wait is None else t_wait - anchor)
        it.update({"i": i, "planned_offset": round(planned, 4), "aim": "predicted",
                   "aim_delay": round(predicted, 4),
                   "fired_late_by": round(max(0.0, late), 4),
                   "measured_offset": None if measured is None else round(measured, 4),
                   "wait_commit_source": source, "workflow": c["wf"], "payment": c["payment"],
                   "grant": c["grant"], "result": res["kind"], "status": res["status"],
                   "end_to_end": round(c["t_end"] - c["t_start"], 4),
                   "ground_truth": {"i": i, "payment": c["payment"],
                                    "posts": [_post_row(a) for a in posts],
                                    "ledger": refunds}})  # fmt: skip
        return it

    iters = dr.iterate(play_one)
    gt = [it.pop("ground_truth") for it in iters]
    ok = driver.counted(iters)

    out = driver.summarize(iters)
    pred = _prediction(dr)
    totals = [it["total_cents"] for it in ok]
    out["expected"] = f"${pred['total_cents'] / 100:.0f} per iteration" if pred else None
    out["observed"] = (f"{out['correct_n']}/{out['n']} iterations: one refund, woken promptly; "
                       f"totals {sorted(set(totals))}")  # fmt: skip
    out["prediction_held"] = None if not pred else all(t == pred["total_cents"] for t in totals)
    offs = [it["measured_offset"] for it in ok]
    return {
        "outcome": out,
        "iterations": iters,
        "faults": {
            "race": "approve vs the wait's commit",
            "window_s": S11R_WINDOW,
            "rng_seed": f"{dr.run_id}-i<i>",
            "calibration": {
                "anchor": "model stub arrival of the decision call",
                "aim": f"per iteration: median of the last {AIM_MEMORY} measured delays",
                "stub_delay_ms": STUB_DELAY_MS,
                "median_delay_s": round(calib, 4),
                "warmups_s": [round(d, 4) for d in delays],
            },
        },  # fmt: skip
        "ground_truth": {"iterations": gt},
        "artifacts": {
            "per_iteration": [
                {k: it[k] for k in ("workflow", "status", "result", "consumed")} for it in iters
            ]
        },  # fmt: skip
        "timings": {
            "measured_offset": _stats(offs),
            "planned_offset": _stats([it["planned_offset"] for it in iters]),
            "wake_latency": _stats([it["wake_latency"] for it in iters]),
            "end_to_end": _stats([it["end_to_end"] for it in iters]),
        },  # fmt: skip
    }


def _wait_commit(b: _Bench, c: dict) -> tuple[float | None, str]:
    """When the workflow committed its wait for the approval (see the module doc)."""
    if b.family == "temporal":
        return b.temporal_wait_reached(c["wf"]), "history: WorkflowTaskCompleted after decide"
    for _ in range(50):  # the event line may trail the commit by a moment
        for e in reversed(b.events.poll()):
            if (
                e["event"] == "suspended"
                and e.get("wf") == c["wf"]
                and "signal approve" in str(e.get("reason"))
            ):
                return float(e["ts"]), "worker event: suspended"
        row = b.conn.execute(
            "select extract(epoch from created_at)::float8 as t, epoch from ilr.steps"
            " where workflow_id = %s and kind = 'signal' and name = 'approve'",
            (c["wf"],),
        ).fetchone()
        claims = b.conn.execute("select count(*) as n from ilr.claims where workflow_id = %s",
                                (c["wf"],)).fetchone()["n"]  # fmt: skip
        if row is not None and claims == 1:
            # consumed by the first claim's mailbox check: no suspend happened
            return float(row["t"]), "signal step created_at (consumed without a suspend)"
        time.sleep(0.01)
    return None, "not found"


def _consumed(b: _Bench, c: dict) -> dict:
    """How the system's own records say the approval was consumed (artifact, not the oracle)."""
    if b.family == "runtime":
        sig = b.conn.execute(
            "select count(*) as n, count(consumed_seq) as consumed from ilr.signals"
            " where workflow_id = %s and name = 'approve'",
            (c["wf"],),
        ).fetchone()
        steps = b.conn.execute(
            "select count(*) as n from ilr.steps where workflow_id = %s and kind = 'signal'"
            " and name = 'approve'",
            (c["wf"],),
        ).fetchone()["n"]
        return {"signals": sig["n"], "consumed": sig["consumed"], "wait_steps": steps}
    events = b.sys.client.history(c["wf"])["events"]
    kinds = [e["eventType"] for e in events]
    return {"signals": kinds.count("EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED"),
            "refund_scheduled": kinds.count("EVENT_TYPE_ACTIVITY_TASK_SCHEDULED") - 1}  # fmt: skip


def _judge_signal(dr: DriverRun, c: dict, res: dict, posts: list[dict], refunds: list[dict],
                  consumed: dict) -> dict:  # fmt: skip
    agent = [r for r in refunds if r["source"] != "hand"]
    failures = []
    if len(agent) != 1:
        failures.append(f"agent applications = {len(agent)}, expected 1")
    wrong = sum(1 for r in agent if r["amount"] != AMOUNT)
    if wrong:
        failures.append(f"{wrong} refund(s) of another amount than {AMOUNT}")
    wake = None
    if posts:
        wake = posts[0]["arrival"] - c["t_approve"]
        # the send may not reach the target later than WAKE_BOUND after the approval
        if wake > WAKE_BOUND:
            failures.append(f"the send arrived {wake:.2f}s after the approval (lost wakeup?)")
    if res["kind"] != "completed":
        failures.append(f"workflow ended {res['kind']}: {str(res['value'])[:200]}")
    elif res["status"] is not None and res["status"] == "approval expired":
        failures.append("the approval wait timed out")
    return {"correct": not failures, "failures": failures, "total_cents":
            sum(r["amount"] for r in refunds), "agent_applications": len(agent),
            "agent_sends": len(posts), "duplicate_applications": max(0, len(agent) - 1),
            "wrong_amount": wrong, "blocked_never_sent": int(not agent),
            "wake_latency": None if wake is None else round(wake, 4), "consumed": consumed}  # fmt: skip


# -- S12: the revoke racing the refund's dispatch -------------------------------------------------


def revoke_race(dr: DriverRun) -> dict:
    """S12: `dr.iterations` revokes, each at a seeded offset in +/-20 ms of the refund POST's
    arrival; counts sends applied after the revoke returned that it did not list."""
    b = _Bench(dr, target_delay_ms=TARGET_DELAY_MS)

    def warmup(c: dict) -> float | None:  # no revoke: approve -> the POST's arrival
        b.start(c)
        b.wait_waiting(c)
        b.approve(c, b.facts_seen(c["payment"]))
        b.result(c, dr.timing["run_timeout"])
        posts, _ = b.target_reads(c["payment"])
        return posts[0]["arrival"] - c["t_approve"] if posts else None

    # per-run setup: on resume the warm-ups run again (a new bench needs its own calibration)
    aim, delays = _calibrate(dr, b, warmup, "approve returned", "delay_to_post_arrival")
    calib = aim.delay()
    arrivals = _Arrivals(b.target)

    def play_one(i: int) -> dict:
        rng = random.Random(f"{dr.run_id}-i{i}")  # iteration i's offset, however it is reached
        c = b.new_case(i, "i")
        facts = b.facts_seen(c["payment"])
        b.start(c)
        b.wait_waiting(c)
        planned = rng.uniform(-S12_WINDOW, S12_WINDOW)
        predicted = aim.delay()
        mark = arrivals.mark()
        grant = b.approve(c, facts)
        if planned >= 0:  # after the arrival: anchored on it, as it happens
            how = "arrival"
            t_arrival = arrivals.first_since(mark, dr.timing["run_timeout"])
            fire = (t_arrival if t_arrival is not None else time.time()) + planned
        else:  # before the arrival: aimed at where this run's recent arrivals put it
            how = "predicted"
            fire = c["t_approve"] + predicted + planned
        _sleep_until(fire)
        t_fired = time.time()
        returned = b.revoke(grant)
        t_revoked = time.time()
        res = b.result(c, dr.timing["run_timeout"])
        posts, refunds = b.target_reads(c["payment"])
        rows = [_post_row(a) for a in posts]
        it = _judge_revoke(dr, rows, refunds, returned, t_revoked)
        measured = t_revoked - rows[0]["arrival"] if rows else None
        fired = t_fired - rows[0]["arrival"] if rows else None
        aim.measured(rows[0]["arrival"] - c["t_approve"] if rows else None)
        it.update(_dispatch_tx(b, c["wf"], t_revoked))
        it.update({"i": i, "planned_offset": round(planned, 4), "aim": how,
                   "aim_delay": round(predicted, 4),
                   "fired_late_by": round(t_fired - fire, 4),
                   "fired_offset": None if fired is None else round(fired, 4),
                   "offset_vs_expected": round(t_revoked - (c["t_approve"] + predicted), 4),
                   "revoke_took": round(t_revoked - t_fired, 4),
                   "measured_offset": None if measured is None else round(measured, 4),
                   "returned": returned, "workflow": c["wf"], "payment": c["payment"],
                   "grant": grant, "result": res["kind"], "status": res["status"],
                   "end_to_end": round(c["t_end"] - c["t_start"], 4),
                   "ground_truth": {"i": i, "payment": c["payment"],
                                    "revoke_returned_at": t_revoked, "posts": rows,
                                    "ledger": refunds}})  # fmt: skip
        miss = _missed_aim(how, planned, fired)
        if miss:
            it["drop"] = miss
        if b.family == "temporal":  # now, while this process's attempt log has it
            _attach_attempts(b, [it])
        return it

    iters = dr.iterate(play_one)
    gt = [it.pop("ground_truth") for it in iters]
    ok = driver.counted(iters)
    out = driver.summarize(iters)
    n_sent = sum(1 for it in ok if it["sent"])
    under = out["sent_under_revoked_grant"]
    pred = _prediction(dr)
    out["expected"] = pred.get("status") if pred else None
    out["observed"] = (f"sent_under_revoked_grant = {under} in {out['n']} iterations "
                       f"(sent in {n_sent})")  # fmt: skip
    held = None
    m = _COUNT.search((pred or {}).get("status") or "")
    if m:
        held = under == int(m.group(2)) if m.group(1) == "=" else under > int(m.group(2))
    out["prediction_held"] = held
    offs = [it["measured_offset"] for it in ok]
    return {
        "outcome": out,
        "iterations": iters,
        "faults": {
            "race": "revoke vs the refund's dispatch",
            "window_s": S12_WINDOW,
            "rng_seed": f"{dr.run_id}-i<i>",
            "target_delay_ms": TARGET_DELAY_MS,
            "calibration": {
                "anchor": "approve returned",
                "aim": (
                    "per iteration: offsets >= 0 on the POST's arrival; offsets < 0 on "
                    f"the median of the last {AIM_MEMORY} measured delays"
                ),
                "median_delay_s": round(calib, 4),
                "warmups_s": [round(d, 4) for d in delays],
            },
        },  # fmt: skip
        "ground_truth": {"iterations": gt},
        "artifacts": {
            "per_iteration": [
                {
                    k: it.get(k)
                    for k in ("workflow", "grant", "returned", "result", "status", "attempts")
                }
                for it in iters
            ]
        },  # fmt: skip
        "timings": {
            "measured_offset": _stats(offs),
            "measured_offset_sent_under": _stats(
                [it["measured_offset"] for it in iters if it["sent_under_revoked_grant"]]
            ),
            "planned_offset": _stats([it["planned_offset"] for it in iters]),
            "offset_vs_expected": _stats([it["offset_vs_expected"] for it in iters]),
            "offset_vs_dispatch_tx": _stats([it.get("offset_vs_dispatch_tx") for it in iters]),
            "not_sent": sum(1 for it in iters if not it["sent"]),
            "fired_offset": _stats([it.get("fired_offset") for it in ok]),
            "aim": dict(Counter(str(it.get("aim")) for it in ok)),
            "missed_aim_attempts": sum(
                1 for it in iters for r in it.get("harness_retries") or [] if r.get("drop")
            ),
            "revoke_took": _stats([it["revoke_took"] for it in iters]),
            "end_to_end": _stats([it["end_to_end"] for it in iters]),
        },  # fmt: skip
    }


def _missed_aim(how: str, planned: float, fired: float | None) -> str | None:
    """Why an S12 iteration's revoke did not fire where its plan put it, or None. An offset
    anchored on the arrival cannot miss; one aimed before it misses when the POST arrived
    first or the revoke fired more than the window before it. Nothing sent: the revoke came
    first, and there is no arrival to measure against (counted)."""
    if how != "predicted" or fired is None:
        return None
    if fired >= 0:
        return f"planned {planned * 1000:+.1f} ms, fired {fired * 1000:+.1f} ms: after the arrival"
    if fired < -S12_WINDOW:
        return f"planned {planned * 1000:+.1f} ms, fired {fired * 1000:+.1f} ms: before the window"
    return None


def _dispatch_tx(b: _Bench, wf: str, t_revoked: float) -> dict:
    """Runtime: the T_dispatch that sent or refused the effect (its journal entry's database
    time), so an iteration whose revoke won (nothing sent) has an offset too."""
    if b.family != "runtime":
        return {}
    row = b.conn.execute(
        "select j.kind, j.body from ilr.journal j join ilr.effects e using (effect_id)"
        " where e.workflow_id = %s and j.kind in ('DISPATCHED', 'REFUSED') order by j.seq"
        " limit 1",
        (wf,),
    ).fetchone()
    if row is None:
        return {"dispatch_tx": None, "offset_vs_dispatch_tx": None}
    ts = float(json.loads(row["body"])["ts"])
    return {"dispatch_tx": row["kind"], "offset_vs_dispatch_tx": round(t_revoked - ts, 4)}


def _judge_revoke(dr: DriverRun, rows: list[dict], refunds: list[dict],
                  returned: list[str] | None, t_revoked: float) -> dict:  # fmt: skip
    agent = [r for r in refunds if r["source"] != "hand"]
    listed = set(returned or [])
    under = []
    for p in _applied(rows):
        applied_at = p["created"] if p["created"] is not None else p["end"]
        if applied_at > t_revoked and p["key"] not in listed:
            under.append(p["id"])
    failures = []
    if under:
        failures.append(f"{len(under)} send(s) applied after the revoke returned, not in its "
                        f"list {sorted(listed)}: access log ids {under}")  # fmt: skip
    if len(agent) > 1:
        failures.append(f"agent applications = {len(agent)}, expected <= 1")
    return {"correct": not failures, "failures": failures,
            "sent": bool(rows), "agent_sends": len(rows), "agent_applications": len(agent),
            "total_cents": sum(r["amount"] for r in refunds),
            "sent_under_revoked_grant": len(under), "sent_under_ids": under,
            "duplicate_applications": max(0, len(agent) - 1),
            "wrong_amount": sum(1 for r in agent if r["amount"] != AMOUNT),
            "blocked_never_sent": 0}  # fmt: skip


def _attach_attempts(b: _Bench, iters: list[dict]) -> None:
    """Temporal: the refund activity's attempts per iteration (from the worker's attempt log).
    A second attempt would make (b)'s lookup matter; the worker's lookup reads its --payment,
    not the iteration's, so such an iteration is flagged."""
    from baselines.refund import read_attempts

    by_wf: dict[str, list[dict]] = {}
    for a in read_attempts(b.sys.attempt_log):
        if a.get("activity") == "refund":
            by_wf.setdefault(a["workflow_id"], []).append(a)
    for it in iters:
        atts = by_wf.get(it["workflow"], [])
        it["attempts"] = [{"attempt": a["attempt"], "outcome": a["outcome"],
                           "error": a.get("error"),
                           "grant_read": (a.get("checks") or {}).get("grant", {}).get("row", {})
                           .get("revoked_at") if a.get("checks") else None} for a in atts]  # fmt: skip
        it["retried"] = len(atts) > 1
