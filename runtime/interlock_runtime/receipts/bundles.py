"""A receipt bundle: building one from an effect's journal, signing it, and its strict JSON
text (the formats are described in receipts/)."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .. import journal, stored
from . import keys as receipt_keys

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

FORMAT = "interlock-receipt/1"  # HMAC-SHA256 signatures, or unsigned
FORMAT_V2 = "interlock-receipt/2"  # an Ed25519 signature over a signed head
BUNDLE_FIELDS = (
    "format",
    "effect_id",
    "entries",
    "late_result",
    "reconciled",
    "signature",
    "bundle_signature",
)
BUNDLE_FIELDS_V2 = (
    "format",
    "effect_id",
    "entries",
    "late_result",
    "reconciled",
    "head",
    "signature",
)
SIGNATURE_FIELDS = ("signature", "bundle_signature")
# What the content hash of a signed head covers: every field but the head and the signature.
CONTENT_FIELDS = ("format", "effect_id", "entries", "late_result", "reconciled")
HEAD_FIELDS = ("alg", "key_id", "effect_id", "entries", "last_hash", "content_hash")
CONTENT_DOMAIN = FORMAT_V2 + " content\n"
HEAD_DOMAIN = FORMAT_V2 + " head\n"


def key_bytes(key: bytes | str | None) -> bytes | None:
    """A receipt key as bytes (a str is UTF-8 encoded); None for no key."""
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
    raw = key_bytes(key)
    if raw is None:
        raise ValueError("signing needs a key")
    return raw


def _hmac(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).hexdigest()


def last_entry_hash(entries: Any) -> str:
    """The hash of the last entry, the one the chain signature covers; "" when there is none."""
    if isinstance(entries, list) and entries and isinstance(entries[-1], Mapping):
        last = entries[-1].get("hash")
        if isinstance(last, str):
            return last
    return ""


def chain_signature(effect_id: str, last_hash: str, key: bytes) -> str:
    """HMAC-SHA256 (hex) over "<effect_id>:<last_hash>" (docs/design.md#journal); last_hash "" when empty."""
    return _hmac(_require_key(key), f"{effect_id}:{last_hash}")


def bundle_signature(bundle: Mapping[str, Any], key: bytes) -> str:
    """HMAC-SHA256 (hex) over the format name and the canonical bundle without its signatures."""
    unsigned = {k: v for k, v in bundle.items() if k not in SIGNATURE_FIELDS}
    return _hmac(_require_key(key), f"{FORMAT}\n{stored.canonical(unsigned)}")


def content_hash(bundle: Mapping[str, Any]) -> str:
    """sha256 (hex) over the canonical text of the bundle's content fields (CONTENT_FIELDS,
    missing ones as null): the entries, late_result, reconciled, the format and the effect id."""
    content = {k: bundle.get(k) for k in CONTENT_FIELDS}
    return hashlib.sha256((CONTENT_DOMAIN + stored.canonical(content)).encode("utf-8")).hexdigest()


def head_message(head: Mapping[str, Any]) -> bytes:
    """The bytes an Ed25519 signature covers: a domain line and the canonical head."""
    return (HEAD_DOMAIN + stored.canonical(dict(head))).encode("utf-8")


def make_head(bundle: Mapping[str, Any], kid: str) -> dict[str, Any]:
    """The signed head of a /2 bundle: who signs (alg, key id), which effect, how many entries,
    the last entry's hash, and the hash of everything else the bundle says."""
    entries = bundle.get("entries")
    return {
        "alg": receipt_keys.ALG,
        "key_id": kid,
        "effect_id": bundle.get("effect_id"),
        "entries": len(entries) if isinstance(entries, list) else 0,
        "last_hash": last_entry_hash(entries),
        "content_hash": content_hash(bundle),
    }


def _content(bundle: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    out = {k: copy.deepcopy(bundle.get(k)) for k in CONTENT_FIELDS}
    out["format"] = fmt
    return out


def sign(bundle: Mapping[str, Any], key: bytes | str | Ed25519PrivateKey) -> dict[str, Any]:
    """A signed copy of bundle (the argument is left alone).

    key is an Ed25519 private key: the copy is an interlock-receipt/2 bundle, its head signed
    (needs the signing extra). key is bytes (a str is UTF-8 encoded): the copy is an
    interlock-receipt/1 bundle with both HMAC-SHA256 signatures, as before version 2.
    """
    if isinstance(key, (bytes, bytearray, str)) or key is None:
        raw_key = _require_key(key)
        out = _content(bundle, FORMAT)
        out["signature"] = chain_signature(
            out.get("effect_id") or "", last_entry_hash(out.get("entries")), raw_key
        )
        out["bundle_signature"] = bundle_signature(out, raw_key)
        return out
    if receipt_keys.is_private_key(key):
        out = _content(bundle, FORMAT_V2)
        out["head"] = make_head(out, receipt_keys.key_id(key))
        out["signature"] = key.sign(head_message(out["head"])).hex()
        return out
    if receipt_keys.is_public_key(key):
        raise TypeError("signing needs the private key; a public key only verifies")
    if not receipt_keys._crypto_loaded():
        raise receipt_keys.SigningUnavailable()
    raise TypeError(
        f"a receipt key is an Ed25519 private key or HMAC bytes, not {type(key).__name__}"
    )


def bundle(
    entries: Iterable[Mapping[str, Any] | str | bytes],
    effect_id: str,
    key: bytes | str | Ed25519PrivateKey | None = None,
    late_result: Any = None,
    reconciled: Any = None,
) -> dict[str, Any]:
    """The receipt bundle of one effect, signed when a key is given (see sign()).

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
            plain.append(json.loads(stored.canonical(dict(entry))))
        else:
            raise TypeError(
                f"entries[{index}] must be a sealed entry (dict) or its body text, "
                f"got {type(entry).__name__}"
            )
    out: dict[str, Any] = {
        "format": FORMAT,
        "effect_id": effect_id,
        "entries": plain,
        "late_result": json.loads(stored.canonical(late_result)),
        "reconciled": json.loads(stored.canonical(reconciled)),
        "signature": None,
        "bundle_signature": None,
    }
    return sign(out, key) if key is not None else out


def dumps(bundle: Mapping[str, Any], pretty: bool = False) -> str:
    """The bundle as JSON text: canonical by default, indented (sorted keys) when pretty."""
    if pretty:
        return json.dumps(bundle, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    return stored.canonical(dict(bundle))


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
