"""Receipts: a bundle of one effect's journal, its signature, and verify() (docs/design.md#journal).

A bundle is a JSON object in one of two formats.

interlock-receipt/2, signed with Ed25519 (the signing extra: pip install
'interlock-runtime[signing]'):

    {"format": "interlock-receipt/2", "effect_id": ..., "entries": [sealed entries, in order],
     "late_result": ..., "reconciled": ...,
     "head": {"alg": "ed25519", "key_id": ..., "effect_id": ..., "entries": N,
              "last_hash": ..., "content_hash": ...},
     "signature": hex}

- head is the signed head: the signer's key id (the first 16 hex digits of sha256 over the raw
  public key), the number of entries and the last entry's hash (so dropping entries from the
  end, which leaves a chain that still links, no longer matches), and content_hash, sha256 over
  the canonical format, effect_id, entries, late_result and reconciled.
- signature is Ed25519 over "interlock-receipt/2 head\n" + canonical(head), made at export
  with a private key the caller holds (receipt_keys; never stored in the database).

interlock-receipt/1, signed with HMAC-SHA256 before version 2 (still verified), or unsigned:

    {"format": "interlock-receipt/1", "effect_id": ..., "entries": [...], "late_result": ...,
     "reconciled": ..., "signature": hex | null, "bundle_signature": hex | null}

- signature is HMAC-SHA256(key, "<effect_id>:<hash of the last entry>").
- bundle_signature is HMAC-SHA256(key, "interlock-receipt/1\n" + canonical(bundle without the
  two signatures)); it also covers late_result and reconciled, which live outside the chain.

verify() re-derives every answer from the entries alone; nothing is read from a database.
Without a key, or for a bundle without a signature, it proves internal consistency only and
says so: integrity "unsigned: integrity not established" (anyone can re-seal a whole chain,
docs/design.md#concessions). An HMAC key verifies only its own receipts, and whoever holds it
can also forge them; a public key cannot sign.

The CLI: `python -m interlock_runtime.receipts FILE [--public-key PEM | --key-ring PATH |
--key-file F | --key-env NAME | --no-key] [--json]`, also reachable as `interlock verify`. Exit 0
valid and signed by a given key, 1 invalid, 2 unreadable input, 3 not established.
`interlock keygen --out DIR` makes a key pair.

This package gathers the receipt API; the code lives in its modules:

    bundles       building and signing a bundle (bundle, sign), its JSON text (dumps, loads)
    keys          Ed25519 keys: generate, PEM files, key ids, KeyRing
    verification  verify(): the problems, the signatures, the claims
    analysis      the walk over the entries behind verify()
    cli           `interlock verify` (main), `interlock keygen`, and checklist()
"""

from __future__ import annotations

from .analysis import RESEND_VIAS
from .bundles import (
    BUNDLE_FIELDS,
    BUNDLE_FIELDS_V2,
    FORMAT,
    FORMAT_V2,
    HEAD_FIELDS,
    SIGNATURE_FIELDS,
    bundle,
    bundle_signature,
    chain_signature,
    content_hash,
    dumps,
    head_message,
    loads,
    sign,
)
from .bundles import _hmac as _hmac  # the tests recompute a signature with it
from .cli import KEY_ENV, build_parser, checklist, exit_status, keygen_main, main
from .keys import (
    INSTALL_HINT,
    KeyFileError,
    KeyRing,
    SigningUnavailable,
    generate,
    key_id,
    load_private_key,
    load_public_keys,
    private_pem,
    public_pem,
    write_key_pair,
)
from .verification import ENTRY_FRAME, ESTABLISHED, FAILED, NOT_ESTABLISHED, verify

__all__ = [
    "BUNDLE_FIELDS",
    "BUNDLE_FIELDS_V2",
    "ENTRY_FRAME",
    "ESTABLISHED",
    "FAILED",
    "FORMAT",
    "FORMAT_V2",
    "HEAD_FIELDS",
    "INSTALL_HINT",
    "KEY_ENV",
    "NOT_ESTABLISHED",
    "RESEND_VIAS",
    "SIGNATURE_FIELDS",
    "KeyFileError",
    "KeyRing",
    "SigningUnavailable",
    "build_parser",
    "bundle",
    "bundle_signature",
    "chain_signature",
    "checklist",
    "content_hash",
    "dumps",
    "exit_status",
    "generate",
    "head_message",
    "key_id",
    "keygen_main",
    "load_private_key",
    "load_public_keys",
    "loads",
    "main",
    "private_pem",
    "public_pem",
    "sign",
    "verify",
    "write_key_pair",
]
