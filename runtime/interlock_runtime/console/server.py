"""`interlock console [--dsn DSN] [--host 127.0.0.1] [--port 8470] [--session-ttl SECONDS]`:
serve the operator console.

Loopback only: any other bind address is refused. Each person logs in with their own operator
name and password, created with `interlock operator add NAME` (an admin DSN); who approved,
rejected, revoked or reconciled is the logged-in operator, and every login and action is
written to ilr.operator_audit. A session ends after --session-ttl seconds (default 8 hours), at
logout, or when the operator is disabled (`interlock operator disable NAME`). Run it with an
operator DSN (`interlock roles --login NAME=operator`) so the console can approve, reject,
revoke and reconcile but never write steps or the journal. Receipts are signed and verified
with ILR_RECEIPT_KEY when it is set.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys

from .. import local_postgres, receipts
from ..cli_parsing import HelpFormatter
from .auth import DEFAULT_SESSION_TTL


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="interlock console", description=__doc__,
                                formatter_class=HelpFormatter)  # fmt: skip
    p.add_argument(
        "--dsn", default=None, help="Postgres DSN (default: ILR_DSN or the local cluster)"
    )
    p.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8470, help="0 picks a free port (default 8470)")
    p.add_argument("--session-ttl", type=float, default=DEFAULT_SESSION_TTL, metavar="SECONDS",
                   help="how long a login lasts (default 28800: 8 hours)")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not loopback(args.host):
        print(f"interlock console: refusing to bind {args.host!r}: the console serves loopback "
              "only (127.0.0.1, ::1 or localhost); reach it through an SSH tunnel",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        import uvicorn

        from .app import create_app
    except ImportError as exc:
        print(f"interlock console: {exc.name} is missing: pip install 'interlock-runtime[console]'",
              file=sys.stderr)  # fmt: skip
        return 2
    if not args.session_ttl > 0:
        print("interlock console: --session-ttl must be a positive number of seconds",
              file=sys.stderr)  # fmt: skip
        return 2
    key = os.environ.get(receipts.KEY_ENV)
    app = create_app(args.dsn or local_postgres.dsn(), key.encode() if key else None,
                     args.session_ttl)  # fmt: skip
    operators = app.state.store.operators()
    # Bind first so --port 0 can print the port it got.
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("::1" if args.host == "::1" else "127.0.0.1" if args.host == "localhost"
               else args.host, args.port))  # fmt: skip
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"interlock console: http://{shown}:{port}/login", flush=True)
    enabled = [o["name"] for o in operators if o["disabled_at"] is None]
    if enabled:
        print(f"operators: {len(enabled)} can log in", flush=True)
    else:
        print("operators: none yet; create one with `interlock operator add NAME`", flush=True)
    if not key:
        print(f"receipts: unsigned ({receipts.KEY_ENV} is not set)", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
