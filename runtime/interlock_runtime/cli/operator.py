"""`interlock operator add|list|disable`: the people who may log in to the console.

    interlock operator add NAME [--dsn DSN]       # asks for the password (twice) on a terminal,
                                                  # else reads one line from stdin
    interlock operator list [--dsn DSN] [--json]
    interlock operator disable NAME [--dsn DSN]   # no more logins; their sessions end now

Run it with an admin DSN (the schema owner): the console's own operator role may read operators
but never create or disable one. Passwords are stored as salted scrypt hashes, never as text
(console/auth.py); adding and disabling are written to ilr.operator_audit. Exit status: 0 done,
1 refused (the name is taken, no such operator), 2 invalid input (a name or password that
breaks the rules) or an unreachable database.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from datetime import datetime
from typing import TextIO

from .. import db, local_postgres, migrations
from ..cli_parsing import HelpFormatter
from ..console import auth
from ..errors import ENVIRONMENT_ERRORS, InterlockError, InvalidInput

COLUMNS = ["name", "created_at", "created_by", "disabled_at", "sessions", "last_login"]


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def _table(rows: list[db.Row]) -> None:
    cells = [[_cell(r.get(c)) for c in COLUMNS] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(COLUMNS)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        print("(none: add one with `interlock operator add NAME`)")


def read_password(stdin: TextIO, prompt: bool) -> str:
    """The new password: asked twice on a terminal, else the first line of stdin (without its
    line ending)."""
    if prompt:
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise InvalidInput("the two passwords differ; nothing was changed")
        return first
    line = stdin.readline()
    if not line:
        raise InvalidInput("no password on stdin (give it as one line)")
    return line.rstrip("\r\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="interlock operator", description=__doc__,
                                formatter_class=HelpFormatter)  # fmt: skip
    sub = p.add_subparsers(dest="action", required=True, metavar="{add,list,disable}")

    def verb(name: str, help: str) -> argparse.ArgumentParser:
        v = sub.add_parser(name, help=help, description=help)
        v.add_argument("--dsn", default=None,
                       help="an admin DSN (default: ILR_DSN or the local cluster)")  # fmt: skip
        return v

    verb("add", "create an operator; the password comes from a prompt or stdin").add_argument(
        "name"
    )
    verb("list", "every operator: created, disabled, live sessions, last login").add_argument(
        "--json", action="store_true", help="print JSON instead of a table"
    )
    verb("disable", "refuse the operator's logins and end their sessions now").add_argument("name")
    return p


def main(argv: list[str] | None = None, stdin: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    stdin = stdin or sys.stdin
    try:
        with db.connect_explained(args.dsn or local_postgres.dsn()) as conn:
            migrations.ensure(conn)
            if args.action == "add":
                auth.check_name(args.name)
                auth.add_operator(conn, args.name, read_password(stdin, stdin.isatty()))
                print(f"operator {args.name} added; log in to `interlock console` as {args.name}")
            elif args.action == "disable":
                ended = auth.disable_operator(conn, args.name)
                print(f"operator {args.name} disabled; {ended} session(s) ended")
            else:
                rows = auth.list_operators(conn)
                if args.json:
                    print(json.dumps(rows, indent=2, default=str))
                else:
                    _table(rows)
    except ENVIRONMENT_ERRORS as exc:  # the CLI's error contract (cli.run)
        print(f"interlock operator {args.action}: {exc}", file=sys.stderr)
        return 2
    except InterlockError as exc:  # refused: the name is taken, no such operator
        print(f"interlock operator {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
