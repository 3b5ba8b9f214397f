"""Code checks of the catalog's invariants over real runs (docs/design.md#invariant-catalog, layer C).

INVARIANTS maps each catalog name (models/catalog.yaml, rows whose layers include C) to a check.
A check reads the run's evidence and returns its violations (an empty list: it holds):

- Postgres, always: claim history, steps, journal, effects, grants, signals, workflows;
- the target's ledger and access log, for the checks that compare the record with the world;
- the workers' event logs, for the checks that need to know when a step body started.

A check whose evidence is missing raises MissingEvidence rather than passing vacuously.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import psycopg

from interlock_runtime import journal, receipts
from interlock_runtime.vocabulary import RESOLVING_ENTRIES, ResendVia

TERMINAL_ENTRIES = tuple(k.value for k in RESOLVING_ENTRIES)
RESEND_VIA = ResendVia.values()


class MissingEvidence(Exception):
    """The run did not collect what this check needs (ledger, access log or worker events)."""


@dataclass
class Evidence:
    """Everything a run leaves behind. conn reads the run's database."""

    conn: psycopg.Connection
    ledger: list[dict] | None = None  # target refunds: {key, amount, source, ...}
    access_log: list[dict] | None = None  # target requests: {key, method, path, arrival, end, ...}
    events: list[dict] | None = None  # worker events: {event, ts, wf, epoch, seq, ...}
    # The world as read just before the database snapshot (see snapshot()); by default the
    # same as above. "The record implies the world" checks use the later reading, "the world
    # implies the record" checks the earlier one, so a live run gives no false alarms.
    ledger_before: list[dict] | None = None
    access_log_before: list[dict] | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.ledger_before is None:
            self.ledger_before = self.ledger
        if self.access_log_before is None:
            self.access_log_before = self.access_log

    def rows(self, sql: str) -> list[dict]:
        if sql not in self._cache:
            self._cache[sql] = self.conn.execute(sql).fetchall()
        return self._cache[sql]

    def need(self, what: str) -> Any:
        value = getattr(self, what)
        if value is None:
            raise MissingEvidence(f"this check needs the run's {what.replace('_', ' ')}")
        return value

    # -- shared reads -------------------------------------------------------------------------

    def claims(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = defaultdict(list)
        for c in self.rows("select * from ilr.claims order by workflow_id, epoch"):
            out[c["workflow_id"]].append(c)
        return out

    def steps(self) -> list[dict]:
        return self.rows("select * from ilr.steps order by workflow_id, seq")

    def effects(self) -> dict[str, dict]:
        return {e["effect_id"]: e for e in self.rows("select * from ilr.effects")}

    def entries(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = defaultdict(list)
        for r in self.rows("select effect_id, body from ilr.journal order by seq"):
            out[r["effect_id"]].append(json.loads(r["body"]))
        return out

    def workflows(self) -> dict[str, dict]:
        return {w["id"]: w for w in self.rows("select * from ilr.workflows")}

    def grants(self) -> dict[str, dict]:
        return {g["id"]: g for g in self.rows("select * from ilr.grants")}

    def posts(self, before: bool = False) -> dict[str, list[dict]]:
        """Refund requests that reached the target, by effect key, in arrival order."""
        out: dict[str, list[dict]] = defaultdict(list)
        log = self.need("access_log_before" if before else "access_log")
        for r in sorted(log, key=lambda r: r["arrival"]):
            if r["method"] == "POST" and r["path"].rstrip("/").endswith("refunds") and r.get("key"):
                out[r["key"]].append(r)
        return out

    def applied(self, before: bool = False) -> Counter:
        """How many times the target applied each effect (the ledger is ground truth)."""
        ledger = self.need("ledger_before" if before else "ledger")
        return Counter(r["key"] for r in ledger if r.get("key"))


def _ts(value: datetime) -> float:
    return value.replace(tzinfo=value.tzinfo or timezone.utc).timestamp()


def _tenure(claims: list[dict], epoch: int) -> tuple[float, float]:
    """Database-time window in which `epoch` was the current claim: [claimed_at, next claim)."""
    start = next((_ts(c["claimed_at"]) for c in claims if c["epoch"] == epoch), None)
    nxt = [_ts(c["claimed_at"]) for c in claims if c["epoch"] == epoch + 1]
    return (start if start is not None else float("inf"), nxt[0] if nxt else float("inf"))


def _sends(entries: list[dict]) -> list[dict]:
    """Every authorized send: DISPATCHED entries and resends (COMMITTED via retry/reapply)."""
    out = []
    for e in entries:
        if e["kind"] == "DISPATCHED":
            out.append({"ts": e["ts"], "checks": e.get("checks") or {}, "lease": e.get("lease"),
                        "by": e.get("by") or {}, "effect": e.get("effect"), "resend": False})  # fmt: skip
        elif e["kind"] == "COMMITTED" and e.get("via") in RESEND_VIA:
            rc = e.get("rechecked") or {}
            out.append({"ts": rc.get("ts", e["ts"]), "checks": rc, "lease": None, "by": {},
                        "effect": None, "resend": True})  # fmt: skip
    return out


def _effective_tier3(eff: dict, entries: list[dict]) -> bool:
    if eff["tier"] == 3:
        return True
    return any(e["kind"] == "AMBIGUOUS" and "no lookup" in str(e.get("reason")) for e in entries)


# -- the checks, one per catalog name ---------------------------------------------------------


def no_rerun_after_complete(ev: Evidence) -> list[str]:
    recorded = {(s["workflow_id"], s["seq"]): _ts(s["created_at"]) for s in ev.steps()}
    out = []
    for e in ev.need("events"):
        if e.get("event") != "step_started":
            continue
        at = recorded.get((e["wf"], e["seq"]))
        if at is not None and e["ts"] >= at:
            out.append(f"{e['wf']} seq {e['seq']}: body started at {e['ts']:.3f} by epoch "
                       f"{e['epoch']}, after its row committed at {at:.3f}")  # fmt: skip
    return out


def step_result_unique(ev: Evidence) -> list[str]:
    out = [
        f"{k}: {n} rows"
        for k, n in Counter((s["workflow_id"], s["seq"]) for s in ev.steps()).items()
        if n > 1
    ]
    triggers = {
        r["tgname"] for r in ev.rows("select tgname from pg_trigger where not tgisinternal")
    }
    if "steps_append_only" not in triggers:
        out.append("the append-only trigger on ilr.steps is missing: rows could be updated")
    return out


def fenced_writes(ev: Evidence) -> list[str]:
    claims, wfs, out = ev.claims(), ev.workflows(), []
    for s in ev.steps():
        if s["epoch"] == 0 and wfs[s["workflow_id"]]["forked_from"]:
            continue  # copied by rt.fork, not written by a claim
        lo, hi = _tenure(claims[s["workflow_id"]], s["epoch"])
        if not lo <= _ts(s["created_at"]) < hi:
            out.append(f"{s['workflow_id']} seq {s['seq']} written by epoch {s['epoch']} outside "
                       "its tenure")  # fmt: skip
    for eid, entries in ev.entries().items():
        for e in entries:
            by = e.get("by") or {}
            if e["kind"] == "DISPATCHED" and by:
                lo, hi = _tenure(claims[by["workflow_id"]], by["epoch"])
                if not lo <= e["ts"] < hi:
                    out.append(f"{eid}: DISPATCHED by epoch {by['epoch']} outside its tenure")
    return out


def lease_mutex(ev: Evidence) -> list[str]:
    out = takeover_only_after_expiry(ev)
    for wf, claims in ev.claims().items():
        if [c["epoch"] for c in claims] != sorted({c["epoch"] for c in claims}):
            out.append(f"{wf}: two claims share an epoch")
    return out


def takeover_only_after_expiry(ev: Evidence) -> list[str]:
    return [f"{c['workflow_id']} epoch {c['epoch']}: claimed at {c['claimed_at']} while the "
            f"previous lease ran until {c['prev_lease_expires_at']}"
            for cl in ev.claims().values() for c in cl
            if c["prev_status"] == "running" and c["prev_lease_expires_at"] is not None
            and c["claimed_at"] < c["prev_lease_expires_at"]]  # fmt: skip


def at_most_one_commit(ev: Evidence) -> list[str]:
    return [f"{eid}: {n} COMMITTED entries" for eid, entries in ev.entries().items()
            if (n := sum(e["kind"] == "COMMITTED" for e in entries)) > 1]  # fmt: skip


def effect_at_most_once_tier12(ev: Evidence) -> list[str]:
    applied, entries, out = ev.applied(), ev.entries(), []
    for eid, eff in ev.effects().items():
        if eff["tier"] in (1, 2) and not _effective_tier3(eff, entries[eid]) and applied[eid] > 1:
            late = eff["late_result"] or {}
            note = " (assumption A2 reported violated)" if late.get("assumption_violated") else ""
            out.append(f"{eid}: applied {applied[eid]} times at tier {eff['tier']}{note}")
    return out


def tier3_never_resends(ev: Evidence) -> list[str]:
    posts, entries = ev.posts(), ev.entries()
    return [f"{eid}: {len(posts[eid])} requests at effective tier 3"
            for eid, eff in ev.effects().items()
            if _effective_tier3(eff, entries[eid]) and len(posts[eid]) > 1]  # fmt: skip


def no_overlapping_sends(ev: Evidence) -> list[str]:
    out = []
    for key, reqs in ev.posts().items():
        for a, b in zip(reqs, reqs[1:], strict=False):
            if a.get("end") is None or b["arrival"] < a["end"]:
                out.append(f"{key}: a second request arrived at {b['arrival']:.3f} while the first "
                           f"(arrived {a['arrival']:.3f}) was still in flight")  # fmt: skip
    return out


def committed_implies_applied(ev: Evidence) -> list[str]:
    applied = ev.applied()
    return [f"{eid}: COMMITTED but the target ledger has no application"
            for eid, eff in ev.effects().items() if eff["state"] == "committed" and applied[eid] == 0]  # fmt: skip


def ambiguous_only_when_unknowable(ev: Evidence) -> list[str]:
    out = []
    for eid, entries in ev.entries().items():
        for e in entries:
            if e["kind"] == "AMBIGUOUS":
                reason = str(e.get("reason"))
                # A failed post-condition is unknowable too: the target said ok, reading it
                # back says otherwise (verified completion).
                if not ("tier 3" in reason or "no lookup" in reason or "postcondition" in reason):
                    out.append(f"{eid}: AMBIGUOUS without tier 3 or a failed re-check ({reason})")
    return out


def effect_checkpoint_atomic(ev: Evidence) -> list[str]:
    wfs, out = ev.workflows(), []
    fingerprints = {
        s["fingerprint"].split(":")[0]
        for s in ev.steps()
        if s["kind"] == "effect" and s["fingerprint"]
    }
    for eid, eff in ev.effects().items():
        wf = wfs.get(eff["dispatch_workflow_id"] or "")
        current = (
            wf is not None and wf["status"] == "running" and wf["epoch"] == eff["dispatch_epoch"]
        )
        if eff["state"] == "committed" and eid not in fingerprints and current:
            out.append(f"{eid}: committed with no step row while its dispatching claim is current")
    return out


def send_requires_live_claim(ev: Evidence) -> list[str]:
    out, claims = [], ev.claims()
    for eid, entries in ev.entries().items():
        for e in entries:
            if e["kind"] != "DISPATCHED":
                continue
            by = e.get("by") or {}
            if not by or by.get("epoch") not in {c["epoch"] for c in claims[by.get("workflow_id")]}:
                out.append(f"{eid}: DISPATCHED by {by or 'nobody'}, which never held a claim")
    effs = ev.effects() if ev.access_log is not None else {}  # once: it is a query
    for key, reqs in ev.posts().items() if ev.access_log is not None else []:
        if key in effs and effs[key]["sends"] < len(reqs):
            out.append(
                f"{key}: {len(reqs)} requests but only {effs[key]['sends']} authorized sends"
            )
    return out


def no_send_under_revoked_grant(ev: Evidence) -> list[str]:
    out, grants, effects = [], ev.grants(), ev.effects()
    for eid, entries in ev.entries().items():
        for s in _sends(entries):
            snap = s["checks"].get("lease") or {}
            g = grants.get(snap.get("grant_id") or s["lease"] or effects[eid]["grant_id"])
            revoked_before = g and g["revoked_at"] is not None and _ts(g["revoked_at"]) <= s["ts"]
            if not s["checks"].get("lease_live") or snap.get("revoked") or revoked_before:
                out.append(f"{eid}: a send at {s['ts']:.3f} was not under a live grant")
    return out


def revoke_linearizable(ev: Evidence) -> list[str]:
    out, grants, effects = [], ev.grants(), ev.effects()
    for eid, entries in ev.entries().items():
        for s in _sends(entries):
            g = grants.get(
                (s["checks"].get("lease") or {}).get("grant_id") or effects[eid]["grant_id"]
            )
            if g and g["revoked_at"] is not None and s["ts"] >= _ts(g["revoked_at"]):
                out.append(f"{eid}: authorized at {s['ts']:.3f}, after grant {g['id']} was revoked")
    return out


def no_send_on_stale_premise(ev: Evidence) -> list[str]:
    return [f"{eid}: a send at {s['ts']:.3f} had premise violations {s['checks'].get('violations')}"
            for eid, entries in ev.entries().items() for s in _sends(entries)
            if s["checks"].get("violations") != []]  # fmt: skip


def recovery_rechecks(ev: Evidence) -> list[str]:
    return [f"{eid}: a resend without a passing grant and premise re-check"
            for eid, entries in ev.entries().items() for s in _sends(entries)
            if s["resend"] and not (s["checks"].get("lease_live") and s["checks"].get("violations") == [])]  # fmt: skip


def payload_bound(ev: Evidence) -> list[str]:
    out, effects = [], ev.effects()
    for eid, entries in ev.entries().items():
        for s in _sends(entries):
            if (
                s["effect"] is not None
                and journal.payload_hash(s["effect"]) != effects[eid]["payload_hash"]
            ):
                out.append(f"{eid}: sent a payload other than the one bound at the first PROPOSED")
    if ev.access_log is not None:
        for key, reqs in ev.posts().items():
            if key in effects:
                bound = effects[key]["payload"].get("amount")
                for r in reqs:
                    body = (
                        json.loads(r["payload"]) if isinstance(r["payload"], str) else r["payload"]
                    )
                    if body and body.get("amount") != bound:
                        out.append(f"{key}: the target received amount {body.get('amount')}, "
                                   f"bound {bound}")  # fmt: skip
    return out


def no_send_after_cancel(ev: Evidence) -> list[str]:
    out, wfs = [], ev.workflows()
    for eid, entries in ev.entries().items():
        for e in entries:
            by = e.get("by") or {}
            if e["kind"] != "DISPATCHED" or by.get("compensation"):
                continue
            cancel = wfs[by["workflow_id"]]["cancel_requested_at"] if by else None
            if cancel is not None and e["ts"] >= _ts(cancel):
                out.append(f"{eid}: dispatched after {by['workflow_id']} was cancelled")
    return out


def late_result_preserved(ev: Evidence) -> list[str]:
    out, entries = [], ev.entries()
    for eid, eff in ev.effects().items():
        late = [e for e in entries[eid] if e["kind"] == "LATE_RESULT"]
        if bool(late) != (eff["late_result"] is not None):
            out.append(f"{eid}: late_result column and LATE_RESULT entries disagree")
    return out


def receipt_chain_linear(ev: Evidence) -> list[str]:
    out = []
    for eid, entries in ev.entries().items():
        out += [f"{eid}: {p}" for p in journal.check_chain(entries, eid)]
    return out


def receipt_truthful(ev: Evidence) -> list[str]:
    # happened=True must be in the later ledger; happened=False must hold in the earlier one.
    applied, applied_before, effects, out = ev.applied(), ev.applied(before=True), ev.effects(), []
    for eid, entries in ev.entries().items():
        eff = effects[eid]
        v = receipts.verify(
            receipts.bundle(entries, eid, None, eff["late_result"], eff["reconciled"])
        )
        if eff["state"] in ("ambiguous", "dispatched"):
            if v["happened"] != "unknown" and not (v["happened"] is True and eff["late_result"]):
                out.append(
                    f"{eid}: verify() says happened={v['happened']} for an open/ambiguous effect"
                )
        elif v["happened"] is True and applied[eid] == 0:
            out.append(f"{eid}: verify() says it happened, the ledger has no application")
        elif v["happened"] is False and applied_before[eid] > 0:
            out.append(f"{eid}: verify() says it did not happen, the ledger has it")
        if v["happened"] is True and applied[eid] > 1 and v["happened_once"]:
            if not _effective_tier3(eff, entries):
                out.append(f"{eid}: verify() says happened once, the ledger shows {applied[eid]}")
    return out


def timer_not_early(ev: Evidence) -> list[str]:
    return [f"{s['workflow_id']} seq {s['seq']}: timer recorded at {s['created_at']} before "
            f"{s['output']['until']}" for s in ev.steps()
            if s["kind"] == "sleep" and isinstance(s["output"], dict)
            and s["created_at"] < datetime.fromisoformat(s["output"]["until"])]  # fmt: skip


def signal_exactly_once_consumed(ev: Evidence) -> list[str]:
    steps = {(s["workflow_id"], s["seq"]): s for s in ev.steps()}
    out = []
    for sig in ev.rows("select * from ilr.signals where consumed_seq is not null"):
        step = steps.get((sig["workflow_id"], sig["consumed_seq"]))
        if step is None or step["kind"] != "signal" or step["output"] != sig["payload"]:
            out.append(f"signal {sig['id']} of {sig['workflow_id']}: consumed at seq "
                       f"{sig['consumed_seq']} but that step does not hold its payload")  # fmt: skip
    return out


def no_lost_wakeup(ev: Evidence) -> list[str]:
    return [f"{r['id']}: sleeping forever while signal {r['signal']!r} waits unconsumed"
            for r in ev.rows(
                "select w.id, w.waiting->>'signal' as signal from ilr.workflows w "
                "where w.status = 'sleeping' and w.available_at = 'infinity' and exists ("
                "select 1 from ilr.signals s where s.workflow_id = w.id "
                "and s.name = w.waiting->>'signal' and s.consumed_seq is null)")]  # fmt: skip


def version_pinned(ev: Evidence) -> list[str]:
    out, wfs = [], ev.workflows()
    deployed = {
        (d["name"], d["version"]) for d in ev.rows("select name, version from ilr.deployments")
    }
    serves: dict[str, set] = defaultdict(set)
    for e in ev.events or []:
        if e.get("event") == "registered":
            serves[e["worker"]] |= {tuple(k.split("@", 1)) for k in e["workflows"]}
    for wf, claims in ev.claims().items():
        name = wfs[wf]["name"]
        for c in claims:
            if (name, c["version"]) not in deployed:
                out.append(f"{wf} epoch {c['epoch']}: claimed at undeployed version {c['version']}")
            if (
                ev.events is not None
                and c["owner"] in serves
                and (name, c["version"]) not in serves[c["owner"]]
            ):
                out.append(
                    f"{wf} epoch {c['epoch']}: {c['owner']} does not serve {name}@{c['version']}"
                )
    return out


def non_determinism_loud(ev: Evidence) -> list[str]:
    out, steps = [], ev.steps()
    for wf in ev.workflows().values():
        err = wf["error"] or {}
        if wf["status"] == "stuck" and err.get("type") == "NonDeterminism":
            later = [s for s in steps if s["workflow_id"] == wf["id"] and s["seq"] > err["seq"]
                     and s["epoch"] == wf["epoch"]]  # fmt: skip
            if later:
                out.append(f"{wf['id']}: the run that found non-determinism still recorded steps")
    return out


def fork_never_resends(ev: Evidence) -> list[str]:
    out, wfs, effects = [], ev.workflows(), ev.effects()
    entries = posts = None  # read once, and only if a forked run has an effect
    for s in ev.steps():
        wf = wfs[s["workflow_id"]]
        if not wf["forked_from"] or s["kind"] != "effect" or s["epoch"] == 0:
            continue
        eid = s["fingerprint"].split(":")[0]
        entries = ev.entries() if entries is None else entries
        committed_before = [e for e in entries[eid] if e["kind"] == "COMMITTED"
                            and e["ts"] < _ts(wf["created_at"])]  # fmt: skip
        if committed_before and s["output"]["status"] not in ("DUPLICATE_IGNORED",
                                                               "REFUSED:conflicting_payload"):  # fmt: skip
            out.append(f"{wf['id']}: reached committed {eid} and got {s['output']['status']}")
        if committed_before and eid in effects and ev.access_log is not None:
            posts = ev.posts() if posts is None else posts
            late = [r for r in posts[eid] if r["arrival"] > _ts(wf["created_at"])]
            if late:
                out.append(f"{wf['id']}: {eid} was sent again after the fork")
    return out


Check = Callable[[Evidence], list[str]]

INVARIANTS: dict[str, Check] = {
    "NoRerunAfterComplete": no_rerun_after_complete,
    "StepResultUnique": step_result_unique,
    "FencedWrites": fenced_writes,
    "LeaseMutex": lease_mutex,
    "TakeoverOnlyAfterExpiry": takeover_only_after_expiry,
    "AtMostOneCommit": at_most_one_commit,
    "EffectAtMostOnceTier12": effect_at_most_once_tier12,
    "Tier3NeverResends": tier3_never_resends,
    "NoOverlappingSends": no_overlapping_sends,
    "CommittedImpliesApplied": committed_implies_applied,
    "AmbiguousOnlyWhenUnknowable": ambiguous_only_when_unknowable,
    "EffectCheckpointAtomic": effect_checkpoint_atomic,
    "SendRequiresLiveClaim": send_requires_live_claim,
    "NoSendUnderRevokedGrant": no_send_under_revoked_grant,
    "RevokeLinearizable": revoke_linearizable,
    "NoSendOnStalePremise": no_send_on_stale_premise,
    "RecoveryRechecks": recovery_rechecks,
    "PayloadBound": payload_bound,
    "NoSendAfterCancel": no_send_after_cancel,
    "LateResultPreserved": late_result_preserved,
    "ReceiptChainLinear": receipt_chain_linear,
    "ReceiptTruthful": receipt_truthful,
    "TimerNotEarly": timer_not_early,
    "SignalExactlyOnceConsumed": signal_exactly_once_consumed,
    "NoLostWakeup": no_lost_wakeup,
    "VersionPinned": version_pinned,
    "NonDeterminismLoud": non_determinism_loud,
    "ForkNeverResends": fork_never_resends,
}


@contextmanager
def snapshot(conn: psycopg.Connection, read_world: Callable[[], tuple[list, list]] | None = None,
             events: list[dict] | None = None) -> Iterator[Evidence]:  # fmt: skip
    """Evidence of a live run: the world (ledger, access log) read just before and just after a
    repeatable-read database snapshot, so that no check compares a newer record with an older
    world or the reverse."""
    ledger0, log0 = read_world() if read_world else (None, None)
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    try:
        with conn.transaction():
            conn.execute("select 1")  # the snapshot is taken at the first statement
            ledger1, log1 = read_world() if read_world else (None, None)
            yield Evidence(conn, ledger=ledger1, access_log=log1, events=events,
                           ledger_before=ledger0, access_log_before=log0)  # fmt: skip
    finally:
        conn.isolation_level = None


def check_all(ev: Evidence, names: list[str] | None = None) -> dict[str, list[str] | str]:
    """Run checks by name; a check lacking evidence reports 'missing evidence: ...'."""
    out: dict[str, list[str] | str] = {}
    for name in names or list(INVARIANTS):
        try:
            out[name] = INVARIANTS[name](ev)
        except MissingEvidence as exc:
            out[name] = f"missing evidence: {exc}"
    return out
