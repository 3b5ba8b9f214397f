"""One gated effect call: EffectCall holds what every stage of the gate reads (dispatch in
effects.dispatch, the send and commit in effects.commit, recovery in effects.recovery) and the
few things they share: the effect's hash chain (Chain), its step row, suspending the run
until a time, and telling whose dispatch is open."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import Any, NoReturn

from .. import db, journal
from ..errors import Fenced, Suspend
from ..run_port import RunPort
from .breaker import Breaker
from .results import EffectResult
from .spec import TargetSpec


def journal_entries(conn: db.Conn, eid: str) -> list[dict[str, Any]]:
    """The effect's sealed entries, in chain order."""
    return [json.loads(r["body"]) for r in conn.execute(db.query("journal_entries"), {"eid": eid})]


class Chain:
    """Appends sealed entries to one effect's chain inside an open transaction."""

    def __init__(self, conn: db.Conn, eid: str, entries: list[dict[str, Any]], ts: float):
        self.conn, self.eid, self.ts = conn, eid, ts
        self.prev = entries[-1]["hash"] if entries else None

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        sealed = journal.seal({"ts": self.ts, "kind": kind, "effect_id": self.eid, **fields},
                              self.prev)  # fmt: skip
        self.conn.execute(db.query("append_entry"), {"eid": self.eid, "kind": kind,
                          "body": journal.body_text(sealed), "prev": self.prev,
                          "hash": sealed["hash"]})  # fmt: skip
        self.prev = sealed["hash"]
        return sealed


class EffectCall:
    """One ctx.effect call at the frontier: the submit path, or recovery of an open send.

    `eid`, `ph` (the payload's hash) and `fingerprint` are computed once by the caller.
    `records_step` is False when the call only resolves someone else's send (an orphan, or
    a caller offering another payload): no step row is written then."""

    def __init__(self, port: RunPort, seq: int, name: str, target: Any, spec: TargetSpec, *,
                 eid: str, payload: Any, ph: str, fingerprint: str | None, premises: Any,
                 grant: str, action: str, local_premises: Any = (), compensation: bool = False,
                 decision: Any = None, postcondition: Any = None,
                 records_step: bool = True):  # fmt: skip
        self.port, self.seq, self.name, self.target, self.spec = port, seq, name, target, spec
        self.eid, self.payload, self.ph, self.fingerprint = eid, payload, ph, fingerprint
        self.premises, self.grant, self.action = premises, grant, action
        self.local_premises, self.compensation, self.decision = (
            local_premises,
            compensation,
            decision,
        )
        self.postcondition = postcondition
        self.records_step = records_step
        self._breaker = Breaker(port.conn, spec)
        self.why_suspended = ""

    @property
    def conn(self) -> db.Conn:
        """The run's connection now: the asyncio worker lends the run one per stage of the
        gate (none is held while a send is out)."""
        return self.port.conn

    @property
    def breaker(self) -> Breaker:
        self._breaker.conn = self.port.conn
        return self._breaker

    # -- the effects row and its chain --------------------------------------------------------

    def lock_effect(self) -> db.Row:
        """The effects row, locked FOR UPDATE until the transaction ends."""
        return db.one(self.conn.execute(db.query("lock_effect"), {"eid": self.eid}))

    def set_state(self, state: str) -> None:
        self.conn.execute(db.query("set_effect_state"), {"eid": self.eid, "state": state})

    def chain(self, ts: float) -> Chain:
        """The effect's chain as stored now, to append entries stamped `ts`."""
        return Chain(self.conn, self.eid, journal_entries(self.conn, self.eid), ts)

    def dispatched_by_me(self, eff: db.Row) -> bool:
        return (eff["dispatch_workflow_id"], eff["dispatch_epoch"]) == (self.port.workflow_id,
                                                                        self.port.epoch)  # fmt: skip

    # -- outcomes -----------------------------------------------------------------------------

    def record(self, status: str, result: Any = None, reason: str | None = None) -> EffectResult:
        """Insert the effect's step row inside the open fenced transaction (unless this call
        only resolves someone else's send: orphans, or a caller offering another payload)."""
        res = EffectResult(status, self.eid, result, reason)
        if self.records_step:
            self.port.insert_step(self.seq, "effect", self.name, output=asdict(res),
                                  fingerprint=self.fingerprint)  # fmt: skip
        return res

    def resolved_elsewhere_in_txn(self, eff: db.Row) -> EffectResult:
        """Inside a fenced transaction: the open send was resolved by another claim."""
        status = {"committed": "DUPLICATE_IGNORED", "ambiguous": "AMBIGUOUS"}.get(eff["state"])
        if status is None:
            raise Fenced(f"effect {self.eid} is {eff['state']} under another claim")
        return self.record(status)

    def suspend_until(self, until: datetime, why: str) -> None:
        """Inside an open fenced transaction: release the row until `until` (status pending);
        suspend_after_commit() then ends the run."""
        waiting = {"seq": self.seq, "kind": "effect", "name": self.name, "until": until.isoformat()}
        self.conn.execute(db.query("suspend_until"), {"wf": self.port.workflow_id,
                          "status": "pending", "waiting": db.jsonb(waiting), "until": until})  # fmt: skip
        self.why_suspended = why

    def suspend_after_commit(self) -> NoReturn:
        self.port.unwind(
            Suspend(f"{self.port.workflow_id}: effect {self.eid} {self.why_suspended}")
        )
