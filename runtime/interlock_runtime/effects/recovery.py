"""Recovery of an open send (docs/design.md#gated-effects recovery a-d): nothing before send_deadline +
settle_margin; then, by effective tier, re-check the grant and the premises, query when the
tier allows, and in T_resolve (fenced, the recovery table) resend, commit, refuse or mark
AMBIGUOUS. T_resolve judges the tier again: if the tier-1 window closed since the read, it
rolls back and recovery reads again (the model's TierAtRead shows the resend it prevents)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from .. import db, journal, killpoints, stored
from ..telemetry import RECOVERY, effect_stage
from .authority import grant_checks, local_violations
from .call import EffectCall, journal_entries
from .commit import send_and_commit
from .postconditions import post_holds
from .results import EffectResult
from .send import Io, target_read
from .spec import TargetSpec


def effective_tier(spec: TargetSpec, now: datetime, eff: db.Row) -> int:
    """The tier recovery may act on at database time `now`: past its window (dedup_window -
    dedup_margin after the first dispatch) a tier-1 target may have forgotten the key, so
    recovery treats it as tier 2 if it answers lookups, else tier 3."""
    window_age = (now - eff["first_dispatched_at"]).total_seconds()
    if spec.tier == 1 and window_age > spec.dedup_window - spec.dedup_margin:
        return 2 if spec.queryable else 3
    return spec.tier


@effect_stage(RECOVERY, on_none="again")
def recover(call: EffectCall, eff: db.Row) -> Io[EffectResult | None]:
    """Resolve the open send of `eff` (the effects row, with the database's `now`). None when
    this caller must go round again: somebody moved first, or the caller offered another
    payload (B13) and is refused on the next round."""
    now = eff["now"]
    settle_until = eff["send_deadline"] + eff["settle_margin"]
    if now <= settle_until:  # (a) nobody may query or resend yet
        with call.port.fenced_write():
            call.suspend_until(settle_until,
                               f"waits for send_deadline + settle_margin ({settle_until.isoformat()})")  # fmt: skip
        call.suspend_after_commit()
    spec = call.spec
    tier = effective_tier(spec, now, eff)
    entries = journal_entries(call.conn, call.eid)
    dispatched = journal.open_dispatch(entries) or {}
    payload = eff["payload"]
    violations: list[str] = []
    found = None
    if tier in (1, 2):  # (c) outside any transaction
        violations = list(call.target.validate_premises(dispatched.get("premises"), call.eid))
        grant = call.conn.execute(db.query("get_grant"), {"grant": eff["grant_id"]}).fetchone()
        may_fail = bool(violations) or not (grant and grant["live"])
        # Tier 1 resends under the key once; an effect already resent is looked up first: a
        # target slower than the send timeout would time out every resend, and each timeout
        # ends the worker that sent it (docs/design.md#recovery).
        resent = eff["sends"] > 1
        if spec.queryable and (tier == 2 or may_fail or resent):
            found = yield from target_read(call.target.query, call.eid, payload)
    post = (yield from post_holds(call, payload)) if found else (None, "")
    t0 = time.monotonic()  # the resend's stopwatch starts before T_resolve (B10)
    killpoints.hit("resolve_before_begin")
    return (yield from _t_resolve(call, eff, tier, violations, found, t0, post))


def _t_resolve(call: EffectCall, read: db.Row, tier: int, violations: list[str], found: Any,
               t0: float, post: tuple[bool | None, str] = (None, "")) -> Io[EffectResult | None]:  # fmt: skip
    """T_resolve, fenced: the recovery table of docs/design.md#gated-effects (d)."""
    port, conn = call.port, call.conn
    offered_other = read["payload_hash"] != call.ph  # B13: resolve, then refuse as conflicting
    resend_via = None
    with port.fenced_write() as fence:
        now = fence["now"]
        eff = call.lock_effect()
        same_pair = (eff["dispatch_workflow_id"], eff["dispatch_epoch"]) == (
            read["dispatch_workflow_id"], read["dispatch_epoch"])  # fmt: skip
        if not (eff["state"] == "dispatched" and same_pair
                and now > eff["send_deadline"] + eff["settle_margin"]):  # fmt: skip
            return None  # somebody moved first: roll back and re-enter
        if effective_tier(call.spec, now, eff) != tier:
            return None  # the tier-1 window closed since the read: read again at the new tier
        grant = conn.execute(db.query("lock_grant_for_share"),
                             {"grant": eff["grant_id"]}).fetchone()  # fmt: skip
        rechecked = grant_checks(grant, eff["grant_id"], call.action, eff["payload"],
                                 eff["payload_hash"], eff["workflow_id"])  # fmt: skip
        rechecked["violations"] = []
        if rechecked["lease_live"]:  # the local SQL premises: read here, as T_dispatch reads them
            local = local_violations(conn, call.local_premises, call.eid)
            rechecked["violations"] = violations + local
        rechecked["ts"] = now.timestamp()  # the grant is judged as of T_resolve, not T_commit
        grant_stale = not rechecked["lease_live"]
        stale = grant_stale or bool(rechecked["violations"])
        why = "authority" if grant_stale else "stale_premise"
        chain = call.chain(now.timestamp())

        def finish(state: str, status: str, result: Any = None,
                   reason: str | None = None) -> EffectResult | None:  # fmt: skip
            if state != "dispatched":
                call.set_state(state)
            if offered_other:
                return None
            return call.record(status, result, reason)

        if tier == 3:
            chain.append("AMBIGUOUS", reason="tier 3: no lookup and no dedup; cannot tell "
                         "whether the send landed", rechecked=rechecked)  # fmt: skip
            return finish("ambiguous", "AMBIGUOUS")
        if tier == 1 and not stale and not found:
            resend_via = "retry-idempotent"
        elif stale and not call.spec.queryable:
            chain.append("AMBIGUOUS", reason=f"{why} at recovery, no lookup", rechecked=rechecked)
            return finish("ambiguous", "AMBIGUOUS")
        elif found and post[0] is False:
            chain.append("AMBIGUOUS", reason=f"postcondition failed: {post[1]}",
                         rechecked=rechecked, found=stored.json_value(found, "found"))  # fmt: skip
            return finish("ambiguous", "POSTCONDITION_FAILED", {"detail": post[1]})
        elif found:
            found = stored.json_value(found, "found")
            extra = {"verified": True} if post[0] else {}
            chain.append("COMMITTED", via="recovery-query", rechecked=rechecked, found=found,
                         result=found, **extra)  # fmt: skip
            count = found.get("count") if isinstance(found, dict) else None
            if isinstance(count, int) and count > 1:  # the lookup itself shows A2 broken
                chain.append("AUDITED", applications=count, assumption_violated="A2",
                             reason="the recovery lookup found more than one application")  # fmt: skip
            return finish("committed", "COMMITTED_ON_QUERY", found)
        elif stale:
            chain.append("REFUSED", reason=f"{why} at recovery", resolves=True,
                         rechecked=rechecked)  # fmt: skip
            detail = (rechecked.get("refusals") if grant_stale
                      else ["premise changed: " + "; ".join(rechecked["violations"])])  # fmt: skip
            return finish(
                "proposed",
                f"REFUSED:{why}_at_recovery",
                reason="at recovery, not resent: " + "; ".join(detail or []),
            )
        else:
            resend_via = "recovery-reapply"
        # A resend: the durable record (dispatch pair, deadline, sends) commits before any
        # byte goes out. No second DISPATCHED entry is written.
        conn.execute(db.query("mark_resend"), {"eid": call.eid, "wf": port.workflow_id,
                     "epoch": port.epoch, "send_timeout": call.spec.send_timeout})  # fmt: skip
    killpoints.hit("resolve_after_commit")
    if offered_other:
        # Resolve the open send with the recorded payload, then come back to be refused.
        yield from _resend_recorded(call, read, t0, resend_via, rechecked)
        return None
    return (yield from send_and_commit(call, t0, via=resend_via, rechecked=rechecked))


def _resend_recorded(
    call: EffectCall, read: db.Row, t0: float, via: str, rechecked: dict[str, Any]
) -> Io[None]:
    """B13: a caller with another payload first settles the recorded send (with the
    recorded payload), without taking its status: no step row is written."""
    offered, call.payload, call.records_step = call.payload, read["payload"], False
    try:  # an unknown outcome suspends this workflow until recovery may look again
        yield from send_and_commit(call, t0, via=via, rechecked=rechecked)
    finally:
        call.payload, call.records_step = offered, True
