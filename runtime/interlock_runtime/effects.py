"""Gated effects (spec 5.4, 5.7): T_dispatch, the watched send, T_commit, recovery by tier.

An effect is sent at most once per effect_id at tiers 1 and 2 (assuming A1, A2), only under a
live grant, only while its premises hold, and every decision is journaled in a hash chain:

    submit:   premises read -> T_dispatch (fenced: bind payload, cancel, grant FOR SHARE, local
              premises, AUTHORIZED + DISPATCHED, send_deadline) -> watched send -> T_commit
              (fenced: COMMITTED + the step row) | late result (unfenced CAS) on a lost fence
    recovery: nothing before send_deadline + settle_margin; then by effective tier: re-check
              grant and premises, query when the tier allows, and resend, commit, refuse or
              mark AMBIGUOUS in T_resolve (fenced).

Assumptions (stated here, in the model and in every result file):
A1 no process pause across the local send deadline (the watchdog acts only while we run);
A2 the target settles any request within settle_margin after send_deadline;
A3 external premises are true as of their read; only local SQL premises are atomic with dispatch;
A4 durable commits; A5 database and worker clocks differ in rate by less than settle_margin.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from . import authority, db, journal, killpoints
from .errors import Fenced, InvalidInput, Suspend, TargetRejected
from .events import emit
from .vocabulary import LANDED_RESULTS, ResultStatus

if TYPE_CHECKING:
    from .context import WorkflowContext

MIN_SEND_BUDGET = 1.0  # seconds: below this, do not start a send (spec B5)
WATCHDOG_EXIT = 75  # os._exit status when a send outlives its deadline
DEFAULT_DEDUP_MARGIN = 600.0  # seconds; tier 1 is safe only with margin > timeout + settle (C2)
TARGET_DEFAULTS = {"send_timeout": 35.0, "settle_margin": 10.0, "premise_max_age": 5.0,
                   "dedup_window": float("inf"), "dedup_margin": DEFAULT_DEDUP_MARGIN,
                   "breaker_cooldown": 60.0}  # fmt: skip
_FUNCTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")

STATUSES = ResultStatus.values()


@dataclass(frozen=True)
class EffectResult:
    """What ctx.effect returns. `status` is a vocabulary.ResultStatus; `result` what the
    target answered (or found); `reason` says why, for a refusal or an ambiguity."""

    status: str
    effect_id: str
    result: Any = None
    reason: str | None = None

    @property
    def refused(self) -> bool:
        return self.status.startswith("REFUSED")

    @property
    def landed(self) -> bool:
        """True when the effect is known to have happened (by this call or an earlier one)."""
        return self.status in LANDED_RESULTS


class EffectRefused(Exception):
    """Raised by ctx.effect(..., raise_on_refusal=True) for a REFUSED:* outcome."""

    def __init__(self, result: EffectResult):
        self.result = result
        why = f" ({result.reason})" if result.reason else ""
        super().__init__(f"effect {result.effect_id} refused: {result.status}{why}")


@dataclass(frozen=True)
class TargetSpec:
    """What the runtime reads from a target object (attributes with the spec's defaults)."""

    name: str
    tier: int
    queryable: bool
    send_timeout: float
    settle_margin: float
    premise_max_age: float
    dedup_window: float
    dedup_margin: float
    breaker_cooldown: float
    breaker_threshold: int | None = None  # None: no circuit breaker for this target


def check_target(target: Any) -> TargetSpec:
    """Validate a target before anything is written; includes the C2 dedup-margin check."""
    missing = [m for m in ("apply", "validate_premises") if not callable(getattr(target, m, None))]
    if missing or not isinstance(getattr(target, "name", None), str):
        raise InvalidInput(
            f"{target!r} is not an effect target: it needs a `name` and callable "
            f"{', '.join(missing) or 'apply/validate_premises'} (see interlock_runtime.effects)"
        )
    tier = getattr(target, "tier", None)
    if tier not in (1, 2, 3):
        raise InvalidInput(f"target {target.name!r} has tier {tier!r}; a tier is 1, 2 or 3")
    vals = {k: float(getattr(target, k, v)) for k, v in TARGET_DEFAULTS.items()}
    queryable = bool(getattr(target, "queryable", tier == 2))
    if tier == 2 and not queryable:
        raise InvalidInput(
            f"target {target.name!r}: tier 2 means the target answers lookups (query) but does "
            "not dedupe; a target that does neither is tier 3 (recovery cannot tell whether a "
            "send landed, so it must not resend)"
        )
    if queryable and not callable(getattr(target, "query", None)):
        raise InvalidInput(f"target {target.name!r} is queryable but has no query() method")
    if tier == 1 and vals["dedup_margin"] <= vals["send_timeout"] + vals["settle_margin"]:
        raise InvalidInput(
            f"target {target.name!r}: tier 1 is safe only when DEDUP_MARGIN > send_timeout + "
            f"settle_margin, but {vals['dedup_margin']} <= {vals['send_timeout']} + "
            f"{vals['settle_margin']}; raise dedup_margin or lower the timeouts (DESIGN B10 C2)"
        )
    threshold = getattr(target, "breaker_threshold", None)
    if threshold is not None and (not isinstance(threshold, int) or threshold < 1):
        raise InvalidInput(f"target {target.name!r}: breaker_threshold must be an integer >= 1 "
                           f"(or None for no breaker), got {threshold!r}")  # fmt: skip
    return TargetSpec(target.name, tier, queryable, **vals, breaker_threshold=threshold)


def _entries(conn: psycopg.Connection, eid: str) -> list[dict]:
    return [json.loads(r["body"]) for r in conn.execute(db.query("journal_entries"), {"eid": eid})]


class _Chain:
    """Appends sealed entries to one effect's chain inside an open transaction."""

    def __init__(self, conn: psycopg.Connection, eid: str, entries: list[dict], ts: float):
        self.conn, self.eid, self.ts = conn, eid, ts
        self.prev = entries[-1]["hash"] if entries else None

    def append(self, kind: str, **fields: Any) -> dict:
        sealed = journal.seal({"ts": self.ts, "kind": kind, "effect_id": self.eid, **fields},
                              self.prev)  # fmt: skip
        self.conn.execute(db.query("append_entry"), {"eid": self.eid, "kind": kind,
                          "body": journal.body_text(sealed), "prev": self.prev,
                          "hash": sealed["hash"]})  # fmt: skip
        self.prev = sealed["hash"]
        return sealed


def target_action(target: Any, spec: TargetSpec) -> str:
    """The action an effect on `target` performs unless ctx.effect names one: the target's
    `action` attribute, else its name (a grant must allow that action)."""
    action = getattr(target, "action", None)
    return action if isinstance(action, str) and action else spec.name


def _snapshot(grant: dict | None, grant_id: str) -> dict:
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


def _grant_checks(grant: dict | None, grant_id: str, action: str, payload: Any, ph: str) -> dict:
    """The authority check of a send, as the journal records it: lease_live (the grant covers
    this send now), the grant's snapshot, and the reasons when it does not."""
    reasons = authority.refusal_reasons(grant, grant_id, action, payload, ph)
    out = {"lease_live": not reasons, "lease": _snapshot(grant, grant_id)}
    if reasons:
        out["refusals"] = reasons
    return out


def _local_violations(conn: psycopg.Connection, local_premises: Any, eid: str) -> list[str]:
    """Each local premise is (registered SQL function, args); it returns violation strings."""
    out: list[str] = []
    for fn, args in local_premises:
        ident = sql.Identifier(*fn.split("."))
        stmt = sql.SQL("select {}(%s, %s) as v").format(ident)
        value = conn.execute(stmt, (db.jsonb(args), eid)).fetchone()["v"]
        out.extend(str(v) for v in (value or []))
    return out


class EffectCall:
    """One ctx.effect call at the frontier: the submit path, or recovery of an open send."""

    def __init__(self, ctx: WorkflowContext, seq: int, name: str, target: Any, spec: TargetSpec,
                 key: str, payload: Any, premises: Any, grant: str, action: str,
                 local_premises: Any, compensation: bool, decision: Any,
                 postcondition: Any = None):  # fmt: skip
        self.ctx, self.seq, self.name, self.target, self.spec = ctx, seq, name, target, spec
        self.eid = journal.effect_id_for(key)
        self.payload, self.ph = payload, journal.payload_hash(payload)
        self.fingerprint = journal.fingerprint(self.eid, self.ph)
        self.premises, self.grant, self.action = premises, grant, action
        self.local_premises, self.compensation, self.decision = (
            local_premises,
            compensation,
            decision,
        )
        self.conn = ctx._conn
        self.records_step = True
        self.postcondition = postcondition

    # -- outcomes ---------------------------------------------------------------------------

    def _result(self, status: str, result: Any = None, reason: str | None = None) -> EffectResult:
        return EffectResult(status, self.eid, result, reason)

    def _record(self, status: str, result: Any = None, reason: str | None = None) -> EffectResult:
        """Insert the effect's step row inside the open fenced transaction (unless this call
        only resolves someone else's send: orphans, or a caller offering another payload)."""
        res = self._result(status, result, reason)
        if self.records_step:
            self.ctx._insert_step(self.seq, "effect", self.name, output=asdict(res),
                                  fingerprint=self.fingerprint)  # fmt: skip
        return res

    def _suspend_until(self, fence_now: datetime, until: datetime, why: str) -> None:
        """Inside an open fenced transaction: release the row until `until` (status pending)."""
        waiting = {"seq": self.seq, "kind": "effect", "name": self.name, "until": until.isoformat()}
        self.conn.execute(db.query("suspend_until"), {"wf": self.ctx.workflow_id,
                          "status": "pending", "waiting": db.jsonb(waiting), "until": until})  # fmt: skip
        self._why = why

    def _suspend_after_commit(self) -> None:
        self.ctx._raise(Suspend(f"{self.ctx.workflow_id}: effect {self.eid} {self._why}"))

    # -- the entry point --------------------------------------------------------------------

    def run(self) -> EffectResult:
        while True:
            row = self.conn.execute(db.query("get_effect"), {"eid": self.eid}).fetchone()
            if row is not None and row["state"] == "dispatched":
                outcome = self._recover(row)
            else:
                outcome = self._submit()
            if outcome is not None:
                return outcome
            # None: an open send was resolved for a caller offering another payload (B13):
            # go round again and be refused as conflicting_payload.

    # -- submit path (spec 5.7 a-g) ----------------------------------------------------------

    def _decided_on(self) -> Any:
        """Premises of the first PROPOSED under this grant, else the argument (B7 a)."""
        for e in _entries(self.conn, self.eid):
            if e["kind"] == "PROPOSED" and e.get("lease") == self.grant:
                return e.get("premises")
        return self.premises

    def _submit(self) -> EffectResult | None:
        decided_on = self._decided_on()
        violations = list(self.target.validate_premises(decided_on, self.eid))
        read_t = time.monotonic()
        killpoints.hit("effect_before_dispatch")
        t0 = time.monotonic()  # the stopwatch starts before T_dispatch (spec 5.4)
        if t0 - read_t > self.spec.premise_max_age:  # stale external read: read again (B13)
            violations = list(self.target.validate_premises(decided_on, self.eid))
            t0 = time.monotonic()
        outcome = self._t_dispatch(decided_on, violations)
        if outcome is not None:
            return outcome
        killpoints.hit("effect_after_dispatch")
        return self._send_and_commit(t0, via=None)

    def _t_dispatch(self, decided_on: Any, violations: list[str]) -> EffectResult | None:
        """T_dispatch, fenced, in the exact order of spec 5.7 (c). Returns an outcome when the
        call ends here (refused, duplicate, ambiguous), None when a send is authorized."""
        ctx, suspended = self.ctx, False
        with ctx._fenced_write() as fence:
            now = fence["now"]
            self.conn.execute(db.query("insert_effect"), {"eid": self.eid, "wf": ctx.workflow_id,
                              "target": self.spec.name, "tier": self.spec.tier,
                              "payload": db.jsonb(self.payload), "payload_hash": self.ph})  # fmt: skip
            eff = self.conn.execute(db.query("lock_effect"), {"eid": self.eid}).fetchone()
            entries = _entries(self.conn, self.eid)
            chain = _Chain(self.conn, self.eid, entries, now.timestamp())
            if journal.open_dispatch(entries) is not None and eff["state"] == "dispatched":
                until = eff["send_deadline"] + eff["settle_margin"]
                self._suspend_until(now, until, f"is in flight until {until.isoformat()}")
                suspended = True
            elif eff["payload_hash"] != self.ph:
                chain.append("PROPOSED", agent=ctx._run.name, lease=self.grant,
                             premises=self.premises, effect=self.payload, decision=self.decision)  # fmt: skip
                chain.append("REFUSED", reason="payload differs from recorded decision",
                             recorded=eff["payload_hash"], offered=self.ph)  # fmt: skip
                return self._record(
                    "REFUSED:conflicting_payload",
                    reason="this key was first proposed with another payload",
                )
            elif eff["state"] == "ambiguous":
                return self._record("AMBIGUOUS")
            elif eff["state"] == "committed":
                committed = [e for e in entries if e["kind"] == "COMMITTED"]
                return self._record(
                    "DUPLICATE_IGNORED", committed[-1].get("result") if committed else None
                )
            else:
                return self._authorize(fence, chain, decided_on, violations)
        if suspended:
            self._suspend_after_commit()
        raise AssertionError("unreachable")  # pragma: no cover

    def _authorize(self, fence: dict, chain: _Chain, decided_on: Any,
                   violations: list[str]) -> EffectResult | None:  # fmt: skip
        """Steps 6-12 of T_dispatch, inside its transaction."""
        ctx = self.ctx
        chain.append("PROPOSED", agent=ctx._run.name, lease=self.grant, premises=self.premises,
                     effect=self.payload, decision=self.decision)  # fmt: skip
        if fence["cancel_requested_at"] is not None and not self.compensation:
            chain.append("REFUSED", reason="cancelled")
            return self._record("REFUSED:cancelled", reason="the workflow was cancelled")
        breaker = self._breaker()
        if breaker is not None and breaker["open"]:
            state = {k: breaker[k] for k in ("consecutive_failures", "threshold")}
            state["opened_at"] = breaker["opened_at"].isoformat()
            chain.append("REFUSED", reason=f"circuit open for target {self.spec.name}",
                         breaker=state)  # fmt: skip
            return self._record(
                "REFUSED:circuit_open", reason=f"circuit open for target {self.spec.name}"
            )
        grant = self.conn.execute(
            db.query("lock_grant_for_share"), {"grant": self.grant}
        ).fetchone()
        checks = _grant_checks(grant, self.grant, self.action, self.payload, self.ph)
        if not checks["lease_live"]:
            why = "; ".join(checks["refusals"])
            chain.append("REFUSED", reason=why, checks=checks)
            return self._record("REFUSED:lease", reason=why)
        chain.append("AUTHORIZED", lease=self.grant)
        checks["violations"] = violations + _local_violations(
            self.conn, self.local_premises, self.eid
        )
        if checks["violations"]:
            chain.append("REFUSED", reason=checks["violations"], checks=checks)
            return self._record(
                "REFUSED:stale_premise",
                reason="premise changed: " + "; ".join(checks["violations"]),
            )
        by = {"workflow_id": ctx.workflow_id, "epoch": ctx.epoch}
        if self.compensation:
            by["compensation"] = True
        chain.append("DISPATCHED", effect=self.payload, lease=self.grant, premises=decided_on,
                     checks=checks, by=by)  # fmt: skip
        self.conn.execute(db.query("mark_dispatched"), {"eid": self.eid, "grant": self.grant,
                          "wf": ctx.workflow_id, "epoch": ctx.epoch,
                          "send_timeout": self.spec.send_timeout,
                          "settle_margin": self.spec.settle_margin})  # fmt: skip
        return None

    # -- verified completion ------------------------------------------------------------------

    def _post_holds(self, payload: Any) -> tuple[bool | None, str]:
        """Evaluate the post-condition by reading the target back (outside any transaction).
        None when there is none; a raising post-condition fails closed."""
        if self.postcondition is None:
            return None, ""
        try:
            ok = self.postcondition(self.target, self.eid, payload)
        except Exception as exc:  # noqa: BLE001 - fail closed, and say why
            return False, f"postcondition raised {type(exc).__name__}: {exc}"
        return (True, "") if ok is True else (False, f"postcondition returned {ok!r}")

    def _post_failed(self, detail: str, result: Any) -> EffectResult:
        """The target said it applied, but reading it back says otherwise: never success. The
        effect is AMBIGUOUS (a human reconciles) and the call returns POSTCONDITION_FAILED."""
        with self.ctx._fenced_write() as fence:
            eff = self.conn.execute(db.query("lock_effect"), {"eid": self.eid}).fetchone()
            if eff["state"] != "dispatched":
                return self._resolved_elsewhere_in_txn(eff)
            chain = _Chain(
                self.conn, self.eid, _entries(self.conn, self.eid), fence["now"].timestamp()
            )
            chain.append("AMBIGUOUS", reason=f"postcondition failed: {detail}", result=result)
            self.conn.execute(db.query("set_effect_state"), {"eid": self.eid, "state": "ambiguous"})
            return self._record("POSTCONDITION_FAILED", {"detail": detail})

    # -- the circuit breaker ------------------------------------------------------------------

    def _breaker(self) -> dict | None:
        if self.spec.breaker_threshold is None:
            return None
        row = self.conn.execute(db.query("breaker_state"), {"target": self.spec.name}).fetchone()
        self._breaker_dirty = bool(row and (row["consecutive_failures"] or row["opened_at"]))
        return row

    def _breaker_outcome(self, failed: bool) -> None:
        """Count a definite failure or timeout; a success closes the breaker. Autocommit: the
        count must survive whatever happens to the effect's own transactions."""
        if self.spec.breaker_threshold is None:
            return
        if failed:
            self.conn.execute(db.query("breaker_failure"), {"target": self.spec.name,
                              "threshold": self.spec.breaker_threshold,
                              "cooldown": self.spec.breaker_cooldown})  # fmt: skip
        elif getattr(self, "_breaker_dirty", True):
            self.conn.execute(db.query("breaker_success"), {"target": self.spec.name})

    # -- the watched send, T_commit, the late result ------------------------------------------

    def _watched_apply(self, t0: float) -> Any:
        """Send with the watchdog (spec 5.4): the process exits if the send outlives the local
        deadline, so no byte can leave after it while the process runs (A1)."""
        remaining = self.spec.send_timeout - (time.monotonic() - t0)
        if remaining < MIN_SEND_BUDGET:
            return _NOT_SENT
        timer = threading.Timer(remaining, os._exit, args=(WATCHDOG_EXIT,))
        timer.daemon = True
        timer.start()
        try:
            return self.target.apply(self.eid, self.payload, worker=self.ctx.worker_id,
                                     epoch=self.ctx.epoch, timeout=remaining)  # fmt: skip
        finally:
            timer.cancel()

    def _send_and_commit(self, t0: float, via: str | None, rechecked: Any = None) -> EffectResult:
        after_send = "effect_after_send" if via is None else "resolve_after_send"
        try:
            result = self._watched_apply(t0)
        except TargetRejected as exc:
            killpoints.hit(after_send)
            self._breaker_outcome(failed=True)
            return self._definite_failure(exc, rechecked)
        except Exception as exc:  # noqa: BLE001 - unknown outcome: leave it dispatched
            killpoints.hit(after_send)
            self._breaker_outcome(failed=True)
            return self._leave_open(f"send failed without a definite answer ({type(exc).__name__})")
        if result is _NOT_SENT:
            return self._leave_open("not sent: send budget below the minimum")
        killpoints.hit(after_send)
        self._breaker_outcome(failed=False)
        result = db.json_value(result, "the target's response")
        fields: dict[str, Any] = {"result": result}
        holds, detail = self._post_holds(self.payload)
        if holds is False:
            return self._post_failed(detail, result)
        if holds:
            fields["verified"] = True
        status = "COMMITTED"
        if via is not None:
            fields.update(via=via, rechecked=rechecked)
            status = {"retry-idempotent": "COMMITTED_BY_RETRY",
                      "recovery-reapply": "REAPPLIED_AFTER_QUERY"}[via]  # fmt: skip
        try:
            outcome = self._t_commit(status, fields)
        finally:  # also when the claim was lost meanwhile (the late path committed or kept it)
            if via == "recovery-reapply":
                self._settle_audit()
        killpoints.hit("effect_after_commit")
        return outcome

    def _settle_audit(self) -> None:
        """A resend after a lookup found nothing rests on A2 (the first send had settled by
        then). Once the resend has settled too, look once more: two applications mean A2 was
        broken, and the journal says so, so that the receipt never claims "once" against the
        ledger. It sees what has landed by then; a send that lands even later is not seen."""
        try:
            eff = self.conn.execute(db.query("get_effect"), {"eid": self.eid}).fetchone()
            wait = (eff["send_deadline"] + eff["settle_margin"] - eff["now"]).total_seconds()
            time.sleep(max(0.0, wait))
            found = self.target.query(self.eid, self.payload)
            count = found.get("count") if isinstance(found, dict) else None
            if not (isinstance(count, int) and count > 1):
                return
            # Evidence, like a late result: unfenced, under the effect row's lock only.
            with self.conn.transaction():
                self.conn.execute(db.query("lock_effect"), {"eid": self.eid}).fetchone()
                now = db.db_now(self.conn).timestamp()
                _Chain(self.conn, self.eid, _entries(self.conn, self.eid), now).append(
                    "AUDITED", applications=count, assumption_violated="A2",
                    reason="a lookup after the resend settled")  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - best effort: the outcome stands as recorded
            emit("settle_audit_failed", wf=self.ctx.workflow_id, effect=self.eid,
                 error=f"{type(exc).__name__}: {exc}")  # fmt: skip

    def _t_commit(self, status: str, fields: dict) -> EffectResult:
        """COMMITTED and the step row in one fenced transaction; on a lost fence, the late
        result path keeps the response."""
        try:
            with self.ctx._fenced_write() as fence:
                eff = self.conn.execute(db.query("lock_effect"), {"eid": self.eid}).fetchone()
                mine = eff["state"] == "dispatched" and self._dispatched_by_me(eff)
                if mine:
                    chain = _Chain(self.conn, self.eid, _entries(self.conn, self.eid),
                                   fence["now"].timestamp())  # fmt: skip
                    chain.append("COMMITTED", **fields)
                    self.conn.execute(
                        db.query("set_effect_state"), {"eid": self.eid, "state": "committed"}
                    )
                    return self._record(status, fields["result"])
        except Fenced:
            self._late_result(fields["result"], fields)
            raise
        # Still our claim, but someone else resolved the send meanwhile: keep the response.
        self._late_result(fields["result"], fields)
        return self._record_resolved_elsewhere()

    def _record_resolved_elsewhere(self) -> EffectResult:
        with self.ctx._fenced_write():
            eff = self.conn.execute(db.query("lock_effect"), {"eid": self.eid}).fetchone()
            status = {"committed": "DUPLICATE_IGNORED", "ambiguous": "AMBIGUOUS"}.get(eff["state"])
            if status is None:
                raise Fenced(f"effect {self.eid} moved to {eff['state']} under another claim")
            return self._record(status)

    def _dispatched_by_me(self, eff: dict) -> bool:
        return (eff["dispatch_workflow_id"], eff["dispatch_epoch"]) == (self.ctx.workflow_id,
                                                                        self.ctx.epoch)  # fmt: skip

    def _late_result(self, result: Any, fields: dict | None = None) -> None:
        """Spec 5.7 (f): unfenced, locks only the effect row. A response that arrives after
        the claim was lost is never dropped (LateResultPreserved). A commit here keeps the
        resend's `via` and `rechecked`, so the journal still shows the send was a resend."""
        with self.conn.transaction():
            eff = self.conn.execute(db.query("lock_effect"), {"eid": self.eid}).fetchone()
            now = db.db_now(self.conn).timestamp()
            chain = _Chain(self.conn, self.eid, _entries(self.conn, self.eid), now)
            if eff["state"] == "dispatched" and self._dispatched_by_me(eff):
                # Our dispatch is still the open one: this compare-and-set may commit it, with no
                # step row (our successor replays it as DUPLICATE_IGNORED).
                resend = {k: v for k, v in (fields or {}).items() if k in ("via", "rechecked")}
                chain.append("COMMITTED", result=result, **resend)
                self.conn.execute(
                    db.query("set_effect_state"), {"eid": self.eid, "state": "committed"}
                )
                return
            late = {
                "result": result,
                "from_epoch": self.ctx.epoch,
                "state_at_arrival": eff["state"],
            }
            if eff["state"] == "proposed":
                late["assumption_violated"] = "A2"
            chain.append("LATE_RESULT", **late)
            self.conn.execute(
                db.query("set_late_result"), {"eid": self.eid, "late": db.jsonb(late)}
            )

    def _definite_failure(self, exc: TargetRejected, rechecked: Any) -> EffectResult:
        """Spec 5.7 (g): a definite failure. Landed anyway (queryable and found): committed;
        otherwise a resolving REFUSED returns the effect to proposed."""
        found = self.target.query(self.eid, self.payload) if self.spec.queryable else None
        with self.ctx._fenced_write() as fence:
            eff = self.conn.execute(db.query("lock_effect"), {"eid": self.eid}).fetchone()
            if not (eff["state"] == "dispatched" and self._dispatched_by_me(eff)):
                return self._resolved_elsewhere_in_txn(eff)
            chain = _Chain(
                self.conn, self.eid, _entries(self.conn, self.eid), fence["now"].timestamp()
            )
            if found:
                chain.append("COMMITTED", via="failed-but-landed", found=db.json_value(found, "found"),
                             result=None, rechecked=rechecked)  # fmt: skip
                self.conn.execute(
                    db.query("set_effect_state"), {"eid": self.eid, "state": "committed"}
                )
                return self._record("COMMITTED_ON_QUERY", db.json_value(found, "found"))
            chain.append("REFUSED", reason=f"target rejected: {exc.reason}", resolves=True,
                         response=db.json_value(exc.response, "response"))  # fmt: skip
            self.conn.execute(db.query("set_effect_state"), {"eid": self.eid, "state": "proposed"})
            return self._record(
                "REFUSED:target_error",
                db.json_value(exc.response, "response"),
                f"target rejected: {exc.reason}",
            )

    def _resolved_elsewhere_in_txn(self, eff: dict) -> EffectResult:
        status = {"committed": "DUPLICATE_IGNORED", "ambiguous": "AMBIGUOUS"}.get(eff["state"])
        if status is None:
            raise Fenced(f"effect {self.eid} is {eff['state']} under another claim")
        return self._record(status)

    def _leave_open(self, why: str) -> EffectResult:
        """Unknown outcome: the effect stays dispatched; come back after deadline + settle."""
        with self.ctx._fenced_write() as fence:
            eff = self.conn.execute(db.query("lock_effect"), {"eid": self.eid}).fetchone()
            until = eff["send_deadline"] + eff["settle_margin"]
            self._suspend_until(fence["now"], until, f"{why}; recovery after {until.isoformat()}")
        self._suspend_after_commit()
        raise AssertionError("unreachable")  # pragma: no cover

    # -- recovery (spec 5.7 recovery a-d) -----------------------------------------------------

    def _recover(self, eff: dict) -> EffectResult | None:
        now = eff["now"]
        settle_until = eff["send_deadline"] + eff["settle_margin"]
        if now <= settle_until:  # (a) nobody may query or resend yet
            with self.ctx._fenced_write() as fence:
                self._suspend_until(fence["now"], settle_until,
                                    f"waits for send_deadline + settle_margin ({settle_until.isoformat()})")  # fmt: skip
            self._suspend_after_commit()
        spec = self.spec
        tier = spec.tier
        window_age = (now - eff["first_dispatched_at"]).total_seconds()
        if tier == 1 and window_age > spec.dedup_window - spec.dedup_margin:
            tier = 2 if spec.queryable else 3  # the target may have forgotten the key
        entries = _entries(self.conn, self.eid)
        dispatched = journal.open_dispatch(entries) or {}
        payload = eff["payload"]
        violations: list[str] = []
        found = None
        if tier in (1, 2):  # (c) outside any transaction
            violations = list(self.target.validate_premises(dispatched.get("premises"), self.eid))
            grant = self.conn.execute(db.query("get_grant"), {"grant": eff["grant_id"]}).fetchone()
            may_fail = bool(violations) or not (grant and grant["live"])
            if spec.queryable and (tier == 2 or may_fail):
                found = self.target.query(self.eid, payload)
        post = self._post_holds(payload) if found else (None, "")
        t0 = time.monotonic()  # the resend's stopwatch starts before T_resolve (B10)
        return self._t_resolve(eff, tier, violations, found, t0, post)

    def _t_resolve(self, read: dict, tier: int, violations: list[str], found: Any, t0: float,
                   post: tuple[bool | None, str] = (None, "")) -> EffectResult | None:  # fmt: skip
        """T_resolve, fenced: the recovery table of spec 5.7 (d)."""
        offered_other = read["payload_hash"] != self.ph  # B13: resolve, then refuse as conflicting
        resend_via = None
        with self.ctx._fenced_write() as fence:
            now = fence["now"]
            eff = self.conn.execute(db.query("lock_effect"), {"eid": self.eid}).fetchone()
            same_pair = (eff["dispatch_workflow_id"], eff["dispatch_epoch"]) == (
                read["dispatch_workflow_id"], read["dispatch_epoch"])  # fmt: skip
            if not (eff["state"] == "dispatched" and same_pair
                    and now > eff["send_deadline"] + eff["settle_margin"]):  # fmt: skip
                return None  # somebody moved first: roll back and re-enter
            grant = self.conn.execute(db.query("lock_grant_for_share"),
                                      {"grant": eff["grant_id"]}).fetchone()  # fmt: skip
            rechecked = _grant_checks(grant, eff["grant_id"], self.action, eff["payload"],
                                      eff["payload_hash"])  # fmt: skip
            rechecked["violations"] = violations if rechecked["lease_live"] else []
            rechecked["ts"] = now.timestamp()  # the grant is judged as of T_resolve, not T_commit
            lease_stale = not rechecked["lease_live"]
            stale = lease_stale or bool(rechecked["violations"])
            why = "lease" if lease_stale else "stale_premise"
            chain = _Chain(self.conn, self.eid, _entries(self.conn, self.eid), now.timestamp())

            def finish(state: str, status: str, result: Any = None,
                       reason: str | None = None) -> EffectResult | None:  # fmt: skip
                if state != "dispatched":
                    self.conn.execute(
                        db.query("set_effect_state"), {"eid": self.eid, "state": state}
                    )
                if offered_other:
                    return None
                return self._record(status, result, reason)

            if tier == 3:
                chain.append("AMBIGUOUS", reason="tier 3: no lookup and no dedup; cannot tell "
                             "whether the send landed", rechecked=rechecked)  # fmt: skip
                return finish("ambiguous", "AMBIGUOUS")
            if tier == 1 and not stale:
                resend_via = "retry-idempotent"
            elif stale and not self.spec.queryable:
                chain.append(
                    "AMBIGUOUS", reason=f"{why} at recovery, no lookup", rechecked=rechecked
                )
                return finish("ambiguous", "AMBIGUOUS")
            elif found and post[0] is False:
                chain.append("AMBIGUOUS", reason=f"postcondition failed: {post[1]}",
                             rechecked=rechecked, found=db.json_value(found, "found"))  # fmt: skip
                return finish("ambiguous", "POSTCONDITION_FAILED", {"detail": post[1]})
            elif found:
                found = db.json_value(found, "found")
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
                detail = (rechecked.get("refusals") if lease_stale
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
            self.conn.execute(db.query("mark_resend"), {"eid": self.eid, "wf": self.ctx.workflow_id,
                              "epoch": self.ctx.epoch, "send_timeout": self.spec.send_timeout})  # fmt: skip
        killpoints.hit("resolve_after_commit")
        if offered_other:
            # Resolve the open send with the recorded payload, then come back to be refused.
            self._resend_recorded(read, t0, resend_via, rechecked)
            return None
        return self._send_and_commit(t0, via=resend_via, rechecked=rechecked)

    def _resend_recorded(self, read: dict, t0: float, via: str, rechecked: dict) -> None:
        """B13: a caller with another payload first settles the recorded send (with the
        recorded payload), without taking its status: no step row is written."""
        offered, self.payload, self.records_step = self.payload, read["payload"], False
        try:  # an unknown outcome suspends this workflow until recovery may look again
            self._send_and_commit(t0, via=via, rechecked=rechecked)
        finally:
            self.payload, self.records_step = offered, True


_NOT_SENT = object()


def run_effect(ctx: WorkflowContext, target: Any, key: str, payload: Any, premises: Any,
               grant: str, name: str | None = None, local_premises: Any = (),
               compensation: bool = False, raise_on_refusal: bool = False,
               action: str | None = None, decision: Any = None,
               postcondition: Any = None) -> EffectResult:  # fmt: skip
    """ctx.effect: validate, replay, or run the call at the frontier."""
    spec = check_target(target)
    if postcondition is not None and not callable(postcondition):
        raise InvalidInput(f"postcondition {postcondition!r} is not callable: pass a function "
                           "(target, effect_id, payload) -> bool that reads the target back")  # fmt: skip
    if not isinstance(key, str) or not key or len(key) > 500:
        raise InvalidInput(f"effect key {key!r}: use a non-empty string of at most 500 characters")
    try:
        db.to_json_text(payload, "the effect payload")
        db.to_json_text(premises, "the effect premises")
    except TypeError as exc:
        raise InvalidInput(str(exc)) from None
    local_premises = [(fn, args) for fn, args in local_premises]
    for fn, _ in local_premises:
        if not isinstance(fn, str) or not _FUNCTION.match(fn):
            raise InvalidInput(f"local premise {fn!r} is not a SQL function name (schema.name)")
    action = action or target_action(target, spec)
    call_name = name or f"effect:{key}"
    eid = journal.effect_id_for(key)
    seq, row = ctx._next(
        "effect", call_name, journal.fingerprint(eid, journal.payload_hash(payload))
    )
    if row is not None:
        out = EffectResult(**row["output"])
    else:
        ctx._frontier()
        if ctx._conn.execute(db.query("get_grant"), {"grant": grant}).fetchone() is None:
            raise InvalidInput(
                f"unknown grant {grant!r}: create it with rt.grant() or rt.approve()"
            )
        out = EffectCall(ctx, seq, call_name, target, spec, key, payload, premises, grant, action,
                         local_premises, compensation, decision, postcondition).run()  # fmt: skip
    if raise_on_refusal and out.refused:
        raise EffectRefused(out)
    return out


def resolve_orphan(ctx: WorkflowContext, target: Any, effect_row: dict) -> EffectResult | None:
    """rt.recover_orphans: run the recovery path for an effect whose workflow will never run
    again, under a synthetic claim; writes the journal and the effects row only."""
    spec = check_target(target)
    call = EffectCall(ctx, 0, "$orphan", target, spec, "orphan", effect_row["payload"], None,
                      effect_row["grant_id"], target_action(target, spec), (), False, None)  # fmt: skip
    call.eid = effect_row["effect_id"]
    call.ph = effect_row["payload_hash"]
    call.records_step = False
    return call._recover(effect_row)
