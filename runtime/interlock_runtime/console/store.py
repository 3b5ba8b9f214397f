"""Read-only queries of the console. Every action goes through Runtime (runtime.py); these only
read, so they work under the ilr_operator and ilr_auditor roles alike."""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

import psycopg

from .. import approve_cli, db, receipts
from ..errors import WorkflowNotFound
from ..runtime import Runtime
from ..vocabulary import LIVE_STATUSES, WorkflowStatus

LIVE = LIVE_STATUSES
STATUSES = WorkflowStatus.values()

_INBOX = """
select id from ilr.workflows
 where status in ('pending', 'running', 'sleeping') and waiting->>'signal' = 'approve'
 order by created_at, id"""

_SIGNALS = """
select id, name, payload, sender, consumed_seq, created_at
  from ilr.signals where workflow_id = %(wf)s order by id"""

_EFFECTS = """
select effect_id, workflow_id, target, tier, state, grant_id, sends, first_dispatched_at,
       send_deadline, settle_margin, reconciled
  from ilr.effects
 order by first_dispatched_at desc nulls last, effect_id
 limit %(limit)s"""

_JOURNAL = "select seq, kind, body from ilr.journal where effect_id = %(eid)s order by seq"

_GRANTS = """
select g.id, g.principal, g.action, g.constraints, g.payload_hash, g.facts_seen, g.granted_by,
       g.expires_at, g.revoked_at, g.revoked_by, g.created_at,
       (g.revoked_at is null and (g.expires_at is null or g.expires_at > now())) as live,
       (select count(*) from ilr.effects e where e.grant_id = g.id) as effects,
       (select count(*) from ilr.effects e
         where e.grant_id = g.id and e.state = 'dispatched') as in_flight
  from ilr.grants g
 order by g.created_at desc, g.id
 limit %(limit)s"""

_GRANT = """
select id, principal, action, constraints, payload_hash, facts_seen, granted_by, expires_at,
       revoked_at, revoked_by, created_at,
       (revoked_at is null and (expires_at is null or expires_at > now())) as live
  from ilr.grants where id = %(grant)s"""

_GRANT_EFFECTS = """
select effect_id, workflow_id, state, tier, sends, send_deadline
  from ilr.effects where grant_id = %(grant)s order by effect_id"""


def fingerprint(wf_id: str, payload: Any, facts: Any) -> str:
    """What the approver was shown: the Approve form carries it back, so a proposal that is no
    longer the one on the page is refused instead of approved."""
    text = json.dumps([wf_id, payload, facts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def proposal(wf: dict[str, Any]) -> dict[str, Any]:
    """What a waiting workflow proposes for approval (ctx.wait_approval's proposal, else the
    payload of its latest decision) and the facts of that decision, as `interlock approve`."""
    decision = approve_cli.decided(wf)
    payload, problem = None, None
    try:
        payload = approve_cli.proposed_payload(wf, decision)
    except ValueError as exc:
        problem = str(exc)
    facts = decision.get("premises") if decision else None
    return {"decision": decision, "payload": payload, "facts": facts, "problem": problem,
            "fingerprint": fingerprint(wf["id"], payload, facts)}  # fmt: skip


class Store:
    """A Runtime for actions and one more connection for the console's own reads."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.rt = Runtime(dsn)
        self._lock = threading.Lock()
        self._conn = db.connect(dsn)

    def close(self) -> None:
        self.rt.close()
        self._conn.close()

    def _rows(self, sql: str, params: dict[str, Any] | None = None) -> list[db.Row]:
        with self._lock:
            if self._conn.closed or self._conn.broken:  # e.g. after a server restart
                self._conn = db.connect(self.dsn)
            try:
                return self._conn.execute(sql, params).fetchall()
            except psycopg.OperationalError:
                self._conn.close()
                raise

    def whoami(self) -> str:
        user: str = self._rows("select current_user as u")[0]["u"]
        return user

    def workflows(self, status: str | None, name: str | None, version: str | None) -> list[db.Row]:
        return self.rt.list(status=status, name=name, version=version, limit=500)

    def workflow(self, wf_id: str) -> db.Row:
        wf = self.rt.describe(wf_id)
        wf["signals"] = self._rows(_SIGNALS, {"wf": wf_id})
        return wf

    def inbox(self) -> list[dict[str, Any]]:
        out = []
        for row in self._rows(_INBOX):
            try:
                wf = self.workflow(row["id"])
            except WorkflowNotFound:
                continue
            out.append({"wf": wf, **proposal(wf)})
        return out

    def effects(self) -> list[db.Row]:
        return self._rows(_EFFECTS, {"limit": 500})

    def ambiguous(self) -> list[db.Row]:
        return self.rt.ambiguous()

    def effect(self, effect_id: str, key: bytes | None) -> db.Row:
        rows = self._rows(db.query("get_effect"), {"eid": effect_id})
        if not rows:
            raise WorkflowNotFound(f"no effect with id {effect_id!r}")
        eff = rows[0]
        journal = self._rows(_JOURNAL, {"eid": effect_id})
        eff["journal"] = [{"seq": j["seq"], "kind": j["kind"], "entry": json.loads(j["body"])}
                          for j in journal]  # fmt: skip
        eff["bundle"] = self.rt.receipt(effect_id, key=key) if journal else None
        eff["verify"] = receipts.verify(eff["bundle"], key) if journal else None
        eff["checklist_text"] = receipts.checklist(eff["verify"], effect_id) if journal else ""
        return eff

    def grants(self) -> list[db.Row]:
        return self._rows(_GRANTS, {"limit": 500})

    def grant(self, grant_id: str) -> db.Row:
        rows = self._rows(_GRANT, {"grant": grant_id})
        if not rows:
            raise WorkflowNotFound(f"no grant with id {grant_id!r}")
        g = rows[0]
        g["effect_rows"] = self._rows(_GRANT_EFFECTS, {"grant": grant_id})
        return g
