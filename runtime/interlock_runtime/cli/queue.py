"""`interlock queue set|list|describe`: named queues and their limits (docs/queues.md).

    interlock queue set NAME [--concurrency N] [--worker-concurrency N]
                             [--per-key-concurrency N] [--rate N/PERIOD] [--per-key-rate N/PERIOD]
    interlock queue list [--json]
    interlock queue describe NAME [--keys N] [--json]

`set` replaces all the queue's limits: a limit not given is lifted. PERIOD is seconds, or a
number with a unit: 500ms, 30s, 5m, 2h, 1d (`--rate 10/1m`: at most 10 first starts in any
minute). Workers serve chosen queues with `interlock worker --queue a,b`; runs go on a queue
with `interlock start NAME ID --queue Q [--priority N] [--queue-key K]`.
Exit status: 0 done, 1 refused (no such queue), 2 invalid input or an unreachable database.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from typing import Any

from .. import db, local_postgres, migrations, validate
from .. import queues as queueing
from ..cli_parsing import Parser, checked
from ..errors import ENVIRONMENT_ERRORS, InterlockError, InvalidInput

COLUMNS = ["name", "concurrency", "worker_concurrency", "per_key_concurrency", "rate",
           "per_key_rate", "running", "ready", "waiting", "awaiting_worker"]  # fmt: skip
_UNITS = {"ms": 0.001, "s": 1.0, "": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


def parse_rate(text: str, what: str) -> tuple[int, float]:
    """N/PERIOD, e.g. 10/60, 10/1m, 5/500ms: at most N first starts in any window of PERIOD."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|d|)\s*", text)
    if not m:
        raise InvalidInput(f"{what} {validate.shown(text)} is not N/PERIOD; write e.g. 10/60 or "
                           "10/1m (10 starts a minute), 5/500ms, 100/1h")  # fmt: skip
    limit, period = queueing.rate((int(m.group(1)), float(m.group(2)) * _UNITS[m.group(3)]), what)
    assert limit is not None and period is not None
    return limit, period


def _limit(what: str) -> Callable[[str], Any]:
    return checked(lambda t: validate.count(t, what, high=queueing.MAX_LIMIT, from_text=True))


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="interlock queue", description=__doc__)
    sub = p.add_subparsers(dest="action", required=True, metavar="{set,list,describe}")

    def verb(name: str, help: str) -> argparse.ArgumentParser:
        v = sub.add_parser(name, help=help, description=help, formatter_class=p.formatter_class)
        v.error = p.error  # type: ignore[method-assign]  # one line, exit 2, as every verb
        v.add_argument("--dsn", default=None,
                       help="Postgres DSN (default: ILR_DSN or the local cluster)")  # fmt: skip
        return v

    s = verb("set", "declare a queue or replace all its limits (one not given is lifted)")
    s.add_argument("name", type=checked(queueing.settable_name), help="the queue's name")
    s.add_argument("--concurrency", type=_limit("--concurrency"), metavar="N",
                   help="runs at once over all workers (default: no limit)")  # fmt: skip
    s.add_argument("--worker-concurrency", type=_limit("--worker-concurrency"), metavar="N",
                   help="runs at once in one worker (default: no limit)")  # fmt: skip
    s.add_argument("--per-key-concurrency", type=_limit("--per-key-concurrency"), metavar="N",
                   help="runs at once per queue key (default: no limit)")  # fmt: skip
    s.add_argument("--rate", type=checked(lambda t: parse_rate(t, "--rate")), metavar="N/PERIOD",
                   help="first starts per period, e.g. 10/1m (default: no limit)")  # fmt: skip
    s.add_argument("--per-key-rate", type=checked(lambda t: parse_rate(t, "--per-key-rate")),
                   metavar="N/PERIOD", help="first starts per period per queue key (default: "
                   "no limit)")  # fmt: skip
    verb("list", "declared queues and those live runs name: limits and use").add_argument(
        "--json", action="store_true", help="print JSON instead of a table"
    )
    d = verb("describe", "one queue: limits, use, its busiest queue keys")
    d.add_argument("name", type=checked(queueing.queue_name), help="the queue's name")
    d.add_argument("--keys", type=checked(lambda t: validate.count(t, "--keys", high=10_000,
                                                                   from_text=True)),
                   default=20, metavar="N", help="show at most N keys")  # fmt: skip
    d.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def _rate(limit: object, period: object) -> str:
    return "-" if limit is None else f"{limit}/{period:g}s"


def _cells(row: db.Row) -> dict[str, str]:
    shown = {k: "-" if row.get(k) is None else str(row.get(k)) for k in COLUMNS}
    shown["rate"] = _rate(row["rate_limit"], row["rate_period_s"])
    shown["per_key_rate"] = _rate(row["per_key_rate_limit"], row["per_key_rate_period_s"])
    return shown


def _table(rows: list[dict[str, str]], columns: list[str], empty: str) -> None:
    widths = [max([len(c)] + [len(r[c]) for r in rows]) for c in columns]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(r[c].ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    if not rows:
        print(empty)


def run(args: argparse.Namespace) -> int:
    with db.connect_explained(args.dsn or local_postgres.dsn()) as conn:
        migrations.ensure(conn)
        if args.action == "set":
            rate, key_rate = args.rate, args.per_key_rate
            row = queueing.set_queue(conn, args.name, concurrency=args.concurrency,
                                     worker_concurrency=args.worker_concurrency,
                                     per_key_concurrency=args.per_key_concurrency,
                                     rate_limit=rate, per_key_rate=key_rate)  # fmt: skip
            limits = [f"{c}={v}" for c, v in _cells(row).items()
                      if c in COLUMNS[1:6] and v != "-"]  # fmt: skip
            print(f"queue {args.name}: {', '.join(limits) or 'no limits'}")
        elif args.action == "list":
            rows = queueing.list_queues(conn)
            if args.json:
                print(json.dumps(rows, indent=2, default=str))
            else:
                _table([_cells(r) for r in rows], COLUMNS,
                       "(none: declare one with `interlock queue set NAME --concurrency N`)")  # fmt: skip
        else:
            row = queueing.describe_queue(conn, args.name, args.keys)
            if args.json:
                print(json.dumps(row, indent=2, default=str))
                return 0
            cells = _cells(row)
            for c in [*COLUMNS, "started_in_window"]:
                print(f"{c:>20}: {cells.get(c, row.get(c))}")
            print("\nkeys")
            keys = [{k: str(v) for k, v in r.items()} for r in row["keys"]]
            _table(keys, ["queue_key", "running", "ready", "started_in_window"], "(none)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except ENVIRONMENT_ERRORS as exc:  # the CLI's error contract (cli.run)
        print(f"interlock queue {args.action}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except InterlockError as exc:  # refused: no such queue
        print(f"interlock queue {args.action}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
