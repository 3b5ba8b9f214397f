"""Receipts: a bundle of one effect's journal, an HMAC signature, and verify() (docs/design.md#journal).

A bundle is a JSON object:

    {"format": "interlock-receipt/1", "effect_id": ..., "entries": [sealed entries, in order],
     "late_result": ..., "reconciled": ..., "signature": hex | null, "bundle_signature": hex | null}

- signature is HMAC-SHA256(key, "<effect_id>:<hash of the last entry>") as docs/design.md#journal defines it:
  with the hash chain it covers every entry and detects a truncated or extended journal.
- bundle_signature is HMAC-SHA256(key, "interlock-receipt/1\\n" + canonical(bundle without the two
  signatures)). It also covers late_result and reconciled, which live outside the chain
  (reconciled is a human attestation that is never journaled).

verify() re-derives every answer from the entries alone; nothing is read from a database.
Without a key it proves internal consistency only: anyone can re-seal a whole chain (docs/design.md#concessions).

The CLI: `python -m interlock_runtime.receipts FILE [--key K | --key-file F | --key-env NAME]
[--json]`, also reachable as `interlock verify`. Exit 0 valid, 1 invalid, 2 unreadable input.

This module gathers the receipt API; the code lives in:

    receipt_bundle    building and signing a bundle (bundle, sign), its JSON text (dumps, loads)
    receipt_verify    verify(): the problems, the signatures, the claims
    receipt_analysis  the walk over the entries behind verify()
    receipt_cli       `interlock verify` (main) and checklist()
"""

from __future__ import annotations

import sys

from .receipt_analysis import RESEND_VIAS
from .receipt_bundle import (
    BUNDLE_FIELDS,
    FORMAT,
    SIGNATURE_FIELDS,
    bundle,
    bundle_signature,
    chain_signature,
    dumps,
    loads,
    sign,
)
from .receipt_bundle import _hmac as _hmac  # the tests recompute a signature with it
from .receipt_cli import KEY_ENV, build_parser, checklist, main
from .receipt_verify import ENTRY_FRAME, verify

__all__ = [
    "BUNDLE_FIELDS",
    "ENTRY_FRAME",
    "FORMAT",
    "KEY_ENV",
    "RESEND_VIAS",
    "SIGNATURE_FIELDS",
    "build_parser",
    "bundle",
    "bundle_signature",
    "chain_signature",
    "checklist",
    "dumps",
    "loads",
    "main",
    "sign",
    "verify",
]

if __name__ == "__main__":
    sys.exit(main())
