"""The effect journal's entry format: hashes, effect ids, sealing, open dispatch.

Pure functions, no database access (docs/design.md#journal, docs/design.md#schema and 5.7). effects/ writes entries with
these functions and receipts/ re-derives everything from them.

An entry is a JSON object {ts, kind, effect_id, ...fields, prev, hash}:
- ts is the database clock in seconds (extract(epoch from now()) read in the writing
  transaction, converted to a float);
- prev is the hash of the previous entry of the same effect, null for the first;
- hash is sha256 (hex) over canonical(entry without "hash"), so it covers prev as well;
  canonical is stored.canonical (docs/design.md#stored-values).

ilr.journal.body stores body_text(sealed) verbatim (text, never jsonb), so the bytes that were
hashed can always be re-read and re-hashed.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from .stored import NotJSON as NotJSON  # part of journal's interface: its errors
from .stored import canonical as canonical  # the text entries are hashed and stored as
from .vocabulary import RESOLVING_ENTRIES, EntryKind

KINDS = EntryKind.values()
RESOLVING_KINDS = tuple(k.value for k in RESOLVING_ENTRIES)

# The fields seal() adds; an entry handed to seal() must not carry them yet.
SEAL_FIELDS = ("prev", "hash")

EFFECT_ID_PREFIX = "eff_"
EFFECT_ID_HEX_CHARS = 32  # 128 bits of sha256

_HEX = frozenset("0123456789abcdef")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def payload_hash(payload: Any) -> str:
    """sha256 (hex) of canonical(payload): the payload binding of docs/design.md#schema, stable across key order."""
    return _sha256(canonical(payload))


def effect_id_for(key: str) -> str:
    """The effect id of an idempotency key (docs/design.md#gated-effects).

    Format: "eff_" followed by the first 32 hex characters (128 bits) of
    sha256(canonical({"request_id": key})). The same key always gives the same id, in every
    process and version; the id reveals nothing about the key.
    """
    if not isinstance(key, str):
        raise NotJSON(f"effect key must be a str, got {type(key).__name__}")
    if not key:
        raise ValueError("effect key must not be empty")
    digest = _sha256(canonical({"request_id": key}))
    return EFFECT_ID_PREFIX + digest[:EFFECT_ID_HEX_CHARS]


def fingerprint(effect_id: str, payload_hash: str) -> str:
    """The step fingerprint of an effect call: "<effect_id>:<payload_hash>" (docs/design.md#gated-effects)."""
    return f"{effect_id}:{payload_hash}"


def is_hash(value: Any) -> bool:
    """True for a sha256 hex digest as seal() writes it (64 lowercase hex characters)."""
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX


def entry_hash(entry: Mapping[str, Any]) -> str:
    """sha256 over canonical(entry without "hash"); prev is part of what is hashed."""
    return _sha256(canonical({k: v for k, v in entry.items() if k != "hash"}))


def _require_fields(entry: Mapping[str, Any]) -> None:
    ts = entry.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise NotJSON(
            f"entry ts must be a number of seconds on the database clock, got {type(ts).__name__}"
            + (" (convert with float())" if type(ts).__name__ == "Decimal" else "")
        )
    if not math.isfinite(ts):
        raise ValueError(f"entry ts must be finite, got {ts!r}")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise ValueError(f"entry kind {kind!r} is not one of {', '.join(KINDS)}")
    effect_id = entry.get("effect_id")
    if not isinstance(effect_id, str) or not effect_id:
        raise ValueError(f"entry effect_id must be a non-empty str, got {effect_id!r}")


def seal(entry: Mapping[str, Any], prev_hash: str | None) -> dict[str, Any]:
    """A new, sealed entry: entry + {"prev": prev_hash} + {"hash": ...}.

    entry must hold ts (database clock seconds), kind (one of KINDS) and effect_id, and must not
    already hold prev or hash. prev_hash is the hash of this effect's previous entry, or None
    for its first. The result is a plain copy (tuples become lists), equal to
    json.loads(body_text(result)); later changes to the argument do not reach it.
    """
    if not isinstance(entry, Mapping):
        raise NotJSON(f"entry must be a dict, got {type(entry).__name__}")
    present = [k for k in SEAL_FIELDS if k in entry]
    if present:
        raise ValueError(f"entry already has {', '.join(present)}: seal a fresh entry")
    _require_fields(entry)
    if prev_hash is not None and not is_hash(prev_hash):
        raise ValueError(f"prev_hash must be None or a sha256 hex digest, got {prev_hash!r}")
    body = dict(entry)
    body["prev"] = prev_hash
    plain: dict[str, Any] = json.loads(canonical(body))
    plain["hash"] = entry_hash(plain)
    return plain


def body_text(sealed: Mapping[str, Any]) -> str:
    """The verbatim text stored in ilr.journal.body: canonical JSON of the sealed entry.

    Refuses an entry that is not sealed or whose hash no longer re-derives (it was changed
    after seal()), so a wrong body is never written.
    """
    if not isinstance(sealed, Mapping) or "hash" not in sealed or "prev" not in sealed:
        raise ValueError("body_text needs an entry returned by seal() (with prev and hash)")
    if entry_hash(sealed) != sealed["hash"]:
        raise ValueError(
            f"{sealed.get('kind')} entry of {sealed.get('effect_id')} was changed after it was "
            "sealed: its hash does not re-derive"
        )
    return canonical(dict(sealed))


def parse_body(text: str | bytes | bytearray) -> dict[str, Any]:
    """The entry stored in an ilr.journal.body (the inverse of body_text)."""
    entry = json.loads(text)
    if not isinstance(entry, dict):
        raise ValueError(f"journal body is not a JSON object: {text[:80]!r}")
    return entry


def last_hash(entries: Iterable[Mapping[str, Any]]) -> str | None:
    """The hash the next entry's prev must carry (None for an empty journal)."""
    last = None
    for entry in entries:
        last = entry.get("hash")
    return last


def resolves_dispatch(entry: Mapping[str, Any]) -> bool:
    """True for an entry that ends an open DISPATCHED: COMMITTED, AMBIGUOUS, REFUSED resolves."""
    kind = entry.get("kind")
    return kind in RESOLVING_KINDS or (kind == "REFUSED" and entry.get("resolves") is True)


def open_dispatch(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The last DISPATCHED entry not resolved by a later COMMITTED, AMBIGUOUS or REFUSED with
    resolves: true; None when there is none. LATE_RESULT, PROPOSED, AUTHORIZED, a REFUSED without
    resolves and kinds this version does not know leave it open.
    """
    current: Mapping[str, Any] | None = None
    for entry in entries:
        if entry.get("kind") == "DISPATCHED":
            current = entry
        elif resolves_dispatch(entry):
            current = None
    return dict(current) if current is not None else None


def check_links(entries: Iterable[Mapping[str, Any]], effect_id: str | None = None) -> list[str]:
    """Integrity problems of a journal chain, in order; an empty list means the chain is intact.

    Reports an entry that is not an object or lacks ts, kind, effect_id, prev or hash; a first
    entry whose prev is not null; a prev that is not the previous entry's hash; a hash that does
    not re-derive from the entry; entries of more than one effect_id (or of another effect_id
    than the one given). Unknown kinds are not a problem (docs/design.md#vocabulary).
    """
    problems: list[str] = []
    effect_ids: list[str] = []
    expected_prev: str | None = None
    for index, entry in enumerate(entries):
        where = f"entries[{index}]"
        if not isinstance(entry, Mapping):
            problems.append(f"{where}: not a JSON object")
            expected_prev = "<unknown>"
            continue
        kind = entry.get("kind")
        if isinstance(kind, str):
            where = f"{where} ({kind})"
        missing = [k for k in ("ts", "kind", "effect_id", "prev", "hash") if k not in entry]
        if missing:
            problems.append(f"{where}: missing {', '.join(missing)}")
        ts = entry.get("ts")
        if "ts" in entry and (
            isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts)
        ):
            problems.append(f"{where}: ts is not a number")
        if "kind" in entry and not isinstance(kind, str):
            problems.append(f"{where}: kind is not a string")
        eid = entry.get("effect_id")
        if isinstance(eid, str):
            if eid not in effect_ids:
                effect_ids.append(eid)
        elif "effect_id" in entry:
            problems.append(f"{where}: effect_id is not a string")
        prev = entry.get("prev")
        if "prev" in entry and prev != expected_prev:
            if index == 0:
                problems.append(f"{where}: first entry has prev {prev!r}, expected null")
            else:
                problems.append(f"{where}: prev does not link to the hash of entries[{index - 1}]")
        try:
            derived: str | None = entry_hash(entry)
        except NotJSON as exc:
            problems.append(f"{where}: cannot be hashed: {exc}")
            derived = None
        if "hash" in entry and entry.get("hash") != derived:
            problems.append(f"{where}: hash does not re-derive from the entry's contents")
        expected_prev = entry.get("hash")
    if len(effect_ids) > 1:
        problems.append(f"entries for more than one effect_id: {', '.join(effect_ids)}")
    if effect_id is not None and any(eid != effect_id for eid in effect_ids):
        others = ", ".join(eid for eid in effect_ids if eid != effect_id)
        problems.append(f"entries are for {others}, not for {effect_id}")
    return problems


def check_commits(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """A problem when more than one COMMITTED exists (the one_commit index forbids it)."""
    commits = [
        i for i, e in enumerate(entries) if isinstance(e, Mapping) and e.get("kind") == "COMMITTED"
    ]
    if len(commits) > 1:
        return [f"more than one COMMITTED ({', '.join(f'entries[{i}]' for i in commits)})"]
    return []


def check_chain(entries: Iterable[Mapping[str, Any]], effect_id: str | None = None) -> list[str]:
    """Problems of a journal: check_links (broken prev links, hashes that do not re-derive,
    missing fields, more than one effect_id) followed by check_commits (two COMMITTED).
    An empty list means intact.
    """
    entries = list(entries)
    return check_links(entries, effect_id) + check_commits(entries)
