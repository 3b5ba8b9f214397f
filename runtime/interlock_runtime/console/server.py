"""`interlock console [--dsn DSN] [--host 127.0.0.1] [--port 8470]`: serve the operator console.

Loopback only: any other bind address is refused. A fresh token is printed at start; the login
page asks for it. Run it with an operator DSN (`interlock roles --login NAME=operator`) so the
console can approve, reject, revoke and reconcile but never write steps or the journal.
Receipts are signed and verified with ILR_RECEIPT_KEY when it is set.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import socket
import sys

from .. import local_postgres, receipts


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="interlock console", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument(
        "--dsn", default=None, help="Postgres DSN (default: ILR_DSN or the local cluster)"
    )
    p.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8470, help="0 picks a free port (default 8470)")
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
    key = os.environ.get(receipts.KEY_ENV)
    token = secrets.token_urlsafe(24)
    app = create_app(args.dsn or local_postgres.dsn(), token, key.encode() if key else None)
    # Bind first so --port 0 can print the port it got.
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("::1" if args.host == "::1" else "127.0.0.1" if args.host == "localhost"
               else args.host, args.port))  # fmt: skip
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"interlock console: http://{shown}:{port}/login", flush=True)
    print(f"token: {token}", flush=True)
    if not key:
        print(f"receipts: unsigned ({receipts.KEY_ENV} is not set)", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
