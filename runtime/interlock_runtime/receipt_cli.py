"""The command line of receipts: `interlock verify FILE` (also `python -m
interlock_runtime.receipts FILE`) and checklist(), the readable form of a verify() result.
Exit 0 valid, 1 invalid, 2 unreadable input."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .receipt_analysis import ts_text
from .receipt_bundle import loads
from .receipt_verify import verify

KEY_ENV = "ILR_RECEIPT_KEY"


class _Unreadable(Exception):
    pass


def _read_key(args: argparse.Namespace) -> bytes | None:
    if args.no_key:
        return None
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
