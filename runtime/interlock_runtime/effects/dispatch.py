"""The submit path (docs/design.md#gated-effects a-c): read the premises, then T_dispatch, fenced, in the spec's
order: bind the payload, cancel, the circuit breaker, the grant FOR SHARE, the local premises,
AUTHORIZED + DISPATCHED and the send deadline; then the send (effects.commit)."""

from __future__ import annotations

import time
from typing import Any

from .. import db, journal, killpoints
from ..telemetry import DISPATCH, effect_stage
from ..vocabulary import ResultStatus
from .authority import grant_checks, local_violations
from .call import Chain, EffectCall, journal_entries
from .commit import send_and_commit
from .results import EffectResult
from .send import Io


def submit(call: EffectCall) -> Io[EffectResult]:
    """Dispatch and send a call whose effect has no open send (or refuse it, or return the
    recorded outcome)."""
    decided_on = _decided_on(call)
    violations = list(call.target.validate_premises(decided_on, call.eid))
    read_t = time.monotonic()
    killpoints.hit("effect_before_dispatch")
    t0 = time.monotonic()  # the stopwatch starts before T_dispatch (docs/design.md#send-deadline)
    if t0 - read_t > call.spec.premise_max_age:  # stale external read: read again (B13)
        violations = list(call.target.validate_premises(decided_on, call.eid))
        t0 = time.monotonic()
    outcome = _t_dispatch(call, decided_on, violations)
    if outcome is not None:
        return outcome
    killpoints.hit("effect_after_dispatch")
    return (yield from send_and_commit(call, t0, via=None))


def _decided_on(call: EffectCall) -> Any:
    """Premises of the first PROPOSED under this grant, else the argument (B7 a)."""
    for e in journal_entries(call.conn, call.eid):
        if e["kind"] == "PROPOSED" and e.get("lease") == call.grant:
            return e.get("premises")
    return call.premises


@effect_stage(DISPATCH, on_none="authorized")
def _t_dispatch(call: EffectCall, decided_on: Any, violations: list[str]) -> EffectResult | None:
    """T_dispatch, fenced, in the exact order of docs/design.md#gated-effects (c). Returns an outcome when the
    call ends here (refused, duplicate, ambiguous), None when a send is authorized."""
    port, conn, suspended = call.port, call.conn, False
    with port.fenced_write() as fence:
        now = fence["now"]
        conn.execute(db.query("insert_effect"), {"eid": call.eid, "wf": port.workflow_id,
                     "target": call.spec.name, "tier": call.spec.tier,
                     "payload": db.jsonb(call.payload), "payload_hash": call.ph,
                     "action": call.action})  # fmt: skip
        eff = call.lock_effect()
        entries = journal_entries(conn, call.eid)
        chain = Chain(conn, call.eid, entries, now.timestamp())
        if journal.open_dispatch(entries) is not None and eff["state"] == "dispatched":
            until = eff["send_deadline"] + eff["settle_margin"]
            call.suspend_until(until, f"is in flight until {until.isoformat()}")
            suspended = True
        elif eff["payload_hash"] != call.ph:
            chain.append("PROPOSED", agent=port.workflow_name, lease=call.grant,
                         premises=call.premises, effect=call.payload, decision=call.decision)  # fmt: skip
            chain.append("REFUSED", reason="payload differs from recorded decision",
                         recorded=eff["payload_hash"], offered=call.ph)  # fmt: skip
            return call.record(
                "REFUSED:conflicting_payload",
                reason="this key was first proposed with another payload",
            )
        elif eff["state"] == "ambiguous":
            return call.record("AMBIGUOUS")
        elif eff["state"] == "committed":
            committed = [e for e in entries if e["kind"] == "COMMITTED"]
            return call.record(
                "DUPLICATE_IGNORED", committed[-1].get("result") if committed else None
            )
        else:
            return _authorize(call, fence, chain, decided_on, violations)
    if suspended:
        call.suspend_after_commit()
    raise AssertionError("unreachable")  # pragma: no cover


def _authorize(call: EffectCall, fence: db.Row, chain: Chain, decided_on: Any,
               violations: list[str]) -> EffectResult | None:  # fmt: skip
    """Steps 6-12 of T_dispatch, inside its transaction."""
    port, conn = call.port, call.conn
    chain.append("PROPOSED", agent=port.workflow_name, lease=call.grant, premises=call.premises,
                 effect=call.payload, decision=call.decision)  # fmt: skip
    if fence["cancel_requested_at"] is not None and not call.compensation:
        chain.append("REFUSED", reason="cancelled")
        return call.record("REFUSED:cancelled", reason="the workflow was cancelled")
    breaker = call.breaker.state()
    if breaker is not None and breaker["open"]:
        state = {k: breaker[k] for k in ("consecutive_failures", "threshold")}
        state["opened_at"] = breaker["opened_at"].isoformat()
        chain.append("REFUSED", reason=f"circuit open for target {call.spec.name}",
                     breaker=state)  # fmt: skip
        return call.record(
            "REFUSED:circuit_open", reason=f"circuit open for target {call.spec.name}"
        )
    grant = conn.execute(db.query("lock_grant_for_share"), {"grant": call.grant}).fetchone()
    checks = grant_checks(grant, call.grant, call.action, call.payload, call.ph, port.workflow_id)
    if not checks["lease_live"]:
        why = "; ".join(checks["refusals"])
        chain.append("REFUSED", reason=why, checks=checks)
        return call.record(ResultStatus.REFUSED_AUTHORITY, reason=why)
    chain.append("AUTHORIZED", lease=call.grant)
    checks["violations"] = violations + local_violations(conn, call.local_premises, call.eid)
    if checks["violations"]:
        chain.append("REFUSED", reason=checks["violations"], checks=checks)
        return call.record(
            "REFUSED:stale_premise",
            reason="premise changed: " + "; ".join(checks["violations"]),
        )
    by = {"workflow_id": port.workflow_id, "epoch": port.epoch}
    if call.compensation:
        by["compensation"] = True
    chain.append("DISPATCHED", effect=call.payload, lease=call.grant, premises=decided_on,
                 checks=checks, by=by)  # fmt: skip
    conn.execute(db.query("mark_dispatched"), {"eid": call.eid, "grant": call.grant,
                 "wf": port.workflow_id, "epoch": port.epoch,
                 "send_timeout": call.spec.send_timeout,
                 "settle_margin": call.spec.settle_margin})  # fmt: skip
    return None
