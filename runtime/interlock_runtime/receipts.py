"""Receipts: a bundle of one effect's journal, an HMAC signature, and verify() (DESIGN C).

A bundle is a JSON object:

    {"format": "interlock-receipt/1", "effect_id": ..., "entries": [sealed entries, in order],
     "late_result": ..., "reconciled": ..., "signature": hex | null, "bundle_signature": hex | null}

- signature is HMAC-SHA256(key, "<effect_id>:<hash of the last entry>") as DESIGN C defines it:
  with the hash chain it covers every entry and detects a truncated or extended journal.
- bundle_signature is HMAC-SHA256(key, "interlock-receipt/1\\n" + canonical(bundle without the two
  signatures)). It also covers late_result and reconciled, which live outside the chain
  (reconciled is a human attestation that is never journaled).

verify() re-derives every answer from the entries alone; nothing is read from a database.
Without a key it proves internal consistency only: anyone can re-seal a whole chain (DESIGN B9).

The CLI: `python -m interlock_runtime.receipts FILE [--key K | --key-file F | --key-env NAME]
[--json]`, also reachable as `interlock verify`. Exit 0 valid, 1 invalid, 2 unreadable input.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import hmac
import json
import os
import sys
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import authority, journal
from .vocabulary import ResendVia

FORMAT = "interlock-receipt/1"
BUNDLE_FIELDS = (
    "format",
    "effect_id",
    "entries",
    "late_result",
    "reconciled",
    "signature",
    "bundle_signature",
)
SIGNATURE_FIELDS = ("signature", "bundle_signature")
# COMMITTED.via values that mean the effect was sent again (spec 5.7 recovery table).
RESEND_VIAS = ResendVia.values()
KEY_ENV = "ILR_RECEIPT_KEY"
# The fields of a sealed entry that are not the entry's own data.
ENTRY_FRAME = ("ts", "kind", "effect_id", "prev", "hash")


# --- signing -------------------------------------------------------------------------------------


def _key_bytes(key: bytes | str | None) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"a receipt key must be bytes (or str), got {type(key).__name__}")
    if not key:
        raise ValueError("a receipt key must not be empty")
    return bytes(key)


def _require_key(key: bytes | str | None) -> bytes:
    raw = _key_bytes(key)
    if raw is None:
        raise ValueError("signing needs a key")
    return raw


def _hmac(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).hexdigest()


def _last_hash(entries: Any) -> str:
    if isinstance(entries, list) and entries and isinstance(entries[-1], Mapping):
        last = entries[-1].get("hash")
        if isinstance(last, str):
            return last
    return ""


def chain_signature(effect_id: str, last_hash: str, key: bytes) -> str:
    """HMAC-SHA256 (hex) over "<effect_id>:<last_hash>" (DESIGN C); last_hash "" when empty."""
    return _hmac(_require_key(key), f"{effect_id}:{last_hash}")


def bundle_signature(bundle: Mapping[str, Any], key: bytes) -> str:
    """HMAC-SHA256 (hex) over the format name and the canonical bundle without its signatures."""
    unsigned = {k: v for k, v in bundle.items() if k not in SIGNATURE_FIELDS}
    return _hmac(_require_key(key), f"{FORMAT}\n{journal.canonical(unsigned)}")


def sign(bundle: Mapping[str, Any], key: bytes) -> dict[str, Any]:
    """A copy of bundle with both signatures computed under key (bytes; a str is UTF-8 encoded)."""
    raw_key = _require_key(key)
    out = copy.deepcopy(dict(bundle))
    out["signature"] = chain_signature(
        out.get("effect_id", ""), _last_hash(out.get("entries")), raw_key
    )
    out["bundle_signature"] = bundle_signature(out, raw_key)
    return out


def bundle(
    entries: Iterable[Mapping[str, Any] | str | bytes],
    effect_id: str,
    key: bytes | None = None,
    late_result: Any = None,
    reconciled: Any = None,
) -> dict[str, Any]:
    """The receipt bundle of one effect, signed when a key is given.

    entries are the sealed entries in journal order, as dicts or as the verbatim body texts of
    ilr.journal. late_result and reconciled are the effects row's columns (JSON or None).
    The bundle holds plain copies; it is not checked here (verify() does that).
    """
    if not isinstance(effect_id, str) or not effect_id:
        raise ValueError(f"effect_id must be a non-empty str, got {effect_id!r}")
    plain: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        if isinstance(entry, (str, bytes, bytearray)):
            plain.append(journal.parse_body(entry))
        elif isinstance(entry, Mapping):
            plain.append(json.loads(journal.canonical(dict(entry))))
        else:
            raise TypeError(
                f"entries[{index}] must be a sealed entry (dict) or its body text, "
                f"got {type(entry).__name__}"
            )
    out: dict[str, Any] = {
        "format": FORMAT,
        "effect_id": effect_id,
        "entries": plain,
        "late_result": json.loads(journal.canonical(late_result)),
        "reconciled": json.loads(journal.canonical(reconciled)),
        "signature": None,
        "bundle_signature": None,
    }
    return sign(out, key) if key is not None else out


def dumps(bundle: Mapping[str, Any], pretty: bool = False) -> str:
    """The bundle as JSON text: canonical by default, indented (sorted keys) when pretty."""
    if pretty:
        return json.dumps(bundle, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    return journal.canonical(dict(bundle))


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in one object (ambiguous JSON)")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# Hashes cover numbers as canonical() writes them (Python's repr), so a number spelled another
# way ("1795000001e0" for 1795000001.0, "-0" for 0) is not the text that was sealed and signed.
def _canonical_float(token: str) -> float:
    value = float(token)
    if repr(value) != token:
        raise ValueError(f"number {token} is not written canonically (expected {value!r})")
    return value


def _canonical_int(token: str) -> int:
    value = int(token)
    if str(value) != token:
        raise ValueError(f"number {token} is not written canonically (expected {value})")
    return value


def loads(data: bytes | str) -> Any:
    """Strict JSON for receipts: UTF-8 only, no duplicate keys, no NaN or Infinity, numbers
    written as canonical() writes them. Whitespace between tokens is free (pretty files load).

    Raises ValueError with a readable reason (UnicodeDecodeError and JSONDecodeError are
    ValueErrors too).
    """
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
            ) from None
    else:
        text = data
    try:
        return json.loads(
            text,
            object_pairs_hook=_reject_duplicates,
            parse_constant=_reject_constant,
            parse_float=_canonical_float,
            parse_int=_canonical_int,
        )
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


# --- verify --------------------------------------------------------------------------------------


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


def _iso(ts: Any) -> str:
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        return repr(ts)
    try:
        return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return repr(ts)


def _grant_reasons(checks: Mapping[str, Any], payload: Any, ts: Any, lease: Any) -> list[str]:
    """Why the recorded grant check does not show a live grant covering this payload at ts."""
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
    expires_at = snap.get("expires_at")
    if expires_at is not None:
        expiry = _epoch(expires_at)
        if expiry is None:
            reasons.append(f"grant {grant_id!r} has an unreadable expires_at {expires_at!r}")
        elif isinstance(ts, bool) or not isinstance(ts, (int, float)):
            reasons.append("the send has no timestamp to compare with expires_at")
        elif expiry <= ts:
            reasons.append(
                f"grant {grant_id!r} expired at {expires_at}, before the send at {_iso(ts)}"
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
        grant_why = _grant_reasons(checks, payload, ts, lease)
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


def _data(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in ENTRY_FRAME}


def _analyse(entries: list[Any]) -> dict[str, Any]:
    """Walk the entries in order, like the effects row's state machine (spec 5.7, DESIGN B2)."""
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


def _check_late_result(late_result: Any, entries: list[Any]) -> list[str]:
    late_entries = [e for e in entries if isinstance(e, Mapping) and e.get("kind") == "LATE_RESULT"]
    if late_result is None:
        if late_entries:
            return ["late_result is null but the journal holds a LATE_RESULT"]
        return []
    for entry in late_entries:
        if late_result in (entry.get("result"), _data(entry), dict(entry)):
            return []
    return ["late_result does not match any LATE_RESULT entry of the journal"]


def verify(bundle: Any, key: bytes | None = None) -> dict[str, Any]:
    """Re-derive a receipt's claims from its entries (DESIGN C). Never raises on a bad bundle
    (only on a bad key: not bytes/str, or empty).

    A send is a DISPATCHED entry, or a resend: a COMMITTED whose via is retry-idempotent or
    recovery-reapply (a resend never writes a second DISPATCHED). Kinds not in journal.KINDS
    are ignored (DESIGN B2), though the chain covers them.

    - problems: why the receipt is not a sound record: bundle shape and format, broken prev
      links, hashes that do not re-derive, entries of another effect, more than one COMMITTED,
      late_result not matching a LATE_RESULT entry (or null while one exists), reconciled not an
      object, a signature that does not match the key, or no signature while a key was given.
    - valid: problems is empty. When False, the answers below are computed from the entries
      as given and must not be trusted.
    - tamper_evident: at least one entry and every link and hash intact (one effect_id).
    - signed: None without a key; with one, True only when both signatures match.
    - happened: True when the journal proves a landing (a COMMITTED, or a LATE_RESULT: apply()
      returned a result); else "unknown" when the effect is AMBIGUOUS or a DISPATCHED is still
      open; else False (refused, or never sent).
    - happened_once: False when a DISPATCHED was written while another was open or after the
      effect was committed or ambiguous, when there is more than one COMMITTED, or when the
      journal proves two landings (a late result after a REFUSED resolves: true followed by a
      COMMITTED of a later send; a late result in a send episode that was committed via
      recovery-reapply, which was sent only because the query found nothing). Else True.
    - authorized_when_fired: every send's check passed and re-derives: for a DISPATCHED, an
      AUTHORIZED for its lease since the last PROPOSED, checks.lease_live true, and the snapshot
      checks.lease naming that grant, revoked null, expires_at null or later than the entry's
      ts, the payload within the grant's constraints when set (authority.py; receipts from
      before constraints: amount <= max_cents), payload_hash equal when set. For a
      resend the same over COMMITTED.rechecked, at rechecked.ts if recorded, else at the
      COMMITTED's ts. True when nothing was sent.
    - assumptions_held: every send recorded its premise check (checks.violations, or
      rechecked.violations for a resend) and it is empty. True when nothing was sent.
    - refused: the effect ended back in the proposed state after a REFUSED (never sent, or its
      send resolved as not landed); a refused offer of another payload after a commit is not.
    - rechecked_at_recovery: None when the journal shows no recovery (no resend, no entry
      with rechecked); else True when every resend carries a passing re-check.
    - sends: the number of sends.
    - evidence: the derivation: state, each send with its grant snapshot, violations and the
      reasons it fails, the commit, the AMBIGUOUS, refusals, late results, landings, the open
      dispatch, reconciled (a human attestation, outside the chain), ignored kinds, findings.
    """
    raw_key = _key_bytes(key)
    problems: list[str] = []
    if not isinstance(bundle, Mapping):
        bundle = {}
        problems.append("the bundle is not a JSON object")
    else:
        missing = [f for f in BUNDLE_FIELDS if f not in bundle]
        if missing:
            problems.append(f"the bundle lacks {', '.join(missing)}")
        unknown = sorted(str(k) for k in bundle if k not in BUNDLE_FIELDS)
        if unknown:
            problems.append(f"the bundle has unknown fields {', '.join(unknown)}")
        if "format" in bundle and bundle.get("format") != FORMAT:
            problems.append(f"format is {bundle.get('format')!r}, expected {FORMAT!r}")

    effect_id = bundle.get("effect_id")
    if "effect_id" in bundle and (not isinstance(effect_id, str) or not effect_id):
        problems.append("effect_id is not a non-empty string")
        effect_id = None
    entries = bundle.get("entries")
    if not isinstance(entries, list):
        if "entries" in bundle:
            problems.append("entries is not a list")
        entries = []
    link_problems = journal.check_links(entries, effect_id if isinstance(effect_id, str) else None)
    problems.extend(link_problems)
    problems.extend(journal.check_commits(entries))
    if not entries:
        problems.append("the journal has no entries")
    tamper_evident = bool(entries) and not link_problems

    reconciled = bundle.get("reconciled")
    if reconciled is not None and not isinstance(reconciled, Mapping):
        problems.append("reconciled is neither null nor an object")
    problems.extend(_check_late_result(bundle.get("late_result"), entries))

    signature = bundle.get("signature")
    bsig = bundle.get("bundle_signature")
    for name, value in (("signature", signature), ("bundle_signature", bsig)):
        if value is not None and not journal.is_hash(value):
            problems.append(f"{name} is not a hex HMAC-SHA256")
    if (signature is None) != (bsig is None):
        problems.append("only one of signature and bundle_signature is set")
    signed: bool | None = None
    if raw_key is not None:
        if signature is None and bsig is None:
            signed = False
            problems.append("the bundle is not signed, but a key was given")
        else:
            try:
                expected = chain_signature(str(effect_id), _last_hash(entries), raw_key)
                expected_b = bundle_signature(bundle, raw_key)
            except (TypeError, ValueError):
                expected, expected_b = "", ""
            signed = (
                isinstance(signature, str)
                and isinstance(bsig, str)
                and hmac.compare_digest(signature.encode("utf-8"), expected.encode("utf-8"))
                and hmac.compare_digest(bsig.encode("utf-8"), expected_b.encode("utf-8"))
            )
            if not signed:
                problems.append("signature does not match this key")

    a = _analyse(entries)
    sends = a["sends"]
    resends = [s for s in sends if s["kind"] == "resend"]
    if a["committed"] or a["landings"]:
        happened: bool | str = True
    elif a["state"] == "ambiguous" or a["open"] is not None or not entries:
        happened = "unknown"
    else:
        happened = False
    happened_once = a["once"] and len(a["committed"]) <= 1 and a["landings"] <= 1
    if a["landings"] > 1:
        a["findings"].append(f"the journal shows {a['landings']} separate landings")
    if resends or a["rechecked_seen"]:
        rechecked_at_recovery: bool | None = all(
            s["authorized"] and s["premises_held"] for s in resends
        )
    else:
        rechecked_at_recovery = None
    refused = a["state"] == "proposed" and bool(a["refusals"])
    open_ep = a["open"]
    evidence = {
        "state": a["state"],
        "entries": len(entries),
        "sends": sends,
        "open_dispatch": None
        if open_ep is None
        else {
            "entry": open_ep["index"],
            "ts": open_ep["entry"].get("ts"),
            "by": open_ep["entry"].get("by"),
        },
        "committed": a["committed"][-1] if a["committed"] else None,
        "ambiguous": a["ambiguous"][-1] if a["ambiguous"] else None,
        "refusals": a["refusals"],
        "late_results": a["late_results"],
        "landings": a["landings"],
        "reconciled": copy.deepcopy(reconciled),
        "ignored_kinds": a["ignored_kinds"],
        "findings": a["findings"],
    }
    return {
        "valid": not problems,
        "tamper_evident": tamper_evident,
        "signed": signed,
        "happened": happened,
        "happened_once": happened_once,
        "authorized_when_fired": all(s["authorized"] for s in sends),
        "assumptions_held": all(s["premises_held"] for s in sends),
        "refused": refused,
        "evidence": evidence,
        "rechecked_at_recovery": rechecked_at_recovery,
        "problems": problems,
        "sends": len(sends),
        # Verified completion: True when every COMMITTED was checked by a post-condition that
        # held, None when no post-condition was given, False otherwise.
        "verified": _verified(entries),
    }


def _verified(entries: list) -> bool | None:
    commits = [e for e in entries if isinstance(e, Mapping) and e.get("kind") == "COMMITTED"]
    if not any("verified" in e for e in commits):
        return None
    return all(e.get("verified") is True for e in commits)


# --- CLI -----------------------------------------------------------------------------------------


class _Unreadable(Exception):
    pass


def _read_key(args: argparse.Namespace) -> bytes | None:
    if args.no_key:
        return None
    if args.key is not None:
        raw = args.key.encode("utf-8")
        where = "--key"
    elif args.key_file is not None:
        try:
            raw = Path(args.key_file).read_bytes()
        except OSError as exc:
            raise _Unreadable(f"--key-file {args.key_file}: cannot read: {exc.strerror}") from None
        raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1] if raw.endswith(b"\n") else raw
        where = f"--key-file {args.key_file}"
    elif args.key_env is not None:
        value = os.environ.get(args.key_env)
        if value is None:
            raise _Unreadable(f"--key-env {args.key_env}: the environment variable is not set")
        raw = value.encode("utf-8")
        where = f"environment variable {args.key_env}"
    elif os.environ.get(KEY_ENV):
        raw = os.environ[KEY_ENV].encode("utf-8")
        where = f"environment variable {KEY_ENV}"
    else:
        return None
    if not raw:
        raise _Unreadable(f"{where}: the key is empty")
    return raw


def _mark(value: Any) -> str:
    if value is True:
        return "[ok]"
    if value is None or value == "unknown":
        return "[??]"
    return "[NO]"


def _yes(value: Any) -> str:
    return (
        {True: "yes", False: "no", None: "n/a"}.get(value, str(value))
        if not isinstance(value, str)
        else value
    )


def checklist(result: Mapping[str, Any], name: str = "") -> str:
    """The readable form of a verify() result."""
    ev = result["evidence"]
    lines = [
        f"receipt {name or ''}".rstrip() + f": {'VALID' if result['valid'] else 'INVALID'} "
        f"({ev['entries']} entries, {result['sends']} send{'s' if result['sends'] != 1 else ''}, "
        f"state {ev['state']})"
    ]

    def row(label: str, value: Any, detail: str = "", mark: str | None = None) -> None:
        text = f"  {mark or _mark(value)} {label:<22} {_yes(value)}"
        lines.append(text + (f": {detail}" if detail else ""))

    committed = ev.get("committed")
    if result["happened"] is True and committed:
        detail = f"COMMITTED at {_iso(committed['ts'])}" + (
            f" via {committed['via']}" if committed.get("via") else ""
        )
    elif result["happened"] is True:
        detail = "a late result shows the target applied it"
    elif result["happened"] == "unknown":
        detail = (
            "AMBIGUOUS"
            if ev.get("ambiguous")
            else ("a send is still open" if ev.get("open_dispatch") else "no entries")
        )
    elif result["refused"]:
        detail = f"refused: {ev['refusals'][-1]['reason']}"
    else:
        detail = "never sent"
    # happened is a fact, not a check: a definite "no" is not a failure
    row("happened", result["happened"], detail, "[no]" if result["happened"] is False else None)
    once_detail = ""
    if not result["happened_once"]:
        once_detail = "; ".join(ev["findings"]) or "; ".join(
            p for p in result["problems"] if "COMMITTED" in p
        )
    row("happened once", result["happened_once"], once_detail)
    grants = sorted(
        {
            f"{s['grant'].get('grant_id')} (granted by {s['grant'].get('granted_by')})"
            for s in ev["sends"]
            if isinstance(s.get("grant"), Mapping)
        }
    )
    if not result["authorized_when_fired"]:
        auth_detail = "; ".join(
            f"entries[{s['entry']}]: {w}" for s in ev["sends"] for w in s["why_not_authorized"]
        )
    else:
        auth_detail = ", ".join(grants) if grants else "nothing was sent"
    row("authorized when fired", result["authorized_when_fired"], auth_detail)
    if not result["assumptions_held"]:
        prem_detail = "; ".join(
            f"entries[{s['entry']}]: {w}" for s in ev["sends"] for w in s["why_premises_not_held"]
        )
    else:
        prem_detail = "no violations at any send" if ev["sends"] else "nothing was sent"
    row("premises held", result["assumptions_held"], prem_detail)
    if result["rechecked_at_recovery"] is not None:
        row("rechecked at recovery", result["rechecked_at_recovery"])
    row(
        "tamper evident",
        result["tamper_evident"],
        "hash chain intact" if result["tamper_evident"] else "chain broken or empty",
    )
    if result["signed"] is None:
        lines.append(
            f"  [--] {'signed':<22} not checked: no key (--key-file, --key-env or {KEY_ENV})"
        )
    else:
        row("signed", result["signed"])
    if ev.get("reconciled") is not None:
        lines.append(f"  reconciled (human attestation): {json.dumps(ev['reconciled'])}")
    for finding in ev["findings"]:
        lines.append(f"  note: {finding}")
    for problem in result["problems"]:
        lines.append(f"  problem: {problem}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="interlock verify",
        description="Verify a receipt bundle: re-derive its claims from the hash-chained "
        "journal and, with a key, check its HMAC signatures. Exit 0 valid, 1 invalid, "
        "2 unreadable input.",
    )
    parser.add_argument("file", help="the bundle (JSON); - reads standard input")
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument(
        "--key",
        help="the HMAC key as text (visible to other users: prefer --key-file or --key-env)",
    )
    keys.add_argument(
        "--key-file",
        metavar="F",
        help="read the key's bytes from F (one trailing newline is dropped)",
    )
    keys.add_argument(
        "--key-env",
        metavar="NAME",
        help=f"read the key from environment variable NAME (default: {KEY_ENV}, when set)",
    )
    keys.add_argument(
        "--no-key", action="store_true", help=f"ignore {KEY_ENV}; check the chain only"
    )
    parser.add_argument("--json", action="store_true", help="print verify()'s result as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`interlock verify FILE [--key K | --key-file F | --key-env NAME | --no-key] [--json]`."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse printed the usage error (or --help)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        key = _read_key(args)
        name = "standard input" if args.file == "-" else args.file
        try:
            data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
        except OSError as exc:
            raise _Unreadable(f"{name}: cannot read: {exc.strerror or exc}") from None
        try:
            loaded = loads(data)
        except ValueError as exc:
            raise _Unreadable(f"{name}: not a receipt bundle: {exc}") from None
    except _Unreadable as exc:
        print(f"interlock verify: {exc}", file=sys.stderr)
        return 2
    result = verify(loaded, key)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        print(checklist(result, name))
    return 0 if result["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
