"""Can-prove audit (docs/design.md#metrics item 2, docs/design.md#prove): what each system can prove about one run.

Five questions are answered ONLY from the system's own records in a Prove run file, then scored
against the run's ground truth, which the answering code never reads:

    P1 did the effect happen                          yes / no / unknown
    P2 did it happen at most once                      yes / no / unknown
    P3 was every send under a grant live at the send   yes / no / unknown
    P4 were the decision's premises checked right before every send
    P5 is the record tamper evident (one flipped byte in a copy is detected)

Sources. Runtime: the signed receipt bundle (artifacts.receipt), verified here with
interlock_runtime.receipts.verify under the key the runner signs with; the runner's own stored
verify result is not used. A run whose workflow (and forked-from workflows) lists no effect has
no receipt: the runtime journals PROPOSED before any DISPATCHED, so an empty effects list is its
record that nothing was sent. Temporal: the workflow history plus the worker's attempt log.

Why the Temporal answers go beyond "not derivable". The attempt log sometimes proves P1/P2 (two
fresh refund ids in two attempts prove two applications; a replayed or 4xx response proves that
attempt applied nothing). Only what the records prove is claimed: an attempt that logged the
send but no definite answer (killed, timed out, 5xx) may have landed, so a failed activity after
such an attempt is "unknown", not "no". A lookup that found nothing is not used to rule an
earlier send out: without a settle bound the send may still be processing (S08c).

Scoring (per question): 1 for an answer equal to the truth; 1 for "unknown" where the truth is
unknowable by design (only P1: the run's target offers no lookup, tier 3 or a non-queryable
variant, and a send's answer was lost: the sender died between dispatch and recording the
answer, or the target answered after the send timeout); 0 otherwise. Every wrong definite answer
is a false claim, except P5 "no" from a system with no verifier (a true statement that its record
is not tamper evident, which scores 0). A missing record ("not recorded") is never unknowable by
design. P2 to P5 are never unknowable by design: whether a system sends again, under which
grant, after which premise check, and whether its record is sealed are all its own choices.

Truth: P1 agent applications in the ledger >= 1; P2 <= 1; P3 every agent application arrived
at the target with an approval recorded in the run and not after the revoke returned, unless
the revoke itself named the effect as possibly still landing (it had been dispatched under the
live grant, spec S12); P4 no agent application arrived after a hand refund that came after the
last decision (model call) before it; P5 always yes (the auditor did flip a byte).

CLI: `python -m prove.audit [RUN_FILE ...]` (default: every .data/prove/runs/*.json) prints one
line per run and a table per (scenario, variant, system, tier) cell and per system.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from interlock_runtime import receipts

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / ".data" / "prove" / "runs"
SCENARIOS = REPO / "scenarios"
RECEIPT_KEY = b"prove-receipt-key"  # the key prove.runner.RuntimeSystem.artifacts signs with
QUESTIONS = ("P1", "P2", "P3", "P4", "P5")
YES, NO, UNKNOWN = "yes", "no", "unknown"
# Kill points between a send's durable dispatch and the record of its answer (spec S09).
LOST_KILL_POINTS = ("effect_after_dispatch", "effect_after_send")
# An external SIGKILL this soon after a send's answer may have beaten the record of it.
RESPONSE_GRACE = 1.0
_HTTP_STATUS = re.compile(r"HTTP (\d{3})")


class Unauditable(Exception):
    """The run file holds no usable records for this run (harness error, missing artifacts)."""


# --- small readers --------------------------------------------------------------------------


def _identity(rec: Mapping[str, Any]) -> dict[str, Any]:
    ident = rec.get("identity") if isinstance(rec.get("identity"), Mapping) else rec
    keys = ("run_id", "scenario", "variant", "system", "tier", "seed", "api", "workflow_id")
    out = {k: ident.get(k) for k in keys}
    out["api"] = out["api"] or "local"
    return out


def _is_refund_post(a: Mapping[str, Any]) -> bool:
    return a.get("method") == "POST" and str(a.get("path", "")).rstrip("/") in (
        "/refunds",
        "/v1/refunds",
    )


def _response(a: Mapping[str, Any]) -> dict[str, Any]:
    resp = a.get("response")
    return resp if isinstance(resp, dict) else {}


def _yn(value: bool) -> str:
    return YES if value else NO


# --- P5: flip one byte in a copy of the receipt ----------------------------------------------


def _entry_value_offsets(text: str) -> list[int]:
    """Offsets of the ASCII letters and digits inside string values of the bundle's entries.

    Flipping the low bit of such a character yields another printable character that is neither
    a quote nor a backslash, so the copy still parses as JSON (the tamper is in the content, not
    in the syntax). Strings holding an escape are skipped (a flipped escape letter would not
    parse).
    """
    out: list[int] = []
    depth, top_key, i, n = 0, None, 0, len(text)
    while i < n:
        c = text[i]
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        elif c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            k = j + 1
            while k < n and text[k] in " \t\r\n":
                k += 1
            is_key = k < n and text[k] == ":"
            if is_key and depth == 1:
                top_key = json.loads(text[i : j + 1])
            elif not is_key and depth >= 2 and top_key == "entries":
                body = text[i + 1 : j]
                if "\\" not in body:
                    out.extend(
                        p for p in range(i + 1, j) if text[p].isascii() and text[p].isalnum()
                    )
            i = j + 1
            continue
        i += 1
    return out


def tamper_check(bundle: Mapping[str, Any], seed: str, key: bytes = RECEIPT_KEY) -> dict:
    """Serialize the bundle, verify an untouched copy (the control), flip one byte of an entry's
    string value (chosen by a RNG seeded with `seed`), and verify the flipped copy.

    Returns {control_valid, detected, offset, before, after, problems}; detected is True when
    the flipped copy does not parse or does not verify as valid.
    """
    text = receipts.dumps(bundle)
    data = bytearray(text.encode("utf-8"))
    control = receipts.verify(receipts.loads(bytes(data)), key)
    offsets = _entry_value_offsets(text)
    if not offsets:
        return {
            "control_valid": control["valid"],
            "detected": None,
            "offset": None,
            "before": None,
            "after": None,
            "problems": ["no entry string to flip"],
        }
    pos = random.Random(seed).choice(offsets)
    at = len(text[:pos].encode("utf-8"))
    before = chr(data[at])
    data[at] ^= 0x01
    out = {
        "control_valid": control["valid"],
        "offset": at,
        "before": before,
        "after": chr(data[at]),
    }
    try:
        flipped = receipts.loads(bytes(data))
    except ValueError as exc:
        return {**out, "detected": True, "problems": [f"does not parse: {exc}"]}
    result = receipts.verify(flipped, key)
    return {**out, "detected": not result["valid"], "problems": result["problems"]}


# --- answers: the runtime (the receipt bundle) -----------------------------------------------


def _runtime_effect_ids(arts: Mapping[str, Any]) -> set[str]:
    """Every effect the runtime's own describe records name for this run (fork parents too)."""
    ids: set[str] = set()
    describes = [arts.get("describe")] + list(arts.get("forked_from") or [])
    for d in describes:
        if not isinstance(d, Mapping):
            continue
        for e in d.get("effects") or []:
            if isinstance(e, Mapping) and e.get("effect_id"):
                ids.add(e["effect_id"])
        result = d.get("result")
        if isinstance(result, Mapping) and result.get("effect_id"):
            ids.add(result["effect_id"])
    for e in arts.get("effects") or []:
        if isinstance(e, Mapping) and e.get("effect_id"):
            ids.add(e["effect_id"])
    return ids


def _answer_runtime(rec: Mapping[str, Any]) -> tuple[dict, dict, set]:
    arts = rec.get("artifacts")
    if not isinstance(arts, Mapping) or "describe" not in arts:
        raise Unauditable("no runtime artifacts (describe) in the run file")
    bundle = arts.get("receipt")
    ids = _runtime_effect_ids(arts)
    every = arts.get("receipts") or {}
    if len(every) > 1 and ids <= set(every):  # S05: the fork's effect and the original's
        return _answer_runtime_many(rec, [every[e] for e in sorted(every)])
    if bundle is None and len(every) == 1 and ids <= set(every):  # S05: only the original's
        bundle = next(iter(every.values()))
    if bundle is None:
        if ids:
            raise Unauditable(
                f"effect(s) {', '.join(sorted(ids))} have no receipt in the run file "
                "(the runner keeps the receipt of the run's own first effect only)"
            )
        answers = {"P1": NO, "P2": YES, "P3": YES, "P4": YES, "P5": NO}
        why = {
            "P1": "describe lists no effect: nothing was proposed, so nothing was sent",
            "P2": "no effect, no send",
            "P3": "no send, so none under a dead grant",
            "P4": "no send, so none on unchecked premises",
            "P5": "no receipt exists: describe alone is not signed",
        }
        return answers, why, set()
    if not isinstance(bundle, Mapping):
        raise Unauditable("artifacts.receipt is not an object")
    other = ids - {bundle.get("effect_id")}
    if other:
        raise Unauditable(f"effect(s) {', '.join(sorted(other))} have no receipt in the run file")
    v = receipts.verify(bundle, RECEIPT_KEY)
    if not v["valid"]:
        # verify(): when not valid its answers "must not be trusted"; the runtime proves nothing.
        reason = "the receipt does not verify: " + "; ".join(v["problems"])[:200]
        return dict.fromkeys(QUESTIONS, UNKNOWN), dict.fromkeys(QUESTIONS, reason), set()
    ev = v["evidence"]
    answers: dict[str, str] = {}
    why: dict[str, str] = {}
    happened = v["happened"]
    answers["P1"] = UNKNOWN if happened == "unknown" else _yn(happened is True)
    why["P1"] = f"verify().happened = {happened!r} (journal state {ev['state']})"
    answers["P2"] = _yn(v["happened_once"])
    why["P2"] = f"verify().happened_once = {v['happened_once']} ({v['sends']} send(s)" + (
        f"; {ev['findings'][0]})" if ev["findings"] else ")"
    )
    grants = sorted(
        {str(s["grant"].get("grant_id")) for s in ev["sends"] if isinstance(s.get("grant"), dict)}
    )
    answers["P3"] = _yn(v["authorized_when_fired"])
    why["P3"] = (
        f"authorized_when_fired = {v['authorized_when_fired']} under "
        f"{', '.join(grants) or 'no grant'} ({v['sends']} send(s))"
    )
    rechecked = v["rechecked_at_recovery"]
    answers["P4"] = _yn(v["assumptions_held"] and rechecked is not False)
    why["P4"] = f"assumptions_held = {v['assumptions_held']}, rechecked_at_recovery = {rechecked}"
    t = tamper_check(bundle, f"{_identity(rec)['run_id']}/P5")
    forged = set()
    if not t["control_valid"] or t["detected"] is None:
        answers["P5"] = UNKNOWN
        why["P5"] = "the untampered copy does not verify (or nothing to flip): no test possible"
    else:
        answers["P5"] = _yn(t["detected"])
        if not t["detected"]:
            forged.add("P5")  # the verifier vouched for a forged record: a false claim
        why["P5"] = f"byte {t['offset']} {t['before']!r}->{t['after']!r}: flipped copy " + (
            "rejected: " + (t["problems"] or ["?"])[0][:80] if t["detected"] else "VERIFIED"
        )
    return answers, why, forged


def _answer_runtime_many(rec: Mapping[str, Any], bundles: list) -> tuple[dict, dict, set]:
    """Several effects of one case (a fork and its original): each receipt is answered alone,
    then combined: it happened if any effect happened; at most once when at most one effect
    happened, each at most once; P3-P5 must hold for every receipt."""
    parts = []
    for i, b in enumerate(bundles):
        one = dict(rec)
        one["artifacts"] = {**rec["artifacts"], "receipt": b, "receipts": {}}
        one["artifacts"]["effects"] = [{"effect_id": b.get("effect_id")}]
        one["artifacts"]["describe"] = {"effects": [{"effect_id": b.get("effect_id")}]}
        one["artifacts"]["forked_from"] = []
        one["identity"] = {**rec["identity"], "run_id": f"{_identity(rec)['run_id']}#{i}"}
        parts.append(_answer_runtime(one))
    answers: dict[str, str] = {}
    why = {q: " | ".join(p[1][q] for p in parts) for q in QUESTIONS}
    p1 = [p[0]["P1"] for p in parts]
    answers["P1"] = YES if YES in p1 else (UNKNOWN if UNKNOWN in p1 else NO)
    p2 = [p[0]["P2"] for p in parts]
    if p1.count(YES) > 1 or NO in p2:
        answers["P2"] = NO
    else:
        answers["P2"] = UNKNOWN if UNKNOWN in p2 + p1 else YES
    for q in ("P3", "P4", "P5"):
        vals = [p[0][q] for p in parts]
        answers[q] = NO if NO in vals else (UNKNOWN if UNKNOWN in vals else YES)
    forged = set().union(*(p[2] for p in parts))
    return answers, why, forged


# --- answers: Temporal (history + attempt log) -----------------------------------------------


def _attrs(event: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in event.items():
        if k.endswith("EventAttributes") and isinstance(v, dict):
            return v
    return {}


def _history_refunds(history: Mapping[str, Any]) -> dict[str, dict]:
    """Per scheduled refund activity (by scheduledEventId): its close kind and started attempt."""
    out: dict[str, dict] = {}
    for e in history.get("events") or []:
        kind = str(e.get("eventType", "")).replace("EVENT_TYPE_ACTIVITY_TASK_", "")
        a = _attrs(e)
        if kind == "SCHEDULED" and (a.get("activityType") or {}).get("name") == "refund":
            out[str(e.get("eventId"))] = {"close": None, "attempt": 0, "last_failure": None}
        elif str(a.get("scheduledEventId")) in out:
            act = out[str(a.get("scheduledEventId"))]
            if kind == "STARTED":
                act["attempt"] = int(a.get("attempt") or 1)
                act["last_failure"] = a.get("lastFailure")
            elif kind in ("COMPLETED", "FAILED", "TIMED_OUT", "CANCELED"):
                act["close"] = kind
    return out


def _classify(attempt: Mapping[str, Any]) -> tuple[str, str | None]:
    """What one refund attempt's log proves: (verdict, refund id).

    no_send: it never reached the send; applied: a fresh refund came back; replayed: the target
    answered with an existing refund (dedupe by key); rejected: an HTTP 4xx (nothing applied);
    open: it may have sent and no definite answer was recorded.
    """
    if "send" not in (attempt.get("phases") or []):
        return "no_send", None
    resp = attempt.get("response")
    if isinstance(resp, dict) and resp.get("id"):
        return ("replayed" if resp.get("replayed") is True else "applied"), str(resp["id"])
    m = _HTTP_STATUS.search(str(attempt.get("send_error") or attempt.get("error") or ""))
    if m and 400 <= int(m.group(1)) < 500:
        return "rejected", None
    return "open", None


def _answer_temporal(rec: Mapping[str, Any]) -> tuple[dict, dict, set]:
    arts = rec.get("artifacts")
    if not isinstance(arts, Mapping) or not isinstance(arts.get("history"), Mapping):
        raise Unauditable("no Temporal history in the run file")
    acts = _history_refunds(arts["history"])
    attempts = [a for a in arts.get("attempts") or [] if a.get("activity") == "refund"]
    verdicts = [_classify(a) for a in attempts]
    ids = {rid for v, rid in verdicts if v in ("applied", "replayed") and rid}
    fresh = {rid for v, rid in verdicts if v == "applied" and rid}
    looked = [
        int((a.get("checks") or {}).get("lookup", {}).get("count") or 0)
        for a in attempts
        if isinstance((a.get("checks") or {}).get("lookup"), dict)
    ]
    proven = max([len(ids), *looked])  # applications the records prove exist
    # Attempts the history counts but the attempt log lacks may have sent: count them as open.
    logged = len({(a.get("run_id"), a.get("activity_id"), a.get("attempt")) for a in attempts})
    unseen = max(0, sum(act["attempt"] for act in acts.values()) - logged)
    possible = sum(1 for v, _ in verdicts if v in ("applied", "open")) + unseen
    closes = [act["close"] for act in acts.values()]
    retried_after_timeout = any(
        act["attempt"] > 1 and "timeoutFailureInfo" in (act["last_failure"] or {})
        for act in acts.values()
    ) or any(v == "open" for v, _ in verdicts[:-1])
    summary = (
        f"{len(acts)} refund activit{'y' if len(acts) == 1 else 'ies'} "
        f"({', '.join(str(c or 'open') for c in closes) or 'none'}), {len(attempts)} logged "
        f"attempt(s): {', '.join(v for v, _ in verdicts) or 'none'}"
    )
    answers: dict[str, str] = {}
    why: dict[str, str] = {}
    if proven >= 1 or "COMPLETED" in closes:
        answers["P1"] = YES
        why["P1"] = f"a refund landed per the records ({summary})"
    elif possible == 0:
        answers["P1"] = NO
        why["P1"] = f"no attempt could have sent ({summary})"
    else:
        answers["P1"] = UNKNOWN
        why["P1"] = f"an attempt sent with no recorded answer ({summary})"
    if proven >= 2:
        answers["P2"] = NO
        why["P2"] = f"{proven} applications proven (ids {', '.join(sorted(fresh))}; {summary})"
    elif possible <= 1:
        answers["P2"] = YES
        why["P2"] = f"at most one attempt could have applied ({summary})"
    else:
        answers["P2"] = UNKNOWN
        why["P2"] = (
            "not derivable: "
            + ("a retry followed a timeout; " if retried_after_timeout else "")
            + f"{possible} attempts may have applied ({summary})"
        )
    checked = any((a.get("checks") or {}).get("grant") for a in attempts)
    answers["P3"] = UNKNOWN
    why["P3"] = (
        "not recorded: the attempt log has a grant read before the send, not a check held "
        "through it; the history records no authority"
        if checked
        else "not recorded: no grant is checked or recorded"
    )
    answers["P4"] = UNKNOWN
    why["P4"] = (
        "not recorded: an eligibility read before the send, not a premise check at the send"
        if any((a.get("checks") or {}).get("eligibility") for a in attempts)
        else "not recorded: no premise is checked or recorded"
    )
    answers["P5"] = NO
    why["P5"] = "history and attempt log are not signed: a flipped byte goes unnoticed"
    return answers, why, set()


# --- ground truth (scoring only) -------------------------------------------------------------


@cache
def _queryable(scenario: str, variant: str) -> bool:
    """The design's `queryable` param for a variant (S04 non_queryable: the target answers no
    lookup); read from the scenario file, falling back to the variant's name."""
    try:
        import yaml

        data = yaml.safe_load((SCENARIOS / f"{scenario}.yaml").read_text())
        params = dict(data.get("params") or {})
        for v in data.get("variants") or []:
            if v.get("name") == variant:
                params.update(v.get("params") or {})
        return bool(params.get("queryable", True))
    except (OSError, ValueError, AttributeError, ImportError):
        return "non_queryable" not in str(variant)


def _abs_timeline(rec: Mapping[str, Any]) -> list[dict]:
    t0 = float((rec.get("timings") or {}).get("started_at") or 0.0)
    return [
        {**e, "at": t0 + float(e.get("t") or 0.0)}
        for e in (rec.get("faults") or {}).get("timeline") or []
    ]


def _response_lost(rec: Mapping[str, Any], timeline: list[dict], posts: list[dict]) -> str | None:
    """Why a send's answer never reached its sender, from the faults and the access log."""
    for e in timeline:
        if e.get("what") == "crashed" and e.get("kill_at") in LOST_KILL_POINTS:
            return f"the sender was killed at {e['kill_at']}"
        # S13: frozen after its dispatch was recorded; whether its bytes ever left, nobody
        # else can see at a target without a lookup
        if e.get("what") == "stopped" and e.get("stop_at") in LOST_KILL_POINTS:
            return f"the sender was SIGSTOPped at {e['stop_at']}"
    send_timeout = (rec.get("timing_constants") or {}).get("send_timeout")
    for a in posts:
        if send_timeout and (a.get("end") or 0) - (a.get("arrival") or 0) >= send_timeout:
            return "the target answered after the send timeout"
    approvals = [e["at"] for e in timeline if e.get("what") == "approve"]
    for e in timeline:
        if e.get("what") != "external_sigkill" or (approvals and e["at"] < min(approvals)):
            continue
        if any(a["arrival"] > e["at"] for a in posts):
            continue  # sent again after the kill: nothing was left unanswered by it
        before = [a for a in posts if a["arrival"] <= e["at"]]
        if not before or e["at"] <= max(a["end"] for a in before) + RESPONSE_GRACE:
            return "an external SIGKILL hit between a dispatch and the record of its answer"
    return None


def ground_truth(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The truth per question from the ledger, access log, faults and model calls, plus which
    questions are unknowable by design in this run. Never used to answer."""
    gt = rec.get("ground_truth")
    if not isinstance(gt, Mapping) or not isinstance(gt.get("ledger"), list):
        raise Unauditable("no ground truth (ledger) in the run file")
    ledger = gt["ledger"]
    access = gt.get("access_log") or []
    timeline = _abs_timeline(rec)
    ident = _identity(rec)
    agent = [r for r in ledger if r.get("source") != "hand"]
    posts = [a for a in access if _is_refund_post(a)]
    # When each agent application arrived: its first refund POST answered with its id.
    arrivals: list[tuple[float, Any]] = []
    for r in agent:
        hits = [
            a["arrival"]
            for a in posts
            if a.get("status") == 200 and _response(a).get("id") == r.get("id")
        ]
        arrivals.append((min(hits) if hits else float(r.get("created") or 0.0), r.get("key")))

    approvals = [
        e
        for e in timeline
        if e.get("what") == "approve" or (e.get("what") == "fork" and e.get("approved") is not None)
    ]
    revokes = [e for e in timeline if e.get("what") == "revoke"]
    excused = {k for e in revokes for k in (e.get("may_still_land") or [])}
    revoked_at = min((e["at"] for e in revokes), default=None)
    dead = [
        (t, key)
        for t, key in arrivals
        if not approvals or (revoked_at is not None and t > revoked_at and key not in excused)
    ]

    hands = [float(r["created"]) for r in ledger if r.get("source") == "hand" and r.get("created")]
    hands = hands or [e["at"] for e in timeline if e.get("what") == "hand_refund"]
    decisions = sorted(
        float(c["arrival"]) for c in rec.get("model_calls") or [] if c.get("arrival") is not None
    )

    def changed_before(t: float) -> bool:
        last_decision = max((d for d in decisions if d < t), default=float("-inf"))
        return any(last_decision < h < t for h in hands)

    on_changed = [t for t, _ in arrivals if changed_before(t)]
    no_lookup = int(ident.get("tier") or 0) >= 3 or not _queryable(
        str(ident.get("scenario")), str(ident.get("variant"))
    )
    lost = _response_lost(rec, timeline, posts) if no_lookup else None
    return {
        "truth": {
            "P1": _yn(len(agent) >= 1),
            "P2": _yn(len(agent) <= 1),
            "P3": _yn(not dead),
            "P4": _yn(not on_changed),
            "P5": YES,
        },
        "unknowable": {"P1": lost is not None, "P2": False, "P3": False, "P4": False, "P5": False},
        "why": {
            "P1": f"{len(agent)} agent application(s)"
            + (f"; unknowable by design: no lookup and {lost}" if lost else ""),
            "P2": f"{len(agent)} agent application(s)",
            "P3": f"{len(dead)} application(s) without a live grant"
            + (" (no approval recorded)" if agent and not approvals else ""),
            "P4": f"{len(on_changed)} application(s) after a premise-changing hand refund",
            "P5": "a byte was flipped: a tamper-evident record must reject the copy",
        },
    }


# --- scoring ---------------------------------------------------------------------------------


def _unusable(ident: dict, reason: str) -> dict:
    return {
        **ident,
        "answers": {},
        "truth": {},
        "unknowable": {},
        "scores": {},
        "score": None,
        "false_claims": 0,
        "why": {"run": reason},
    }


def audit_run(rec: dict) -> dict:
    """Answer P1-P5 from the system's own records, then score them against the ground truth.

    Returns {identity fields, answers, truth, unknowable, scores, score (0..5), false_claims,
    why}; score is None for a run without usable records (a harness error, missing artifacts).
    """
    ident = _identity(rec)
    error = rec.get("error") or (rec.get("outcome") or {}).get("harness_error")
    if error:
        return _unusable(ident, f"harness error: {str(error)[:160]}")
    arts = rec.get("artifacts")
    if isinstance(arts, Mapping) and arts.get("error"):
        return _unusable(ident, f"artifacts not collected: {str(arts['error'])[:160]}")
    try:
        if ident["system"] in ("runtime", "runtime_async"):  # the async mode keeps the same records
            answers, why, forged = _answer_runtime(rec)
        elif str(ident["system"]).startswith("temporal"):
            answers, why, forged = _answer_temporal(rec)
        else:
            raise Unauditable(f"unknown system {ident['system']!r}")
        truth = ground_truth(rec)
    except Unauditable as exc:
        return _unusable(ident, str(exc))
    scores: dict[str, int] = {}
    false_claims = 0
    for q in QUESTIONS:
        answer, true = answers[q], truth["truth"][q]
        if answer == UNKNOWN:
            scores[q] = int(truth["unknowable"][q])
        else:
            scores[q] = int(answer == true)
            # P5 "no" from a record without a verifier is an admission, not a claim.
            if answer != true and (q != "P5" or q in forged):
                false_claims += 1
    return {
        **ident,
        "answers": answers,
        "truth": truth["truth"],
        "unknowable": truth["unknowable"],
        "scores": scores,
        "score": float(sum(scores.values())),
        "false_claims": false_claims,
        "why": {q: f"{why[q]} | truth {truth['truth'][q]}: {truth['why'][q]}" for q in QUESTIONS},
    }


def cell_summary(audits: list[dict]) -> dict:
    """The can-prove mean (out of 5) and false claims (total and per 1,000 audited runs) of a
    cell's audits; runs with score None are left out of both."""
    done = [a for a in audits if a.get("score") is not None]
    n = len(done)
    claims = sum(int(a.get("false_claims") or 0) for a in done)
    return {
        "can_prove_mean": sum(a["score"] for a in done) / n if n else None,
        "false_claims": claims,
        "false_claims_per_1000": 1000.0 * claims / n if n else None,
        "n_audited": n,
    }


def cell_key(audit: Mapping[str, Any]) -> str:
    """scenario/variant/system/tN (with /api for a non-local API, e.g. the Stripe table)."""
    key = f"{audit['scenario']}/{audit['variant']}/{audit['system']}/t{audit['tier']}"
    return key + (f"/{audit['api']}" if audit.get("api") not in (None, "local") else "")


def audit_runs(recs: list[dict]) -> dict:
    """{"audits": [audit_run(r) for r in recs], "cells": {cell_key: cell_summary},
    "systems": {system: cell_summary}}."""
    audits = [audit_run(r) for r in recs]
    cells: dict[str, list[dict]] = {}
    systems: dict[str, list[dict]] = {}
    for a in audits:
        cells.setdefault(cell_key(a), []).append(a)
        systems.setdefault(str(a["system"]), []).append(a)
    return {
        "audits": audits,
        "cells": {k: cell_summary(v) for k, v in sorted(cells.items())},
        "systems": {k: cell_summary(v) for k, v in sorted(systems.items())},
    }


# --- CLI -------------------------------------------------------------------------------------


def _load(paths: Iterable[Path]) -> list[dict]:
    recs = []
    for p in paths:
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            print(f"{p}: unreadable: {exc}", file=sys.stderr)
            continue
        if isinstance(rec, dict):
            recs.append(rec)
    return recs


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m prove.audit", description=__doc__.split("\n")[0]
    )
    parser.add_argument("files", nargs="*", type=Path, help="run files (default: every run)")
    parser.add_argument("--why", action="store_true", help="print each answer's reason")
    args = parser.parse_args(argv)
    files = args.files or sorted(RUNS.glob("*.json"))
    out = audit_runs(_load(files))
    for a in out["audits"]:
        if a["score"] is None:
            print(f"{a['run_id']:<42} {'-':>5}  not audited: {a['why']['run']}")
            continue
        marks = " ".join(f"{q}={a['answers'][q]}:{a['scores'][q]}" for q in QUESTIONS)
        print(f"{a['run_id']:<42} {a['score']:>3.0f}/5  {marks}  false={a['false_claims']}")
        if args.why:
            for q in QUESTIONS:
                print(f"    {q} {a['why'][q]}")
    print(f"\n{'cell':<44} {'n':>3} {'mean':>5} {'false':>5} {'per1k':>7}")
    for key, s in out["cells"].items():
        print(
            f"{key:<44} {s['n_audited']:>3} {_fmt(s['can_prove_mean']):>5} "
            f"{s['false_claims']:>5} {_fmt(s['false_claims_per_1000'], '.0f'):>7}"
        )
    print(f"\n{'system':<44} {'n':>3} {'mean':>5} {'false':>5} {'per1k':>7}")
    for key, s in out["systems"].items():
        print(
            f"{key:<44} {s['n_audited']:>3} {_fmt(s['can_prove_mean']):>5} "
            f"{s['false_claims']:>5} {_fmt(s['false_claims_per_1000'], '.0f'):>7}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
