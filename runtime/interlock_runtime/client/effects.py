"""Effect administration, the client's part (docs/design.md#gated-effects): the effects a
person must reconcile, their signed receipts, the targets' circuit breakers, and the
recovery of effects that workflows which will not run again left dispatched."""

from __future__ import annotations

import json
import time
from typing import Any

from .. import db, receipts, validate
from ..errors import InvalidInput, Suspend, WorkflowConflict, WorkflowNotFound
from .connection import ClientConnection, check_id


class EffectAdmin(ClientConnection):
    """Reconcile ambiguous effects, export receipts, reset breakers, recover orphans."""

    def ambiguous(self) -> list[db.Row]:
        """Effects whose outcome cannot be known from the target: a human must reconcile."""
        return self._execute(db.query("ambiguous_effects")).fetchall()

    def reconcile(self, effect_id: str, evidence: str, by: str) -> None:
        """Attach a human's attestation to an AMBIGUOUS effect (never written into the journal)."""
        if not by or not evidence:
            raise InvalidInput("reconcile needs evidence and by (who attests)")
        check_id(effect_id, "effect id")
        validate.text(evidence, "evidence")
        validate.name(by, "by")
        value = {
            "evidence": evidence,
            "by": by,
            "at": db.one(self._execute(db.query("db_now")))["now"].isoformat(),
        }
        if self._execute(db.query("reconcile_effect"),
                         {"eid": effect_id, "reconciled": db.jsonb(value)}).fetchone() is None:  # fmt: skip
            raise WorkflowConflict(f"effect {effect_id!r} is not AMBIGUOUS (or does not exist)")

    def receipt(self, effect_id: str, key: bytes | None = None) -> dict[str, Any]:
        """The effect's journal as a verifiable bundle (HMAC-signed when a key is given)."""
        check_id(effect_id, "effect id")
        if key is not None and (not isinstance(key, bytes) or not 1 <= len(key) <= 4096):
            raise InvalidInput("a receipt key must be 1-4096 bytes (or None: unsigned)")
        entries = [json.loads(r["body"]) for r in
                   self._execute(db.query("journal_entries"), {"eid": effect_id})]  # fmt: skip
        if not entries:
            raise WorkflowNotFound(f"no journal for effect {effect_id!r}")
        eff = db.one(self._execute(db.query("get_effect"), {"eid": effect_id}))
        return receipts.bundle(entries, effect_id, key, late_result=eff["late_result"],
                               reconciled=eff["reconciled"])  # fmt: skip

    def breakers(self) -> list[db.Row]:
        """Every target's circuit breaker: consecutive failures, whether it is open."""
        return self._execute(db.query("breakers")).fetchall()

    def reset_breaker(self, target: str) -> None:
        """Close a target's circuit breaker (after fixing what made it open)."""
        validate.name(target, "target")
        if self._execute(db.query("breaker_reset"), {"target": target}).fetchone() is None:
            known = ", ".join(b["target"] for b in self.breakers()) or "none"
            raise WorkflowNotFound(f"no circuit breaker for target {target!r}; known: {known}")

    def recover_orphans(self, targets: dict[str, Any], lease_ttl: float = 30.0) -> list[db.Row]:
        """Resolve effects left dispatched by stuck, failed or cancelled workflows, under a
        synthetic claim (owner $recovery); journal and effects rows only, then the workflow's
        previous status is restored. `targets` maps target names to target objects."""
        lease_ttl = validate.number(lease_ttl, "lease_ttl", low=0.5, high=86_400, unit="seconds")
        if not isinstance(targets, dict):
            raise InvalidInput("targets must be a dict of target name to target object")
        from ..context import WorkflowContext, port_of
        from ..effects import resolve_orphan
        from ..run_state import Run

        done: list[db.Row] = []
        for orphan in self._execute(db.query("orphaned_effects")).fetchall():
            target = targets.get(orphan["target"])
            if target is None:
                done.append({**orphan, "outcome": "skipped: no target object for this name"})
                continue
            with self._lock:
                conn = self._live()
                claim = conn.execute(db.query("orphan_claim"),
                                     {"wf": orphan["workflow_id"], "ttl": lease_ttl}).fetchone()  # fmt: skip
                if claim is None:
                    continue
                run = Run(claim["id"], claim["name"], claim["version"], claim["input"],
                          claim["epoch"], None, 0, None, lease_ttl, time.monotonic() + lease_ttl)  # fmt: skip
                ctx = WorkflowContext(run, conn, [], "$recovery")
                try:
                    eff = db.one(conn.execute(db.query("get_effect"), {"eid": orphan["effect_id"]}))
                    outcome = resolve_orphan(port_of(ctx), target, eff)
                    status = outcome.status if outcome else "retry later"
                except Suspend:
                    status = "still open: resend outcome unknown, recovery comes back later"
                finally:
                    conn.execute(db.query("orphan_restore"), {"wf": claim["id"],
                                 "epoch": claim["epoch"], "status": claim["prev_status"]})  # fmt: skip
            done.append({**orphan, "outcome": status})
        return done
