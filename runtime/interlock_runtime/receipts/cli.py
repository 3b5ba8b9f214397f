"""The command line of receipts: `interlock verify FILE` (also `python -m
interlock_runtime.receipts FILE`), `interlock keygen --out DIR`, and checklist(), the readable
form of a verify() result.

`interlock verify` exits 0 when the receipt is valid and its signature was checked under a key
the verifier brought (integrity established), 1 when it is invalid (a broken chain, a signature
that does not match, a key id not in the ring), 3 when it is consistent but nothing vouches for
it ("unsigned: integrity not established": no key given, or no signature), and 2 when its input
cannot be read (a missing or non-UTF-8 file, broken JSON, a garbage key file); an error is one
line on standard error, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cli_parsing import HelpFormatter
from . import keys as receipt_keys
from .analysis import ts_text
from .bundles import loads
from .verification import ESTABLISHED, NOT_ESTABLISHED, NOT_SIGNED, verify

if TYPE_CHECKING:
    from .verification import VerifyKey

KEY_ENV = "ILR_RECEIPT_KEY"
EXIT_ESTABLISHED, EXIT_INVALID, EXIT_UNREADABLE, EXIT_NOT_ESTABLISHED = 0, 1, 2, 3


class _Unreadable(Exception):
    pass


def _read_key(args: argparse.Namespace) -> VerifyKey | None:
    if args.no_key:
        return None
    try:
        if args.public_key is not None:
            keys = receipt_keys.load_public_keys(args.public_key)
            return keys[0] if len(keys) == 1 else receipt_keys.KeyRing(keys)
        if args.key_ring is not None:
            return receipt_keys.KeyRing.from_path(args.key_ring)
    except (receipt_keys.KeyFileError, receipt_keys.SigningUnavailable) as exc:
        raise _Unreadable(str(exc)) from None
    raw: bytes
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
    integrity = result.get("integrity")
    verdict = (
        "INVALID"
        if not result["valid"] and not _only_unsigned(result)
        else "VALID"
        if integrity == ESTABLISHED
        else "NOT ESTABLISHED"
    )
    lines = [
        f"receipt {name or ''}".rstrip() + f": {verdict} "
        f"({ev['entries']} entries, {result['sends']} send{'s' if result['sends'] != 1 else ''}, "
        f"state {ev['state']})"
    ]

    def row(label: str, value: Any, detail: str = "", mark: str | None = None) -> None:
        text = f"  {mark or _mark(value)} {label:<22} {_yes(value)}"
        lines.append(text + (f": {detail}" if detail else ""))

    committed = ev.get("committed")
    if result["happened"] is True and committed:
        detail = f"COMMITTED at {ts_text(committed['ts'])}" + (
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
    signer = result.get("signed_by")
    by = (
        f"{signer['alg']} key {signer['key_id']}"
        if isinstance(signer, Mapping) and signer.get("key_id")
        else f"{signer['alg']} key"
        if isinstance(signer, Mapping)
        else ""
    )
    if result["signed"] is None:
        lines.append(
            f"  [--] {'signed':<22} not checked: no key (--public-key or --key-ring)"
            + (f"; the bundle claims {by}" if by else "; the bundle carries no signature")
        )
    else:
        row("signed", result["signed"], by)
    if ev.get("reconciled") is not None:
        lines.append(f"  reconciled (human attestation): {json.dumps(ev['reconciled'])}")
    for finding in ev["findings"]:
        lines.append(f"  note: {finding}")
    for problem in result["problems"]:
        lines.append(f"  problem: {problem}")
    if integrity == ESTABLISHED:
        lines.append(f"verified: signed by {by}")
    elif integrity == NOT_ESTABLISHED:
        lines.append(NOT_ESTABLISHED)
    return "\n".join(lines)


def _only_unsigned(result: Mapping[str, Any]) -> bool:
    """True when the one problem is a missing signature (a key was given, the bundle has none)."""
    return result.get("integrity") == NOT_ESTABLISHED and list(result["problems"]) == [NOT_SIGNED]


def exit_status(result: Mapping[str, Any]) -> int:
    """`interlock verify`'s exit status for a verify() result (see the module docstring)."""
    if result.get("integrity") == ESTABLISHED:
        return EXIT_ESTABLISHED
    if result["valid"] or _only_unsigned(result):
        return EXIT_NOT_ESTABLISHED
    return EXIT_INVALID


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="interlock verify",
        description="Verify a receipt bundle: re-derive its claims from the hash-chained "
        "journal and check its signature under a public key (or, for a receipt made before "
        "Ed25519 signatures, its HMAC key). No secret is needed to verify an Ed25519 receipt. "
        "Exit 0 valid and signed by a key you gave (integrity established), 1 invalid, "
        "2 unreadable input, 3 'unsigned: integrity not established' (no key, or no signature).",
    )
    parser.add_argument("file", help="the bundle (JSON); - reads standard input")
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument(
        "--public-key",
        metavar="PEM",
        help="the signer's Ed25519 public key (a PEM file, as `interlock keygen` writes)",
    )
    keys.add_argument(
        "--key-ring",
        metavar="PATH",
        help="public keys matched by the key id the receipt names: a PEM file of several "
        "keys, or a directory of .pem/.pub files",
    )
    keys.add_argument(
        "--key",
        help="an HMAC key as text, for receipts signed before Ed25519 (visible to other "
        "users: prefer --key-file or --key-env)",
    )
    keys.add_argument(
        "--key-file",
        metavar="F",
        help="read an HMAC key's bytes from F (one trailing newline is dropped)",
    )
    keys.add_argument(
        "--key-env",
        metavar="NAME",
        help=f"read an HMAC key from environment variable NAME (default: {KEY_ENV}, when set)",
    )
    keys.add_argument(
        "--no-key",
        action="store_true",
        help=f"ignore {KEY_ENV}; check the chain only (integrity is then not established)",
    )
    parser.add_argument("--json", action="store_true", help="print verify()'s result as JSON")
    return parser


def _fail(verb: str, message: str) -> int:
    text = " ".join(str(message).split()) or "failed"
    print(f"interlock {verb}: {text}", file=sys.stderr)
    return EXIT_UNREADABLE


def main(argv: list[str] | None = None) -> int:
    """`interlock verify FILE [--public-key PEM | --key-ring PATH | --key-file F | --key-env
    NAME | --no-key] [--json]`."""
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
        except ValueError as exc:  # a path with a NUL byte
            raise _Unreadable(f"{name!r}: cannot read: {exc}") from None
        try:
            loaded = loads(data)
        except ValueError as exc:
            raise _Unreadable(f"{name}: not a receipt bundle: {exc}") from None
        except RecursionError:
            raise _Unreadable(f"{name}: not a receipt bundle: nested too deeply") from None
        result = verify(loaded, key)
    except _Unreadable as exc:
        return _fail("verify", str(exc))
    except receipt_keys.SigningUnavailable as exc:
        return _fail("verify", str(exc))
    except RecursionError:
        return _fail("verify", f"{args.file}: not a receipt bundle: nested too deeply")
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        print(checklist(result, name))
    return exit_status(result)


def load_signing_key(path: str) -> Any:
    """The Ed25519 private key in a PEM file, for `interlock receipt --signing-key`; raises
    SystemExit with a one-line message (exit 2) when it cannot be used."""
    try:
        return receipt_keys.load_private_key(path)
    except (receipt_keys.KeyFileError, receipt_keys.SigningUnavailable) as exc:
        print(f"interlock receipt: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_UNREADABLE) from None


def build_keygen_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="interlock keygen",
        description="Make an Ed25519 key pair for signing receipts: NAME.key (the private key, "
        "mode 0600: keep it with whoever exports receipts, never in the database) and NAME.pub "
        "(the public key: give it to verifiers). Prints the key id receipts will name. Never "
        "overwrites a key.",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="directory for the pair")
    parser.add_argument(
        "--name", default="receipt-signing", help="file name stem (default: receipt-signing)"
    )
    return parser


def keygen_main(argv: list[str] | None = None) -> int:
    """`interlock keygen --out DIR [--name NAME]`."""
    try:
        args = build_keygen_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    if not args.name or "/" in args.name or args.name.startswith(".") or "\0" in args.name:
        return _fail("keygen", f"--name {args.name!r}: a plain file name stem is needed")
    try:
        private_path, public_path = receipt_keys.write_key_pair(args.out, args.name)
        kid = receipt_keys.key_id(receipt_keys.load_private_key(private_path))
    except (receipt_keys.KeyFileError, receipt_keys.SigningUnavailable, ValueError) as exc:
        return _fail("keygen", str(exc))
    print(f"private key: {private_path} (mode 0600; signs receipts: keep it secret)")
    print(f"public key:  {public_path} (give it to verifiers)")
    print(f"key id:      {kid}")
    return 0
