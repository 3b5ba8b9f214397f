"""verify(): re-derive a receipt's claims from its entries alone, and check its signatures
under a key (docs/design.md#journal). Nothing is read from a database."""

from __future__ import annotations

import copy
import hmac
from collections.abc import Mapping
from typing import Any

from . import journal
from .receipt_analysis import analyse
from .receipt_bundle import (
    BUNDLE_FIELDS,
    FORMAT,
    bundle_signature,
    chain_signature,
    key_bytes,
    last_entry_hash,
)

# The fields of a sealed entry that are not the entry's own data.
ENTRY_FRAME = ("ts", "kind", "effect_id", "prev", "hash")


def _data(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in ENTRY_FRAME}


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
    """Re-derive a receipt's claims from its entries (docs/design.md#journal). Never raises on a bad bundle
    (only on a bad key: not bytes/str, or empty).

    A send is a DISPATCHED entry, or a resend: a COMMITTED whose via is retry-idempotent or
    recovery-reapply (a resend never writes a second DISPATCHED). Kinds not in journal.KINDS
    are ignored (docs/design.md#vocabulary), though the chain covers them.

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
    raw_key = key_bytes(key)
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
                expected = chain_signature(str(effect_id), last_entry_hash(entries), raw_key)
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

    a = analyse(entries)
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


def _verified(entries: list[Any]) -> bool | None:
    commits = [e for e in entries if isinstance(e, Mapping) and e.get("kind") == "COMMITTED"]
    if not any("verified" in e for e in commits):
        return None
    return all(e.get("verified") is True for e in commits)
