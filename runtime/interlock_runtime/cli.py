"""The `interlock` command: the local Postgres cluster, workers, and operator verbs.

    interlock pg start|stop|restart-immediate|reset|status
    interlock worker --module my_flows [--lease-ttl 30 --concurrency 4 --only name@version]
    interlock start NAME ID [--input JSON] [--version V]
    interlock result ID [--timeout SECONDS]
    interlock list [--status S --name N --version V] [--json]
    interlock describe ID [--json]
    interlock signal ID NAME [--payload JSON] [--sender WHO]
    interlock cancel ID [--by WHO]
    interlock drain-report [--json]
    interlock receipt EFFECT_ID [--signing-key PEM | --key-env NAME] > bundle.json
    interlock verify FILE [--public-key PEM | --key-ring PATH | --key-env NAME] [--json]
    interlock keygen --out DIR                       (an Ed25519 key pair for receipts)
    interlock ambiguous [--json]
    interlock reconcile EFFECT_ID --evidence TEXT --by WHO
    interlock revoke GRANT_ID --by WHO
    interlock approve WF --by WHO [--payload JSON] [--action A]
    interlock db status | upgrade
    interlock breaker list | reset TARGET
    interlock watchdog [--threshold S] [--json] [--every S]
    interlock roles [--login USER=worker|operator|auditor ...]   (with an admin DSN)
    interlock console [--port 8470]                              (the operator web console)
    interlock operator add NAME | list | disable NAME            (who may log in to the console)

Every verb takes --dsn (default: ILR_DSN, else the project's own cluster).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import local_postgres
from .errors import InterlockError

if TYPE_CHECKING:
    from .runtime import Runtime


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


def _worker(rest: list[str]) -> int:
    from .worker import main as worker_main

    return worker_main(rest)


# -- printing -----------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return "infinity" if value.year == 9999 else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """A plain aligned table; long cells are cut so a row stays on one line."""
    cells = [[_cell(r.get(c))[:60] for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    if not rows:
        print("(none)")


def _dump(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


# -- operator verbs -----------------------------------------------------------------------------


def _runtime(args: argparse.Namespace) -> Runtime:
    from .runtime import Runtime

    return Runtime(args.dsn or local_postgres.dsn())


def _list(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        rows = rt.list(status=args.status, name=args.name, version=args.version, limit=args.limit)
    if args.json:
        _dump(rows)
    else:
        print_table(rows, ["id", "name", "version", "status", "epoch", "owner", "available_at",
                           "updated_at"])  # fmt: skip
    return 0


def _describe(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        wf = rt.describe(args.id)
    if args.json:
        _dump(wf)
        return 0
    for key in ("id", "name", "version", "status", "epoch", "owner", "lease_expires_at",
                "available_at", "waiting", "cancel_requested_at", "result", "error", "parent_id",
                "continued_from", "forked_from", "created_at", "updated_at"):  # fmt: skip
        print(f"{key:>20}: {_cell(wf.get(key))}")
    print("\nsteps")
    print_table(wf["steps"], ["seq", "kind", "name", "epoch", "output", "error", "created_at"])
    print("\nclaims")
    print_table(wf["claims"], ["epoch", "owner", "version", "claimed_at", "prev_status",
                               "prev_lease_expires_at"])  # fmt: skip
    return 0


def _signal(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        print(f"interlock signal: --payload is not JSON ({exc}); nothing was sent", file=sys.stderr)
        return 2
    if args.name == "approve" and not (isinstance(payload, dict) and "grant_id" in payload):
        print("interlock signal: an approval needs a grant, which a bare signal does not make; "
              f"run `interlock approve {args.id} --by WHO [--payload JSON]`; nothing was sent",
              file=sys.stderr)  # fmt: skip
        return 2
    with _runtime(args) as rt:
        signal_id = rt.signal(args.id, args.name, payload, sender=args.sender)
    print(f"signal {args.name!r} delivered to {args.id} (signal id {signal_id})")
    return 0


def _start(args: argparse.Namespace) -> int:
    try:
        value = json.loads(args.input)
    except json.JSONDecodeError as exc:
        print(f"interlock start: --input is not JSON ({exc}); nothing was started", file=sys.stderr)
        return 2
    with _runtime(args) as rt:
        wf_id = rt.start(args.name, args.id, value, version=args.version)
        version = rt.describe(wf_id)["version"]
    print(f"started {args.name}@{version} as {wf_id}")
    return 0


def _result(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        try:
            value = rt.result(args.id, timeout=args.timeout)
        except TimeoutError as exc:
            print(f"interlock result: {exc}", file=sys.stderr)
            return 3
    print(json.dumps(value, indent=2, default=str))
    return 0


def _cancel(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        rt.cancel(args.id, by=args.by)
    print(f"cancel requested for {args.id}; it sees Cancelled at its next durable call")
    return 0


def _drain_report(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        rows = rt.drain_report()
    if args.json:
        _dump(rows)
    else:
        print_table(rows, ["name", "version", "status", "workflows"])
    return 0


def _receipt_key(args: argparse.Namespace) -> bytes | None:
    """Receipt keys come from the environment, never from the database."""
    import os

    name = args.key_env or ("ILR_RECEIPT_KEY" if os.environ.get("ILR_RECEIPT_KEY") else None)
    if name is None:
        return None
    if not os.environ.get(name):
        raise SystemExit(f"interlock receipt: environment variable {name} is not set")
    return os.environ[name].encode()


def _receipt(args: argparse.Namespace) -> int:
    from . import receipt_cli, receipts

    signer = receipt_cli.load_signing_key(args.signing_key) if args.signing_key else None
    with _runtime(args) as rt:
        bundle = rt.receipt(args.effect_id, key=None if signer else _receipt_key(args))
    _dump(receipts.sign(bundle, signer) if signer else bundle)
    return 0


def _ambiguous(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        rows = rt.ambiguous()
    if args.json:
        _dump(rows)
    else:
        print_table(rows, ["effect_id", "workflow_id", "target", "tier", "payload", "sends",
                           "first_dispatched_at", "reconciled"])  # fmt: skip
    return 0


def _reconcile(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        rt.reconcile(args.effect_id, args.evidence, by=args.by)
    print(f"reconciled {args.effect_id} (attested by {args.by}; the journal is unchanged)")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        still_open = rt.revoke(args.grant_id, by=args.by)
    print(f"revoked {args.grant_id}; effects that may still land: {len(still_open)}")
    for eid in still_open:
        print(f"  {eid}")
    return 0


def _breaker(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        if args.action == "reset":
            if not args.target:
                raise SystemExit("interlock breaker reset: name the TARGET to reset")
            rt.reset_breaker(args.target)
            print(f"breaker of {args.target} reset: dispatches to it are allowed again")
            return 0
        rows = rt.breakers()
    print_table(
        rows, ["target", "open", "consecutive_failures", "threshold", "cooldown", "opened_at"]
    )
    return 0


def _roles(args: argparse.Namespace) -> int:
    from . import db, migrations

    logins = dict(item.split("=", 1) for item in args.login)
    with db.connect(args.dsn or local_postgres.dsn()) as conn:
        migrations.ensure(conn)
        db.apply_roles(conn, logins)
    print("roles ilr_worker, ilr_operator, ilr_auditor are in place"
          + "".join(f"\n  login {u} -> ilr_{r}" for u, r in logins.items()))  # fmt: skip
    return 0


def _db(args: argparse.Namespace) -> int:
    from . import db, migrations

    with db.connect(args.dsn or local_postgres.dsn()) as conn:
        if args.action == "upgrade":
            done = migrations.upgrade(conn)
            print("applied " + ", ".join(m.label for m in done) if done
                  else f"already at schema version {migrations.latest()}: nothing to do")  # fmt: skip
            return 0
        history = migrations.applied(conn) or []
    rows = [{"version": r["version"], "name": r["name"], "sha256": r["sha256"][:12],
             "applied_at": r["applied_at"].isoformat(timespec="seconds")} for r in history]  # fmt: skip
    have = history[-1]["version"] if history else 0
    mine = {m.version for m in migrations.available()}
    pending = [m.label for m in migrations.available() if m.version > have]
    if args.json:
        print(json.dumps({"applied": rows, "pending": pending, "runtime": migrations.latest()}))
    else:
        print_table(rows, ["version", "name", "sha256", "applied_at"])
        print(f"runtime schema version {migrations.latest()}; "
              + (f"pending: {', '.join(pending)} (run `interlock db upgrade`)" if pending
                 else "the database is current" if have in mine else "the database is NEWER"))  # fmt: skip
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="interlock", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)

    pg = sub.add_parser("pg", help="manage the project's own PostgreSQL cluster")
    pg.add_argument("action", choices=["start", "stop", "restart-immediate", "reset", "status"])
    pg.add_argument("--json", action="store_true", help="status as JSON")
    pg.set_defaults(func=_pg)

    worker = sub.add_parser("worker", help="run a worker (see `interlock worker --help`)",
                            add_help=False)  # fmt: skip
    worker.add_argument("rest", nargs=argparse.REMAINDER)
    worker.set_defaults(func=lambda a: _worker(a.rest))

    def verb(name: str, func: Any, help: str, json_flag: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.add_argument(
            "--dsn", default=None, help="Postgres DSN (default: ILR_DSN or the local cluster)"
        )
        if json_flag:
            p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        p.set_defaults(func=func)
        return p

    p = verb("list", _list, "list workflows")
    p.add_argument("--status")
    p.add_argument("--name")
    p.add_argument("--version")
    p.add_argument("--limit", type=int, default=1000)
    verb("describe", _describe, "one workflow: row, steps, claim history").add_argument("id")
    p = verb("start", _start, "start a workflow by name (idempotent on the id)", json_flag=False)
    p.add_argument("name")
    p.add_argument("id")
    p.add_argument("--input", default="{}", help="JSON input (default {})")
    p.add_argument("--version", help="default: the newest deployed version")
    p = verb("result", _result, "wait for a workflow's result", json_flag=False)
    p.add_argument("id")
    p.add_argument("--timeout", type=float, default=None)
    p = verb("signal", _signal, "send a durable signal", json_flag=False)
    p.add_argument("id")
    p.add_argument("name")
    p.add_argument("--payload", default="{}", help="JSON payload (default {})")
    p.add_argument("--sender")
    p = verb("cancel", _cancel, "request cancellation", json_flag=False)
    p.add_argument("id")
    p.add_argument("--by")
    verb("drain-report", _drain_report, "workflows by name, version and status")
    p = verb("receipt", _receipt, "print an effect's receipt bundle (JSON)", json_flag=False)
    p.add_argument("effect_id")
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--signing-key", metavar="PEM",
                      help="sign with this Ed25519 private key (see `interlock keygen`)")  # fmt: skip
    keys.add_argument("--key-env", help="sign with the HMAC key in this environment variable")
    verb("ambiguous", _ambiguous, "effects waiting for a human to reconcile")
    p = verb("reconcile", _reconcile, "attest the outcome of an AMBIGUOUS effect", json_flag=False)
    p.add_argument("effect_id")
    p.add_argument("--evidence", required=True)
    p.add_argument("--by", required=True)
    p = verb("revoke", _revoke, "revoke a grant; lists the effects that may still land",
             json_flag=False)  # fmt: skip
    p.add_argument("grant_id")
    p.add_argument("--by", required=True)
    p = verb("breaker", _breaker, "list circuit breakers, or reset one", json_flag=False)
    p.add_argument("action", choices=["list", "reset"])
    p.add_argument("target", nargs="?")
    p = verb("db", _db, "the schema: `status` (applied and pending migrations) or `upgrade`")
    p.add_argument("action", choices=["status", "upgrade"])
    p = verb("roles", _roles, "create the least-privilege roles (needs an admin DSN)",
             json_flag=False)  # fmt: skip
    p.add_argument("--login", action="append", default=[], metavar="USER=ROLE",
                   help="also create a login user in ilr_worker, ilr_operator or ilr_auditor")  # fmt: skip
    sub.add_parser("approve", help="approve a workflow's decided payload (see `interlock approve --help`)",
                   add_help=False)  # fmt: skip
    sub.add_parser("watchdog", help="report overdue workflows and effects (exit 1 if any)",
                   add_help=False)  # fmt: skip
    sub.add_parser("verify", help="verify a receipt bundle file (see `interlock verify --help`)",
                   add_help=False)  # fmt: skip
    sub.add_parser("keygen", help="make an Ed25519 key pair for signing receipts",
                   add_help=False)  # fmt: skip
    sub.add_parser("console", help="the operator web console on loopback (see `interlock console --help`)",
                   add_help=False)  # fmt: skip
    sub.add_parser("operator", help="console operators: add, list, disable (see `interlock operator --help`)",
                   add_help=False)  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:  # the worker parses its own flags
        return _worker(argv[1:])
    if argv[:1] == ["watchdog"]:  # and the watchdog (a separate process by design)
        from .watchdog import main as watchdog_main

        return watchdog_main(argv[1:])
    if argv[:1] == ["approve"]:  # a person approves a decision (approve_cli.py)
        from .approve_cli import main as approve_main

        return approve_main(argv[1:])
    if argv[:1] == ["verify"]:  # so does the receipt verifier
        from .receipt_cli import main as verify_main

        return verify_main(argv[1:])
    if argv[:1] == ["keygen"]:  # and the receipt key pair maker
        from .receipt_cli import keygen_main

        return keygen_main(argv[1:])
    if argv[:1] == ["console"]:  # the web console (the `console` extra), imported only here
        from .console import main as console_main

        return console_main(argv[1:])
    if argv[:1] == ["operator"]:  # console operators (operator_cli.py)
        from .operator_cli import main as operator_main

        return operator_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
        return status
    except InterlockError as exc:
        print(f"interlock {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
