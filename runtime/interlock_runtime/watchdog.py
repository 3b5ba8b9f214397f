"""The staleness watchdog: a separate process that reports what should have run and did not.

Code inside a worker can explain why a run it started stopped; it cannot notice that no worker
ever started one. `interlock watchdog` reads Postgres only and reports, beyond a threshold:

- workflows pending or sleeping past their available_at (no worker is claiming them);
- workflows awaiting a worker past their available_at (no deployment serves their name or the
  version they were started for: start a worker that registers it);
- workflows running with an expired lease and no takeover (every worker is gone or stuck);
- effects still dispatched past send_deadline + settle_margin (recovery has not come);
- AMBIGUOUS effects that no human has reconciled yet.

Exit status 0 when all is well, 1 when anything is overdue (for cron or a monitor).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from . import db, local_postgres
from .cli_parsing import HelpFormatter
from .vocabulary import WorkflowStatus as S


def report(conn: db.Conn, threshold: float) -> dict[str, list[db.Row]]:
    params = {"threshold": threshold}
    workflows = conn.execute(db.query("overdue_workflows"), params).fetchall()
    return {
        "stalled_workflows": [w for w in workflows if w["status"] in (S.PENDING, S.SLEEPING)],
        "unserved_workflows": [w for w in workflows if w["status"] == S.AWAITING_WORKER],
        "abandoned_leases": [w for w in workflows if w["status"] == S.RUNNING],
        "unresolved_effects": conn.execute(db.query("overdue_effects"), params).fetchall(),
        "ambiguous_effects": conn.execute(db.query("unreconciled_ambiguous")).fetchall(),
    }


def _unserved(row: db.Row) -> str:
    """What an awaiting_worker run waits for, and so what to start."""
    if row.get("status") != S.AWAITING_WORKER:
        return ""
    wanted = f" version {row['wanted_version']}" if row.get("wanted_version") else ""
    return f" (no worker serves {row['name']}{wanted}: start one that registers it)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="interlock watchdog", description=__doc__,
                                formatter_class=HelpFormatter)  # fmt: skip
    p.add_argument("--dsn", default=None, help="default: ILR_DSN or the project's own cluster")
    p.add_argument("--threshold", type=float, default=60.0, help="seconds overdue before reporting")
    p.add_argument("--json", action="store_true")
    p.add_argument("--every", type=float, default=None, help="repeat every N seconds (a daemon)")
    args = p.parse_args(argv)
    if args.threshold < 0:
        p.error("--threshold must be >= 0 seconds")
    while True:
        with db.connect(args.dsn or local_postgres.dsn()) as conn:
            found = report(conn, args.threshold)
        total = sum(len(v) for v in found.values())
        if args.json:
            print(json.dumps({"overdue": total, "threshold_s": args.threshold, **found},
                             default=str), flush=True)  # fmt: skip
        else:
            print(f"watchdog: {total} overdue (threshold {args.threshold:g} s)")
            for kind, rows in found.items():
                for r in rows:
                    what = r.get("id") or r.get("effect_id")
                    late = f", {r['overdue_s']:.1f} s overdue" if "overdue_s" in r else ""
                    print(f"  {kind}: {what}{late}{_unserved(r)}")
        if args.every is None:
            return 1 if total else 0
        time.sleep(args.every)


if __name__ == "__main__":
    sys.exit(main())
