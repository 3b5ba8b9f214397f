"""The send and what follows it (docs/design.md#gated-effects d-g): the watched send, then T_commit (fenced:
COMMITTED and the step row), the late result (unfenced) when the claim was lost meanwhile,
a definite failure, or an unknown outcome left open for recovery; after a recovery reapply,
the settle audit."""

from __future__ import annotations

from typing import Any, NoReturn

from .. import db, killpoints, stored
from ..errors import Fenced, TargetRejected
from ..events import emit
from ..telemetry import COMMIT, effect_stage
from .call import EffectCall
from .postconditions import post_failed, post_holds
from .results import EffectResult
from .send import NOT_LIVE, NOT_SENT, Io, Pause, Send, target_read


def send_and_commit(call: EffectCall, t0: float, via: str | None,
                    rechecked: Any = None) -> Io[EffectResult]:  # fmt: skip
    """Send (the first send when via is None, else a resend decided by T_resolve) and record
    the outcome. `t0` is when the send's stopwatch started. The send is this module's one
    request to the driver (effects.send): the watched send, inline or awaited."""
    after_send = "effect_after_send" if via is None else "resolve_after_send"
    try:
        result = yield Send(call, t0)
    except TargetRejected as exc:
        killpoints.hit(after_send)
        call.breaker.count(failed=True)
        return (yield from _definite_failure(call, exc, rechecked))
    except Exception as exc:  # noqa: BLE001 - unknown outcome: leave it dispatched
        killpoints.hit(after_send)
        call.breaker.count(failed=True)
        return _leave_open(call, f"send failed without a definite answer ({type(exc).__name__})")
    if result is NOT_SENT:
        return _leave_open(call, "not sent: send budget below the minimum")
    if result is NOT_LIVE:
        return _leave_open(call, "not sent: the local lease deadline passed before the send")
    killpoints.hit(after_send)
    call.breaker.count(failed=False)
    result = stored.json_value(result, "the target's response")
    fields: dict[str, Any] = {"result": result}
    holds, detail = yield from post_holds(call, call.payload)
    if holds is False:
        return post_failed(call, detail, result)
    if holds:
        fields["verified"] = True
    status = "COMMITTED"
    if via is not None:
        fields.update(via=via, rechecked=rechecked)
        status = {"retry-idempotent": "COMMITTED_BY_RETRY",
                  "recovery-reapply": "REAPPLIED_AFTER_QUERY"}[via]  # fmt: skip
    try:
        outcome = _t_commit(call, status, fields)
    finally:  # also when the claim was lost meanwhile (the late path committed or kept it)
        if via == "recovery-reapply":
            yield from _settle_audit(call)
    killpoints.hit("effect_after_commit")
    return outcome


@effect_stage(COMMIT)
def _t_commit(call: EffectCall, status: str, fields: dict[str, Any]) -> EffectResult:
    """COMMITTED and the step row in one fenced transaction; on a lost fence, the late
    result path keeps the response."""
    try:
        with call.port.fenced_write() as fence:
            eff = call.lock_effect()
            mine = eff["state"] == "dispatched" and call.dispatched_by_me(eff)
            if mine:
                call.chain(fence["now"].timestamp()).append("COMMITTED", **fields)
                call.set_state("committed")
                return call.record(status, fields["result"])
    except Fenced:
        _late_result(call, fields["result"], fields)
        raise
    # Still our claim, but someone else resolved the send meanwhile: keep the response.
    _late_result(call, fields["result"], fields)
    return _record_resolved_elsewhere(call)


def _record_resolved_elsewhere(call: EffectCall) -> EffectResult:
    with call.port.fenced_write():
        eff = call.lock_effect()
        status = {"committed": "DUPLICATE_IGNORED", "ambiguous": "AMBIGUOUS"}.get(eff["state"])
        if status is None:
            raise Fenced(f"effect {call.eid} moved to {eff['state']} under another claim")
        return call.record(status)


def _late_result(call: EffectCall, result: Any, fields: dict[str, Any] | None = None) -> None:
    """docs/design.md#gated-effects (f): unfenced, locks only the effect row. A response that arrives after
    the claim was lost is never dropped (LateResultPreserved). A commit here keeps the
    resend's `via` and `rechecked`, so the journal still shows the send was a resend."""
    with call.conn.transaction():
        eff = call.lock_effect()
        now = db.db_now(call.conn).timestamp()
        chain = call.chain(now)
        if eff["state"] == "dispatched" and call.dispatched_by_me(eff):
            # Our dispatch is still the open one: this compare-and-set may commit it, with no
            # step row (our successor replays it as DUPLICATE_IGNORED).
            resend = {k: v for k, v in (fields or {}).items() if k in ("via", "rechecked")}
            chain.append("COMMITTED", result=result, **resend)
            call.set_state("committed")
            return
        late = {
            "result": result,
            "from_epoch": call.port.epoch,
            "state_at_arrival": eff["state"],
        }
        if eff["state"] == "proposed":
            late["assumption_violated"] = "A2"
        chain.append("LATE_RESULT", **late)
        call.conn.execute(db.query("set_late_result"), {"eid": call.eid, "late": db.jsonb(late)})


def _definite_failure(call: EffectCall, exc: TargetRejected, rechecked: Any) -> Io[EffectResult]:
    """docs/design.md#gated-effects (g): a definite failure. Landed anyway (queryable and found): committed;
    otherwise a resolving REFUSED returns the effect to proposed."""
    found = None
    if call.spec.queryable:
        found = yield from target_read(call.target.query, call.eid, call.payload)
    with call.port.fenced_write() as fence:
        eff = call.lock_effect()
        if not (eff["state"] == "dispatched" and call.dispatched_by_me(eff)):
            return call.resolved_elsewhere_in_txn(eff)
        chain = call.chain(fence["now"].timestamp())
        if found:
            chain.append("COMMITTED", via="failed-but-landed", found=stored.json_value(found, "found"),
                         result=None, rechecked=rechecked)  # fmt: skip
            call.set_state("committed")
            return call.record("COMMITTED_ON_QUERY", stored.json_value(found, "found"))
        chain.append("REFUSED", reason=f"target rejected: {exc.reason}", resolves=True,
                     response=stored.json_value(exc.response, "response"))  # fmt: skip
        call.set_state("proposed")
        return call.record(
            "REFUSED:target_error",
            stored.json_value(exc.response, "response"),
            f"target rejected: {exc.reason}",
        )


def _leave_open(call: EffectCall, why: str) -> NoReturn:
    """Unknown outcome: the effect stays dispatched; come back after deadline + settle."""
    with call.port.fenced_write():
        eff = call.lock_effect()
        until = eff["send_deadline"] + eff["settle_margin"]
        call.suspend_until(until, f"{why}; recovery after {until.isoformat()}")
    call.suspend_after_commit()


def _settle_audit(call: EffectCall) -> Io[None]:
    """A resend after a lookup found nothing rests on A2 (the first send had settled by
    then). Once the resend has settled too, look once more: two applications mean A2 was
    broken, and the journal says so, so that the receipt never claims "once" against the
    ledger. It sees what has landed by then; a send that lands even later is not seen."""
    try:
        eff = db.one(call.conn.execute(db.query("get_effect"), {"eid": call.eid}))
        wait = (eff["send_deadline"] + eff["settle_margin"] - eff["now"]).total_seconds()
        yield Pause(max(0.0, wait))
        found = yield from target_read(call.target.query, call.eid, call.payload)
        count = found.get("count") if isinstance(found, dict) else None
        if not (isinstance(count, int) and count > 1):
            return
        # Evidence, like a late result: unfenced, under the effect row's lock only.
        with call.conn.transaction():
            call.lock_effect()
            now = db.db_now(call.conn).timestamp()
            call.chain(now).append("AUDITED", applications=count, assumption_violated="A2",
                                   reason="a lookup after the resend settled")  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - best effort: the outcome stands as recorded
        emit("settle_audit_failed", wf=call.port.workflow_id, effect=call.eid,
             error=f"{type(exc).__name__}: {exc}")  # fmt: skip
