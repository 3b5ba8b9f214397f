"""The `interlock` command: the local Postgres cluster, workers, and (later) operator verbs."""

from __future__ import annotations

import argparse
import json
import sys

from . import local_postgres


def _pg(args: argparse.Namespace) -> int:
    try:
        if args.action == "status":
            info = local_postgres.status()
            if args.json:
                print(json.dumps(info, indent=2))
            else:
                for key, value in info.items():
                    print(f"{key:>18}: {value}")
            return 0
        action = {
            "start": local_postgres.start,
            "stop": local_postgres.stop,
            "restart-immediate": local_postgres.restart_immediate,
            "reset": local_postgres.reset,
        }[args.action]
        print(f"postgres: {action()}")
        return 0
    except local_postgres.PostgresError as exc:
        print(f"interlock pg {args.action}: {exc}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="interlock", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    pg = sub.add_parser("pg", help="manage the project's own PostgreSQL cluster")
    pg.add_argument("action", choices=["start", "stop", "restart-immediate", "reset", "status"])
    pg.add_argument("--json", action="store_true", help="status as JSON")
    pg.set_defaults(func=_pg)

    worker = sub.add_parser(
        "worker", help="run a worker (same flags as python -m interlock_runtime.worker)"
    )
    worker.add_argument("rest", nargs=argparse.REMAINDER)
    worker.set_defaults(func=lambda a: _worker(a.rest))
    return parser


def _worker(rest: list[str]) -> int:
    from .worker import main as worker_main

    return worker_main(rest)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
