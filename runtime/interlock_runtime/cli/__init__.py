"""The `interlock` command: the local Postgres cluster, workers, and operator verbs.

    interlock pg start|stop|restart-immediate|reset|status
    interlock worker --module my_flows [--lease-ttl 30 --concurrency 4 --only name@version]
    interlock start NAME ID [--input JSON] [--version V]
    interlock result ID [--timeout SECONDS] [--json]
    interlock list [--status S --name N --version V] [--json]
    interlock describe ID [--json]
    interlock query ID [--json]                     (the status it published, read without waking it)
    interlock signal ID NAME [--payload JSON] [--sender WHO]
    interlock cancel ID [--by WHO]
    interlock fork ID NEW_ID --at-seq N              (reuse steps below N, run the rest)
    interlock migrate ID --to-version V | --schema   (a workflow's version, or the schema)
    interlock drain-report [--json]
    interlock receipt EFFECT_ID [--signing-key PEM | --key-env NAME] > bundle.json
    interlock verify FILE [--public-key PEM | --key-ring PATH | --key-env NAME] [--json]
    interlock keygen --out DIR                       (an Ed25519 key pair for receipts)
    interlock ambiguous [--json]
    interlock reconcile EFFECT_ID --evidence TEXT --by WHO
    interlock revoke GRANT_ID --by WHO
    interlock approve WF --by WHO [--payload JSON] [--action A]
    interlock db status | upgrade
    interlock breaker list [--json] | reset TARGET
    interlock watchdog [--threshold S] [--json] [--every S]
    interlock roles [--login USER=worker|operator|auditor ...]   (with an admin DSN)
    interlock console [--port 8470]                              (the operator web console)
    interlock operator add NAME | list | disable NAME            (who may log in to the console)
    interlock queue set NAME [--concurrency N --rate N/PERIOD ...] | list | describe NAME
    interlock schedule create|list|describe|pause|resume|trigger|delete   (durable schedules)

Every verb takes --dsn (default: ILR_DSN, else the project's own cluster); `interlock --version`.

Exit status: 0 done; 1 refused by the runtime (no such workflow, already ended, a conflict);
2 invalid input or the database unreachable (one line on stderr, nothing written; see
docs/errors.md); 3 `result --timeout` ran out. A reader that closes the pipe early
(`interlock list | head -1`) is not an error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import local_postgres, validate
from .. import queues as queueing
from ..cli_parsing import Parser, checked
from ..errors import ENVIRONMENT_ERRORS, InterlockError, InvalidInput
from ..vocabulary import WorkflowStatus

if TYPE_CHECKING:
    from ..runtime import Runtime


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
        # the cluster cannot be managed here (no binaries, a port taken, ...): like an
        # unreachable database, the environment's to fix, so exit status 2
        print(f"interlock pg {args.action}: {exc}", file=sys.stderr)
        return 2


def _worker(rest: list[str]) -> int:
    from .worker import main as worker_main
    from .worker import parse_args

    if not {"-h", "--help"} & set(rest):
        try:
            args = parse_args(rest)  # numbers, modules and the id are checked there
        except SystemExit as exc:  # its one-line error is printed; the status is 2
            return int(exc.code or 0)
        validate.optional_name(args.only, "--only", max_chars=validate.MAX_TEXT_CHARS)
        _check_dsn(args.dsn)
    return worker_main(rest)


def _check_dsn(dsn: str | None) -> None:
    """A --dsn that cannot be parsed is invalid input, refused before anything connects."""
    if dsn is not None:
        from .. import db

        db.check_dsn(dsn)


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
    from ..runtime import Runtime

    return Runtime(args.dsn or local_postgres.dsn())


def _connect(args: argparse.Namespace) -> Any:
    from .. import db

    return db.connect_explained(args.dsn or local_postgres.dsn())


def _list(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        rows = rt.list(status=args.status, name=args.name, version=args.version, limit=args.limit)
    if args.json:
        _dump(rows)
    else:
        print_table(rows, ["id", "name", "version", "status", "queue", "epoch", "owner",
                           "available_at", "updated_at"])  # fmt: skip
    return 0


def _describe(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        wf = rt.describe(args.id)
    if args.json:
        _dump(wf)
        return 0
    for key in ("id", "name", "version", "status", "epoch", "owner", "lease_expires_at",
                "available_at", "waiting", "cancel_requested_at", "result", "error", "parent_id",
                "continued_from", "forked_from", "created_at", "updated_at", "queue", "priority",
                "queue_key", "started_at", "execution_timeout", "execution_deadline",
                "execution_seconds_left"):  # fmt: skip
        print(f"{key:>20}: {_cell(wf.get(key))}")
    for fired in wf.get("timed_out", []):  # docs/timeouts.md: which timeout fired
        what = (
            "the workflow"
            if fired["seq"] is None
            else f"step {fired['name']!r} (seq {fired['seq']})"
        )
        limit = "" if fired["limit"] is None else f" of {fired['limit']:g} s"
        print(f"{'timed out':>20}: {what}: {fired['timeout']}{limit}")
    print("\nsteps")
    print_table(wf["steps"], ["seq", "kind", "name", "epoch", "output", "error", "created_at"])
    if wf.get("step_timers"):
        print("\nstep timeouts")
        print_table(wf["step_timers"], ["seq", "name", "start_to_close", "schedule_to_close",
                                        "attempts", "first_started_at", "attempt_deadline",
                                        "step_deadline"])  # fmt: skip
    print("\nclaims")
    print_table(wf["claims"], ["epoch", "owner", "version", "claimed_at", "prev_status",
                               "prev_lease_expires_at"])  # fmt: skip
    # the ids `interlock receipt EFFECT_ID` takes
    print("\neffects")
    print_table(wf["effects"], ["effect_id", "state", "action", "target", "tier", "sends",
                                "grant_id"])  # fmt: skip
    return 0


def _query(args: argparse.Namespace) -> int:
    from .query import show

    with _runtime(args) as rt:
        return show(rt.status_record(args.id), args.json)


def _telemetry_from_env() -> None:
    """start and signal make a span: the CLI is the application, so OTEL_* configures it."""
    from ..telemetry_env import configure_from_env

    configure_from_env("interlock-cli")  # docs/observability.md#configuring


def _signal(args: argparse.Namespace) -> int:
    payload = validate.parse_json(args.payload, "--payload")
    if args.name == "approve" and not (isinstance(payload, dict) and "grant_id" in payload):
        print("interlock signal: an approval needs a grant, which a bare signal does not make; "
              f"run `interlock approve {args.id} --by WHO [--payload JSON]`; nothing was sent",
              file=sys.stderr)  # fmt: skip
        return 2
    _telemetry_from_env()
    with _runtime(args) as rt:
        signal_id = rt.signal(args.id, args.name, payload, sender=args.sender)
        waits_for = (rt.describe(args.id).get("waiting") or {}).get("signal")
    print(f"signal {args.name!r} delivered to {args.id} (signal id {signal_id})")
    hint = validate.did_you_mean(args.name, [waits_for] if waits_for else [])
    if hint:  # kept: a signal may come before its wait, but this one looks like a typo
        print(f"interlock signal: note: {args.id} waits for signal {waits_for!r}, and nothing "
              f"waits for {args.name!r} yet{hint}", file=sys.stderr)  # fmt: skip
    return 0


def _start(args: argparse.Namespace) -> int:
    value = validate.parse_json(args.input, "--input")
    _telemetry_from_env()
    with _runtime(args) as rt:
        deployed = {d["name"] for d in rt.deployments()}
        hint = validate.did_you_mean(args.name, deployed)
        if args.name not in deployed and hint and not args.await_worker:
            # a typo of a deployed name would otherwise wait for ever for a worker
            print(f"interlock start: no deployment serves {args.name!r}{hint}; nothing was "
                  f"started. To start it for a worker that will serve {args.name!r}, pass "
                  "--await-worker", file=sys.stderr)  # fmt: skip
            return 2
        wf_id = rt.start(args.name, args.id, value, version=args.version, queue=args.queue,
                         priority=args.priority, queue_key=args.queue_key,
                         dedup_id=args.dedup_id, wait_for_worker=not args.require_deployed,
                         execution_timeout=args.execution_timeout)  # fmt: skip
        version = rt.describe(wf_id)["version"]
    if version is None:  # docs/queues.md: it runs once a worker registers the workflow
        wanted = f"{args.name}@{args.version}" if args.version else args.name
        print(f"started {wf_id}, awaiting a worker: no deployment serves {wanted} yet; it runs "
              "once a worker that serves it starts (`interlock list --status awaiting_worker`)")  # fmt: skip
        return 0
    print(f"started {args.name}@{version} as {wf_id}")
    return 0


def _result(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        try:
            value = rt.result(args.id, timeout=args.timeout, raw=True)  # typed: as recorded
        except TimeoutError as exc:
            print(f"interlock result: {exc}", file=sys.stderr)
            return 3
    _dump({"id": args.id, "status": "completed", "result": value} if args.json else value)
    return 0


def _cancel(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        rt.cancel(args.id, by=args.by)
    print(f"cancel requested for {args.id}; it sees Cancelled at its next durable call")
    return 0


def _fork(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        new_id = rt.fork(args.id, args.at_seq, args.new_id)
    print(f"forked {args.id} at seq {args.at_seq} as {new_id}: steps below {args.at_seq} are "
          "reused, the rest runs on a worker")  # fmt: skip
    return 0


def _migrate(args: argparse.Namespace) -> int:
    if args.schema:
        if args.id is not None or args.to_version is not None:
            raise InvalidInput("--schema migrates the database schema: give no workflow id and "
                               "no --to-version with it")  # fmt: skip
        from .. import migrations

        with _connect(args) as conn:
            done = migrations.upgrade(conn)
        print("applied " + ", ".join(m.label for m in done) if done
              else f"already at schema version {migrations.latest()}: nothing to do")  # fmt: skip
        return 0
    if args.id is None or args.to_version is None:
        raise InvalidInput("give a workflow ID and --to-version V (a pending or sleeping "
                           "workflow moves to that deployed version), or --schema")  # fmt: skip
    with _runtime(args) as rt:
        rt.migrate(args.id, args.to_version)
    print(f"migrated {args.id} to version {args.to_version}")
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
    from .. import receipts
    from ..receipts import cli as receipt_cli

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
    if args.json:
        _dump(rows)
        return 0
    print_table(
        rows, ["target", "open", "consecutive_failures", "threshold", "cooldown", "opened_at"]
    )
    return 0


def _roles(args: argparse.Namespace) -> int:
    from .. import db, migrations

    logins: dict[str, str] = {}
    for item in args.login:
        user, _, role = item.partition("=")
        validate.name(user, "--login USER")
        logins[user] = validate.choice(role, f"--login {user}=ROLE: the role", db.ROLES)
    with _connect(args) as conn:
        migrations.ensure(conn)
        db.apply_roles(conn, logins)
    print("roles ilr_worker, ilr_operator, ilr_auditor are in place"
          + "".join(f"\n  login {u} -> ilr_{r}" for u, r in logins.items()))  # fmt: skip
    return 0


def _db(args: argparse.Namespace) -> int:
    from .. import migrations

    with _connect(args) as conn:
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


def _timeout(text: str) -> float | None:
    from .. import timeouts

    return timeouts.check_seconds(text, "--execution-timeout", from_text=True)


def _seconds(text: str) -> float | None:
    return validate.seconds(text, "the value", from_text=True)


def _limit(text: str) -> int:
    from ..runtime import MAX_LIST_LIMIT

    return validate.count(text, "the value", high=MAX_LIST_LIMIT, from_text=True)


def _seq(text: str) -> int:
    from ..runtime import MAX_SEQ

    return validate.count(text, "the value", high=MAX_SEQ, from_text=True)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"interlock {version('interlock-runtime')}"
    except PackageNotFoundError:  # a checkout on sys.path without the package installed
        return "interlock (version unknown: the package is not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="interlock", description=__doc__)
    parser.add_argument("--version", action="version", version=_version(),
                        help="print the installed version and exit")  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB")

    pg = sub.add_parser("pg", help="manage the project's own PostgreSQL cluster")
    pg.add_argument("action", choices=["start", "stop", "restart-immediate", "reset", "status"],
                    help="what to do with the cluster")  # fmt: skip
    pg.add_argument("--json", action="store_true", help="status as JSON")
    pg.set_defaults(func=_pg)

    worker = sub.add_parser("worker", help="run a worker (see `interlock worker --help`)",
                            add_help=False)  # fmt: skip
    worker.add_argument("rest", nargs=argparse.REMAINDER, help="the worker's own options")
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
    p.add_argument("--status", choices=WorkflowStatus.values(),
                   help="only workflows in this status (default: any)")  # fmt: skip
    p.add_argument("--name", help="only this workflow name (default: any)")
    p.add_argument("--version", help="only this version (default: any)")
    p.add_argument("--limit", type=checked(_limit), default=1000, metavar="N",
                   help="at most N rows, newest first (1-100000)")  # fmt: skip
    verb("describe", _describe, "one workflow: row, steps, claim history").add_argument(
        "id", help="the workflow id"
    )
    verb("query", _query, "the status a workflow published (ctx.set_status), read without "
         "waking it").add_argument("id", help="the workflow id")  # fmt: skip
    p = verb("start", _start, "start a workflow by name (idempotent on the id)", json_flag=False)
    p.add_argument("name", help="the workflow name a worker serves")
    p.add_argument("id", help="the new workflow's id (a second start with it is idempotent)")
    p.add_argument("--input", default="{}", metavar="JSON", help="the workflow input")
    p.add_argument("--version", help="the version to run (default: the newest deployed)")
    p.add_argument("--queue", metavar="Q", help="the queue to start it on (default: default, "
                   "which has no limits; see `interlock queue`)")  # fmt: skip
    p.add_argument("--priority", type=checked(lambda t: queueing.priority(t, from_text=True)),
                   default=0, metavar="N",
                   help="lower runs first, -1000000 to 1000000 (default: 0)")  # fmt: skip
    p.add_argument("--queue-key", metavar="KEY",
                   help="what the queue's per-key limits count, e.g. a customer (default: none)")  # fmt: skip
    p.add_argument("--dedup-id", metavar="ID", help="refused while a live run of the queue has "
                   "the same one (default: none)")  # fmt: skip
    p.add_argument("--execution-timeout", type=checked(_timeout), default=None,
                   metavar="SECONDS", help="end it as timed_out this long after the start, "
                   "wherever it is, children and successors included (default: no limit)")  # fmt: skip
    p.add_argument("--require-deployed", action="store_true",
                   help="refuse (exit 1) when no deployment serves the workflow, instead of "
                   "recording it as awaiting_worker until a worker serves it")  # fmt: skip
    p.add_argument("--await-worker", action="store_true",
                   help="start it awaiting a worker even when its name is close to a deployed "
                   "one (without this, such a name is taken for a typo: exit 2, nothing "
                   "started)")  # fmt: skip
    p = verb("result", _result, "wait for a workflow's result")
    p.add_argument("id", help="the workflow id")
    p.add_argument("--timeout", type=checked(_seconds), default=None, metavar="SECONDS",
                   help="give up after this long, exit 3 (default: wait for ever)")  # fmt: skip
    p = verb("signal", _signal, "send a durable signal", json_flag=False)
    p.add_argument("id", help="the workflow id")
    p.add_argument("name", help="the signal name (not starting with $)")
    p.add_argument("--payload", default="{}", metavar="JSON", help="the signal payload")
    p.add_argument("--sender", help="who sends it, recorded with it (default: nobody named)")
    p = verb("cancel", _cancel, "request cancellation", json_flag=False)
    p.add_argument("id", help="the workflow id")
    p.add_argument("--by", help="who cancels, recorded (default: nobody named)")
    p = verb("fork", _fork, "a new workflow reusing another's steps below a sequence number",
             json_flag=False)  # fmt: skip
    p.add_argument("id", help="the workflow to fork from")
    p.add_argument("new_id", help="the new workflow's id")
    p.add_argument("--at-seq", type=checked(_seq), required=True, metavar="N",
                   help="required: steps below N are reused, N and later run again")  # fmt: skip
    p = verb("migrate", _migrate, "move a workflow to another deployed version, or upgrade the "
             "schema (--schema)", json_flag=False)  # fmt: skip
    p.add_argument("id", nargs="?", default=None,
                   help="a pending or sleeping workflow (default: none; give --schema instead)")  # fmt: skip
    p.add_argument("--to-version", metavar="V",
                   help="the deployed version to move it to (default: none, required with ID)")  # fmt: skip
    p.add_argument("--schema", action="store_true",
                   help="apply pending schema migrations, as `interlock db upgrade` does")  # fmt: skip
    verb("drain-report", _drain_report, "workflows by name, version and status")
    p = verb("receipt", _receipt, "print an effect's receipt bundle (JSON)", json_flag=False)
    p.add_argument("effect_id", help="the effect id (eff_...)")
    p.add_argument("--json", action="store_true", help="accepted for uniformity: the bundle is "
                   "always JSON")  # fmt: skip
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--signing-key", metavar="PEM",
                      help="sign with this Ed25519 private key (see `interlock keygen`; "
                      "default: HMAC or unsigned, see --key-env)")  # fmt: skip
    keys.add_argument("--key-env", metavar="NAME",
                      help="sign with the HMAC key in this environment variable (default: "
                      "ILR_RECEIPT_KEY if set, else unsigned)")  # fmt: skip
    verb("ambiguous", _ambiguous, "effects waiting for a human to reconcile")
    p = verb("reconcile", _reconcile, "attest the outcome of an AMBIGUOUS effect", json_flag=False)
    p.add_argument("effect_id", help="the AMBIGUOUS effect's id")
    p.add_argument("--evidence", required=True, metavar="TEXT",
                   help="required: what shows the outcome (a statement, a ticket, a log line)")  # fmt: skip
    p.add_argument("--by", required=True, metavar="WHO", help="required: who attests")
    p = verb("revoke", _revoke, "revoke a grant; lists the effects that may still land",
             json_flag=False)  # fmt: skip
    p.add_argument("grant_id", help="the grant id")
    p.add_argument("--by", required=True, metavar="WHO", help="required: who revokes")
    p = verb("breaker", _breaker, "list circuit breakers, or reset one")
    p.add_argument("action", choices=["list", "reset"], help="list them, or reset TARGET's")
    p.add_argument("target", nargs="?", help="the target to reset (default: none; needed by "
                   "reset)")  # fmt: skip
    p = verb("db", _db, "the schema: `status` (applied and pending migrations) or `upgrade`")
    p.add_argument("action", choices=["status", "upgrade"], help="show the schema, or upgrade it")
    p = verb("roles", _roles, "create the least-privilege roles (needs an admin DSN)",
             json_flag=False)  # fmt: skip
    p.add_argument("--login", action="append", default=[], metavar="USER=ROLE",
                   help="also create a login user in ilr_worker, ilr_operator or ilr_auditor "
                   "(repeatable; default: no login users)")  # fmt: skip
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
    sub.add_parser("queue", help="queues and their limits: set, list, describe (see `interlock "
                   "queue --help`)", add_help=False)  # fmt: skip
    sub.add_parser("schedule", help="durable schedules: create, list, describe, pause, resume, "
                   "trigger, delete (see `interlock schedule --help`)", add_help=False)  # fmt: skip
    return parser


_IDS = {"id": "workflow id", "new_id": "new workflow id", "effect_id": "effect id",
        "grant_id": "grant id"}  # fmt: skip
_NAMES = {"queue_key": "--queue-key", "dedup_id": "--dedup-id",
          "name": "name", "version": "--version", "to_version": "--to-version", "by": "--by",
          "sender": "--sender", "target": "target", "key_env": "--key-env"}  # fmt: skip


def _check_args(args: argparse.Namespace) -> None:
    """Ids and names of every verb, checked before anything connects (validate.py)."""
    for attr, what in _IDS.items():
        if getattr(args, attr, None) is not None:
            validate.identifier(getattr(args, attr), what)
    for attr, what in _NAMES.items():
        if getattr(args, attr, None) is not None:
            validate.name(getattr(args, attr), what)
    if getattr(args, "evidence", None) is not None:
        validate.text(args.evidence, "--evidence")
    if hasattr(args, "dsn"):
        _check_dsn(args.dsn or local_postgres.dsn())


def _dsn_in(argv: list[str]) -> str:
    """The --dsn a delegated verb was given (for messages), else the default one."""
    for i, item in enumerate(argv):
        if item == "--dsn" and i + 1 < len(argv):
            return argv[i + 1]
        if item.startswith("--dsn="):
            return item.split("=", 1)[1]
    return local_postgres.dsn()


def _option_values(argv: list[str], option: str) -> list[str]:
    """The values given to an option (`--opt V` or `--opt=V`) of a verb that parses its own
    flags, so that they are checked here before its module sees them."""
    values = []
    for i, item in enumerate(argv):
        if item == option and i + 1 < len(argv):
            values.append(argv[i + 1])
        elif item.startswith(option + "="):
            values.append(item.split("=", 1)[1])
    return values


def _delegate(argv: list[str]) -> Callable[[], int] | None:
    """The verbs that parse their own flags, each its module's main (imported only here)."""
    verb, rest = argv[0] if argv else "", argv[1:]
    if verb == "worker":  # the worker parses its own flags
        return lambda: _worker(rest)
    if verb == "watchdog":  # and the watchdog (a separate process by design)
        from ..watchdog import main as watchdog_main

        def watchdog() -> int:
            for value in _option_values(rest, "--threshold"):
                validate.seconds(value, "--threshold", optional=False, from_text=True)
            for value in _option_values(rest, "--every"):
                validate.number(value, "--every", low=0.1, high=86_400, unit="seconds",
                                from_text=True)  # fmt: skip
            return watchdog_main(rest)

        return watchdog
    if verb == "approve":  # a person approves a decision (cli/approve.py)
        from .approve import main as approve_main

        return lambda: approve_main(rest)
    if verb == "verify":  # so does the receipt verifier
        from ..receipts.cli import main as verify_main

        return lambda: verify_main(rest)
    if verb == "keygen":  # and the receipt key pair maker
        from ..receipts.cli import keygen_main

        return lambda: keygen_main(rest)
    if verb == "console":  # the web console (the `console` extra), imported only here
        from ..console import main as console_main

        return lambda: console_main(rest)
    if verb == "schedule":  # durable schedules (cli/schedule.py)
        from .schedule import main as schedule_main

        return lambda: schedule_main(rest)
    if verb == "queue":  # queues and their limits (cli/queue.py)
        from .queue import main as queue_main

        return lambda: queue_main(rest)
    if verb == "operator":  # console operators (cli/operator.py)
        from .operator import main as operator_main

        return lambda: operator_main(rest)
    return None


def _quiet_stdout() -> None:
    """The reader of stdout went away (`| head -1`): send what is left nowhere, quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file descriptor (tests capture it)
        pass


def run(command: str, dsn: Callable[[], str], body: Callable[[], int]) -> int:
    """Run one verb under the error contract (docs/errors.md): invalid input and an
    unreachable database are one line on stderr and exit 2; a refusal by the runtime is one
    line and exit 1; a closed stdout pipe ends quietly; never a traceback for any of these."""
    import psycopg

    from .. import db, db_faults

    caller = db_faults.CALLER.set(f"interlock {command}")  # a refusal names the verb
    try:
        return body()
    except ENVIRONMENT_ERRORS as exc:  # bad input, no database, a role without the privilege
        print(f"interlock {command}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as exc:
        print(f"interlock {command}: the database at {db.address(dsn())} has no Interlock schema "
              f"({' '.join(str(exc).split())[:120]}); run `interlock db upgrade --dsn ...` or "
              "check the DSN", file=sys.stderr)  # fmt: skip
        return 2
    except psycopg.Error as exc:  # a verb's own connection: docs/errors.md#database-faults
        fault = db_faults.answer(exc, f"interlock {command}", dsn())
        text = str(fault) if fault is not exc else f"the database refused the command: {exc}"
        print(f"interlock {command}: {' '.join(text.split())}", file=sys.stderr)
        return 2
    except InterlockError as exc:
        print(f"interlock {command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:
        print(f"interlock {command}: interrupted", file=sys.stderr)
        return 130
    finally:
        db_faults.CALLER.reset(caller)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    delegated = _delegate(argv)
    if delegated is not None:

        def checked_first() -> int:
            if argv[0] != "worker":  # the worker checks its --dsn with its other flags
                _check_dsn(_dsn_in(argv))
            return delegated()

        return run(argv[0], lambda: _dsn_in(argv), checked_first)
    args = build_parser().parse_args(argv)

    def body() -> int:
        _check_args(args)
        status: int = args.func(args)
        return status

    return run(args.command, lambda: getattr(args, "dsn", None) or local_postgres.dsn(), body)


if __name__ == "__main__":
    sys.exit(main())
