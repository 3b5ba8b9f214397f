"""Authority administration, the client's part (authority.py, docs/design.md#gated-effects):
policy grants, human approvals bound to one payload, and revocation. approve_in and
revoke_in are their bodies inside a caller's transaction (the console adds its audit row to
the same one; the race tests hold it open)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg

from .. import authority, db, journal, stored, validate
from ..errors import InvalidInput, WorkflowConflict, WorkflowNotFound
from .connection import ClientConnection, check_id, input_text
from .operations import lock_live, signal_in


class AuthorityAdmin(ClientConnection):
    """Grant, approve and revoke the authority effects are dispatched under."""

    def grant(self, principal: str, action: str, *, constraints: Any = None,
              expires_in: float | None = None, by: str | None = None,
              grant_id: str | None = None) -> str:  # fmt: skip
        """A policy grant: `principal` may perform `action`, within `constraints` (bounds on
        named payload fields, see authority.py: {"amount": {"max": 5000}}), until it expires
        (`expires_in` seconds; None: until revoked)."""
        if not by:
            raise InvalidInput("grant(by=...) is required: who grants this authority")
        by = validate.name(by, "by")
        if not isinstance(action, str) or not action:
            raise InvalidInput("grant(action=...) must name the action it allows, e.g. 'refund'")
        validate.name(action, "action")
        validate.name(principal, "principal")
        gid = check_id(grant_id or f"grant_{uuid.uuid4().hex[:16]}", "grant id")
        value = None if constraints is None else json.loads(input_text(constraints, "constraints"))
        _check_numbers(value)
        bounds = authority.validate_constraints(value)
        _check_money(bounds)
        params = {"id": gid, "principal": principal, "action": action,
                  "constraints": None if bounds is None else db.jsonb(bounds),
                  "payload_hash": None, "facts_seen": None, "by": by,
                  "expires_in": _expires_in(expires_in)}  # fmt: skip
        try:
            self._execute(db.query("insert_grant"), params)
        except psycopg.errors.UniqueViolation:
            raise WorkflowConflict(f"grant id {gid!r} already exists") from None
        return gid

    def approve(self, wf_id: str, payload: Any, facts_seen: Any = None, *, by: str,
                expires_in: float | None = None, action: str | None = None,
                principal: str | None = None) -> str:  # fmt: skip
        """A human approval, in one transaction: a grant bound to exactly this payload (its hash)
        and the facts the approver saw, plus the `approve` signal {grant_id, payload,
        facts_seen} that wakes the workflow. `action` None: the grant covers this payload
        whatever the effect's action; name one to narrow it."""
        with self._transaction() as conn:
            return approve_in(conn, wf_id, payload, facts_seen, by=by, expires_in=expires_in,
                              action=action, principal=principal)  # fmt: skip

    def revoke(self, grant_id: str, by: str | None = None) -> list[str]:
        """Revoke a grant. Returns exactly the effects that may still land: those dispatched
        under it before the revoke committed. No later dispatch or resend can use it."""
        check_id(grant_id, "grant id")
        by = validate.optional_name(by, "by")
        with self._transaction() as conn:
            return revoke_in(conn, grant_id, by)


def revoke_in(conn: db.Conn, grant_id: str, by: str | None = None) -> list[str]:
    """The body of rt.revoke inside the caller's transaction (race tests hold it open)."""
    if conn.execute(db.query("revoke_grant"), {"grant": grant_id, "by": by}).fetchone() is None:
        raise WorkflowNotFound(f"no grant with id {grant_id!r}; nothing was revoked")
    rows = conn.execute(db.query("effects_still_open_under_grant"), {"grant": grant_id})
    return [r["effect_id"] for r in rows]


def approve_in(conn: db.Conn, wf_id: str, payload: Any, facts_seen: Any = None, *, by: str,
               expires_in: float | None = None, action: str | None = None,
               principal: str | None = None, once: bool = False) -> str:  # fmt: skip
    """The body of rt.approve inside the caller's transaction (the console adds its audit row
    to the same one). once: refuse (WorkflowConflict) when an approval of this workflow is
    already waiting to be picked up, instead of a second grant."""
    check_id(wf_id)
    if not by:
        raise InvalidInput("approve(by=...) is required: who approves")
    by = validate.name(by, "by")
    if action is not None and (not isinstance(action, str) or not action):
        raise InvalidInput("approve(action=...) must be a non-empty string or None")
    action = validate.optional_name(action, "action")
    principal = validate.optional_name(principal, "principal")
    expires = _expires_in(expires_in)
    body = json.loads(input_text({"payload": payload, "facts_seen": facts_seen}, "approval"))
    gid = f"grant_{uuid.uuid4().hex[:16]}"
    lock_live(conn, wf_id, "approved")
    if once:
        first = conn.execute(db.query("console_pending_approval"), {"wf": wf_id}).fetchone()
        if first is not None:
            raise WorkflowConflict(f"workflow {wf_id!r} was already approved by "
                                   f"{first['sender']}; nothing was approved")  # fmt: skip
    conn.execute(db.query("insert_grant"), {
        "id": gid, "principal": principal or f"workflow:{wf_id}", "action": action,
        "constraints": None, "payload_hash": journal.payload_hash(body["payload"]),
        "facts_seen": db.jsonb(body["facts_seen"]), "by": by, "expires_in": expires})  # fmt: skip
    signal_in(conn, wf_id, "approve", {"grant_id": gid, **body}, sender=by)
    return gid


def _expires_in(seconds: Any) -> float | None:
    """None (never expires) or a positive, finite number of seconds, at most ten years."""
    if seconds is not None and (isinstance(seconds, bool)
                                or not isinstance(seconds, (int, float))):  # fmt: skip
        raise InvalidInput(f"expires_in must be a positive number of seconds (or None: until "
                           f"revoked), not {validate.shown(seconds)}")  # fmt: skip
    return validate.seconds(seconds, "expires_in", allow_zero=False)


_MONEY = ("amount", "cents")


def _check_numbers(constraints: Any) -> None:
    """Constraint bounds (min, max) are finite numbers within +-2**53, exact in every JSON
    reader (checked before authority.validate_constraints, which checks the shape)."""
    if not isinstance(constraints, dict):
        return
    for field, ops in constraints.items():
        for op in ("min", "max"):
            if isinstance(ops, dict) and op in ops:
                validate.number(ops[op], f"constraint on {validate.shown(field)}: {op}",
                                low=-stored.MAX_SAFE_INTEGER, high=stored.MAX_SAFE_INTEGER)  # fmt: skip


def _check_money(bounds: dict[str, dict[str, Any]] | None) -> None:
    """A cap on a money field (its name ends in amount or cents: amounts are never negative)
    may not be below zero: nothing could pass it."""
    for field, ops in (bounds or {}).items():
        last = field.rsplit(".", 1)[-1].lower()
        if "max" in ops and last.endswith(_MONEY) and ops["max"] < 0:
            raise InvalidInput(f"constraint on {field!r}: max {ops['max']} is below zero, so no "
                               "amount could pass; give a cap of 0 or more")  # fmt: skip
