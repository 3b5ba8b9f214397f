"""The features of the fault matrix (models/faults.yaml `features`): what each starts, the
moment its fault lands, what it does after the fault, and the ground truth it adds to the
evidence. The checks that judge them are conformance/matrix/checks.py."""

from __future__ import annotations

import time
from typing import Any

from conformance.matrix.cells import PAYMENT, Session, _retrying
from interlock_runtime import Runtime, db


def _rows(s: Session, sql: str, params: Any = None) -> list[dict[str, Any]]:
    def read() -> list[dict[str, Any]]:
        with db.connect(s.dsn) as conn:
            return conn.execute(sql, params).fetchall()

    result: list[dict[str, Any]] = _retrying(read)
    return result


def _started(s: Session, step: str, count: int = 1) -> bool:
    """`count` starts of `step` in the side log (a body is running: the fault's moment)."""
    try:
        with open(s.side_log) as f:
            return sum(1 for line in f if f'"step": "{step}"' in line) >= count
    except FileNotFoundError:
        return False


def _service_ms(s: Session) -> int:
    """The target's service time: each send in flight 1.5 s of its 2.5 s, so the fault lands
    in one; under slow_target 3 s, past the send timeout and within the 1 s settle margin."""
    return 3000 if s.cell.fault == "slow_target" else 1500


def _after_pause(s: Session) -> None:
    """What the pause's commit is judged against: the database's time, and a snapshot taken
    after it, in which every transaction committed before the pause is visible."""
    row = _rows(s, "select now() as now, pg_current_snapshot()::text as snap")[0]
    s.facts["paused_at"], s.facts["snapshot_after_pause"] = row["now"].isoformat(), row["snap"]


def _fires_after_pause(s: Session) -> list[dict[str, Any]]:
    """The started fires whose transaction committed after the pause: invisible in the snapshot
    taken after it (a fire row is inserted once and not updated, so its xmin is its insert's;
    xmin read as xid8 holds while the cluster's xid epoch is 0)."""
    sids = s.facts.get("schedules") or [s.facts["schedule"]]
    return _rows(s, "select tick, workflow_id from ilr.schedule_fires where schedule_id = any(%s) "
                    "and outcome = 'started' and not pg_visible_in_snapshot(xmin::text::xid8, "
                    "%s::pg_snapshot)", (sids, s.facts["snapshot_after_pause"]))  # fmt: skip


class Feature:
    def start(self, s: Session, rt: Runtime) -> None:
        raise NotImplementedError

    def ready(self, s: Session) -> bool:
        raise NotImplementedError

    def launched(self, s: Session, rt: Runtime) -> None:
        """What the feature does once its workers run, before its fault's moment (approve)."""

    def after_fault(self, s: Session, rt: Runtime) -> None:
        """What the feature does once the fault has landed (send signals, pause a schedule)."""

    def collect(self, s: Session, out: dict[str, Any]) -> None:
        out["workflows"] = _rows(s, "select id, name, status, result, error, input, queue, "
                                    "created_at, updated_at from ilr.workflows order by id")  # fmt: skip
        out["steps"] = _rows(s, "select workflow_id, seq, kind, name, output, error, epoch, "
                                "created_at from ilr.steps order by workflow_id, seq")  # fmt: skip
        out["claims"] = _rows(s, "select * from ilr.claims order by workflow_id, epoch")
        out["grants"] = _rows(s, "select id, principal, revoked_at, revoked_by from ilr.grants")
        out["db_now"] = _rows(s, "select now() as now")[0]["now"]


class ScheduleFeature(Feature):
    """A feature whose runs a schedule starts: they are known only after the fault, and the
    schedule is paused last, its pause judged by what commits after it."""

    SID = ""

    def sids(self) -> list[str]:
        """The schedules of the feature (one, but for cron's two)."""
        return [self.SID]

    def count(self, s: Session, sid: str | None = None) -> int:
        return int(_rows(s, "select count(*) n from ilr.workflows where input->>'schedule_id' "
                            "= %s", (sid or self.SID,))[0]["n"])  # fmt: skip

    def wait_runs(self, s: Session, n: int) -> None:
        from interlock_runtime.testing import wait_for

        wait_for(lambda: self.count(s) >= n, 60, f"the schedule's run {n}")

    def pause_last(self, s: Session, rt: Runtime) -> None:
        """Pause, then two more intervals (a paused schedule must start nothing); the runs to
        judge are every run the schedule started."""
        for sid in self.sids():
            _retrying(lambda sid=sid: rt.pause_schedule(sid, by="matrix"))
        _after_pause(s)
        time.sleep(2.5)
        s.runs.extend(r["id"] for r in _rows(s, "select id from ilr.workflows where "
                                                "input->>'schedule_id' = any(%s) order by id",
                                                (self.sids(),)))  # fmt: skip

    def collect(self, s: Session, out: dict[str, Any]) -> None:
        super().collect(s, out)
        out["fires"] = _rows(s, "select * from ilr.schedule_fires order by tick")
        out["fires_after_pause"] = _fires_after_pause(s)
        out["schedules"] = _rows(s, "select id, overlap, missed_ticks, next_fire_at, last_tick "
                                    "from ilr.schedules order by id")  # fmt: skip


class Steps(Feature):
    def start(self, s: Session, rt: Runtime) -> None:
        for i in range(3):
            s.runs.append(rt.start(s.flows.m_steps, f"steps-{i}", {"log": s.side_log, "hold": 0.8}))

    def ready(self, s: Session) -> bool:
        return _started(s, "s2", 2)  # a retry taken, a run mid-body


class Timers(Feature):
    SECONDS = 2.0

    def start(self, s: Session, rt: Runtime) -> None:
        for i in range(3):
            s.runs.append(rt.start(s.flows.m_timer, f"timer-{i}",
                                   {"log": s.side_log, "seconds": self.SECONDS}))  # fmt: skip
        s.facts["seconds"] = self.SECONDS

    def ready(self, s: Session) -> bool:
        return _started(s, "before", 3)  # every run is asleep or about to be


class Signals(Feature):
    def start(self, s: Session, rt: Runtime) -> None:
        for i in range(3):
            s.runs.append(rt.start(s.flows.m_signals, f"sig-{i}", {}))
        s.facts["sent"] = {wf: [] for wf in s.runs}
        for wf in s.runs:
            self._send(s, rt, wf, 1)

    def _send(self, s: Session, rt: Runtime, wf: str, n: int) -> None:
        _retrying(lambda: rt.signal(wf, "go", {"n": n, "wf": wf}))
        s.facts["sent"][wf].append({"n": n, "wf": wf})

    def ready(self, s: Session) -> bool:
        rows = _rows(s, "select count(*) n from ilr.steps where kind = 'signal'")
        return bool(rows[0]["n"] >= 1)

    def after_fault(self, s: Session, rt: Runtime) -> None:
        for wf in s.runs:
            self._send(s, rt, wf, 2)

    def collect(self, s: Session, out: dict[str, Any]) -> None:
        super().collect(s, out)
        out["signals"] = _rows(s, "select workflow_id, name, payload, consumed_seq "
                                  "from ilr.signals order by workflow_id, id")  # fmt: skip


class Effects(Feature):
    """Three refunds under a policy grant at the feature's tier: 1 (idempotency keys and a
    lookup, as Stripe), 2 (a lookup, no keys) or 3 (neither: never resent blind)."""

    def __init__(self, tier: int = 2):
        self.tier = tier

    def cases(self, s: Session, prefix: str) -> list[dict[str, Any]]:
        """A target at the tier holding each refund for _service_ms, a paid payment per case,
        and each case's refund (the target named as the workers reach it)."""
        from world.target import Target
        from world.target_client import TargetAdmin

        target = Target(self.tier, db=str(s.log_dir / "ledger.db")).start()
        s.stack.callback(target.stop)
        s.targets.append(target)
        admin = TargetAdmin(target.url)
        url = s.facts["target_url"] = s.reachable(target.url, target.port)
        admin.set_delay(_service_ms(s))
        out = []
        for i in range(3):
            admin.create_payment(f"{PAYMENT}_{i}", 10000)
            out.append({"id": f"{prefix}-{i}", "target_url": url, "payment": f"{PAYMENT}_{i}",
                        "tier": self.tier, "send_timeout": 2.5, "settle_margin": 1.0})  # fmt: skip
        s.facts["tier"] = self.tier
        return out

    def start(self, s: Session, rt: Runtime) -> None:
        grant = rt.grant("agent", "refund", constraints={"amount": {"max": 5000}}, by="policy")
        for case in self.cases(s, "fx"):
            case.update(payload={"amount": 100, "payment": case["payment"]}, grant=grant)
            s.runs.append(rt.start(s.refund_flows.policy_refund, case["id"], case))

    def ready(self, s: Session) -> bool:
        """A send in flight: DISPATCHED in the journal and not yet resolved. (The target's
        admin API answers only once the held POST is served, so it cannot say this.)"""
        rows = _rows(s, "select count(*) n from ilr.journal d where d.kind = 'DISPATCHED' and "
                        "not exists (select 1 from ilr.journal c where c.effect_id = d.effect_id "
                        "and c.kind in ('COMMITTED', 'REFUSED', 'AMBIGUOUS'))")  # fmt: skip
        return bool(rows[0]["n"] >= 1)

    def collect(self, s: Session, out: dict[str, Any]) -> None:
        from world.target_client import TargetAdmin

        super().collect(s, out)
        admin = TargetAdmin(s.targets[0].url)
        out["ledger"] = admin.ledger()["refunds"]
        out["access_log"] = admin.log()
        out["receipts"] = _receipts(s)


def _receipts(s: Session) -> dict[str, dict[str, Any]]:
    """Each effect's receipt, exported, signed with an Ed25519 key made here and verified with
    only its public half: what a stranger holding the receipt would conclude."""
    from interlock_runtime.receipts import bundles as receipt_bundle
    from interlock_runtime.receipts import keys as receipt_keys
    from interlock_runtime.receipts import verification as receipt_verify

    private = receipt_keys.generate()
    public = receipt_keys.public_of(private)
    out = {}
    with Runtime(s.dsn, create_schema=False) as rt:
        for row in _rows(s, "select effect_id from ilr.effects order by effect_id"):
            signed = receipt_bundle.sign(rt.receipt(row["effect_id"]), private)
            out[row["effect_id"]] = receipt_verify.verify(signed, public)
    return out


class Queues(Feature):
    LIMIT = 2

    def start(self, s: Session, rt: Runtime) -> None:
        rt.queue("mq", concurrency=self.LIMIT)
        for i in range(6):
            s.runs.append(rt.start(s.flows.m_queued, f"q-{i}", {"log": s.side_log, "hold": 0.8},
                                   queue="mq"))  # fmt: skip
        s.facts["limit"] = self.LIMIT

    def ready(self, s: Session) -> bool:
        return _started(s, "work", 3)


class Schedules(ScheduleFeature):
    SID = "ms"

    def start(self, s: Session, rt: Runtime) -> None:
        rt.create_schedule(self.SID, s.flows.m_scheduled, every=1, input={"log": s.side_log},
                           overlap="allow_all", catchup_window=30)  # fmt: skip
        s.facts["schedule"] = self.SID

    def ready(self, s: Session) -> bool:
        return _started(s, "tick", 2)

    def after_fault(self, s: Session, rt: Runtime) -> None:
        time.sleep(3)  # ticks after the fault too
        self.pause_last(s, rt)


class Timeouts(Feature):
    TIMEOUT = 3.0

    def start(self, s: Session, rt: Runtime) -> None:
        for i in range(2):
            s.runs.append(rt.start(s.flows.m_deadline, f"to-{i}",
                                   {"log": s.side_log, "steps": 8, "hold": 1.0},
                                   execution_timeout=self.TIMEOUT))  # fmt: skip
        s.facts["timeout"] = self.TIMEOUT

    def ready(self, s: Session) -> bool:
        return _started(s, "s0", 2)


class Children(Feature):
    def start(self, s: Session, rt: Runtime) -> None:
        for i in range(2):
            s.runs.append(rt.start(s.flows.m_parent, f"par-{i}", {"log": s.side_log, "hold": 0.8}))

    def ready(self, s: Session) -> bool:
        return _started(s, "work", 2)  # a child's body running

    def after_fault(self, s: Session, rt: Runtime) -> None:
        pass

    def collect(self, s: Session, out: dict[str, Any]) -> None:
        super().collect(s, out)
        out["children"] = _rows(s, "select id, parent_id, status, result from ilr.workflows "
                                   "where parent_id is not null order by id")  # fmt: skip


class Chains(Feature):
    UNTIL = 4

    def start(self, s: Session, rt: Runtime) -> None:
        for i in range(2):
            s.runs.append(rt.start(s.flows.m_chain, f"chain-{i}",
                                   {"n": 0, "until": self.UNTIL, "log": s.side_log, "hold": 0.5}))  # fmt: skip
        s.facts["until"] = self.UNTIL

    def ready(self, s: Session) -> bool:
        return _started(s, "work", 3)

    def after_fault(self, s: Session, rt: Runtime) -> None:
        """The runs judged are each chain's last: its first run followed to its successors."""
        from interlock_runtime.testing import wait_for

        def last(wf: str) -> str | None:
            while True:
                row = _rows(s, "select status, result from ilr.workflows where id = %s", (wf,))
                if not row or row[0]["status"] != "continued":
                    return wf if row else None
                wf = row[0]["result"]["continued_as"]

        firsts = list(s.runs)
        wait_for(lambda: all(last(wf) is not None for wf in firsts), 60, "the chains' successors")
        s.facts["firsts"] = firsts
        final = "('completed', 'failed', 'cancelled', 'timed_out', 'stuck')"
        wait_for(lambda: all(_rows(s, f"select 1 from ilr.workflows where id = %s and status in "
                                      f"{final}", (last(wf),)) for wf in firsts),
                 120, "each chain's last run to end")  # fmt: skip
        s.runs[:] = [str(last(wf)) for wf in firsts]


class StepTimeouts(Feature):
    HANG = 4.0

    def start(self, s: Session, rt: Runtime) -> None:
        for i in range(3):
            s.runs.append(rt.start(s.flows.m_step_timeout, f"st-{i}",
                                   {"log": s.side_log, "hang": self.HANG}))  # fmt: skip
        s.facts["start_to_close"] = 1.0

    def ready(self, s: Session) -> bool:
        return _started(s, "slow", 3)  # every first attempt hanging


class Approvals(Effects):
    def start(self, s: Session, rt: Runtime) -> None:
        for case in self.cases(s, "ap"):
            s.runs.append(rt.start(s.refund_flows.refund, case["id"], case))
        s.facts["revokes"] = []

    def launched(self, s: Session, rt: Runtime) -> None:
        """A person approves each proposal once it waits (the payload the model proposed)."""
        from interlock_runtime.testing import wait_for

        s.facts["grants"] = {}
        for wf in s.runs:
            wait_for(lambda wf=wf: (rt.describe(wf)["waiting"] or {}).get("signal") == "approve",
                     60, f"{wf} to wait for approval")  # fmt: skip
            decided = rt.describe(wf)["steps"][0]["output"]
            amount = decided["response"]["amount"]
            payment = rt.describe(wf)["input"]["payment"]
            s.facts["grants"][wf] = rt.approve(wf, {"payment": payment, "amount": amount},
                                               decided["premises"], by="alice")  # fmt: skip

    def after_fault(self, s: Session, rt: Runtime) -> None:
        """The last approval is revoked once the fault has landed (its send may be done, in
        flight or not yet made): what revoke returned is evidence for RevokeLinearizable."""
        from conformance.invariants import record_revoke

        grant = s.facts["grants"][s.runs[-1]]
        _retrying(lambda: record_revoke(rt, grant, "alice", s.facts["revokes"]))


class QueueRates(Feature):
    """Six runs on a queue limited to 2 first starts a second, and six more on a queue of
    per-key concurrency 1 over two keys; a start that repeats a live run's dedup id is refused."""

    RATE, PERIOD = 2, 1.0

    def start(self, s: Session, rt: Runtime) -> None:
        rt.queue("rated", rate=(self.RATE, self.PERIOD))
        rt.queue("keyed", per_key_concurrency=1)
        for i in range(6):
            s.runs.append(rt.start(s.flows.m_queued, f"rate-{i}", {"log": s.side_log, "hold": 0.3},
                                   queue="rated"))  # fmt: skip
            s.runs.append(rt.start(s.flows.m_queued, f"key-{i}", {"log": s.side_log, "hold": 0.6},
                                   queue="keyed", queue_key="ab"[i % 2],
                                   dedup_id=f"d-{i}"))  # fmt: skip
        from interlock_runtime import WorkflowConflict

        try:  # a second live run with d-0 on the same queue: refused, nothing written
            rt.start(s.flows.m_queued, "key-dup", {"log": s.side_log, "hold": 0.1},
                     queue="keyed", queue_key="a", dedup_id="d-0")  # fmt: skip
            s.facts["dedup_refused"] = False
        except WorkflowConflict:
            s.facts["dedup_refused"] = True
        s.facts.update(rate=self.RATE, period=self.PERIOD)

    def ready(self, s: Session) -> bool:
        return _started(s, "work", 4)


class OverlapSkip(ScheduleFeature):
    """A schedule every second whose runs take 2.5 s, overlap "skip": a tick that falls while
    the previous run lives starts nothing."""

    SID = "skip"

    def start(self, s: Session, rt: Runtime) -> None:
        rt.create_schedule(self.SID, s.flows.m_scheduled, every=1, overlap="skip",
                           catchup_window=30, input={"log": s.side_log, "hold": 2.5})  # fmt: skip
        s.facts["schedule"] = self.SID

    def ready(self, s: Session) -> bool:
        return _started(s, "tick", 1)

    def after_fault(self, s: Session, rt: Runtime) -> None:
        """Ticks after the fault too: until a second run has started (a fault may keep the
        first alive for a while; every tick meanwhile is skipped), then the pause."""
        self.wait_runs(s, 2)
        self.pause_last(s, rt)


class BufferResume(ScheduleFeature):
    """A schedule every second, overlap buffer_one, whose runs take 2 s: a tick that falls while
    a run lives is buffered (one at most) and starts once that run ends. After the fault it is
    paused for 3 s and resumed: ticks that fell while paused are not made up."""

    SID = "buf"

    def start(self, s: Session, rt: Runtime) -> None:
        rt.create_schedule(self.SID, s.flows.m_scheduled, every=1, overlap="buffer_one",
                           catchup_window=30, input={"log": s.side_log, "hold": 2.0})  # fmt: skip
        s.facts["schedule"] = self.SID

    def ready(self, s: Session) -> bool:
        return _started(s, "tick", 1)

    def after_fault(self, s: Session, rt: Runtime) -> None:
        self.wait_runs(s, 2)
        _retrying(lambda: rt.pause_schedule(self.SID, by="matrix"))
        paused = _rows(s, "select now() as now")[0]["now"]
        time.sleep(3)
        _retrying(lambda: rt.resume_schedule(self.SID))
        resumed = _rows(s, "select now() as now")[0]["now"]
        s.facts["paused_window"] = [paused.isoformat(), resumed.isoformat()]
        self.wait_runs(s, self.count(s) + 1)  # a run after the resume
        self.pause_last(s, rt)


class WorkerLimits(Feature):
    """Eight runs on a queue of per-worker concurrency 1, half at priority 0 and half at 5,
    started before any worker: each worker holds one at most, and the urgent ones start first."""

    def start(self, s: Session, rt: Runtime) -> None:
        rt.queue("solo", worker_concurrency=1)
        for i in range(8):
            priority = 0 if i % 2 else 5
            s.runs.append(rt.start(s.flows.m_queued, f"pri{priority}-{i}",
                                   {"log": s.side_log, "hold": 0.5}, queue="solo",
                                   priority=priority))  # fmt: skip

    def ready(self, s: Session) -> bool:
        return _started(s, "work", 2)


class Queries(Feature):
    def start(self, s: Session, rt: Runtime) -> None:
        for i in range(3):
            s.runs.append(
                rt.start(s.flows.m_published, f"qy-{i}", {"log": s.side_log, "hold": 0.6})
            )

    def ready(self, s: Session) -> bool:
        return _started(s, "s1", 2)

    def after_fault(self, s: Session, rt: Runtime) -> None:
        """Queries read during the runs, after the fault, from the sync client: each answer
        must be a status the committed history had published by then."""
        answers = []
        for _ in range(5):
            for wf in s.runs:
                answers.append((wf, _retrying(lambda wf=wf: rt.query(wf))))
            time.sleep(0.2)
        s.facts["answers"] = answers


class Cron(ScheduleFeature):
    """Two cron schedules, their ticks a minute apart, each back from an outage: made with its
    next tick BACKLOG minutes in the past, as a schedule is left when no worker ran for that
    long. The first pass catches up (docs/schedules.md#catch-up): ticks older than
    the catch-up window are dropped and counted in missed_ticks, the others decided in order
    under the overlap policy. `cron_all` (allow_all) is caught up by the workers as they start
    (its runs are what the fault lands on); `cron_skip` (skip) is put back after the fault, so
    the workers that came through it catch it up."""

    BACKLOG, WINDOW, HOLD = 5, 150.0, 2.0  # minutes behind; seconds of catch-up; of each run
    SPECS = {"cron_all": ("* * * * *", "allow_all"), "cron_skip": ("0-59 * * * *", "skip")}

    def sids(self) -> list[str]:
        return list(self.SPECS)

    def _back_from_outage(self, s: Session, rt: Runtime, sid: str) -> None:
        """Made paused, then in one transaction unpaused with its next tick in the past; only
        once (last_tick null), so a retry through a fault does not put it back twice."""
        cron, overlap = self.SPECS[sid]
        rt.create_schedule(sid, s.flows.m_scheduled, cron=cron, overlap=overlap, paused=True,
                           catchup_window=self.WINDOW,
                           input={"log": s.side_log, "hold": self.HOLD})  # fmt: skip
        _rows(s, "update ilr.schedules set paused = false, paused_at = null, paused_by = null, "
                 "next_fire_at = date_trunc('minute', now()) - make_interval(mins => %s) "
                 "where id = %s and last_tick is null returning id", (self.BACKLOG, sid))  # fmt: skip
        since = _rows(s, "select next_fire_at from ilr.schedules where id = %s", (sid,))
        s.facts.setdefault("backlogs", {})[sid] = since[0]["next_fire_at"].isoformat()

    def start(self, s: Session, rt: Runtime) -> None:
        s.facts.update(schedules=self.sids(), window=self.WINDOW)
        self._back_from_outage(s, rt, "cron_all")

    def ready(self, s: Session) -> bool:
        return _started(s, "tick", 2)  # two of the caught-up runs are running

    def after_fault(self, s: Session, rt: Runtime) -> None:
        from interlock_runtime.testing import wait_for

        _retrying(lambda: self._back_from_outage(s, rt, "cron_skip"))
        wait_for(lambda: self.count(s, "cron_skip") >= 1, 60, "cron_skip's catch-up")
        self.pause_last(s, rt)


class ConsoleApprovals(Approvals):
    """As approvals, but a person approves and revokes at the console: `interlock console` on a
    real socket, its login, the workflow's page and the form on it (conformance/matrix/
    console.py), never rt.approve."""

    def start(self, s: Session, rt: Runtime) -> None:
        from conformance.matrix.console import ConsoleProcess, Person

        console = ConsoleProcess(s.dsn, s.log_dir)
        s.stack.callback(console.close)
        self.person = Person(console)
        self.person.log_in()
        super().start(s, rt)

    def launched(self, s: Session, rt: Runtime) -> None:
        """The person approves each proposal at its workflow's page once it waits."""
        from conformance.matrix.console import OPERATOR
        from interlock_runtime.testing import wait_for

        s.facts.update(grants={}, shown={}, operator=OPERATOR)
        for wf in s.runs:
            wait_for(lambda wf=wf: (rt.describe(wf)["waiting"] or {}).get("signal") == "approve",
                     60, f"{wf} to wait for approval")  # fmt: skip
            s.facts["grants"][wf], s.facts["shown"][wf] = self.person.approve(wf)

    def after_fault(self, s: Session, rt: Runtime) -> None:
        """The last approval is revoked at the console once the fault has landed (its send
        may be done, in flight or not yet made); the console's list of what may still land is
        the evidence of RevokeLinearizable, as rt.revoke's is for approvals."""
        from conformance.matrix.console import revoke_recorded

        grant = s.facts["grants"][s.runs[-1]]
        _retrying(lambda: revoke_recorded(self.person, grant, s.facts["revokes"]))

    def collect(self, s: Session, out: dict[str, Any]) -> None:
        super().collect(s, out)
        out["grant_rows"] = _rows(s, "select id, principal, payload_hash, facts_seen, granted_by, "
                                     "revoked_at, revoked_by from ilr.grants order by id")  # fmt: skip
        out["audit"] = _rows(s, "select event, operator, subject, detail, at from "
                                "ilr.operator_audit order by id")  # fmt: skip
        out["effect_rows"] = _rows(s, "select effect_id, workflow_id, payload_hash, grant_id "
                                      "from ilr.effects order by effect_id")  # fmt: skip


FEATURES: dict[str, Feature] = {
    "steps": Steps(),
    "timers": Timers(),
    "signals": Signals(),
    "effects": Effects(2),
    "effects_t1": Effects(1),
    "effects_t3": Effects(3),
    "queues": Queues(),
    "schedules": Schedules(),
    "timeouts": Timeouts(),
    "children": Children(),
    "continue_as_new": Chains(),
    "step_timeouts": StepTimeouts(),
    "approvals": Approvals(),
    "queue_rates": QueueRates(),
    "overlap_skip": OverlapSkip(),
    "queries": Queries(),
    "buffer_resume": BufferResume(),
    "worker_limits": WorkerLimits(),
    "cron": Cron(),
    "console_approvals": ConsoleApprovals(),
}
