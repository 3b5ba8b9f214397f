"""Code checks of the catalog's invariants over real runs (docs/design.md#invariant-catalog, layer C).

INVARIANTS maps each catalog name (models/catalog.yaml, rows whose layers include C) to a check.
A check reads the run's evidence and returns its violations (an empty list: it holds):

- Postgres, always: claim history, steps, journal, effects, grants, signals, workflows;
- the target's ledger and access log, for the checks that compare the record with the world;
- the workers' event logs, for the checks that need to know when a step body started;
- what each rt.revoke() returned (record_revoke), for RevokeLinearizable;
- each target's configuration as the target reports it (target_config), narrowed by what the
  application declared of it, and the workflows whose effects the application declared
  compensations: the declarations of the world and the application, never the runtime's.

A check derives its verdict from that ground truth: the grant rows, the journal's database
timestamps, the claims, the target's ledger and access log. It never takes a verdict the
runtime recorded about itself (a send's `checks`, a resend's `rechecked`) as the answer.
A check whose evidence is missing raises MissingEvidence rather than passing vacuously.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import psycopg

from interlock_runtime import journal, receipts
from interlock_runtime.vocabulary import RESOLVING_ENTRIES, TERMINAL_STATUSES, ResendVia

TERMINAL_ENTRIES = tuple(k.value for k in RESOLVING_ENTRIES)
FINISHED = ("completed", "failed", "cancelled", "continued")  # workflow statuses that end grants
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
    # Every rt.revoke() of the run, in call order (record_revoke): {grant, returned, and the
    # wall-clock called_at / returned_at around the call when the harness timed it}.
    revokes: list[dict] | None = None
    # By target url: {tier, lookup} (target_config). The checks that must know whether an
    # outcome was knowable (effective tier 3, AmbiguousOnlyWhenUnknowable) need it.
    targets: dict[str, dict] | None = None
    # Workflows whose effects the application declared compensations (ctx.effect(...,
    # compensation=True)): the only sends NoSendAfterCancel allows after a cancel.
    compensations: set[str] = field(default_factory=set)
    # The database's timestamps come from the clock of whichever server was primary; the
    # world's (target, workers, revoke calls) from this machine's. When they differ (a failover
    # to a server whose clock is off), db_clock lists (since, offset): from this machine's time
    # `since` on, the primary's clock ran `offset` s ahead. The world's times are then read on
    # that clock, so every check compares like with like. None: one clock (the usual case).
    db_clock: list[tuple[float, float]] | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.ledger_before is None:
            self.ledger_before = self.ledger
        if self.access_log_before is None:
            self.access_log_before = self.access_log
        if self.db_clock:
            shift = _clock_shift(self.db_clock)
            for name, fields in _WORLD_TIMES.items():
                rows = getattr(self, name)
                if rows is not None:
                    setattr(self, name, [_shifted(r, fields, shift) for r in rows])

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
        """Refund requests that reached the target, by effect key, in arrival order. Made once
        per reading (checks ask per effect: rebuilt each time, a 10,000-workflow soak spent
        minutes here); a key with no request reads as an empty list."""
        key = ("posts", before)
        if key not in self._cache:
            out: dict[str, list[dict]] = defaultdict(list)
            log = self.need("access_log_before" if before else "access_log")
            for r in sorted(log, key=lambda r: r["arrival"]):
                if (r["method"] == "POST" and r["path"].rstrip("/").endswith("refunds")
                        and r.get("key")):  # fmt: skip
                    out[r["key"]].append(r)
            self._cache[key] = out
        return self._cache[key]

    def applied(self, before: bool = False) -> Counter:
        """How many times the target applied each effect (the ledger is ground truth)."""
        ledger = self.need("ledger_before" if before else "ledger")
        return Counter(r["key"] for r in ledger if r.get("key"))


def target_config(url: str, queryable: bool | None = None, dedup_window: float | None = None,
                  dedup_margin: float | None = None) -> dict:  # fmt: skip
    """The target's configuration as it reports it (GET /admin/config), its tier and whether
    it answers lookups, with what the application declared of it: queryable=False (the
    application never asks it, as S04's non-queryable variant declares), and for tier 1 how
    long a key is safe to rely on: dedup_window - dedup_margin (the runtime's documented
    default margin when the application sets none)."""
    from interlock_runtime.effects.spec import DEFAULT_DEDUP_MARGIN
    from world.target_client import TargetAdmin

    cfg = TargetAdmin(url).config()
    lookup = bool(cfg["lookup"]) and cfg["tier"] in (1, 2) and queryable is not False
    window = math.inf if dedup_window is None else float(dedup_window)
    margin = DEFAULT_DEDUP_MARGIN if dedup_margin is None else float(dedup_margin)
    return {"tier": int(cfg["tier"]), "lookup": lookup, "key_age": window - margin}


# The world's timestamps, by evidence field: what db_clock shifts.
_WORLD_TIMES = {
    "ledger": ("created",),
    "ledger_before": ("created",),
    "access_log": ("arrival", "end"),
    "access_log_before": ("arrival", "end"),
    "events": ("ts",),
    "revokes": ("called_at", "returned_at"),
}


def _clock_shift(spans: list[tuple[float, float]]) -> Callable[[float], float]:
    """This machine's time -> the then-primary's clock. Before the first span: its offset."""
    spans = sorted(spans)

    def shift(t: float) -> float:
        offset = spans[0][1]
        for since, off in spans:
            if t < since:
                break
            offset = off
        return t + offset

    return shift


def _shifted(row: dict, fields: tuple[str, ...], shift: Callable[[float], float]) -> dict:
    return {k: shift(v) if k in fields and isinstance(v, (int, float)) else v
            for k, v in row.items()}  # fmt: skip


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


def record_revoke(rt: Any, grant: str, by: str | None, into: list[dict]) -> list[str]:
    """rt.revoke(grant, by=by), its returned list appended to `into` (the evidence's revokes)
    with the wall-clock time around the call; returns what revoke() returned."""
    called_at = time.time()
    returned = list(rt.revoke(grant, by=by))
    into.append({"grant": grant, "returned": returned, "called_at": called_at,
                 "returned_at": time.time()})  # fmt: skip
    return returned


# What the target did, by the path a request went to: the action a grant must allow.
ACTION_BY_PATH = {"refunds": "refund"}
_ABSENT = object()


def _field(payload: Any, path: str) -> Any:
    value = payload
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _outside_bounds(constraints: Any, payload: Any) -> list[str]:
    """The grant row's declared bounds that the payload breaks, evaluated here (not by the
    runtime's authority module): min/max (numbers, inclusive), in, equals; dotted fields."""
    out = []
    for name, bounds in (constraints or {}).items():
        v = _field(payload, name)
        if v is _ABSENT:
            out.append(f"{name} missing")
            continue
        if "min" in bounds and not (_is_number(v) and v >= bounds["min"]):
            out.append(f"{name}={v!r} below min {bounds['min']}")
        if "max" in bounds and not (_is_number(v) and v <= bounds["max"]):
            out.append(f"{name}={v!r} above max {bounds['max']}")
        if "in" in bounds and v not in bounds["in"]:
            out.append(f"{name}={v!r} not in {bounds['in']!r}")
        if "equals" in bounds and v != bounds["equals"]:
            out.append(f"{name}={v!r} is not {bounds['equals']!r}")
    return out


def _not_covered(grant: dict | None, gid: str | None, t: float, payload: Any,
                 action: str | None, sender_wf: str | None = None) -> list[str]:  # fmt: skip
    """Why the grant row does not cover a send authorized at database time t by workflow
    sender_wf (empty: it does): unrevoked and unexpired at t, an approval's own workflow
    (principal workflow:<id>), the action, the bounds, the approved payload."""
    if grant is None:
        return [f"no grant {gid!r}"]
    out = []
    principal = grant["principal"] or ""
    if sender_wf and principal.startswith("workflow:") and principal != f"workflow:{sender_wf}":
        out.append(f"grant {gid} was given to {principal}, the send was {sender_wf}'s")
    if grant["revoked_at"] is not None and _ts(grant["revoked_at"]) <= t:
        out.append(f"grant {gid} revoked at {_ts(grant['revoked_at']):.3f}")
    if grant["expires_at"] is not None and _ts(grant["expires_at"]) <= t:
        out.append(f"grant {gid} expired at {_ts(grant['expires_at']):.3f}")
    if action is not None and grant["action"] is not None and grant["action"] != action:
        out.append(f"grant {gid} allows {grant['action']!r}, the target did {action!r}")
    out += [f"grant {gid}: {b}" for b in _outside_bounds(grant["constraints"], payload)]
    if grant["payload_hash"] is not None and grant["payload_hash"] != journal.payload_hash(payload):
        out.append(f"grant {gid} approves another payload")
    return out


def _authorizations(entries: list[dict], eff: dict) -> list[dict]:
    """Every send the journal authorizes, in order, with the database time of the
    transaction that authorized it: a DISPATCHED (T_dispatch, its ts) or a resend
    (T_resolve, the time its COMMITTED records for it), the grant it went under (the
    DISPATCHED's lease; a resend goes under the open dispatch's), the payload, and whether
    the previous send was still open (no COMMITTED, AMBIGUOUS or REFUSED since)."""
    out: list[dict] = []
    grant, open_ = eff["grant_id"], False
    for e in entries:
        if e["kind"] == "DISPATCHED":
            grant = e.get("lease") or eff["grant_id"]
            payload = e["effect"] if "effect" in e else eff["payload"]
            sender = (e.get("by") or {}).get("workflow_id")
            out.append({"ts": e["ts"], "grant": grant, "payload": payload, "resend": False,
                        "after_open": open_, "sender": sender})  # fmt: skip
            open_ = True
        elif e["kind"] == "COMMITTED" and e.get("via") in RESEND_VIA:
            at = (e.get("rechecked") or {}).get("ts", e["ts"])
            out.append({"ts": at, "grant": grant, "payload": eff["payload"], "resend": True,
                        "after_open": True, "sender": eff["dispatch_workflow_id"]})  # fmt: skip
            open_ = False
        elif e["kind"] in ("COMMITTED", "AMBIGUOUS", "REFUSED"):
            open_ = False
    return out


def _action(ev: Evidence, eid: str) -> str | None:
    """The action the target performed for an effect, from the paths its requests went to
    (None when the access log is missing or shows no request for it)."""
    if ev.access_log is None:
        return None
    for r in ev.posts()[eid]:
        return ACTION_BY_PATH.get(r["path"].rstrip("/").rsplit("/", 1)[-1])
    return None


def _send_timeout(eff: dict, auths: list[dict]) -> float:
    """The effect's send timeout: its send_deadline minus the time of the send that set it,
    when the journal accounts for every authorized send; else 0 (a lower bound)."""
    if not auths or eff["send_deadline"] is None or eff["sends"] != len(auths):
        return 0.0
    return max(0.0, _ts(eff["send_deadline"]) - auths[-1]["ts"])


def _target_of(ev: Evidence, eid: str) -> dict:
    """The configuration of the target an effect went to: the only target of the run, else the
    one whose access log names the effect's key, else the one its workflow's input names."""
    targets = ev.need("targets")
    if len(targets) == 1:
        return next(iter(targets.values()))
    for r in ev.access_log or []:
        if r.get("key") == eid and r.get("target") in targets:
            return targets[r["target"]]
    eff = ev.effects().get(eid) or {}
    wf = ev.workflows().get(eff.get("workflow_id")) or {}
    url = (wf.get("input") or {}).get("target_url") if isinstance(wf.get("input"), dict) else None
    if url in targets:
        return targets[url]
    raise MissingEvidence(f"which target {eid} went to (no request, no target_url in its input)")


def _effective_tier3(ev: Evidence, eff: dict, t: float | None = None) -> bool:
    """Nothing could tell at database time t (default: the effect's last journal entry)
    whether a send landed: the application declared tier 3; or the target, by its own
    configuration, neither dedupes nor answers lookups; or it dedupes, answers no lookups,
    and the key is older than the application declared safe (key_age, from the first
    DISPATCHED entry's time)."""
    cfg = _target_of(ev, eff["effect_id"])
    tier = max(int(eff["tier"]), cfg["tier"])
    if tier == 3:
        return True
    if tier == 2 or cfg["lookup"]:
        return False
    entries = ev.entries()[eff["effect_id"]]
    first = next((e["ts"] for e in entries if e["kind"] == "DISPATCHED"), None)
    t = t if t is not None else max((e["ts"] for e in entries), default=None)
    return first is not None and t is not None and t - first > cfg.get("key_age", math.inf)


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
    applied, out = ev.applied(), []
    for eid, eff in ev.effects().items():
        if eff["tier"] in (1, 2) and applied[eid] > 1 and not _effective_tier3(ev, eff):
            late = eff["late_result"] or {}
            note = " (assumption A2 reported violated)" if late.get("assumption_violated") else ""
            out.append(f"{eid}: applied {applied[eid]} times at tier {eff['tier']}{note}")
    return out


def tier3_never_resends(ev: Evidence) -> list[str]:
    posts = ev.posts()
    return [f"{eid}: {len(posts[eid])} requests at effective tier 3"
            for eid, eff in ev.effects().items()
            if len(posts[eid]) > 1 and _effective_tier3(ev, eff)]  # fmt: skip


def no_overlapping_sends(ev: Evidence) -> list[str]:
    """The settle rule of the catalog: a send of an effect that follows a still open send
    starts only after that send's send_deadline + settle_margin. The times are the journal's
    (the database clock of T_dispatch and T_resolve); the deadline is the authorizing time
    plus the effect's send timeout (_send_timeout). At the target, two requests of one key
    are never in flight at once."""
    out = []
    for key, reqs in ev.posts().items():
        for a, b in zip(reqs, reqs[1:], strict=False):
            if a.get("end") is None or b["arrival"] < a["end"]:
                out.append(f"{key}: a second request arrived at {b['arrival']:.3f} while the first "
                           f"(arrived {a['arrival']:.3f}) was still in flight")  # fmt: skip
    entries = ev.entries()
    for eid, eff in ev.effects().items():
        auths = _authorizations(entries[eid], eff)
        if len(auths) < 2:
            continue
        timeout = _send_timeout(eff, auths)
        settle = eff["settle_margin"].total_seconds() if eff["settle_margin"] is not None else 0.0
        for prev, nxt in zip(auths, auths[1:], strict=False):
            until = prev["ts"] + timeout + settle
            if nxt["after_open"] and nxt["ts"] <= until:
                out.append(f"{eid}: a send authorized at {nxt['ts']:.3f}, before the previous "
                           f"send's send_deadline + settle_margin ({until:.3f})")  # fmt: skip
    return out


def committed_implies_applied(ev: Evidence) -> list[str]:
    applied = ev.applied()
    return [f"{eid}: COMMITTED but the target ledger has no application"
            for eid, eff in ev.effects().items() if eff["state"] == "committed" and applied[eid] == 0]  # fmt: skip


def ambiguous_only_when_unknowable(ev: Evidence) -> list[str]:
    """AMBIGUOUS only where nothing could tell the outcome, judged from the target's own
    configuration and records, the grant rows and the claims (never the entry's reason):
    - effective tier 3 (_effective_tier3); or
    - a target that answers no lookups, and a re-check that failed at the entry's database
      time, so that not even a tier-1 resend was allowed: the grant no longer covered the
      send, the dispatching workflow's lease had lapsed, or the target's ledger showed the
      premise changed (_recheck_failures); or
    - a failed read-back: the target's ledger does not hold exactly one application of the
      effect with its payload's amount, though the target answered (verified completion)."""
    out = []
    effects, ledger = ev.effects(), ev.need("ledger")
    for eid, entries in ev.entries().items():
        eff = effects[eid]
        for e in entries:
            if e["kind"] != "AMBIGUOUS" or _effective_tier3(ev, eff, e["ts"]):
                continue
            if not _target_of(ev, eid)["lookup"] and _recheck_failures(ev, eid, entries, e["ts"]):
                continue
            rows = [r for r in ledger if r.get("key") == eid]
            amount = eff["payload"].get("amount") if isinstance(eff["payload"], dict) else None
            if len(rows) != 1 or rows[0].get("amount") != amount:
                continue  # reading the target back disagrees with what it answered
            out.append(f"{eid}: AMBIGUOUS at {e['ts']:.3f}, yet the target answers lookups or "
                       f"nothing barred a resend, and its ledger holds the effect as sent")  # fmt: skip
    return out


def _recheck_failures(ev: Evidence, eid: str, entries: list[dict], t: float) -> list[str]:
    """What barred a resend of the effect at database time t, from ground truth: the grant row
    (_not_covered), the dispatching workflow's lease (the claims: the claim current at t and
    the lease its holder had, by the next claim's record or, for the last claim, the
    workflow row: a lapsed lease is never renewed), the target's ledger (refunds of the
    payment by others created before t, against the premise the send was decided on; at a
    target without lookups, the effect's own refund among them)."""
    eff = ev.effects()[eid]
    auths = _authorizations(entries, eff)
    if not auths:
        return []
    last = auths[-1]
    out = _not_covered(ev.grants().get(last["grant"]), last["grant"], t, last["payload"],
                       _action(ev, eid), last["sender"])  # fmt: skip
    wf = eff["dispatch_workflow_id"]
    claims = [c for c in ev.claims().get(wf, []) if _ts(c["claimed_at"]) <= t]
    if claims:
        later = [c for c in ev.claims()[wf] if c["epoch"] == claims[-1]["epoch"] + 1]
        expiry = (later[0]["prev_lease_expires_at"] if later
                  else ev.workflows()[wf]["lease_expires_at"])  # fmt: skip
        if expiry is not None and _ts(expiry) <= t:
            out.append(f"{wf}'s lease lapsed at {_ts(expiry):.3f}")
    decided = [e.get("premises") for e in entries if e["kind"] == "DISPATCHED" and e["ts"] <= t]
    premises = decided[-1] if decided else None
    if isinstance(premises, dict) and {"payment", "refunded_by_others"} <= set(premises):
        # A target without lookups cannot tell the effect's own refund from anyone else's, so
        # a re-read there counts it too (as the application's premise check does).
        own_counts = not _target_of(ev, eid)["lookup"]
        others = sum(
            r["amount"]
            for r in ev.need("ledger")
            if r["payment"] == premises["payment"]
            and (own_counts or r.get("key") != eid)
            and r["created"] < t
        )
        if others != premises["refunded_by_others"]:
            out.append(f"refunded_by_others {others} at the target, decided on "
                       f"{premises['refunded_by_others']}")  # fmt: skip
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
    entries = ev.entries() if ev.access_log is not None else {}
    for key, reqs in ev.posts().items() if ev.access_log is not None else []:
        if key in effs and effs[key]["sends"] < len(reqs):
            out.append(
                f"{key}: {len(reqs)} requests but only {effs[key]['sends']} authorized sends"
            )
        if key not in effs:
            continue
        # The sender each request names (X-ILR-Worker / X-ILR-Epoch, as the target logged
        # them) must be a claim on a workflow of this effect, claimed before it arrived.
        wfs = {effs[key]["workflow_id"], effs[key]["dispatch_workflow_id"]}
        wfs |= {(e.get("by") or {}).get("workflow_id") for e in entries[key]}
        held = {(c["owner"], str(c["epoch"])): _ts(c["claimed_at"])
                for wf in wfs if wf for c in claims.get(wf, [])}  # fmt: skip
        for r in reqs:
            sender = (r.get("worker"), None if r.get("epoch") is None else str(r["epoch"]))
            if sender[1] is None:
                continue  # a target that does not log its senders: nothing to compare
            if sender not in held or held[sender] > r["arrival"]:
                out.append(f"{key}: a request at {r['arrival']:.3f} from {sender[0]} epoch "
                           f"{sender[1]}, which held no claim on {sorted(w for w in wfs if w)}")  # fmt: skip
    return out


def no_send_under_revoked_grant(ev: Evidence) -> list[str]:
    """Every send (DISPATCHED or resend) was covered by its grant as the grant row says, at the
    database time of the transaction that authorized it: unrevoked, unexpired, the action the
    target performed, the declared bounds and the approved payload."""
    out, grants, effects = [], ev.grants(), ev.effects()
    for eid, entries in ev.entries().items():
        action = _action(ev, eid)
        for a in _authorizations(entries, effects[eid]):
            why = _not_covered(
                grants.get(a["grant"]), a["grant"], a["ts"], a["payload"], action, a["sender"]
            )
            if why:
                out.append(f"{eid}: a send at {a['ts']:.3f} was not under a live grant: "
                           + "; ".join(why))  # fmt: skip
    return out


def _open_at(entries: list[dict], eff: dict, grant: str, t: float) -> bool:
    """Whether a send of the effect under `grant` authorized before t was still unresolved at
    t by the journal (no COMMITTED, AMBIGUOUS or REFUSED with a timestamp before t)."""
    open_ = False
    for a_or_e in entries:
        if a_or_e["ts"] >= t:
            break
        if a_or_e["kind"] == "DISPATCHED":
            open_ = (a_or_e.get("lease") or eff["grant_id"]) == grant
        elif a_or_e["kind"] in ("COMMITTED", "AMBIGUOUS", "REFUSED"):
            open_ = False
    return open_


def _grant_at(auths: list[dict], t: float) -> str | None:
    """The grant of the last send authorized before t (the one a request arriving at t
    belongs to, at the latest)."""
    before = [a["grant"] for a in auths if a["ts"] < t]
    return before[-1] if before else None


def revoke_linearizable(ev: Evidence) -> list[str]:
    """Once the revoke of g commits (ilr.grants.revoked_at), no send under g is authorized;
    and each rt.revoke(g) returned every effect under g that could still land: one whose send
    was still open when the call committed, or whose request reached the target after it.
    The commit lies between revoked_at and the call's return; an effect counts as open or
    late only when it was so at the return (revoked_at when the harness did not time it)."""
    out, grants, effects, entries = [], ev.grants(), ev.effects(), ev.entries()
    revoked = {gid: _ts(g["revoked_at"]) for gid, g in grants.items() if g["revoked_at"]}
    under: dict[str, set] = defaultdict(set)
    for eid, eff in effects.items():
        for a in _authorizations(entries[eid], eff):
            under[a["grant"]].add(eid)
            at = revoked.get(a["grant"])
            if at is not None and a["ts"] >= at:
                out.append(f"{eid}: a send authorized at {a['ts']:.3f} under grant {a['grant']}, "
                           f"revoked at {at:.3f}")  # fmt: skip
    if not revoked:
        return out
    # A workflow's own grants (principal workflow:<id>) end with it: revoked by the runtime in
    # the transaction that finished it, not by a revoke() call, so no returned list exists.
    # Judged from the workflow row (finished), not from revoked_by; a revoke() call that was
    # recorded for such a grant is still checked below.
    wfs, called = ev.workflows(), {c["grant"] for c in ev.revokes or []}

    def ended_with_workflow(gid: str) -> bool:
        principal = grants[gid]["principal"] or ""
        wf = (
            wfs.get(principal.removeprefix("workflow:"))
            if principal.startswith("workflow:")
            else None
        )
        return wf is not None and wf["status"] in FINISHED and gid not in called

    revoked = {gid: at for gid, at in revoked.items() if not ended_with_workflow(gid)}
    if not revoked:
        return out
    calls = ev.need("revokes")
    missing = sorted(set(revoked) - {c["grant"] for c in calls})
    if missing:
        raise MissingEvidence(f"grants {missing} were revoked but no revoke() result was recorded")
    posts = ev.posts() if ev.access_log is not None else {}
    for c in calls:
        gid, returned = c["grant"], set(c["returned"])
        if gid not in revoked:
            out.append(f"revoke({gid}) returned, yet the grant is not revoked")
            continue
        after = max(revoked[gid], c.get("returned_at") or revoked[gid])
        for eid in sorted(returned - under[gid]):
            out.append(f"revoke({gid}) returned {eid}, which was never sent under it")
        for eid in sorted(under[gid] - returned):
            auths = _authorizations(entries[eid], effects[eid])
            late = [r["arrival"] for r in posts.get(eid, []) if r["arrival"] > after
                    and _grant_at(auths, r["arrival"]) == gid]  # fmt: skip
            if _open_at(entries[eid], effects[eid], gid, after):
                out.append(f"revoke({gid}) left out {eid}, still open when it committed")
            elif late:
                out.append(f"revoke({gid}) left out {eid}, whose request reached the target at "
                           f"{late[0]:.3f}, after the revoke committed")  # fmt: skip
    return out


# A refund created this long before a premise read arrived at the target is visible to it; one
# created later may or may not be (the read and the write race inside the target).
PREMISE_READ_MARGIN = 0.25


def _premise_reads(log: list[dict]) -> dict[tuple[Any, str], list[float]]:
    """Arrival times of the reads of each payment at each target (the world's premise reads),
    by (target, payment), in order."""
    out: dict[tuple[Any, str], list[float]] = defaultdict(list)
    for r in log:
        prefix, _, payment = r["path"].rstrip("/").rpartition("/")
        if r["method"] == "GET" and prefix in ("/payments", "/v1/payment_intents") and payment:
            out[(r.get("target"), payment)].append(r["arrival"])
    for times in out.values():
        times.sort()
    return out


def _stale_sends(ev: Evidence) -> list[tuple[str, bool, str]]:
    """Each refund request that reached the target, judged from the target's own records: the
    premise read that preceded it at that target (the latest GET of the payment) must have
    seen refunded_by_others as the send was decided on (the DISPATCHED entry's premises). The
    refunds the read certainly saw are those created PREMISE_READ_MARGIN before it; the ones
    it may have seen are those created before it ended. A violation needs every value the
    read could have returned, with or without the effect's own refund, to differ from the
    decided one. Returns (effect, is a resend, why)."""
    log, ledger = ev.need("access_log"), ev.need("ledger")
    reads_of = _premise_reads(log)  # built once: per request it was a scan of the whole log
    rows_of: dict[tuple[Any, str], list[dict]] = defaultdict(list)
    for r in ledger:
        rows_of[(r.get("target"), r["payment"])].append(r)
    posts = ev.posts()
    out = []
    for eid, entries in ev.entries().items():
        decisions = [(e["ts"], e.get("premises")) for e in entries if e["kind"] == "DISPATCHED"]
        for n, post in enumerate(posts.get(eid, [])):
            earlier = [p for ts, p in decisions if ts <= post["arrival"]] or [
                p for _, p in decisions[:1]]  # fmt: skip
            premises = earlier[-1] if earlier else None
            if not isinstance(premises, dict) or not {"payment", "refunded_by_others"} <= set(
                premises
            ):
                continue
            target, payment = post.get("target"), premises["payment"]
            reads = [a for a in reads_of.get((target, payment), []) if a < post["arrival"]]
            if not reads:
                continue  # no read of this payment at this target: nothing to judge it by
            read = reads[-1]
            rows = rows_of.get((target, payment), [])
            seen = [r for r in rows if r["created"] < read - PREMISE_READ_MARGIN]
            maybe = [r for r in rows if r["created"] < post["arrival"]]
            low = sum(r["amount"] for r in seen if r.get("key") != eid)
            high = sum(r["amount"] for r in maybe)
            decided = premises["refunded_by_others"]
            if isinstance(decided, (int, float)) and not low <= decided <= high:
                out.append((eid, n > 0, f"{eid}: request {n + 1} reached the target at "
                            f"{post['arrival']:.3f}, after a premise read at {read:.3f} that saw "
                            f"refunded_by_others between {low} and {high}; it was decided on "
                            f"{decided}"))  # fmt: skip
    return out


def no_send_on_stale_premise(ev: Evidence) -> list[str]:
    """No request reaches the target after a premise read that saw the premises changed (the
    target's access log and ledger; see _stale_sends)."""
    return [why for _, _, why in _stale_sends(ev)]


def recovery_rechecks(ev: Evidence) -> list[str]:
    """Every resend was decided in a T_resolve whose grant covered it by the grant row, at
    the database time of that T_resolve, and no resend reached the target after a premise
    read that saw the premises changed (the target's own records: _stale_sends)."""
    out, grants, effects = [], ev.grants(), ev.effects()
    for eid, entries in ev.entries().items():
        action = _action(ev, eid)
        for a in _authorizations(entries, effects[eid]):
            if not a["resend"]:
                continue
            why = _not_covered(
                grants.get(a["grant"]), a["grant"], a["ts"], a["payload"], action, a["sender"]
            )
            if why:
                out.append(f"{eid}: a resend at {a['ts']:.3f} without a live grant: "
                           + "; ".join(why))  # fmt: skip
    out += [f"a resend on a stale premise: {why}" for _, resend, why in _stale_sends(ev) if resend]
    return out


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
    """No T_dispatch at or after its workflow's cancel_requested_at (database times), unless
    the application declared the effect a compensation (ev.compensations): a send the runtime
    itself calls a compensation counts only when the application said so."""
    out, wfs = [], ev.workflows()
    for eid, entries in ev.entries().items():
        for e in entries:
            wf = (e.get("by") or {}).get("workflow_id")
            if e["kind"] != "DISPATCHED" or wf in ev.compensations:
                continue
            cancel = wfs[wf]["cancel_requested_at"] if wf in wfs else None
            if wf is None:
                out.append(f"{eid}: a DISPATCHED entry that names no workflow")
            elif cancel is not None and e["ts"] >= _ts(cancel):
                out.append(f"{eid}: dispatched after {wf} was cancelled")
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
            if not _effective_tier3(ev, eff):
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


def database_fault_never_ends(ev: Evidence) -> list[str]:
    """No run ends failed, timed_out, cancelled or stuck with a database fault as its recorded
    error (docs/design.md#run-end, rule 1): the fault's record in the run's own row is the
    evidence that the fault was taken for the workflow's failure."""
    from interlock_runtime.errors import DATABASE_FAULTS

    def is_fault(name: Any) -> bool:
        if name == "DatabaseUnreachable":  # the runtime's own, an OperationalError too
            return True
        cls = getattr(psycopg.errors, str(name), None) or getattr(psycopg, str(name), None)
        return isinstance(cls, type) and issubclass(cls, DATABASE_FAULTS)

    return [f"{wf['id']} ended {wf['status']} on a database fault: {wf['error']}"
            for wf in ev.workflows().values()
            if wf["status"] in ("failed", "timed_out", "cancelled", "stuck")
            and is_fault((wf["error"] or {}).get("type"))]  # fmt: skip


def queue_concurrency_bounded(ev: Evidence) -> list[str]:
    """At no instant do more claims of a limited queue's runs hold than its concurrency, from the
    claims table: a claim holds from claimed_at until the next claim found its lease expired
    (prev_lease_expires_at, at most that claim's time), or until the run's end for its last
    claim. A claim that ended in a suspend or a release leaves no time of its end; it is taken
    to hold until its last recorded step (a lower bound: such a check can miss, never invent,
    a violation)."""
    limits = {q["name"]: q["concurrency"] for q in ev.rows(
        "select name, concurrency from ilr.queues where concurrency is not null")}  # fmt: skip
    if not limits:
        return []
    wfs, claims = ev.workflows(), ev.claims()
    last_step: dict[tuple[str, int], Any] = {}
    for s in ev.steps():
        key = (s["workflow_id"], s["epoch"])
        last_step[key] = max(last_step.get(key, s["created_at"]), s["created_at"])
    edges: dict[str, list[tuple[Any, int]]] = defaultdict(list)
    for wf, held in claims.items():
        queue = wfs[wf]["queue"]
        if queue not in limits:
            continue
        for i, c in enumerate(held):
            nxt = held[i + 1] if i + 1 < len(held) else None
            if nxt is not None and nxt["prev_status"] == "running":
                until = min(nxt["prev_lease_expires_at"], nxt["claimed_at"])
            elif nxt is None and wfs[wf]["status"] in TERMINAL_STATUSES:
                until = wfs[wf]["updated_at"]
            elif nxt is None:
                until = wfs[wf]["lease_expires_at"] or c["claimed_at"]
            else:
                until = last_step.get((wf, c["epoch"]), c["claimed_at"])
            edges[queue] += [(c["claimed_at"], 1), (max(until, c["claimed_at"]), -1)]
    out = []
    for queue, found in edges.items():
        held_now, worst, at = 0, 0, None
        for t, step in sorted(found, key=lambda e: (e[0], e[1])):  # ends first at a tie
            held_now += step
            if held_now > worst:
                worst, at = held_now, t
        if worst > limits[queue]:
            out.append(f"queue {queue}: {worst} claims held at {at}, limit {limits[queue]}")
    return out


def tick_starts_at_most_once(ev: Evidence) -> list[str]:
    """Each tick of a schedule started at most one run: the scheduled runs counted by the
    schedule, source and tick their own input names (the envelope the run received)."""
    found = Counter(
        (w["input"].get("schedule_id"), w["input"].get("source"), w["input"].get("scheduled_at"))
        for w in ev.workflows().values()
        if isinstance(w["input"], dict) and "scheduled_at" in w["input"]
    )
    return [f"schedule {s} ({source}) tick {t}: {n} runs" for (s, source, t), n in found.items()
            if n > 1]  # fmt: skip


def execution_timeout_not_early(ev: Evidence) -> list[str]:
    """A run ends timed_out only at or after its execution deadline, both by the database's
    clock (execution_deadline: now() + timeout at the start; updated_at: the end's now())."""
    return [f"{w['id']} timed out at {w['updated_at']}, before its deadline "
            f"{w['execution_deadline']}" for w in ev.workflows().values()
            if w["status"] == "timed_out" and w["execution_deadline"] is not None
            and w["updated_at"] < w["execution_deadline"]]  # fmt: skip


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
    "DatabaseFaultNeverEnds": database_fault_never_ends,
    "QueueConcurrencyBounded": queue_concurrency_bounded,
    "TickStartsAtMostOnce": tick_starts_at_most_once,
    "ExecutionTimeoutNotEarly": execution_timeout_not_early,
    "ForkNeverResends": fork_never_resends,
}


@contextmanager
def snapshot(conn: psycopg.Connection, read_world: Callable[[], tuple[list, list]] | None = None,
             events: list[dict] | None = None, revokes: list[dict] | None = None,
             targets: dict[str, dict] | None = None,
             compensations: set[str] | None = None,
             db_clock: list[tuple[float, float]] | None = None) -> Iterator[Evidence]:  # fmt: skip
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
                           ledger_before=ledger0, access_log_before=log0,
                           revokes=None if revokes is None else list(revokes),
                           targets=targets, compensations=set(compensations or ()),
                           db_clock=db_clock)  # fmt: skip
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
