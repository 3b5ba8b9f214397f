"""The analysis behind verify(): a walk over a receipt's entries, like the effects row's state
machine, that re-derives each send's authority and premise checks from what the journal
recorded, the episodes of each dispatch, and the landings the journal proves."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from .. import authority, journal
from ..vocabulary import ResendVia

# COMMITTED.via values that mean the effect was sent again (docs/design.md#gated-effects recovery table).
RESEND_VIAS = ResendVia.values()


def _epoch(value: Any) -> float | None:
    """Seconds since the epoch for a snapshot time (ISO string or number); None if unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.lower() in ("infinity", "+infinity"):
        return float("inf")
    if text.lower() == "-infinity":
        return float("-inf")
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:  # the runtime writes aware times; a naive one is read as UTC
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def ts_text(ts: Any) -> str:
    """An entry's ts (seconds since the epoch) as ISO 8601 text, for messages."""
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        return repr(ts)
    try:
        return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return repr(ts)


def _grant_reasons(checks: Mapping[str, Any], payload: Any, ts: Any, lease: Any,
                   by: Any = None) -> list[str]:  # fmt: skip
    """Why the recorded grant check does not show a live grant covering this payload, sent at
    ts by the workflow `by` names, where the entry names one."""
    reasons: list[str] = []
    if checks.get("lease_live") is not True:
        reasons.append(
            f"the recorded grant check did not pass (lease_live {checks.get('lease_live')!r})"
        )
    snap = checks.get("lease")
    if not isinstance(snap, Mapping):
        reasons.append("no grant snapshot recorded (checks.lease)")
        return reasons
    grant_id = snap.get("grant_id")
    if lease is not None and grant_id != lease:
        reasons.append(f"the snapshot is of grant {grant_id!r} but the entry names {lease!r}")
    if snap.get("revoked") is not None:
        reasons.append(f"grant {grant_id!r} was revoked ({snap.get('revoked')})")
    sender = by.get("workflow_id") if isinstance(by, Mapping) else None
    reasons += authority.principal_reason(snap.get("principal"), str(grant_id),
                                          sender if isinstance(sender, str) else None)  # fmt: skip
    expires_at = snap.get("expires_at")
    if expires_at is not None:
        expiry = _epoch(expires_at)
        if expiry is None:
            reasons.append(f"grant {grant_id!r} has an unreadable expires_at {expires_at!r}")
        elif isinstance(ts, bool) or not isinstance(ts, (int, float)):
            reasons.append("the send has no timestamp to compare with expires_at")
        elif expiry <= ts:
            reasons.append(
                f"grant {grant_id!r} expired at {expires_at}, before the send at {ts_text(ts)}"
            )
    constraints = snap.get("constraints")
    if constraints is not None:
        if not isinstance(constraints, Mapping):
            reasons.append(f"grant {grant_id!r} has unreadable constraints {constraints!r}")
        else:
            reasons += authority.constraint_violations(constraints, payload)
    max_cents = snap.get("max_cents")  # receipts written before migration 0002
    if max_cents is not None:
        amount = payload.get("amount") if isinstance(payload, Mapping) else None
        if isinstance(max_cents, bool) or not isinstance(max_cents, (int, float)):
            reasons.append(f"grant {grant_id!r} has an unreadable max_cents {max_cents!r}")
        elif isinstance(amount, bool) or not isinstance(amount, (int, float)):
            reasons.append(f"the payload has no amount to compare with max_cents {max_cents}")
        elif amount > max_cents:
            reasons.append(f"amount {amount} exceeds the grant's max_cents {max_cents}")
    bound = snap.get("payload_hash")
    if bound is not None:
        try:
            actual = journal.payload_hash(payload)
        except (TypeError, ValueError):
            actual = None
        if actual != bound:
            reasons.append(f"the payload is not the one grant {grant_id!r} approves (payload_hash)")
    return reasons


def _premise_reasons(checks: Mapping[str, Any]) -> list[str]:
    violations = checks.get("violations")
    if not isinstance(violations, list):
        return ["no premise check recorded (checks.violations missing)"]
    if violations:
        return ["premise violations recorded: " + "; ".join(str(v) for v in violations)]
    return []


def _send(
    index: int,
    entry: Mapping[str, Any],
    kind: str,
    checks: Any,
    payload: Any,
    ts: Any,
    lease: Any,
) -> dict[str, Any]:
    """The evidence of one send: its authority and premise checks, re-derived."""
    if isinstance(checks, Mapping):
        grant_why = _grant_reasons(checks, payload, ts, lease, entry.get("by"))
        premise_why = _premise_reasons(checks)
        snapshot = checks.get("lease") if isinstance(checks.get("lease"), Mapping) else None
        violations = checks.get("violations")
    else:
        what = "checks" if kind == "DISPATCHED" else "rechecked"
        grant_why = [f"no {what} recorded for this send"]
        premise_why = [f"no {what} recorded for this send"]
        snapshot, violations = None, None
    return {
        "entry": index,
        "kind": kind,  # "DISPATCHED" or "resend"
        "via": entry.get("via"),
        "ts": entry.get("ts"),
        "by": entry.get("by"),
        "grant": copy.deepcopy(snapshot),
        "violations": copy.deepcopy(violations),
        "authorized": not grant_why,
        "premises_held": not premise_why,
        "why_not_authorized": grant_why,
        "why_premises_not_held": premise_why,
    }


def analyse(entries: list[Any]) -> dict[str, Any]:
    """Walk the entries in order, like the effects row's state machine (docs/design.md#gated-effects, docs/design.md#vocabulary)."""
    findings: list[str] = []
    sends: list[dict[str, Any]] = []
    episodes: list[dict[str, Any]] = []  # one per DISPATCHED: its resolution and late results
    refusals: list[dict[str, Any]] = []
    late_results: list[dict[str, Any]] = []
    audited = 0  # the most applications a lookup after a settled resend has counted
    committed: list[dict[str, Any]] = []
    ambiguous: list[dict[str, Any]] = []
    ignored: list[str] = []
    state: str | None = None
    open_ep: dict[str, Any] | None = None
    bound_hash: str | None = None
    authorized_leases: set[Any] = set()
    once = True
    rechecked_seen = False

    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            continue
        kind = entry.get("kind")
        ts = entry.get("ts")
        where = f"entries[{index}]"
        if "rechecked" in entry and kind in journal.KINDS:
            rechecked_seen = True
        if kind == "PROPOSED":
            if bound_hash is None:
                try:
                    bound_hash = journal.payload_hash(entry.get("effect"))
                except (TypeError, ValueError):
                    bound_hash = None
            authorized_leases = set()
            state = state or "proposed"
        elif kind == "AUTHORIZED":
            authorized_leases.add(entry.get("lease"))
        elif kind == "DISPATCHED":
            if open_ep is not None:
                once = False
                findings.append(
                    f"{where}: sent again while the send at entries[{open_ep['index']}] was "
                    "still unresolved"
                )
            elif state in ("committed", "ambiguous"):
                once = False
                findings.append(f"{where}: sent again after the effect was {state}")
            payload = entry.get("effect")
            send = _send(
                index, entry, "DISPATCHED", entry.get("checks"), payload, ts, entry.get("lease")
            )
            if entry.get("lease") not in authorized_leases:
                send["authorized"] = False
                send["why_not_authorized"].insert(
                    0,
                    f"no AUTHORIZED entry for grant {entry.get('lease')!r} since the last PROPOSED",
                )
            try:
                sent_hash = journal.payload_hash(payload)
            except (TypeError, ValueError):
                sent_hash = None
            if bound_hash is not None and sent_hash != bound_hash:
                findings.append(
                    f"{where}: the payload sent is not the one bound at the first PROPOSED"
                )
            sends.append(send)
            open_ep = {"index": index, "entry": entry, "resolution": None, "late": []}
            open_ep["resolved_at"] = None
            episodes.append(open_ep)
            state = "dispatched"
        elif kind == "COMMITTED":
            committed.append(
                {
                    "entry": index,
                    "ts": ts,
                    "via": entry.get("via"),
                    "result": entry.get("result"),
                    "found": entry.get("found"),
                }
            )
            if open_ep is None:
                findings.append(f"{where}: COMMITTED resolves no open DISPATCHED")
            if entry.get("via") in RESEND_VIAS:
                payload = open_ep["entry"].get("effect") if open_ep else None
                lease = open_ep["entry"].get("lease") if open_ep else None
                rechecked = entry.get("rechecked")
                at = rechecked.get("ts", ts) if isinstance(rechecked, Mapping) else ts
                sends.append(_send(index, entry, "resend", rechecked, payload, at, lease))
            if open_ep is not None:
                open_ep["resolution"], open_ep["resolved_at"] = entry, index
                open_ep = None
            state = "committed"
        elif kind == "AMBIGUOUS":
            ambiguous.append({"entry": index, "ts": ts, "reason": entry.get("reason")})
            if open_ep is None:
                findings.append(f"{where}: AMBIGUOUS resolves no open DISPATCHED")
            else:
                open_ep["resolution"], open_ep["resolved_at"] = entry, index
                open_ep = None
            state = "ambiguous"
        elif kind == "REFUSED":
            resolves = entry.get("resolves") is True
            refusals.append(
                {"entry": index, "ts": ts, "reason": entry.get("reason"), "resolves": resolves}
            )
            if resolves:
                if open_ep is None:
                    findings.append(
                        f"{where}: REFUSED with resolves: true resolves no open DISPATCHED"
                    )
                else:
                    open_ep["resolution"], open_ep["resolved_at"] = entry, index
                    open_ep = None
                state = "proposed"
            else:
                state = state or "proposed"
        elif kind == "AUDITED":
            # A lookup after a resend had settled, counting the applications it could see.
            audited = max(audited, int(entry.get("applications") or 0))
            if (entry.get("applications") or 0) > 1:
                findings.append(
                    f"{where}: a lookup after the resend settled found {entry['applications']} "
                    f"applications (assumption {entry.get('assumption_violated')} broken)"
                )
        elif kind == "LATE_RESULT":
            late_results.append(
                {
                    "entry": index,
                    "ts": ts,
                    "from_epoch": entry.get("from_epoch"),
                    "state_at_arrival": entry.get("state_at_arrival"),
                    "assumption_violated": entry.get("assumption_violated"),
                    "result": entry.get("result"),
                }
            )
            if episodes:
                episodes[-1]["late"].append(index)
            else:
                findings.append(f"{where}: LATE_RESULT with no send before it")
            if entry.get("assumption_violated"):
                findings.append(
                    f"{where}: a response arrived late enough to violate assumption "
                    f"{entry.get('assumption_violated')} (state at arrival "
                    f"{entry.get('state_at_arrival')!r})"
                )
        else:
            ignored.append(str(kind))

    # Landings the journal proves: a COMMITTED, or a late response (apply() returned a result).
    landings = 0
    for ep in episodes:
        resolution = ep["resolution"]
        late = ep["late"]
        if resolution is not None and resolution.get("kind") == "COMMITTED":
            landings += 1
            if late and resolution.get("via") == "recovery-reapply":
                # The reapply went out because a query found nothing; a response to an earlier
                # send of the same episode shows that one landed too (assumption A2 broken).
                landings += 1
                findings.append(
                    f"entries[{late[0]}]: an earlier send of the effect reapplied at "
                    f"entries[{ep['resolved_at']}] also landed (two applications)"
                )
        elif late:
            landings += 1
            if resolution is not None and resolution.get("kind") == "REFUSED":
                findings.append(
                    f"entries[{late[0]}]: the send resolved as not landed at "
                    f"entries[{ep['resolved_at']}] did land"
                )
    landings = max(landings, audited)
    return {
        "state": state,
        "sends": sends,
        "episodes": episodes,
        "open": open_ep,
        "refusals": refusals,
        "late_results": late_results,
        "committed": committed,
        "ambiguous": ambiguous,
        "ignored_kinds": ignored,
        "findings": findings,
        "landings": landings,
        "once": once,
        "rechecked_seen": rechecked_seen,
    }
