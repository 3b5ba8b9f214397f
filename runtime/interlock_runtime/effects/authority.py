"""The checks of a send as the journal records them: the grant (authority.py decides) with the
snapshot a receipt re-derives the verdict from, and the local SQL premises."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from .. import authority, db


def grant_snapshot(grant: db.Row | None, grant_id: str) -> dict[str, Any]:
    """The grant as the receipt records it (the keys verify() reads)."""
    if grant is None:
        return {"grant_id": grant_id, "principal": None, "action": None, "constraints": None,
                "payload_hash": None, "expires_at": None, "revoked": "unknown grant",
                "granted_by": None}  # fmt: skip
    return {
        "grant_id": grant["id"], "principal": grant["principal"], "action": grant["action"],
        "constraints": grant["constraints"], "payload_hash": grant["payload_hash"],
        "expires_at": grant["expires_at"].isoformat() if grant["expires_at"] else None,
        "revoked": grant["revoked_at"].isoformat() if grant["revoked_at"] else None,
        "granted_by": grant["granted_by"],
    }  # fmt: skip


def grant_checks(
    grant: db.Row | None, grant_id: str, action: str, payload: Any, ph: str, workflow_id: str
) -> dict[str, Any]:
    """The authority check of a send by `workflow_id`, as the journal records it: lease_live
    (the grant covers this send now), the grant's snapshot, and the reasons when it does not."""
    reasons = authority.refusal_reasons(grant, grant_id, action, payload, ph, workflow_id)
    out: dict[str, Any] = {"lease_live": not reasons, "lease": grant_snapshot(grant, grant_id)}
    if reasons:
        out["refusals"] = reasons
    return out


def local_violations(conn: db.Conn, local_premises: Any, eid: str) -> list[str]:
    """Each local premise is (registered SQL function, args); it returns violation strings."""
    out: list[str] = []
    for fn, args in local_premises:
        ident = sql.Identifier(*fn.split("."))
        stmt = sql.SQL("select {}(%s, %s) as v").format(ident)
        value = db.one(conn.execute(stmt, (db.jsonb(args), eid)))["v"]
        out.extend(str(v) for v in (value or []))
    return out
