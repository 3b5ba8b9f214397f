"""The console's reads and its audited actions (SQL in sql/queries.sql, the console_* queries).

Reads work under the ilr_operator and ilr_auditor roles alike. Each action (approve, reject,
revoke, reconcile) runs in one transaction with its audit row (auth.audit), so there is no
approval without its audit row and no audit row without its approval."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from .. import db, journal, receipts
from ..errors import InvalidInput, WorkflowConflict, WorkflowNotFound
from ..run_state import APPROVAL_SIGNAL
from ..runtime import Runtime, approve_in, cancel_in, check_id, revoke_in
from ..views import decided, proposed_payload, status_json
from ..vocabulary import LIVE_STATUSES, WorkflowStatus
from . import auth

LIVE = LIVE_STATUSES
STATUSES = WorkflowStatus.values()


def fingerprint(wf_id: str, payload: Any, facts: Any) -> str:
    """What the approver was shown: the Approve form carries it back, so a proposal that is no
    longer the one on the page is refused instead of approved."""
    text = json.dumps([wf_id, payload, facts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def proposal(wf: dict[str, Any]) -> dict[str, Any]:
    """What a waiting workflow proposes for approval (ctx.wait_approval's proposal, else the
    payload of its latest decision) and the facts of that decision, as `interlock approve`."""
    decision = decided(wf)
    payload, problem = None, None
    try:
        payload = proposed_payload(wf, decision)
    except ValueError as exc:
        problem = str(exc)
    facts = decision.get("premises") if decision else None
    return {"decision": decision, "payload": payload, "facts": facts, "problem": problem,
            "fingerprint": fingerprint(wf["id"], payload, facts)}  # fmt: skip


def approved_pending(wf: dict[str, Any]) -> dict[str, Any] | None:
    """The approval a person gave that the workflow has not picked up yet (an approve signal
    not consumed), as {by, at, grant_id}; None if there is none. The page shows the workflow
    as approved at once, not as still waiting for approval."""
    pending = [s for s in wf.get("signals") or []
               if s["name"] == APPROVAL_SIGNAL and s["consumed_seq"] is None]  # fmt: skip
    if not pending or wf["status"] not in LIVE:
        return None
    first = pending[0]
    payload = first["payload"] if isinstance(first["payload"], dict) else {}
    return {"by": first["sender"], "at": first["created_at"], "grant_id": payload.get("grant_id")}


class Store:
    """A Runtime for actions and one more connection for the console's own reads."""

    def __init__(self, dsn: str, session_ttl: float = auth.DEFAULT_SESSION_TTL) -> None:
        self.dsn = dsn
        self.session_ttl = session_ttl
        self.rt = Runtime(dsn)
        self._lock = threading.Lock()
        self._conn = db.connect(dsn)

    def close(self) -> None:
        self.rt.close()
        self._conn.close()

    @contextmanager
    def _using(self) -> Iterator[db.Conn]:
        """The console's connection, alone (reconnected after e.g. a server restart)."""
        with self._lock:
            if self._conn.closed or self._conn.broken:
                self._conn = db.connect(self.dsn)
            try:
                yield self._conn
            except psycopg.OperationalError:
                self._conn.close()
                raise

    def _rows(self, sql: str, params: dict[str, Any] | None = None) -> list[db.Row]:
        with self._using() as conn:
            return conn.execute(sql, params).fetchall()

    # -- identity (auth.py) ----------------------------------------------------------------

    def login(self, name: str, password: str) -> dict[str, Any] | None:
        with self._using() as conn:
            return auth.login(conn, name, password, self.session_ttl)

    def session(self, token: str | None) -> dict[str, Any] | None:
        with self._using() as conn:
            return auth.session(conn, token)

    def logout(self, token: str) -> None:
        with self._using() as conn:
            auth.logout(conn, token)

    def operators(self) -> list[db.Row]:
        with self._using() as conn:
            return auth.list_operators(conn)

    def audit_log(self, limit: int = 200) -> list[db.Row]:
        return self._rows(db.query("audit_list"), {"limit": limit})

    # -- actions: each with its audit row, in one transaction --------------------------------

    def approve(self, wf_id: str, payload: Any, facts: Any, who: str) -> str:
        """rt.approve's transaction (a grant bound to this payload and these facts, principal
        workflow:<id>, and the approve signal) plus the audit row, refused while an earlier
        approval waits to be picked up (another tab, another operator). Returns the grant id."""
        with self._using() as conn, conn.transaction():
            gid = approve_in(conn, wf_id, payload, facts, by=who, once=True)
            auth.audit(conn, "approve", who, wf_id,
                       {"grant_id": gid, "payload_hash": journal.payload_hash(payload)})  # fmt: skip
        return gid

    def reject(self, wf_id: str, who: str) -> None:
        check_id(wf_id)
        with self._using() as conn, conn.transaction():
            cancel_in(conn, wf_id, who)
            auth.audit(conn, "reject", who, wf_id)

    def revoke(self, grant_id: str, who: str) -> list[str]:
        """rt.revoke plus the audit row; returns the effects that may still land."""
        with self._using() as conn, conn.transaction():
            still = revoke_in(conn, grant_id, who)
            auth.audit(conn, "revoke", who, grant_id, {"may_still_land": still})
        return still

    def reconcile(self, effect_id: str, evidence: str, who: str) -> None:
        if not evidence:
            raise InvalidInput("reconcile needs the evidence text")
        with self._using() as conn, conn.transaction():
            now = db.db_now(conn)
            value = {"evidence": evidence, "by": who, "at": now.isoformat()}
            done = conn.execute(db.query("reconcile_effect"),
                                {"eid": effect_id, "reconciled": db.jsonb(value)}).fetchone()  # fmt: skip
            if done is None:
                raise WorkflowConflict(f"effect {effect_id!r} is not AMBIGUOUS (or does not exist)")
            auth.audit(conn, "reconcile", who, effect_id, {"evidence": evidence})

    # -- reads -------------------------------------------------------------------------------

    def whoami(self) -> str:
        user: str = self._rows(db.query("console_whoami"))[0]["u"]
        return user

    def workflows(self, status: str | None, name: str | None, version: str | None) -> list[db.Row]:
        return self.rt.list(status=status, name=name, version=version, limit=500)

    def workflow(self, wf_id: str) -> db.Row:
        wf = self.rt.describe(wf_id)
        wf["signals"] = self._rows(db.query("console_signals"), {"wf": wf_id})
        wf["approved"] = approved_pending(wf)
        # what the workflow published with ctx.set_status, of this run (not a successor's)
        wf["published"] = status_json(self.rt.status_record(wf_id, follow=False))
        return wf

    def inbox(self) -> list[dict[str, Any]]:
        out = []
        for row in self._rows(db.query("console_inbox")):
            try:
                wf = self.workflow(row["id"])
            except WorkflowNotFound:
                continue
            out.append({"wf": wf, **proposal(wf)})
        return out

    def effects(self) -> list[db.Row]:
        return self._rows(db.query("console_effects"), {"limit": 500})

    def ambiguous(self) -> list[db.Row]:
        return self.rt.ambiguous()

    def effect(self, effect_id: str, key: bytes | None) -> db.Row:
        rows = self._rows(db.query("get_effect"), {"eid": effect_id})
        if not rows:
            raise WorkflowNotFound(f"no effect with id {effect_id!r}")
        eff = rows[0]
        journal = self._rows(db.query("console_journal"), {"eid": effect_id})
        eff["journal"] = [{"seq": j["seq"], "kind": j["kind"], "entry": json.loads(j["body"])}
                          for j in journal]  # fmt: skip
        eff["bundle"] = self.rt.receipt(effect_id, key=key) if journal else None
        eff["verify"] = receipts.verify(eff["bundle"], key) if journal else None
        eff["checklist_text"] = receipts.checklist(eff["verify"], effect_id) if journal else ""
        return eff

    def grants(self) -> list[db.Row]:
        return self._rows(db.query("console_grants"), {"limit": 500})

    def grant(self, grant_id: str) -> db.Row:
        rows = self._rows(db.query("console_grant"), {"grant": grant_id})
        if not rows:
            raise WorkflowNotFound(f"no grant with id {grant_id!r}")
        g = rows[0]
        g["effect_rows"] = self._rows(db.query("console_grant_effects"), {"grant": grant_id})
        return g
