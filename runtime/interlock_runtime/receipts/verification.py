"""verify(): re-derive a receipt's claims from its entries alone, and check its signature
under a key the verifier brings (docs/design.md#journal). Nothing is read from a database."""

from __future__ import annotations

import copy
import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import journal
from . import keys as receipt_keys
from .analysis import analyse
from .bundles import (
    BUNDLE_FIELDS,
    BUNDLE_FIELDS_V2,
    FORMAT,
    FORMAT_V2,
    HEAD_FIELDS,
    bundle_signature,
    chain_signature,
    content_hash,
    head_message,
    key_bytes,
    last_entry_hash,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    VerifyKey = bytes | str | Ed25519PublicKey | Ed25519PrivateKey | receipt_keys.KeyRing

# integrity: what a verifier may conclude about who made the receipt.
ESTABLISHED = "established"
NOT_ESTABLISHED = "unsigned: integrity not established"
FAILED = "failed"
NOT_SIGNED = "the bundle is not signed, but a key was given"
ED25519_SIGNATURE_HEX = 128

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


def verify(bundle: Any, key: VerifyKey | None = None) -> dict[str, Any]:
    """Re-derive a receipt's claims from its entries (docs/design.md#journal). Never raises on a
    bad bundle (only on a bad key: empty, or of no known kind; SigningUnavailable when an
    Ed25519 key is given without the signing extra).

    key: None (no signature is checked), an Ed25519 public key (a private key stands for its
    public half), a receipt_keys.KeyRing (the key is chosen by the key id the signed head
    names), or the HMAC key (bytes; a str is UTF-8 encoded) of an interlock-receipt/1 receipt.

    A send is a DISPATCHED entry, or a resend: a COMMITTED whose via is retry-idempotent or
    recovery-reapply (a resend never writes a second DISPATCHED). Kinds not in journal.KINDS
    are ignored (docs/design.md#vocabulary), though the chain covers them.

    - problems: why the receipt is not a sound record: bundle shape and format, broken prev
      links, hashes that do not re-derive, entries of another effect, more than one COMMITTED,
      late_result not matching a LATE_RESULT entry (or null while one exists), reconciled not an
      object, a signature that does not match the key, or no signature while a key was given;
      for interlock-receipt/2 also a signed head that does not describe the bundle (its entry
      count, last entry hash, effect id or content hash differ: entries dropped or added,
      content changed), a key id not in the ring, a key of the wrong kind.
    - integrity: "established" only when valid and the signature was checked under a key the
      verifier brought; "unsigned: integrity not established" without a key or without a
      signature (anyone could have written the bundle: a consistent chain proves nothing about
      who wrote it); "failed" otherwise.
    - signed_by: what the bundle claims about its signer ({"alg", "key_id"}), or None.
    - valid: problems is empty. When False, the answers below are computed from the entries
      as given and must not be trusted. Without a key, valid means internally consistent
      only: check integrity before trusting the answers.
    - tamper_evident: at least one entry and every link and hash intact (one effect_id).
    - signed: None without a key; with one, True only when the signature matches (both for
      an HMAC receipt).
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
    hmac_key, ring, single = _verifier_key(key)
    problems: list[str] = []
    fmt = bundle.get("format") if isinstance(bundle, Mapping) else None
    fields = BUNDLE_FIELDS_V2 if fmt == FORMAT_V2 else BUNDLE_FIELDS
    if not isinstance(bundle, Mapping):
        bundle = {}
        problems.append("the bundle is not a JSON object")
    else:
        missing = [f for f in fields if f not in bundle]
        if missing:
            problems.append(f"the bundle lacks {', '.join(missing)}")
        unknown = sorted(str(k) for k in bundle if k not in fields)
        if unknown:
            problems.append(f"the bundle has unknown fields {', '.join(unknown)}")
        if "format" in bundle and fmt not in (FORMAT, FORMAT_V2):
            problems.append(f"format is {fmt!r}, expected {FORMAT!r} or {FORMAT_V2!r}")

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

    if fmt == FORMAT_V2:
        signed, signed_by, has_signature = _check_v2(
            bundle, effect_id, entries, hmac_key, ring, single, problems
        )
    else:
        signed, signed_by, has_signature = _check_v1(
            bundle, effect_id, entries, hmac_key, ring, problems
        )
    if signed is True and not problems:
        integrity = ESTABLISHED
    elif signed is None or not has_signature:
        integrity = NOT_ESTABLISHED
    else:
        integrity = FAILED

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
        "integrity": integrity,
        "signed_by": signed_by,
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


def _verifier_key(key: Any) -> tuple[bytes | None, receipt_keys.KeyRing | None, bool]:
    """The verifier's key as (HMAC key, key ring, whether the ring is one given key)."""
    if key is None:
        return None, None, False
    if isinstance(key, (bytes, bytearray, str)):
        return key_bytes(bytes(key) if isinstance(key, bytearray) else key), None, False
    if isinstance(key, receipt_keys.KeyRing):
        return None, key, False
    if receipt_keys.is_public_key(key) or receipt_keys.is_private_key(key):
        return None, receipt_keys.KeyRing([key]), True
    if not receipt_keys._crypto_loaded():
        raise receipt_keys.SigningUnavailable()
    raise TypeError(
        "a verifying key is an Ed25519 public key, a KeyRing or HMAC bytes, "
        f"not {type(key).__name__}"
    )


def _check_v1(
    bundle: Mapping[str, Any],
    effect_id: Any,
    entries: list[Any],
    hmac_key: bytes | None,
    ring: receipt_keys.KeyRing | None,
    problems: list[str],
) -> tuple[bool | None, dict[str, Any] | None, bool]:
    """The HMAC signatures of an interlock-receipt/1 bundle: (signed, signed_by, has one)."""
    signature = bundle.get("signature")
    bsig = bundle.get("bundle_signature")
    for name, value in (("signature", signature), ("bundle_signature", bsig)):
        if value is not None and not journal.is_hash(value):
            problems.append(f"{name} is not a hex HMAC-SHA256")
    if (signature is None) != (bsig is None):
        problems.append("only one of signature and bundle_signature is set")
    has_signature = signature is not None or bsig is not None
    signed_by = {"alg": "hmac-sha256", "key_id": None} if has_signature else None
    if hmac_key is None and ring is None:
        return None, signed_by, has_signature
    if not has_signature:
        problems.append(NOT_SIGNED)
        return False, signed_by, has_signature
    if ring is not None:
        problems.append(
            "this receipt is HMAC-signed (interlock-receipt/1): only its HMAC key verifies it, "
            "not a public key"
        )
        return False, signed_by, has_signature
    assert hmac_key is not None
    try:
        expected = chain_signature(str(effect_id), last_entry_hash(entries), hmac_key)
        expected_b = bundle_signature(bundle, hmac_key)
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
    return signed, signed_by, has_signature


def _is_hex(value: Any, length: int) -> bool:
    return (
        isinstance(value, str)
        and len(value) == length
        and all(c in "0123456789abcdef" for c in value)
    )


def _check_v2(
    bundle: Mapping[str, Any],
    effect_id: Any,
    entries: list[Any],
    hmac_key: bytes | None,
    ring: receipt_keys.KeyRing | None,
    single: bool,
    problems: list[str],
) -> tuple[bool | None, dict[str, Any] | None, bool]:
    """The signed head and Ed25519 signature of an interlock-receipt/2 bundle.

    The head is checked against the bundle with or without a key (anyone can recompute it);
    only the signature, checked under a key the verifier brings, says who wrote it.
    """
    head = bundle.get("head")
    signature = bundle.get("signature")
    has_signature = head is not None or signature is not None
    kid: Any = None
    head_ok = False
    if has_signature:
        if signature is not None and not _is_hex(signature, ED25519_SIGNATURE_HEX):
            problems.append(
                f"signature is not a hex Ed25519 signature ({ED25519_SIGNATURE_HEX} hex digits)"
            )
        if signature is None:
            problems.append("the signed head has no signature")
        if not isinstance(head, Mapping):
            problems.append("head is not an object")
        else:
            kid = head.get("key_id")
            n = len(problems)
            if sorted(str(k) for k in head) != sorted(HEAD_FIELDS):
                problems.append(f"head does not have exactly the fields {', '.join(HEAD_FIELDS)}")
            if head.get("alg") != receipt_keys.ALG:
                problems.append(f"head.alg is {head.get('alg')!r}, expected {receipt_keys.ALG!r}")
            if not isinstance(kid, str) or not kid:
                problems.append("head.key_id is not a non-empty string")
            if head.get("effect_id") != effect_id:
                problems.append("the signed head names another effect_id")
            count = head.get("entries")
            if isinstance(count, bool) or not isinstance(count, int):
                problems.append("head.entries is not an integer")
            elif count != len(entries):
                what = "dropped (truncated)" if count > len(entries) else "added"
                problems.append(
                    f"the signed head covers {count} entries but the bundle holds "
                    f"{len(entries)}: entries were {what}"
                )
            if head.get("last_hash") != last_entry_hash(entries):
                problems.append("the last entry is not the one the signed head covers (last_hash)")
            try:
                content = content_hash(bundle)
            except (TypeError, ValueError):
                content = ""
            if head.get("content_hash") != content:
                problems.append(
                    "the bundle's content does not match the signed head (content_hash)"
                )
            head_ok = len(problems) == n
    signed_by = {"alg": receipt_keys.ALG, "key_id": kid} if has_signature else None
    if hmac_key is None and ring is None:
        return None, signed_by, has_signature
    if not has_signature:
        problems.append(NOT_SIGNED)
        return False, signed_by, has_signature
    if ring is None:
        problems.append(
            f"this receipt is signed with Ed25519 (key id {kid}): verify it with a public key, "
            "not an HMAC key"
        )
        return False, signed_by, has_signature
    public = ring.get(kid) if isinstance(kid, str) else None
    if public is None:
        if single:
            problems.append(
                f"signed by key id {kid}, not by the given public key (key id {ring.ids()[0]})"
            )
        else:
            held = ", ".join(ring.ids()) or "no key"
            problems.append(f"signed by key id {kid}, which is not in the key ring ({held})")
        return False, signed_by, has_signature
    # The signature is over the head: it is checked even when the head does not describe this
    # bundle, so that a genuine head over a changed bundle (truncated, say) is told apart
    # from a forged head. Either way the bundle is not valid.
    if not isinstance(signature, str) or not _is_hex(signature, ED25519_SIGNATURE_HEX):
        problems.append(f"signature does not match key {kid}")
        return False, signed_by, has_signature
    try:
        message = head_message(head) if isinstance(head, Mapping) else b""
    except (TypeError, ValueError):
        message = b""
    good = bool(message) and receipt_keys.verify_signature(
        public, bytes.fromhex(signature), message
    )
    if not good:
        problems.append(f"signature does not match key {kid}")
    elif not head_ok:
        problems.append(
            f"the head is signed by key {kid}, but the bundle is not the one it describes"
        )
    return good, signed_by, has_signature


def _verified(entries: list[Any]) -> bool | None:
    commits = [e for e in entries if isinstance(e, Mapping) and e.get("kind") == "COMMITTED"]
    if not any("verified" in e for e in commits):
        return None
    return all(e.get("verified") is True for e in commits)
