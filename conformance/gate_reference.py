"""An in-memory reference of one gated effect: the decision table of docs/design.md#gated-effects.

Written from the spec text (5.4 the send watchdog, 5.7 submit a-g, recovery a-d and the
T_resolve table) and docs/design.md#vocabulary, B5, B7, B13 and C, not from runtime/interlock_runtime/effects/__init__.py.
It shares only the journal format (interlock_runtime.journal: seal, effect ids, payload hash,
open dispatch), so receipts.verify() reads its bundles exactly as it reads the runtime's.

One effect (one idempotency key), single-threaded, with a simulated database clock:
- the effect row: state, payload_hash, grant, dispatch pair, first_dispatched_at,
  send_deadline, settle_margin, sends, late_result;
- the journal: sealed entries shaped as docs/design.md#gated-effects says;
- grants, the claims of each workflow (epochs: the fence) and each workflow's effect step;
- a target (RefTarget): tier, queryable, a tier-1 dedup store, a ledger and an access log.

A call that suspends (docs/design.md#gated-effects: in flight, before send_deadline + settle_margin, an unknown
send outcome) is woken when the database clock reaches its `until`: the reference advances the
clock there and the workflow is claimed again (a new epoch), as a worker would.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from interlock_runtime import journal, receipts

CRASHED = "CRASHED"  # the caller died at a kill point: no step was recorded
FENCED = "FENCED"  # the caller lost its claim before T_commit: the run is abandoned
MIN_SEND_BUDGET = 1.0  # docs/design.md#send-deadline
INF = float("inf")
WAKE_SLACK = 0.2  # a suspended workflow is claimed this long after its `until` (poll)


class Rejected(Exception):
    """A definite failure from the target (HTTP 4xx other than 409/429): nothing happened."""


class Unknown(Exception):
    """No definite answer (a timeout, a reset, a 5xx): the request may or may not have landed."""


class NoLookup(Exception):
    """The target answers no lookups (tier 3, or not queryable)."""


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


class RefTarget:
    """The local payment target of docs/design.md#refund-case reduced to one payment, with B13's premises
    {payment, eligible, refunded_by_others}. Its ledger is ground truth."""

    def __init__(self, tier: int, payment: str, paid: int, queryable: bool | None = None):
        self.tier, self.payment, self.paid = tier, payment, paid
        self.queryable = tier in (1, 2) if queryable is None else queryable
        self.refunds: list[dict] = []  # {id, amount, key, source}
        self.keys: dict[str, tuple[str, dict]] = {}  # tier 1: Idempotency-Key -> (params, refund)
        self.access_log: list[dict] = []
        self.drop_responses = 0  # the next N refunds land but their responses are lost

    def _refunded(self) -> int:
        return sum(r["amount"] for r in self.refunds)

    def apply(self, key: str, payload: dict, worker: str) -> dict:
        """POST /refunds: tier 1 dedupes on the key with Stripe semantics; tiers 2, 3 apply."""
        self.access_log.append({"method": "POST", "path": "/refunds", "worker": worker, "key": key})
        params = journal.canonical(payload)
        if self.tier == 1 and key in self.keys:
            stored_params, refund = self.keys[key]
            if stored_params != params:
                raise Rejected("key_reused")
            return {**refund, "replayed": True}
        amount = payload["amount"]
        if amount > self.paid - self._refunded():
            raise Rejected("insufficient_funds")
        refund = {"id": f"re_{len(self.refunds) + 1:06d}", "amount": amount, "key": key,
                  "source": "api"}  # fmt: skip
        self.refunds.append(refund)
        if self.tier == 1:
            self.keys[key] = (params, dict(refund))
        if self.drop_responses:
            self.drop_responses -= 1
            raise Unknown("the response was lost")
        return dict(refund)

    def query(self, key: str) -> dict | None:
        """GET /refunds?key=: the first refund under key (with count), or None."""
        if not self.queryable:
            raise NoLookup(f"tier {self.tier} target without lookup")
        self.access_log.append({"method": "GET", "path": "/refunds", "worker": None, "key": key})
        found = [r for r in self.refunds if r["key"] == key]
        return {**found[0], "count": len(found)} if found else None

    def capture(self, key: str | None = None) -> dict:
        """The premises now. Our own refunds (under key) are not "others'"; only a target with
        a lookup (tiers 1, 2) can tell them apart."""
        ours = 0
        if key is not None and self.tier in (1, 2):
            ours = sum(r["amount"] for r in self.refunds if r["key"] == key)
        others = self._refunded() - ours
        return {"payment": self.payment, "eligible": self.paid - others > 0,
                "refunded_by_others": others}  # fmt: skip

    def validate_premises(self, premises: dict | None, key: str) -> list[str]:
        premises, now = premises or {}, self.capture(key)
        out = []
        if premises.get("payment") not in (None, self.payment):
            out.append("payment changed")
        if "refunded_by_others" in premises and (
            premises["refunded_by_others"] != now["refunded_by_others"]
        ):
            out.append(
                f"refunded_by_others changed: {premises['refunded_by_others']} -> "
                f"{now['refunded_by_others']}"
            )
        if not now["eligible"] and premises.get("eligible", True):
            out.append(f"payment {self.payment} is no longer eligible")
        return out

    # world events
    def hand_refund(self, amount: int) -> None:
        self.access_log.append({"method": "POST", "path": "/admin/hand_refund", "worker": None})
        self.refunds.append({"id": f"re_{len(self.refunds) + 1:06d}", "amount": amount,
                             "key": None, "source": "hand"})  # fmt: skip

    def prune_keys(self) -> None:
        """EMULATED: the target forgets its idempotency keys (Stripe prunes after 24 h)."""
        self.keys.clear()

    def ledger(self) -> list[tuple[int, str]]:
        return [(r["amount"], r["source"]) for r in self.refunds]

    def posts(self, worker: str | None = None) -> list[dict]:
        return [e for e in self.access_log if e["path"] == "/refunds" and e["method"] == "POST"
                and (worker is None or e["worker"] == worker)]  # fmt: skip


@dataclass
class Grant:
    id: str
    principal: str
    action: str | None  # None: an approval, bound to one payload whatever the action
    constraints: dict | None  # {field: {"max": n}}: the reference knows max bounds only
    payload_hash: str | None
    granted_by: str
    facts_seen: Any = None
    expires_at: float | None = None
    revoked_at: float | None = None

    def snapshot(self) -> dict:
        """The grant as the receipt records it (docs/design.md#gated-effects c step 8)."""
        return {"grant_id": self.id, "principal": self.principal, "action": self.action,
                "constraints": self.constraints, "payload_hash": self.payload_hash,
                "expires_at": _iso(self.expires_at), "revoked": _iso(self.revoked_at),
                "granted_by": self.granted_by}  # fmt: skip


@dataclass
class EffectRow:
    payload: Any
    payload_hash: str
    state: str = "proposed"
    grant_id: str | None = None
    dispatch_pair: tuple[str, int] | None = None
    first_dispatched_at: float | None = None
    send_deadline: float | None = None
    settle_margin: float | None = None
    sends: int = 0
    late_result: Any = None


class _Suspend(Exception):
    def __init__(self, until: float):
        self.until = until


class GateReference:
    """One effect key through the gate. `call()` is one ctx.effect call at the frontier."""

    def __init__(self, key: str, target: RefTarget, *, send_timeout: float,
                 settle_margin: float, premise_max_age: float = 5.0,
                 dedup_window: float = INF, dedup_margin: float = 600.0,
                 action: str = "refund", clock: float = 1_800_000_000.0):  # fmt: skip
        if target.tier == 1 and not dedup_margin > send_timeout + settle_margin:
            raise ValueError("C2: tier 1 needs dedup_margin > send_timeout + settle_margin")
        self.eid = journal.effect_id_for(key)
        self.target, self.action, self.clock = target, action, clock
        self.send_timeout, self.settle_margin = send_timeout, settle_margin
        self.premise_max_age = premise_max_age
        self.dedup_window, self.dedup_margin = dedup_window, dedup_margin
        self.row: EffectRow | None = None
        self.entries: list[dict] = []
        self.grants: dict[str, Grant] = {}
        self.epochs: dict[str, int] = {}  # workflow -> epoch of its current claim
        self.steps: dict[str, str] = {}  # workflow -> its recorded effect status
        self.cancelled: set[str] = set()

    # -- world ----------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        self.clock += seconds

    def grant(self, gid: str, max_amount: int | None = None, by: str = "policy") -> str:
        bounds = None if max_amount is None else {"amount": {"max": max_amount}}
        self.grants[gid] = Grant(gid, "agent", self.action, bounds, None, by)
        return gid

    def approve(self, gid: str, wf: str, payload: Any, facts_seen: Any, by: str) -> str:
        """A grant bound to exactly this payload (its hash) and the facts the approver saw."""
        self.grants[gid] = Grant(gid, f"workflow:{wf}", None, None,
                                 journal.payload_hash(payload), by, facts_seen)  # fmt: skip
        return gid

    def revoke(self, gid: str) -> list[str]:
        """Returns the effects that may still land: dispatched under the grant."""
        g = self.grants[gid]
        g.revoked_at = g.revoked_at or self.clock
        row = self.row
        return [self.eid] if row and row.state == "dispatched" and row.grant_id == gid else []

    def claim(self, wf: str) -> int:
        """A (re)claim of the workflow bumps its epoch: earlier claims are fenced."""
        self.epochs[wf] = self.epochs.get(wf, 0) + 1
        return self.epochs[wf]

    def cancel(self, wf: str) -> None:
        self.cancelled.add(wf)

    def bundle(self) -> dict:
        """The receipt bundle of the effect (the shared format), for receipts.verify()."""
        late = self.row.late_result if self.row else None
        return receipts.bundle(self.entries, self.eid, late_result=late)

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.entries]

    # -- the call -------------------------------------------------------------------------

    def call(self, wf: str, payload: Any, premises: Any, grant: str, *, agent: str = "refund",
             crash: str | None = None, decision: Any = None,
             compensation: bool = False) -> str:  # fmt: skip
        """ctx.effect by the current claim of wf: the recorded status on replay; else submit
        (no row, or proposed), recovery (dispatched), or T_dispatch's own handling (committed,
        ambiguous). Returns a status of docs/design.md#vocabulary, or CRASHED at the kill point `crash`
        (effect_before_dispatch, effect_after_dispatch, effect_after_send,
        resolve_after_commit, resolve_after_send)."""
        if wf in self.steps:  # replay: the step row answers, nothing runs
            return self.steps[wf]
        if wf not in self.epochs:
            self.claim(wf)
        while True:
            caller = (wf, self.epochs[wf])
            try:
                if self.row is not None and self.row.state == "dispatched":
                    out = self._recover(caller, payload, crash)
                else:
                    out = self._submit(caller, payload, premises, grant, agent, crash, decision,
                                       compensation)  # fmt: skip
            except _Suspend as s:  # released until `until`; woken and claimed again
                self.clock = max(self.clock, s.until) + WAKE_SLACK
                self.claim(wf)
                continue
            if out is None:  # B13: another payload's open send was resolved; go round again
                continue
            return out

    def _record(self, caller: tuple[str, int], status: str) -> str:
        """The effect's step row, written in the same fenced transaction as the decision."""
        self.steps[caller[0]] = status
        return status

    def _append(self, kind: str, **fields: Any) -> dict:
        prev = self.entries[-1]["hash"] if self.entries else None
        entry = {"ts": self.clock, "kind": kind, "effect_id": self.eid, **fields}
        sealed = journal.seal(entry, prev)
        self.entries.append(sealed)
        return sealed

    def _checks(self, gid: str, payload: Any, ph: str) -> dict:
        """docs/design.md#gated-effects (c) step 8: allowed = not revoked, not expired, the action (when the grant
        names one), every max bound, and the payload hash when the grant binds one."""
        g = self.grants[gid]
        allowed = (
            g.revoked_at is None
            and (g.expires_at is None or g.expires_at > self.clock)
            and (g.action is None or g.action == self.action)
            and all(payload.get(f, INF) <= b["max"] for f, b in (g.constraints or {}).items())
            and (g.payload_hash is None or g.payload_hash == ph)
        )
        return {"lease_live": allowed, "lease": g.snapshot()}

    def _grant_live(self, gid: str) -> bool:
        g = self.grants[gid]
        return g.revoked_at is None and (g.expires_at is None or g.expires_at > self.clock)

    # -- submit path (docs/design.md#gated-effects a-e) -----------------------------------------------------------

    def _submit(self, caller, payload, premises, gid, agent, crash, decision, compensation):
        # (a) external premises, outside any transaction: decided_on is the premises of the
        # first PROPOSED under this grant, else the argument (B7 a).
        proposed = [e for e in self.entries if e["kind"] == "PROPOSED" and e.get("lease") == gid]
        decided_on = proposed[0]["premises"] if proposed else premises
        violations = self.target.validate_premises(decided_on, self.eid)
        # (b) kill point effect_before_dispatch; the stopwatch starts. No time passes in the
        # reference between (a) and (b), so the read is never older than premise_max_age.
        if crash == "effect_before_dispatch":
            return CRASHED
        elapsed = 0.0
        out = self._t_dispatch(caller, payload, premises, decided_on, violations, gid, agent,
                               decision, compensation)  # fmt: skip
        if out is not None:
            return out
        # (d) kill point effect_after_dispatch, then the watched send.
        if crash == "effect_after_dispatch":
            return CRASHED
        return self._send_and_commit(caller, payload, elapsed, None, None, crash)

    def _t_dispatch(self, caller, payload, premises, decided_on, violations, gid, agent,
                    decision, compensation) -> str | None:  # fmt: skip
        """(c) T_dispatch, fenced, steps 1-13 in order. A status ends the call; None means the
        send is authorized and durable."""
        ph = journal.payload_hash(payload)
        # 1. insert the effect row (on conflict do nothing), lock it; 2. read its entries.
        if self.row is None:
            self.row = EffectRow(payload, ph)
        row = self.row
        # 3. an open dispatch by another workflow or claim: write nothing, wait (IN_FLIGHT).
        if journal.open_dispatch(self.entries) is not None and row.state == "dispatched":
            raise _Suspend(row.send_deadline + row.settle_margin)
        # 4. payload binding: another payload is refused as conflicting.
        if row.payload_hash != ph:
            self._append("PROPOSED", agent=agent, lease=gid, premises=premises, effect=payload,
                         decision=decision)  # fmt: skip
            self._append("REFUSED", reason="payload differs from recorded decision",
                         recorded=row.payload_hash, offered=ph)  # fmt: skip
            return self._record(caller, "REFUSED:conflicting_payload")
        # 5. terminal states: no entry.
        if row.state == "ambiguous":
            return self._record(caller, "AMBIGUOUS")
        if row.state == "committed":
            return self._record(caller, "DUPLICATE_IGNORED")
        # 6. PROPOSED.
        self._append("PROPOSED", agent=agent, lease=gid, premises=premises, effect=payload,
                     decision=decision)  # fmt: skip
        # 7. cancelled (not a compensation): refused.
        if caller[0] in self.cancelled and not compensation:
            self._append("REFUSED", reason="cancelled")
            return self._record(caller, "REFUSED:cancelled")
        # 8. the grant, FOR SHARE.
        checks = self._checks(gid, payload, ph)
        if not checks["lease_live"]:
            self._append("REFUSED", reason="lease not live, or it does not cover this effect",
                         checks=checks)  # fmt: skip
            return self._record(caller, "REFUSED:authority")
        # 9. AUTHORIZED.
        self._append("AUTHORIZED", lease=gid)
        # 10. premises: the external violations (no local SQL premises here).
        checks["violations"] = list(violations)
        if checks["violations"]:
            self._append("REFUSED", reason=checks["violations"], checks=checks)
            return self._record(caller, "REFUSED:stale_premise")
        # 11. DISPATCHED, naming its sender (B13).
        self._append("DISPATCHED", effect=payload, lease=gid, premises=decided_on, checks=checks,
                     by={"workflow_id": caller[0], "epoch": caller[1]})  # fmt: skip
        # 12. the row: dispatched by this pair, the durable send deadline, one more send.
        row.state, row.grant_id, row.dispatch_pair = "dispatched", gid, caller
        if row.first_dispatched_at is None:
            row.first_dispatched_at = self.clock
        row.send_deadline = self.clock + self.send_timeout
        row.settle_margin = self.settle_margin
        row.sends += 1
        return None  # 13. COMMIT

    def _send_and_commit(self, caller, payload, elapsed, via, rechecked, crash,
                         record: bool = True) -> str | None:  # fmt: skip
        """The watched send (docs/design.md#send-deadline), then T_commit (e), the late result (f) or the
        exception rules (g). `via` is None for a first send, else the resend's COMMITTED.via."""
        after_send = "effect_after_send" if via is None else "resolve_after_send"
        remaining = self.send_timeout - elapsed
        if remaining < MIN_SEND_BUDGET:  # B5: not sent; recovery comes after deadline + settle
            raise _Suspend(self.row.send_deadline + self.row.settle_margin)
        try:
            result = self.target.apply(self.eid, payload, worker=f"{caller[0]}@{caller[1]}")
        except Rejected as exc:  # (g) a definite failure
            if crash == after_send:
                return CRASHED
            return self._definite_failure(caller, exc, rechecked)
        except Unknown:  # (g) any other failure: stays dispatched; recovery after the settle
            if crash == after_send:
                return CRASHED
            raise _Suspend(self.row.send_deadline + self.row.settle_margin) from None
        if crash == after_send:
            return CRASHED
        fields: dict[str, Any] = {"result": result}
        status = "COMMITTED"
        if via is not None:
            fields = {"via": via, "rechecked": rechecked, "result": result}
            status = {"retry-idempotent": "COMMITTED_BY_RETRY",
                      "recovery-reapply": "REAPPLIED_AFTER_QUERY"}[via]  # fmt: skip
        return self._t_commit(caller, fields, status, record)

    def _fence_holds(self, caller) -> bool:
        return self.epochs.get(caller[0]) == caller[1]

    def _t_commit(self, caller, fields: dict, status: str, record: bool) -> str | None:
        """(e) fenced: still dispatched by this pair -> COMMITTED, state committed, the step row
        (none when the send was another payload's, B13: the caller goes round again)."""
        if not self._fence_holds(caller):
            self._late_result(caller, fields["result"], fields)
            return FENCED
        row = self.row
        if row.state == "dispatched" and row.dispatch_pair == caller:
            self._append("COMMITTED", **fields)
            row.state = "committed"
            return self._record(caller, status) if record else None
        # resolved by someone else meanwhile: keep the response, take the effect's outcome
        self._late_result(caller, fields["result"], fields)
        return self._record(caller, "DUPLICATE_IGNORED" if row.state == "committed"
                            else "AMBIGUOUS")  # fmt: skip

    def _late_result(self, caller, result: Any, fields: dict | None = None) -> None:
        """(f) unfenced, the effect row only: commit our still-open dispatch (no step row), or
        keep the response as LATE_RESULT (A2 broken when the effect went back to proposed)."""
        row = self.row
        if row.state == "dispatched" and row.dispatch_pair == caller:
            resend = {k: v for k, v in (fields or {}).items() if k in ("via", "rechecked")}
            self._append("COMMITTED", result=result, **resend)  # a resend stays visible as one
            row.state = "committed"
            return
        late = {"result": result, "from_epoch": caller[1], "state_at_arrival": row.state}
        if row.state == "proposed":
            late["assumption_violated"] = "A2"
        self._append("LATE_RESULT", **late)
        row.late_result = late

    def _definite_failure(self, caller, exc: Rejected, rechecked: Any) -> str:
        """(g) TargetRejected: landed anyway (queryable and found) is COMMITTED_ON_QUERY;
        otherwise a resolving REFUSED returns the effect to proposed."""
        found = self.target.query(self.eid) if self.target.queryable else None
        if found:
            self._append("COMMITTED", via="failed-but-landed", found=found, result=None,
                         rechecked=rechecked)  # fmt: skip
            self.row.state = "committed"
            return self._record(caller, "COMMITTED_ON_QUERY")
        self._append("REFUSED", reason=f"target rejected: {exc}", resolves=True)
        self.row.state = "proposed"
        return self._record(caller, "REFUSED:target_error")

    # -- recovery (docs/design.md#gated-effects recovery a-d) -------------------------------------------------------

    def _recover(self, caller, payload, crash) -> str | None:
        row = self.row
        # (a) a short read. Nobody queries or resends before send_deadline + settle_margin.
        until = row.send_deadline + row.settle_margin
        if self.clock <= until:
            raise _Suspend(until)
        # The effective tier: tier 1 past its dedup window (less the margin) may have
        # forgotten the key: tier 2 when queryable, else tier 3.
        tier = self.target.tier
        if tier == 1 and self.clock - row.first_dispatched_at > (
            self.dedup_window - self.dedup_margin
        ):
            tier = 2 if self.target.queryable else 3
        read_pair = row.dispatch_pair
        dispatched = journal.open_dispatch(self.entries) or {}
        violations: list[str] = []
        found = None
        if tier in (1, 2):
            # (c) outside any transaction: re-validate the DISPATCHED premises; query at tier 2,
            # and at tier 1 when the re-check may fail or the effect was already resent once.
            violations = self.target.validate_premises(dispatched.get("premises"), self.eid)
            may_fail = bool(violations) or not self._grant_live(row.grant_id)
            if self.target.queryable and (tier == 2 or may_fail or row.sends > 1):
                found = self.target.query(self.eid)
        return self._t_resolve(caller, payload, read_pair, tier, violations, found, crash)

    def _t_resolve(self, caller, payload, read_pair, tier, violations, found, crash):
        """(d) T_resolve, fenced: still dispatched by the pair we read, and past the settle
        point, else re-enter; the grant FOR SHARE, the rebuilt checks (violations only while
        the grant holds), then the table."""
        row = self.row
        if not (row.state == "dispatched" and row.dispatch_pair == read_pair
                and self.clock > row.send_deadline + row.settle_margin):  # fmt: skip
            return None
        rechecked = self._checks(row.grant_id, row.payload, row.payload_hash)
        rechecked["violations"] = list(violations) if rechecked["lease_live"] else []
        rechecked["ts"] = self.clock
        grant_stale = not rechecked["lease_live"]
        stale = grant_stale or bool(rechecked["violations"])
        why = "authority" if grant_stale else "stale_premise"
        # B13: a caller offering another payload resolves the open send without taking its
        # status, then goes round again (and is refused as conflicting_payload).
        other = journal.payload_hash(payload) != row.payload_hash

        def finish(state: str, status: str) -> str | None:
            row.state = state
            return None if other else self._record(caller, status)

        queryable = self.target.queryable
        if tier == 3:  # (b): no dedup and no lookup
            self._append("AMBIGUOUS", reason="tier 3: cannot tell whether the send landed",
                         rechecked=rechecked)  # fmt: skip
            return finish("ambiguous", "AMBIGUOUS")
        if tier == 1 and not stale and not found:  # it dedupes: resend with the same key
            via = "retry-idempotent"
        elif stale and not queryable:
            self._append("AMBIGUOUS", reason=f"{why} at recovery, no lookup",
                         rechecked=rechecked)  # fmt: skip
            return finish("ambiguous", "AMBIGUOUS")
        elif found:
            self._append("COMMITTED", via="recovery-query", rechecked=rechecked, found=found,
                         result=found)  # fmt: skip
            return finish("committed", "COMMITTED_ON_QUERY")
        elif stale:
            self._append("REFUSED", reason=f"{why} at recovery", resolves=True,
                         rechecked=rechecked)  # fmt: skip
            return finish("proposed", f"REFUSED:{why}_at_recovery")
        elif not queryable:
            # Not in the spec's table: a tier-2 target without a lookup cannot show "not
            # found"; the reference treats it as unknown rather than resending blind.
            self._append("AMBIGUOUS", reason="no lookup", rechecked=rechecked)
            return finish("ambiguous", "AMBIGUOUS")
        else:  # not stale, not found: resend
            via = "recovery-reapply"
        # A resend: the durable record first (the dispatch pair moves to this claim, a new
        # send_deadline, sends + 1); no second DISPATCHED. The stopwatch started before
        # T_resolve (B10), and no time passes in the reference.
        row.dispatch_pair = caller
        row.send_deadline = self.clock + self.send_timeout
        row.sends += 1
        if crash == "resolve_after_commit":
            return CRASHED
        return self._send_and_commit(caller, row.payload, 0.0, via, rechecked, crash,
                                     record=not other)  # fmt: skip
