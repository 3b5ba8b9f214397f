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


class Feature:
    def start(self, s: Session, rt: Runtime) -> None:
        raise NotImplementedError

    def ready(self, s: Session) -> bool:
        raise NotImplementedError

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
    def start(self, s: Session, rt: Runtime) -> None:
        from world.target import Target
        from world.target_client import TargetAdmin

        target = Target(2, db=str(s.log_dir / "ledger.db")).start()
        s.stack.callback(target.stop)
        s.targets.append(target)
        admin = TargetAdmin(target.url)
        url = s.facts["target_url"] = s.reachable(target.url, target.port)
        admin.set_delay(1500)  # each send in flight 1.5 s (of its 2.5 s): the fault lands in one
        grant = rt.grant("agent", "refund", constraints={"amount": {"max": 5000}}, by="policy")
        for i in range(3):
            admin.create_payment(f"{PAYMENT}_{i}", 10000)
            case = {"id": f"fx-{i}", "target_url": url, "payment": f"{PAYMENT}_{i}",
                    "tier": 2, "payload": {"amount": 100, "payment": f"{PAYMENT}_{i}"},
                    "grant": grant, "send_timeout": 2.5, "settle_margin": 1.0}  # fmt: skip
            s.runs.append(rt.start(s.refund_flows.policy_refund, f"fx-{i}", case))

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


class Schedules(Feature):
    def start(self, s: Session, rt: Runtime) -> None:
        rt.create_schedule("ms", s.flows.m_scheduled, every=1, input={"log": s.side_log},
                           overlap="allow_all", catchup_window=30)  # fmt: skip
        s.facts["schedule"] = "ms"

    def ready(self, s: Session) -> bool:
        return _started(s, "tick", 2)

    def after_fault(self, s: Session, rt: Runtime) -> None:
        time.sleep(3)  # ticks after the fault too
        _retrying(lambda: rt.pause_schedule("ms", by="matrix"))
        paused = _rows(s, "select now() as now")[0]["now"]
        s.facts["paused_at"] = paused.isoformat()
        time.sleep(2.5)  # two more intervals: a paused schedule must start nothing
        s.runs.extend(
            r["id"]
            for r in _rows(
                s, "select id from ilr.workflows where input->>'schedule_id' = 'ms' order by id"
            )
        )

    def collect(self, s: Session, out: dict[str, Any]) -> None:
        super().collect(s, out)
        out["fires"] = _rows(s, "select * from ilr.schedule_fires order by tick")


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


FEATURES: dict[str, Feature] = {
    "steps": Steps(),
    "timers": Timers(),
    "signals": Signals(),
    "effects": Effects(),
    "queues": Queues(),
    "schedules": Schedules(),
    "timeouts": Timeouts(),
}
