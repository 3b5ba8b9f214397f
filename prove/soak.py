"""The chaos soak (issue 11): many refund workflows under random SIGKILLs, revokes, hand refunds
and cancels, then every catalog invariant over the evidence.

    python -m prove.soak [--workflows 10000] [--minutes 20] [--workers 4] [--seed N] [--out DIR]

What runs (all real): a fresh database on the project's Postgres cluster; three payment targets
(world/target.py), one per tier, each in its own process; `--workers` worker subprocesses
(`python -m interlock_runtime.cli.worker --module prove.soak_flows`); this process starts the
workflows (tiers 1, 2 and 3 mixed; one payment each), approves them (half at once, half once
they wait for the approval, with the premises their decision saw) and makes the chaos:

- every `--kill-every` seconds (jittered) a SIGKILL of a random worker, replaced at once by a
  fresh worker. Worker slot 0 is never killed: it lives through the whole run, so its RSS
  over time says whether a worker's memory grows. The first worker of slot 1 is also armed
  with a kill point (ILR_KILL_AT, default effect_after_send) so at least one send is recovered;
- on a random few per cent of the workflows each: a revoke of the approval, a hand refund at
  the target (the premises go stale) and a cancel, at a random moment of the workflow's life.

Starts are paced over the run's length minus a drain reserve; then the chaos stops, every
started workflow must reach a terminal state (else it is lost), and the invariants of
conformance/invariants.py run over the database, the targets' ledgers and access
logs and every worker's event log (also on samples during the run, `--sample-every`).

Failover mode (`--failover`, issue 20): the database is a primary and a synchronous standby
(world/pg_pair.py) reached through a multi-host DSN, and the chaos adds, evenly spread over the
chaos window, `--failovers` failovers (the primary crashed by `pg_ctl stop -m immediate` or
SIGKILL in turn, the standby promoted, the old primary rewound and back as the standby) and
`--crash-restarts` crash-restarts of the primary alone. This process rides through them as a
client would: a call that loses its connection is made again (starts are idempotent, revokes
and cancels too; an approval retried after an unknown commit may leave a second, unused
grant). The report is failover.md / failover.json, with each fault's write-unavailability
window.

Writes soak.md and soak.json to --out (default results/) with versions, seed, commit, date and
machine facts, and raw/soak.jsonl.gz: the rows (workflows, effects, claims, the targets'
refunds, RSS samples) the counts, rates and slopes are computed from (`aggregate`), so
`--verify` recomputes the report from committed data and `--render` rewrites the Markdown. Exits 1 when a must-be-zero count is not zero: duplicate applications at tiers
1 and 2, lost workflows, invariant violations (or missing evidence), workflows not started,
epochs claimed out of order, takeovers before the lease expired.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from conformance.invariants import check_all, record_revoke, snapshot, target_config
from interlock_runtime import Runtime, WorkflowFinished, db, testing
from interlock_runtime.testing import WorkerProcess
from interlock_runtime.vocabulary import TERMINAL_STATUSES
from prove.bench import git_facts, machine_facts, pct, version
from prove.scrub import scrub
from prove.soak_flows import EMULATED, soak_refund
from world import verify_common as vc
from world.pg_pair import PgPair
from world.target_client import TargetAdmin

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
TERMINAL = TERMINAL_STATUSES
TIERS = (1, 2, 3)
PAID, AMOUNT, HAND = 10000, 2000, 1000  # cents: each case's payment, its refund, a hand refund
FLAT_MIB_PER_MIN = 0.5
MUST_BE_ZERO = ("duplicates_tier12", "lost", "invariant_violations", "missing_evidence",
                "not_started", "epochs_backwards", "early_takeovers")  # fmt: skip
RIDE_THROUGH_S = 180.0  # how long a client call keeps retrying a lost connection

DEFAULTS: dict[str, Any] = {
    "workflows": 10000,
    "minutes": 20.0,
    "workers": 4,
    "seed": None,
    "concurrency": 8,  # runs per worker process
    "lease_ttl": 2.0,  # short, so a SIGKILLed worker's runs are taken over quickly
    "poll": 0.2,
    "send_timeout": 2.5,
    "settle_margin": 1.0,
    "kill_every": 3.0,  # mean seconds between SIGKILLs (uniform in [0.5, 1.5] x this)
    "kill_point": "effect_after_send",  # armed on the first worker of slot 1 ("" for none)
    "revoke_frac": 0.03,
    "hand_frac": 0.03,
    "cancel_frac": 0.03,
    "late_approval_frac": 0.5,  # approved once waiting (else approved right after the start)
    "fate_window": 1.0,  # a random-mode chaos action hits within this many seconds of the start
    "max_inflight": 160,
    "start_rate": None,  # starts per second; default: spread over the run minus the drain
    "drain_s": 60.0,  # reserved at the end: no starts, no chaos, everything must settle
    "sample_every": 240.0,  # invariant samples during the run (0: only at the end)
    "rss_every": 1.0,
    "failover": False,  # the database is a primary + synchronous standby pair (issue 20)
    "failovers": 5,
    "crash_restarts": 5,
    "standby_clock_offset": 0.0,  # seconds the standby's clock runs ahead (libfaketime)
}


# -- processes --------------------------------------------------------------------------------


class TargetProcess:
    """One payment target (python -m world.target) in its own process, its tier fixed."""

    def __init__(self, tier: int, ledger: Path) -> None:
        self.tier = tier
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "world.target", "--tier", str(tier), "--port", "0",
             "--db", str(ledger)],
            stdout=subprocess.PIPE, text=True, cwd=str(ROOT), env=env,
        )  # fmt: skip
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise RuntimeError(f"the tier {tier} target did not start (exit {self.proc.poll()})")
        self.url = json.loads(line)["url"]
        self.admin = TargetAdmin(self.url, timeout=120)  # the end-of-run reads are large

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=30)


class Fleet:
    """The worker slots: a SIGKILLed or dead worker is replaced by a fresh one in its slot."""

    def __init__(self, cfg: dict, dsn: str, log_dir: Path, stack: ExitStack) -> None:
        self.cfg, self.dsn, self.log_dir, self.stack = cfg, dsn, log_dir, stack
        self.lock = threading.Lock()
        self.all: list[WorkerProcess] = []
        self.slots: list[WorkerProcess] = []
        self.sigkilled: set[int] = set()  # pids we killed
        self.exits: list[dict] = []  # workers that died on their own
        for slot in range(cfg["workers"]):
            armed = slot == 1 and bool(cfg["kill_point"])
            self.slots.append(self._spawn(slot, armed))

    def _spawn(self, slot: int, armed: bool = False) -> WorkerProcess:
        gen = sum(1 for w in self.all if w.worker_id.startswith(f"s{slot}-"))
        env = {"ILR_KILL_AT": self.cfg["kill_point"]} if armed else {}
        # a standby whose clock is off: the workers allow for it (docs/deployment.md#clocks)
        skew = abs(self.cfg.get("standby_clock_offset") or 0.0)
        w = WorkerProcess(self.dsn, f"s{slot}-{gen}", self.log_dir, "prove.soak_flows",
                          pythonpath=str(ROOT), cwd=str(ROOT), lease_ttl=self.cfg["lease_ttl"],
                          poll=self.cfg["poll"], concurrency=self.cfg["concurrency"], env=env,
                          extra_args=("--max-clock-skew", str(skew)) if skew else ())  # fmt: skip
        self.stack.callback(w.close)
        with self.lock:
            self.all.append(w)
        return w

    def killable(self) -> list[int]:
        """Slots that may be SIGKILLed: all but slot 0 (the memory sentinel) when there are two
        or more."""
        return list(range(1 if len(self.slots) > 1 else 0, len(self.slots)))

    def sigkill(self, slot: int) -> str:
        w = self.slots[slot]
        if w.proc.poll() is None:
            self.sigkilled.add(w.pid)
            w.signal(signal.SIGKILL)
            w.proc.wait(10)
        self.slots[slot] = self._spawn(slot)
        return w.worker_id

    def replace_dead(self) -> None:
        """Workers that died by themselves (an armed kill point, the send watchdog, a crash)."""
        for slot, w in enumerate(self.slots):
            code = w.proc.poll()
            if code is not None:
                self.exits.append({"worker": w.worker_id, "exit": code})
                self.slots[slot] = self._spawn(slot)

    def live(self) -> list[WorkerProcess]:
        with self.lock:
            return [w for w in self.all if w.proc.poll() is None]

    def events(self) -> list[dict]:
        with self.lock:
            workers = list(self.all)
        return [e for w in workers for e in w.events()]


class RssSampler(threading.Thread):
    """Samples every live worker's VmRSS from /proc every `every` seconds."""

    def __init__(self, fleet: Fleet, every: float, t0: float) -> None:
        super().__init__(name="rss", daemon=True)
        self.fleet, self.every, self.t0 = fleet, every, t0
        self.samples: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.every):
            now = time.monotonic() - self.t0
            for w in self.fleet.live():
                kib = rss_kib(w.pid)
                if kib is not None:
                    self.samples[w.worker_id].append((now, kib / 1024.0))


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def slope_per_min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MiB) in MiB per minute; None under 3 points."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    if sxx == 0:
        return None
    return 60.0 * sum((t - mx) * (v - my) for t, v in points) / sxx


# -- the cases --------------------------------------------------------------------------------


@dataclass
class Case:
    wf: str
    tier: int
    payment: str
    late: bool  # approved once waiting, with the decision's premises
    fate: str  # "none", "revoke", "hand", "cancel"
    fate_at: float  # "random" mode: when the action hits, racing the workflow
    at_wait: bool = False  # the action hits while the workflow waits for its approval
    grant: str | None = None
    fate_done: bool = False
    done: bool = False


class Soak:
    def __init__(self, cfg: dict, log: Any) -> None:
        self.cfg, self.log = cfg, log
        self.rng = random.Random(cfg["seed"])
        self.cases: dict[str, Case] = {}
        self.inflight: set[str] = set()
        self.waiting_approval: set[str] = set()
        self.chaos = Counter()
        self.revokes: list[dict] = []  # what each rt.revoke() returned (RevokeLinearizable)
        self.samples: list[dict] = []
        self.faults: list[dict] = []  # failovers and crash-restarts, as measured

    # -- riding through a lost connection -----------------------------------------------------

    def _db(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs), made again while the database is unreachable (a failover or a
        crash-restart in progress), for at most RIDE_THROUGH_S."""
        deadline = time.monotonic() + RIDE_THROUGH_S
        while True:
            try:
                return fn(*args, **kwargs)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                self.chaos["client_retries"] += 1
                time.sleep(0.2)

    def query(self, sql: str, params: dict | None = None) -> list[dict]:
        """Rows of this process's own reads, on a connection made again when it broke."""

        def once() -> list[dict]:
            if self.conn.closed or self.conn.broken:
                self.conn = self.stack.enter_context(db.connect(self.dsn))
            return self.conn.execute(sql, params).fetchall()

        return self._db(once)

    # -- driving ------------------------------------------------------------------------------

    def start_case(self, n: int) -> None:
        cfg, rng = self.cfg, self.rng
        tier = rng.choice(TIERS)
        wf = f"soak-{n:05d}"
        payment = f"pay_{wf}"
        self.targets[tier].admin.create_payment(payment, PAID)
        r = rng.random()
        f = cfg["revoke_frac"], cfg["hand_frac"], cfg["cancel_frac"]
        fate = "revoke" if r < f[0] else "hand" if r < f[0] + f[1] else \
            "cancel" if r < sum(f) else "none"  # fmt: skip
        # Half the chaos actions hit while the workflow waits for its approval (so they land
        # before the effect); the others at a random moment, racing the workflow.
        at_wait = fate != "none" and rng.random() < 0.5
        case = Case(wf, tier, payment, at_wait or rng.random() < cfg["late_approval_frac"],
                    fate, time.monotonic() + rng.uniform(0, cfg["fate_window"]), at_wait)  # fmt: skip
        self._db(self.rt.start, "soak_refund", wf, {
            "id": wf, "target_url": self.targets[tier].url, "payment": payment, "tier": tier,
            "amount": AMOUNT, "send_timeout": cfg["send_timeout"],
            "settle_margin": cfg["settle_margin"]})  # fmt: skip
        self.cases[wf] = case
        self.inflight.add(wf)
        if case.late:
            self.waiting_approval.add(wf)
        else:  # the approver saw the fresh payment: nothing refunded by others yet
            self.approve(case, {"payment": payment, "eligible": True, "refunded_by_others": 0})

    def approve(self, case: Case, facts: Any) -> None:
        try:
            case.grant = self._db(self.rt.approve, case.wf,
                                  {"payment": case.payment, "amount": AMOUNT}, facts,
                                  by="soak-approver")  # fmt: skip
            self.chaos["approvals"] += 1
        except WorkflowFinished:
            pass  # cancelled (or otherwise ended) before its approval
        self.waiting_approval.discard(case.wf)

    def late_approvals(self) -> None:
        if not self.waiting_approval:
            return
        rows = self.query(
            "select w.id, s.output from ilr.workflows w join ilr.steps s"
            " on s.workflow_id = w.id and s.kind = 'decide'"
            " where w.id = any(%(ids)s) and w.status = 'sleeping'"
            " and w.waiting->>'signal' = 'approve'",
            {"ids": list(self.waiting_approval)},
        )
        for r in rows:
            case = self.cases[r["id"]]
            if case.at_wait and case.fate == "hand":  # the world moves before the approval
                self.targets[case.tier].admin.hand_refund(case.payment, HAND)
            if case.at_wait and case.fate == "cancel":
                self._db(self.rt.cancel, case.wf, by="soak-chaos")
                self.waiting_approval.discard(case.wf)
            else:
                self.approve(case, r["output"]["premises"])
            if case.at_wait and case.fate == "revoke" and case.grant:
                self._db(record_revoke, self.rt, case.grant, "soak-chaos", self.revokes)
            if case.at_wait:
                case.fate_done = True
                self.chaos[case.fate + "s"] += 1
                self.chaos[case.fate + "s_at_wait"] += 1

    def poll_terminal(self) -> None:
        if not self.inflight:
            return
        rows = self.query(
            "select id from ilr.workflows where id = any(%(ids)s) and status = any(%(t)s)",
            {"ids": list(self.inflight), "t": list(TERMINAL)},
        )
        for r in rows:
            self.cases[r["id"]].done = True
            self.inflight.discard(r["id"])
            self.waiting_approval.discard(r["id"])

    def fates(self, now: float) -> None:
        for wf in list(self.inflight):
            c = self.cases[wf]
            if c.fate == "none" or c.fate_done or c.at_wait or now < c.fate_at:
                continue
            if c.fate == "revoke":
                if c.grant is None:
                    c.fate_at = now + 0.2  # not approved yet: revoke once it is
                    continue
                self._db(record_revoke, self.rt, c.grant, "soak-chaos", self.revokes)
            elif c.fate == "hand":
                self.targets[c.tier].admin.hand_refund(c.payment, HAND)
            elif c.fate == "cancel":
                try:
                    self._db(self.rt.cancel, wf, by="soak-chaos")
                except WorkflowFinished:
                    self.chaos["cancel_too_late"] += 1
                    c.fate_done = True
                    continue
            c.fate_done = True
            self.chaos[c.fate + "s"] += 1

    # -- evidence -----------------------------------------------------------------------------

    def read_world(self) -> tuple[list, list]:
        ledger, log = [], []
        for t in self.targets.values():  # each row names its target (invariants._stale_sends)
            ledger += [dict(r, target=t.admin.url) for r in t.admin.ledger()["refunds"]]
            log += [dict(r, target=t.admin.url) for r in t.admin.log()]
        return ledger, log

    def invariants(self) -> dict:
        return self._db(self._invariants)

    def _invariants(self) -> dict:
        t = time.monotonic()
        events = self.fleet.events()
        with (
            db.connect(self.dsn) as conn,
            snapshot(
                conn,
                self.read_world,
                events,
                self.revokes,
                {t.admin.url: target_config(t.admin.url) for t in self.targets.values()},
                db_clock=self.pair.db_clock() if getattr(self, "pair", None) else None,
            ) as ev,
        ):
            results = check_all(ev)
        broken = {k: v[:5] for k, v in results.items() if isinstance(v, list) and v}
        missing = {k: v for k, v in results.items() if isinstance(v, str)}
        return {"checked": len(results), "violations": sum(len(v) for v in results.values()
                                                          if isinstance(v, list)),
                "broken": broken, "missing": missing, "events": len(events),
                "seconds": round(time.monotonic() - t, 2)}  # fmt: skip

    def db_now(self) -> dt.datetime:
        now: dt.datetime = self.query("select now() as now")[0]["now"]
        return now

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> dict:
        cfg, log = self.cfg, self.log
        total = cfg["minutes"] * 60.0
        window = max(1.0, total - min(cfg["drain_s"], total / 2))
        paced = window / max(1, cfg["workflows"])
        interval = 1.0 / cfg["start_rate"] if cfg["start_rate"] else paced
        with ExitStack() as stack:
            self.stack = stack
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ilr-soak-")))
            self.targets = {t: TargetProcess(t, tmp / f"ledger-t{t}.db") for t in TIERS}
            for t in self.targets.values():
                stack.callback(t.stop)
            self.pair: PgPair | None = None
            if cfg["failover"]:
                offset = cfg["standby_clock_offset"]
                self.pair = stack.enter_context(
                    PgPair(clock_offset={"b": offset} if offset else {})
                )
                self.dsn = self.pair.dsn()
            else:
                admin = testing.admin_dsn()
                template = stack.enter_context(testing.template_database(admin))
                self.dsn = stack.enter_context(testing.fresh_database(admin, template))
            self.rt = stack.enter_context(Runtime(self.dsn))
            self.rt.register(soak_refund)
            self.conn = stack.enter_context(db.connect(self.dsn))
            self.fleet = Fleet(cfg, self.dsn, tmp, stack)
            t0 = time.monotonic()
            rss = RssSampler(self.fleet, cfg["rss_every"], t0)
            rss.start()
            stack.callback(rss.halt.set)
            chaos_db0 = self.db_now()
            next_start, next_kill = t0, t0 + self.rng.uniform(0.5, 1.0) * cfg["kill_every"]
            next_sample = t0 + cfg["sample_every"] if cfg["sample_every"] else float("inf")
            next_poll, last_report, started = t0, t0, 0
            phase, chaos_db1, chaos_end = "chaos", None, None
            faults = self.fault_plan(t0, window)
            log(f"[soak] {cfg['workflows']} workflows, {cfg['workers']} workers, seed "
                f"{cfg['seed']}, start window {window:.0f} s of {total:.0f} s")  # fmt: skip
            while True:
                now = time.monotonic()
                if phase == "chaos":
                    if now >= next_kill:
                        slot = self.rng.choice(self.fleet.killable())
                        self.fleet.sigkill(slot)
                        self.chaos["sigkills"] += 1
                        next_kill = now + self.rng.uniform(0.5, 1.5) * cfg["kill_every"]
                    # Behind schedule, start in bursts of at most 0.2 s so that kills, chaos
                    # actions and approvals keep their pace.
                    budget = time.monotonic() + 0.2
                    while (started < cfg["workflows"] and now >= next_start
                           and len(self.inflight) < cfg["max_inflight"]
                           and time.monotonic() < budget):  # fmt: skip
                        self.start_case(started)
                        started += 1
                        next_start += interval
                    self.fates(now)
                    if faults and now >= faults[0][0]:
                        self.fault(*faults.pop(0)[1:], at_s=now - t0)
                    all_in = started >= cfg["workflows"] and self.chaos["sigkills"] > 0
                    all_in = all_in and not faults
                    if all_in or now >= t0 + window:
                        phase, chaos_end, chaos_db1 = "drain", now, self.db_now()
                        log(f"[soak] chaos over after {now - t0:.0f} s: {started} started, "
                            f"{len(self.inflight)} in flight; draining")  # fmt: skip
                self.fleet.replace_dead()
                if now >= next_poll:
                    self.poll_terminal()
                    self.late_approvals()
                    next_poll = now + 0.25
                if now >= next_sample:
                    s = self.invariants()
                    s["at_s"] = round(now - t0, 1)
                    self.samples.append(s)
                    log(f"[soak] invariant sample at {s['at_s']} s: {s['violations']} "
                        f"violations ({s['seconds']} s)")  # fmt: skip
                    next_sample = time.monotonic() + cfg["sample_every"]
                if now - last_report >= 30:
                    last_report = now
                    done = sum(c.done for c in self.cases.values())
                    log(f"[soak] {now - t0:.0f} s: {started} started, {done} terminal, "
                        f"{len(self.inflight)} in flight, {self.chaos['sigkills']} SIGKILLs")  # fmt: skip
                if phase == "drain" and not self.inflight:
                    break
                if now >= t0 + total:
                    break
                time.sleep(0.02)
            self.poll_terminal()
            wall = time.monotonic() - t0
            rss.halt.set()
            rss.join(5)
            log(f"[soak] done after {wall:.0f} s; checking every invariant over the evidence")
            final = self.invariants()
            report = self.tally(started, wall, chaos_end - t0 if chaos_end else wall,
                                chaos_db0, chaos_db1 or self.db_now(), final, rss)  # fmt: skip
        return report

    def fault_plan(self, t0: float, window: float) -> list[tuple[float, str, str]]:
        """(monotonic time, kind, how) of each failover and crash-restart: evenly spread over
        the chaos window, kinds interleaved, the crash mode alternating."""
        cfg = self.cfg
        if not cfg["failover"]:
            return []
        kinds = ["failover"] * cfg["failovers"] + ["restart"] * cfg["crash_restarts"]
        self.rng.shuffle(kinds)
        n = len(kinds)
        return [(t0 + window * (i + 1) / (n + 1), kind, ("immediate", "kill")[i % 2])
                for i, kind in enumerate(kinds)]  # fmt: skip

    def fault(self, kind: str, how: str, at_s: float) -> None:
        assert self.pair is not None
        if kind == "failover":
            event = dict(self.pair.failover(how))
        else:
            event = {"how": how, "node": self.pair.primary.name,
                     "writable_s": round(self.pair.crash_restart(how), 3)}  # fmt: skip
        event.update(kind=kind, at_s=round(at_s, 1))
        self.faults.append(event)
        self.chaos[{"failover": "failovers", "restart": "crash_restarts"}[kind]] += 1
        self.log(f"[soak] {kind} ({how}) at {at_s:.0f} s: writable again after "
                 f"{event['writable_s']} s")  # fmt: skip

    def tally(self, started: int, wall: float, chaos_s: float, db0: dt.datetime,
              db1: dt.datetime, final: dict, rss: RssSampler) -> dict:  # fmt: skip
        """The report: the run's facts, then everything aggregate() derives from its raw data
        (kept under "raw" for main() to write beside the report)."""
        cfg = self.cfg
        report = {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "config": cfg, "git": git_facts(), "machine": machine_facts(),
            "versions": {d: version(d) for d in ("interlock-runtime", "psycopg")}
            | {"postgres": self.query("show server_version")[0]["server_version"]},
            "faults": self.faults,
            "clock_offsets": self.pair.measured_offset if self.pair else {},
            "primacy": [[round(t, 3), n] for t, n in self.pair.primacy] if self.pair else [],
            "emulated": [EMULATED], "wall_s": round(wall, 1), "chaos_s": round(chaos_s, 1),
            "chaos": dict(self.chaos) | {"worker_exits": self.fleet.exits,
                                         "workers_started": len(self.fleet.all)},
            "invariants": {"final": final, "samples": self.samples},
        }  # fmt: skip
        raw = self.raw_data(started, wall, db0, db1, rss)
        return {**report, **aggregate(report, raw), "raw": raw}

    def raw_data(
        self, started: int, wall: float, db0: dt.datetime, db1: dt.datetime, rss: RssSampler
    ) -> list[dict]:
        """Every row the report's counts, rates and slopes come from, in a fixed order."""
        rows: list[dict] = [
            {
                "kind": "run",
                "started": started,
                "wall": wall,
                "chaos_db0": db0.isoformat(),
                "chaos_db1": db1.isoformat(),
            }
        ]
        for r in self.query(
            "select id, status, result->>'status' as outcome, created_at, updated_at, error,"
            " (input->>'tier')::int as tier from ilr.workflows where name = 'soak_refund'"
            " order by id"
        ):
            rows.append(
                {
                    "kind": "workflow",
                    "id": r["id"],
                    "tier": r["tier"],
                    "status": r["status"],
                    "outcome": r["outcome"],
                    "created_at": r["created_at"].isoformat(),
                    "updated_at": r["updated_at"].isoformat(),
                    "error": r["error"] if r["status"] in ("failed", "stuck") else None,
                }
            )
        for r in self.query("select tier, state, sends from ilr.effects order by effect_id"):
            rows.append(
                {"kind": "effect", "tier": r["tier"], "state": r["state"], "sends": r["sends"]}
            )
        # The claim history, by the database clock of whichever node held the primary.
        for r in self.query(
            "select workflow_id, epoch, claimed_at, prev_status, prev_lease_expires_at"
            " from ilr.claims order by workflow_id, epoch"
        ):
            lease = r["prev_lease_expires_at"]
            rows.append(
                {
                    "kind": "claim",
                    "workflow_id": r["workflow_id"],
                    "epoch": r["epoch"],
                    "claimed_at": r["claimed_at"].isoformat(),
                    "prev_status": r["prev_status"],
                    "prev_lease_expires_at": lease.isoformat() if lease else None,
                }
            )
        for tier, t in self.targets.items():
            rows += [
                {"kind": "refund", "tier": tier, "key": r["key"]}
                for r in t.admin.ledger()["refunds"]
                if r["source"] != "hand" and r.get("key")
            ]
        for wid, pts in sorted(rss.samples.items()):
            rows += [{"kind": "rss", "worker": wid, "t": t, "mib": mib} for t, mib in pts]
        return rows


# -- the report from its raw data ---------------------------------------------------------------


def aggregate(report: dict, raw: list[dict]) -> dict:
    """The report's derived parts (counts, verdict, throughput, memory, ...) from its facts
    (config, chaos, invariants) and its raw rows: a pure function, so `--verify` can recompute
    a committed report from results/raw/NAME.jsonl.gz."""
    cfg, chaos, final = report["config"], report["chaos"], report["invariants"]["final"]
    samples = report["invariants"]["samples"]
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for row in raw:
        by_kind[row["kind"]].append(row)
    run = by_kind["run"][0]
    when = dt.datetime.fromisoformat
    db0, db1 = when(run["chaos_db0"]), when(run["chaos_db1"])
    rows = by_kind["workflow"]
    statuses = Counter(r["status"] for r in rows)
    outcomes = Counter(f"t{r['tier']} {r['outcome'] or r['status']}" for r in rows)
    lost = sorted(r["id"] for r in rows if r["status"] not in TERMINAL)
    in_chaos = [r for r in rows if r["status"] in TERMINAL and db0 <= when(r["updated_at"]) <= db1]
    lat = [(when(r["updated_at"]) - when(r["created_at"])).total_seconds() * 1000 for r in in_chaos]
    lat_ok = [
        (when(r["updated_at"]) - when(r["created_at"])).total_seconds() * 1000
        for r in in_chaos
        if r["status"] == "completed"
    ]
    chaos_db_s = max(1e-9, (db1 - db0).total_seconds())
    groups: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for e in by_kind["effect"]:
        groups[(e["tier"], e["state"])].append(e)
    effects = [
        {
            "tier": tier,
            "state": state,
            "n": len(es),
            "sends": sum(e["sends"] for e in es if e["sends"] is not None)
            if any(e["sends"] is not None for e in es)
            else None,
        }
        for (tier, state), es in sorted(groups.items())
    ]
    claims = by_kind["claim"]
    takeovers = sum(1 for c in claims if c["prev_status"] == "running")
    early = sum(
        1
        for c in claims
        if c["prev_status"] == "running"
        and c["prev_lease_expires_at"]
        and when(c["claimed_at"]) < when(c["prev_lease_expires_at"])
    )
    history: dict[str, list[dict]] = defaultdict(list)
    for c in claims:
        history[c["workflow_id"]].append(c)
    # a later epoch claimed before an earlier one
    backwards = sum(
        1
        for cs in history.values()
        for c in cs
        for d in cs
        if d["epoch"] > c["epoch"] and when(d["claimed_at"]) < when(c["claimed_at"])
    )
    dup: dict[str, Any] = {}
    applications = 0
    for tier in TIERS:
        keys = Counter(r["key"] for r in by_kind["refund"] if r["tier"] == tier)
        applications += sum(keys.values())
        over = {k: n for k, n in keys.items() if n > 1}
        dup[f"tier{tier}"] = {
            "workflows": len(over),
            "extra_applications": sum(n - 1 for n in over.values()),
            "examples": sorted(over)[:5],
        }
    ambiguous = {f"tier{e['tier']}": e["n"] for e in effects if e["state"] == "ambiguous"}
    rss: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in by_kind["rss"]:
        rss[r["worker"]].append((r["t"], r["mib"]))
    memory = {}
    sentinel = "s0-0" if cfg["workers"] > 1 else None
    for wid, pts in sorted(rss.items()):
        half = pts[len(pts) // 2 :]
        memory[wid] = {
            "samples": len(pts),
            "span_s": round(pts[-1][0] - pts[0][0], 1),
            "first_mib": round(pts[0][1], 1),
            "last_mib": round(pts[-1][1], 1),
            "max_mib": round(max(v for _, v in pts), 1),
            "slope_mib_per_min": _r(slope_per_min(pts), 3),
            "slope_second_half_mib_per_min": _r(slope_per_min(half), 3),
        }
    long_lived = {k: v for k, v in memory.items() if v["span_s"] >= 60}
    # Flat: the sentinel's RSS after its warm-up (the second half of its samples) grows by
    # at most FLAT_MIB_PER_MIN; the first half holds imports, pools and caches filling up.
    s_slope = (memory.get(sentinel or "") or {}).get("slope_second_half_mib_per_min")
    flat = None if s_slope is None else s_slope <= FLAT_MIB_PER_MIN
    started = run["started"]
    counts = {
        "requested": cfg["workflows"],
        "started": started,
        "not_started": cfg["workflows"] - started,
        "terminal": sum(statuses[s] for s in TERMINAL),
        "completed": statuses["completed"],
        "lost": len(lost),
        "duplicates_tier12": dup["tier1"]["workflows"] + dup["tier2"]["workflows"],
        "duplicates_tier3": dup["tier3"]["workflows"],
        "ambiguous_tier3": ambiguous.get("tier3", 0),
        "ambiguous_tier12": ambiguous.get("tier1", 0) + ambiguous.get("tier2", 0),
        "invariant_violations": final["violations"],
        "missing_evidence": len(final["missing"]),
        "sample_violations": sum(s["violations"] for s in samples),
        "applications": applications,
        "sends": sum(e["sends"] or 0 for e in effects),
        "takeovers_after_expiry": takeovers,
        "epochs_backwards": backwards,
        "early_takeovers": early,
        "failovers": chaos.get("failovers", 0),
        "crash_restarts": chaos.get("crash_restarts", 0),
    }
    counts["invariant_violations"] += counts["sample_violations"]
    failed = [k for k in MUST_BE_ZERO if counts[k]]
    if cfg.get("failover"):  # the faults the run promised must have happened
        failed += [k for k in ("failovers", "crash_restarts") if counts[k] < cfg[k]]
    return {
        "counts": counts,
        "verdict": "PASS" if not failed else "FAIL",
        "failed": failed,
        "statuses": dict(statuses),
        "outcomes": dict(sorted(outcomes.items())),
        "effects": effects,
        "duplicates": dup,
        "lost_examples": lost[:10],
        "failed_examples": [
            {"id": r["id"], "status": r["status"], "error": r["error"]}
            for r in rows
            if r["status"] in ("failed", "stuck")
        ][:10],
        "throughput": {
            "chaos_window_s": round(chaos_db_s, 1),
            "terminal_per_s": round(len(lat) / chaos_db_s, 2),
            "completed_per_s": round(len(lat_ok) / chaos_db_s, 2),
            "overall_terminal_per_s": round(counts["terminal"] / max(run["wall"], 1e-9), 2),
            "latency_ms": {
                "n": len(lat),
                "p50": _r(pct(lat, 50)),
                "p99": _r(pct(lat, 99)),
                "max": _r(max(lat) if lat else None),
            },
            "completed_latency_ms": {
                "n": len(lat_ok),
                "p50": _r(pct(lat_ok, 50)),
                "p99": _r(pct(lat_ok, 99)),
            },
        },
        "memory": {
            "sentinel": sentinel,
            "workers": memory,
            "flat": flat,
            "flat_limit_mib_per_min": FLAT_MIB_PER_MIN,
            "long_lived": sorted(long_lived),
        },
    }


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


# -- the report -------------------------------------------------------------------------------


def render(r: dict) -> str:
    c, cfg, tp, g, m = r["counts"], r["config"], r["throughput"], r["git"], r["machine"]
    mem = r["memory"]
    sent = mem["workers"].get(mem["sentinel"] or "", {})
    fo = cfg.get("failover")
    L = [
        "# Failover soak (issue 20)" if fo else "# Chaos soak (issue 11)",
        "",
        f"Generated by `python -m prove.soak` (`make soak`). Date {r['date']}; git "
        f"{g['commit'][:12]}{' (dirty)' if g['dirty'] else ''}; seed {cfg['seed']}; "
        f"{m['cores']} cores ({m['cpu']}), {m['mem_gib']} GiB, Python {m['python']}, "
        f"Postgres {r['versions']['postgres']}, interlock-runtime "
        f"{r['versions']['interlock-runtime']}, load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['loadavg_at_start'])}.",
        "",
        f"{c['requested']} refund workflows requested, {cfg['workers']} worker subprocesses "
        f"(concurrency {cfg['concurrency']}, lease {cfg['lease_ttl']} s), tiers 1/2/3 mixed, "
        f"one payment per workflow. Chaos: a SIGKILL of a random worker every "
        f"~{cfg['kill_every']} s (replaced at once; slot 0 is never killed, it is the memory "
        f"sentinel), kill point `{cfg['kill_point'] or 'none'}` armed on the first worker of "
        f"slot 1, revokes / hand refunds / cancels on {cfg['revoke_frac']:.0%} / "
        f"{cfg['hand_frac']:.0%} / {cfg['cancel_frac']:.0%} of the workflows. "
        f"{r['emulated'][0]}.",
        "",
        f"**Verdict: {r['verdict']}**"
        + (f" (non-zero: {', '.join(r['failed'])})" if r["failed"] else ""),  # fmt: skip
        "",
        "| count | value | must be |",
        "|---|---|---|",
    ]
    rows = [
        ("started / requested", f"{c['started']} / {c['requested']}", "all"),
        ("terminal", c["terminal"], "= started"),
        ("completed", c["completed"], ""),
        ("lost (started, never terminal)", c["lost"], "0"),
        ("workflows applied more than once, tiers 1 and 2", c["duplicates_tier12"], "0"),
        ("workflows applied more than once, tier 3", c["duplicates_tier3"], ""),
        ("AMBIGUOUS effects at tier 3", c["ambiguous_tier3"], ""),
        ("AMBIGUOUS effects at tiers 1 and 2", c["ambiguous_tier12"], ""),
        ("invariant violations (final check + samples)", c["invariant_violations"], "0"),
        ("invariants lacking evidence", c["missing_evidence"], "0"),
        ("applications at the targets (ours)", c["applications"], ""),
        ("authorized sends", c["sends"], ""),
        ("takeovers after lease expiry", c["takeovers_after_expiry"], ""),
        (
            "takeovers before lease expiry (claim history, database clock)",
            c.get("early_takeovers"),
            "0",
        ),
        ("epochs claimed out of order", c.get("epochs_backwards"), "0"),
    ]
    if fo:
        rows += [("failovers", c["failovers"], f">= {cfg['failovers']}"),
                 ("crash-restarts of the primary", c["crash_restarts"],
                  f">= {cfg['crash_restarts']}")]  # fmt: skip
    # a count the run did not take yet (a report older than the count) gets no row
    L += [f"| {a} | {b} | {x} |" for a, b, x in rows if b is not None]
    if fo:
        L += ["", "## Failovers and crash-restarts", "",
              "The database is a primary and a synchronous standby (world/pg_pair.py): a commit "
              "returns only once the standby has it. A failover crashes the primary, promotes "
              "the standby and rewinds the old primary back as the standby; writes wait for a "
              "synchronous standby, so the window until a write commits includes the rewind. "
              "Times are seconds from the crash (this process's monotonic clock)."
              + (f" Node b's clock runs {cfg['standby_clock_offset']:g} s ahead of this "
                 "machine's (libfaketime): while b is the primary, the database's now() is "
                 "b's; the workers run with --max-clock-skew "
                 f"{abs(cfg['standby_clock_offset']):g} (docs/deployment.md#clocks). The targets and the workers keep this machine's clock. The harness "
                 "measures each node's clock against this machine's (clock_timestamp() between "
                 "two time.time() readings) and logs when each node became the primary; the "
                 "checks read the world's times (target arrivals, ledger rows, worker events, "
                 "revoke calls) on the clock of the node that was primary at that moment "
                 f"(Evidence.db_clock). Measured offsets: {r.get('clock_offsets', {})}."
                 if cfg.get("standby_clock_offset") else ""), "",
              "| at s | kind | crash | promoted after s | writable after s | in sync after s |",
              "|---:|---|---|---:|---:|---:|"]  # fmt: skip
        for f in r.get("faults", []):
            L.append(f"| {f['at_s']} | {f['kind']} | {f['how']} | {f.get('promoted_s', '-')} | "
                     f"{f['writable_s']} | {f.get('in_sync_s', '-')} |")  # fmt: skip
        win = [f["writable_s"] for f in r.get("faults", [])]
        if win:
            L += ["", f"Without a writable primary: {sum(win):.1f} s in all, at most "
                  f"{max(win):.1f} s per fault; {r['chaos'].get('client_retries', 0)} client "
                  f"calls of this process were made again after a lost connection."]  # fmt: skip
    ch = r["chaos"]
    exits = ", ".join(f"{e['worker']} exit {e['exit']}" for e in ch["worker_exits"]) or "none"
    L += ["", f"Chaos: {ch.get('sigkills', 0)} SIGKILLs, {len(ch['worker_exits'])} workers "
          f"died by themselves ({exits}), "
          f"{ch['workers_started']} workers started in all; {ch.get('revokes', 0)} revokes, "
          f"{ch.get('hands', 0)} hand refunds, {ch.get('cancels', 0)} cancels "
          f"({ch.get('revokes_at_wait', 0)}, {ch.get('hands_at_wait', 0)} and "
          f"{ch.get('cancels_at_wait', 0)} of them while the workflow waited for its approval, "
          f"the rest at a random moment; {ch.get('cancel_too_late', 0)} cancels came after the "
          f"end), {ch.get('approvals', 0)} approvals.", ""]  # fmt: skip
    lt, lc = tp["latency_ms"], tp["completed_latency_ms"]
    L += ["## Throughput and latency during the chaos", "",
          f"Over the {tp['chaos_window_s']} s chaos window (database time): "
          f"{tp['terminal_per_s']} workflows/s reached a terminal state "
          f"({tp['completed_per_s']} completed/s); start-to-end latency p50 {lt['p50']} ms, "
          f"p99 {lt['p99']} ms, max {lt['max']} ms over {lt['n']} workflows (completed only: "
          f"p50 {lc['p50']} ms, p99 {lc['p99']} ms). Whole run: {r['wall_s']} s, "
          f"{tp['overall_terminal_per_s']} terminal workflows/s.", ""]  # fmt: skip
    L += ["## Memory per worker", "",
          f"RSS from /proc every {cfg['rss_every']} s. The sentinel `{mem['sentinel']}` lived "
          f"{sent.get('span_s')} s: {sent.get('first_mib')} -> {sent.get('last_mib')} MiB, "
          f"slope {sent.get('slope_mib_per_min')} MiB/min over the whole run, "
          f"{sent.get('slope_second_half_mib_per_min')} MiB/min over its second half: "
          f"**{ {True: 'flat', False: 'GROWING', None: 'not measured'}[mem['flat']] }** (flat: "
          f"at most {mem['flat_limit_mib_per_min']} MiB/min after the warm-up).", "",
          "| worker | samples | lived s | first MiB | last MiB | max MiB | slope MiB/min |"
          " 2nd half MiB/min |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for wid in [mem["sentinel"], *(w for w in mem["long_lived"] if w != mem["sentinel"])]:
        w = mem["workers"].get(wid or "")
        if w:
            L.append(f"| {wid} | {w['samples']} | {w['span_s']} | {w['first_mib']} | "
                     f"{w['last_mib']} | {w['max_mib']} | {w['slope_mib_per_min']} | "
                     f"{w['slope_second_half_mib_per_min']} |")  # fmt: skip
    L += ["", "## Outcomes by tier", "", "| tier and outcome | workflows |", "|---|---|"]
    L += [f"| {k} | {v} |" for k, v in r["outcomes"].items()]
    inv = r["invariants"]
    L += ["", "## Invariants", "",
          f"All {inv['final']['checked']} catalog checks of invariants.py over the database, "
          f"the three targets' ledgers and access logs and {inv['final']['events']} worker "
          f"events at the end ({inv['final']['seconds']} s): {inv['final']['violations']} "
          f"violations; {len(inv['samples'])} samples during the run: "
          f"{sum(s['violations'] for s in inv['samples'])} violations."]  # fmt: skip
    for name, msgs in inv["final"]["broken"].items():
        L.append(f"- {name}: {'; '.join(msgs)}")
    for name, msg in inv["final"]["missing"].items():
        L.append(f"- {name}: {msg}")
    extra = (f" --failover --failovers {cfg['failovers']} --crash-restarts "
             f"{cfg['crash_restarts']}" if fo else "")  # fmt: skip
    if fo and cfg.get("standby_clock_offset"):
        extra += f" --standby-clock-offset {cfg['standby_clock_offset']:g}"
    L += ["", f"Reproduce: `python -m prove.soak --workflows {cfg['workflows']} --minutes "
          f"{cfg['minutes']:g} --workers {cfg['workers']} --seed {cfg['seed']}{extra}`.", ""]  # fmt: skip
    return "\n".join(L)


def run_soak(cfg: dict, log: Any = None) -> dict:
    """Run one soak with cfg (DEFAULTS overridden) and return its report."""
    full = {**DEFAULTS, **cfg}
    if full["seed"] is None:
        full["seed"] = random.SystemRandom().randrange(2**32)
    return Soak(full, log or (lambda *a: print(*a, flush=True))).run()


VERIFIED_NAMES = ("soak", "failover", "failover_clock")


def raw_path(results: Path, name: str) -> Path:
    return results / "raw" / f"{name}.jsonl.gz"


def regenerate(report: dict, name: str) -> str:
    """The command that measures NAME again, from the report's own config."""
    cfg = report.get("config") or {}
    if not cfg:
        return f"python -m prove.soak (see results/{name}.md)"
    extra = ""
    if cfg.get("failover"):
        extra = (
            f" --failover --failovers {cfg['failovers']} --crash-restarts {cfg['crash_restarts']}"
        )
        if cfg.get("standby_clock_offset"):
            extra += f" --standby-clock-offset {cfg['standby_clock_offset']:g}"
    return (
        f"python -m prove.soak --workflows {cfg['workflows']} --minutes {cfg['minutes']:g} "
        f"--workers {cfg['workers']} --seed {cfg['seed']}{extra}"
    )


def write_report(out: Path, name: str, report: dict) -> None:
    """NAME.json (the facts and the aggregates), raw/NAME.jsonl.gz (the rows they come from)
    and NAME.md, rendered from the JSON as written, as `--verify` renders it."""
    facts = {k: v for k, v in report.items() if k != "raw"}
    text = scrub(json.dumps(facts, indent=1, default=str))
    (out / f"{name}.json").write_text(text)
    raw = [json.loads(scrub(json.dumps(r, default=str))) for r in report.get("raw", [])]
    vc.write_jsonl_gz(raw_path(out, name), raw)
    (out / f"{name}.md").write_text(scrub(render(json.loads(text))))


def verify(results: Path = RESULTS, name: str = "soak") -> vc.Outcome:
    """NAME.md and NAME.json's aggregates against their recomputation from raw/NAME.jsonl.gz.
    A report made before the raw rows were kept is unverifiable; its Markdown must still be
    what its JSON gives."""
    label = f"results/{name}.md"
    js, md = results / f"{name}.json", results / f"{name}.md"
    if not js.exists():
        return vc.unverifiable(label, "python -m prove.soak", f"no {name}.json to render it from")
    report = json.loads(js.read_text())
    regen = regenerate(report, name)
    render_cmd = f"python -m prove.soak --render --name {name}"
    committed = md.read_text() if md.exists() else ""
    raw = raw_path(results, name)
    if not raw.exists():
        out = vc.text_outcome(label, committed, scrub(render(report)), regen, render_cmd)
        return vc.unverifiable(label, regen) if out.status == vc.VERIFIED else out
    full = vc.json_roundtrip({**report, **aggregate(report, list(vc.read_jsonl_gz(raw)))})
    return vc.text_outcome(
        label, committed, scrub(render(full)), regen, render_cmd, vc.diff_json(report, full)
    )


def from_results(args: argparse.Namespace) -> int:
    """--verify and --render: read the committed files, run nothing."""
    results = Path(args.out)
    names = [args.name] if args.name else list(VERIFIED_NAMES)
    if args.verify:
        return vc.finish([verify(results, n) for n in names])
    for n in names:
        report = json.loads((results / f"{n}.json").read_text())
        raw = raw_path(results, n)
        if raw.exists():  # the aggregates as the raw rows give them
            report = vc.json_roundtrip({**report, **aggregate(report, list(vc.read_jsonl_gz(raw)))})
        (results / f"{n}.md").write_text(scrub(render(report)))
        print(f"wrote {n}.md from {n}.json" + (" and its raw rows" if raw.exists() else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m prove.soak", description=__doc__.split("\n")[0])
    ap.add_argument("--workflows", type=int, default=DEFAULTS["workflows"])
    ap.add_argument("--minutes", type=float, default=DEFAULTS["minutes"])
    ap.add_argument("--workers", type=int, default=DEFAULTS["workers"])
    ap.add_argument("--seed", type=int, default=None, help="recorded in the report")
    ap.add_argument("--out", default=str(RESULTS), help="directory for soak.md and soak.json")
    ap.add_argument("--kill-every", type=float, default=DEFAULTS["kill_every"])
    ap.add_argument("--sample-every", type=float, default=DEFAULTS["sample_every"])
    ap.add_argument("--failover", action="store_true",
                    help="a primary + synchronous standby with failovers and crash-restarts; "
                    "writes failover.md and failover.json")  # fmt: skip
    ap.add_argument("--failovers", type=int, default=DEFAULTS["failovers"])
    ap.add_argument("--crash-restarts", type=int, default=DEFAULTS["crash_restarts"])
    ap.add_argument(
        "--standby-clock-offset",
        type=float,
        default=0.0,
        help="seconds the standby's clock runs ahead of the primary's (libfaketime)",
    )
    ap.add_argument(
        "--verify",
        action="store_true",
        help="recompute NAME.md and NAME.json's aggregates from raw/NAME.jsonl.gz "
        "in memory and compare (default: soak, failover, failover_clock); runs nothing",
    )
    ap.add_argument(
        "--render",
        action="store_true",
        help="rewrite NAME.md from NAME.json (the template changed); runs nothing",
    )
    ap.add_argument(
        "--name",
        choices=VERIFIED_NAMES,
        default=None,
        help="the report --verify or --render reads (default: all)",
    )
    args = ap.parse_args(argv)
    if args.verify or args.render:
        return from_results(args)
    if args.workflows < 1 or args.workers < 1 or args.minutes <= 0:
        ap.error("--workflows and --workers must be >= 1 and --minutes > 0")
    report = run_soak({"workflows": args.workflows, "minutes": args.minutes,
                       "workers": args.workers, "seed": args.seed,
                       "kill_every": args.kill_every, "sample_every": args.sample_every,
                       "failover": args.failover, "failovers": args.failovers,
                       "crash_restarts": args.crash_restarts,
                       "standby_clock_offset": args.standby_clock_offset})  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "failover" if args.failover else "soak"
    if args.failover and args.standby_clock_offset:
        name = "failover_clock"
    write_report(out, name, report)
    print(json.dumps({"verdict": report["verdict"], **report["counts"],
                      "throughput": report["throughput"]}, indent=1))  # fmt: skip
    return 0 if report["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
