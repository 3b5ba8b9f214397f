"""`interlock schedule`: durable schedules from the command line (docs/schedules.md).

    interlock schedule create ID WORKFLOW (--cron EXPR | --every DURATION) [--offset DURATION]
                              [--input JSON] [--version V] [--overlap skip|buffer_one|allow_all]
                              [--catchup-window DURATION] [--time-zone ZONE] [--paused]
                              [--note TEXT]
    interlock schedule list [--json]
    interlock schedule describe ID [--json] [--fires N] [--upcoming N]
    interlock schedule pause ID [--by WHO] [--note TEXT]
    interlock schedule resume ID [--note TEXT]
    interlock schedule trigger ID [--overlap skip|allow_all]     (start a run now)
    interlock schedule delete ID                                 (its runs are kept)

A DURATION is seconds, or a number with s, m, h or d (90, 90s, 5m, 2h, 1d). Workers fire the
schedules (`interlock worker` does unless --no-schedules); a tick is started at most once.
Every verb takes --dsn (default: ILR_DSN, else the project's own cluster). Exit status: 0 done;
1 refused (no such schedule, another definition under that id, a trigger skipped because the
previous run is live); 2 invalid input or the database unreachable.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime
from typing import Any

from .. import local_postgres, schedules, validate
from ..cli_parsing import Parser, checked
from ..errors import ENVIRONMENT_ERRORS, InterlockError, InvalidInput
from ..runtime import Runtime
from ..vocabulary import ScheduleOverlap

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*$")


def duration(text: str, what: str, whole: bool = False, low: float = 0) -> float:
    """Seconds from `90`, `90s`, `5m`, `2h` or `1d`; InvalidInput saying how to write one."""
    m = _DURATION.match(text) if isinstance(text, str) and text.isascii() else None
    if not m:
        raise InvalidInput(f"{what} {validate.shown(text)} is not a duration: give seconds, or a "
                           "number with s, m, h or d (90, 5m, 2h, 1d)")  # fmt: skip
    value = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if whole and not value.is_integer():
        raise InvalidInput(f"{what} {validate.shown(text)} must be a whole number of seconds")
    return validate.number(value, what, low=low, high=validate.MAX_SECONDS, unit="seconds")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _table(rows: list[dict[str, Any]], columns: list[str], empty: str) -> None:
    cells = [[_cell(r.get(c))[:60] for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        print(empty)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="interlock schedule", description=__doc__)
    sub = p.add_subparsers(dest="action", required=True,
                           metavar="{create,list,describe,pause,resume,trigger,delete}")  # fmt: skip

    def verb(name: str, help: str, json_flag: bool = False) -> argparse.ArgumentParser:
        v = sub.add_parser(name, help=help, description=help,
                           formatter_class=p.formatter_class)  # fmt: skip
        v.add_argument("--dsn", default=None,
                       help="Postgres DSN (default: ILR_DSN or the local cluster)")  # fmt: skip
        if json_flag:
            v.add_argument("--json", action="store_true", help="print JSON instead of a table")
        return v

    ident = checked(schedules.check_id)
    c = verb("create", "create a schedule (idempotent on the id with the same definition)")
    c.add_argument("id", type=ident, help="the schedule id (1-160 characters)")
    c.add_argument("workflow", type=checked(lambda t: validate.name(t, "workflow")),
                   help="the workflow name a worker serves")  # fmt: skip
    when = c.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", metavar="EXPR",
                      help="five fields 'min hour day month weekday' or @hourly, @daily, ...")  # fmt: skip
    when.add_argument("--every", metavar="DURATION",
                      type=checked(lambda t: duration(t, "--every", whole=True, low=1)),
                      help="a fixed interval, ticks aligned to the Unix epoch (90, 5m, 1h)")  # fmt: skip
    c.add_argument("--offset", metavar="DURATION", default=0.0,
                   type=checked(lambda t: duration(t, "--offset", whole=True)),
                   help="shift an --every schedule's ticks by this much")  # fmt: skip
    c.add_argument("--input", default="{}", metavar="JSON",
                   help="handed to each run as its input's \"input\" field")  # fmt: skip
    c.add_argument("--version", help="the version to start (default: the newest deployed at each "
                   "tick)")  # fmt: skip
    c.add_argument("--overlap", default="skip", choices=ScheduleOverlap.values(),
                   help="while the previous run is live: skip the tick, buffer one, or allow all")  # fmt: skip
    c.add_argument("--catchup-window", metavar="DURATION",
                   default=schedules.DEFAULT_CATCHUP_WINDOW,
                   type=checked(lambda t: duration(t, "--catchup-window")),
                   help="ticks older than this when a worker gets to them are dropped (seconds)")  # fmt: skip
    c.add_argument("--time-zone", default="UTC", metavar="ZONE",
                   help="the IANA zone a --cron is read in")  # fmt: skip
    c.add_argument("--paused", action="store_true", help="create it paused")
    c.add_argument("--note", help="a note kept with it (default: none)")

    verb("list", "every schedule: spec, overlap, paused, next fire, last run", json_flag=True)
    d = verb("describe", "one schedule: definition, next ticks, recent fires", json_flag=True)
    d.add_argument("id", type=ident, help="the schedule id")
    d.add_argument("--fires", default=20, metavar="N",
                   type=checked(lambda t: validate.count(t, "--fires", low=0, high=100_000,
                                                         from_text=True)),
                   help="show the last N decided ticks")  # fmt: skip
    d.add_argument("--upcoming", default=5, metavar="N",
                   type=checked(lambda t: validate.count(t, "--upcoming", low=0, high=1000,
                                                         from_text=True)),
                   help="show the next N tick times")  # fmt: skip
    pa = verb("pause", "stop firing until resumed (runs already started go on)")
    pa.add_argument("id", type=ident, help="the schedule id")
    pa.add_argument("--by", help="who pauses, recorded (default: nobody named)")
    pa.add_argument("--note", help="why, kept with the schedule (default: none)")
    r = verb("resume", "fire again from the next tick (ticks while paused are not made up)")
    r.add_argument("id", type=ident, help="the schedule id")
    r.add_argument("--note", help="replaces the note (default: keep it)")
    t = verb("trigger", "start a run now, paused or not")
    t.add_argument("id", type=ident, help="the schedule id")
    t.add_argument("--overlap", choices=[ScheduleOverlap.SKIP.value, ScheduleOverlap.ALLOW_ALL.value],
                   help="skip while the previous run is live, or start anyway (default: "
                   "allow_all for an allow_all schedule, else skip)")  # fmt: skip
    x = verb("delete", "delete a schedule and its fire history (its runs are kept)")
    x.add_argument("id", type=ident, help="the schedule id")
    return p


def _check(args: argparse.Namespace) -> None:
    for attr, what in (("version", "--version"), ("by", "--by")):
        if getattr(args, attr, None) is not None:
            validate.name(getattr(args, attr), what)
    if getattr(args, "note", None) is not None:
        validate.text(args.note, "--note", max_chars=1000)
    if args.dsn is not None:
        from .. import db

        db.check_dsn(args.dsn)


def _run(args: argparse.Namespace) -> int:
    _check(args)
    if args.action == "create":
        value = validate.parse_json(args.input, "--input")
        every = None if args.every is None else int(args.every)
        # checked here too, so a bad spec is refused before anything connects
        spec = schedules.make_spec(args.cron, every, int(args.offset), args.time_zone)
    with Runtime(args.dsn or local_postgres.dsn()) as rt:
        if args.action == "create":
            rt.create_schedule(args.id, args.workflow, cron=args.cron, every=every,
                               offset=int(args.offset), input=value, version=args.version,
                               overlap=args.overlap, catchup_window=args.catchup_window,
                               time_zone=args.time_zone, paused=args.paused, note=args.note)  # fmt: skip
            row = rt.describe_schedule(args.id, fires=0, upcoming=1)
            when = "paused" if row["paused"] else f"next tick {_cell(row['next_fire_at'])} UTC"
            print(f"schedule {args.id}: {args.workflow} {spec.describe()}, overlap "
                  f"{args.overlap}; {when}")  # fmt: skip
        elif args.action == "list":
            rows = rt.schedules()
            if args.json:
                print(json.dumps(rows, indent=2, default=str))
            else:
                _table(rows, ["id", "workflow_name", "spec", "overlap", "paused", "next_fire_at",
                              "last_workflow_id", "last_status"],
                       "(none: create one with `interlock schedule create`)")  # fmt: skip
        elif args.action == "describe":
            _describe(rt.describe_schedule(args.id, fires=args.fires, upcoming=args.upcoming),
                      args.json)  # fmt: skip
        elif args.action == "pause":
            rt.pause_schedule(args.id, by=args.by, note=args.note)
            print(
                f"schedule {args.id} paused; `interlock schedule resume {args.id}` fires it again"
            )
        elif args.action == "resume":
            nxt = rt.resume_schedule(args.id, note=args.note)
            print(f"schedule {args.id} resumed; next tick {_cell(nxt)} UTC")
        elif args.action == "trigger":
            fire = rt.trigger_schedule(args.id, overlap=args.overlap)
            if fire["workflow_id"] is None:
                print(f"interlock schedule trigger: nothing started ({fire['outcome']}): "
                      f"{fire['reason']}", file=sys.stderr)  # fmt: skip
                return 1
            print(f"schedule {args.id} triggered: started {fire['workflow_id']}")
        else:
            rt.delete_schedule(args.id)
            print(f"schedule {args.id} deleted; the runs it started are kept")
    return 0


def _describe(row: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(row, indent=2, default=str))
        return
    for key in ("id", "workflow_name", "workflow_version", "spec", "overlap", "catchup_seconds",
                "paused", "paused_at", "paused_by", "note", "next_fire_at", "last_tick",
                "last_workflow_id", "previous_live", "buffered_tick", "missed_ticks", "input",
                "created_at"):  # fmt: skip
        value = json.dumps(row[key]) if key == "input" else _cell(row.get(key))
        print(f"{key:>18}: {value}")
    print("\nupcoming")
    for tick in row["upcoming"]:
        print(f"  {_cell(tick)} UTC")
    print("\nfires (newest first)")
    _table(row["fires"], ["source", "tick", "outcome", "workflow_id", "status", "reason"],
           "(none yet)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0), or the parser's one-line error (2)
        return int(exc.code or 0)
    try:
        return _run(args)
    except ENVIRONMENT_ERRORS as exc:  # the CLI's error contract (cli.run)
        print(f"interlock schedule {args.action}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except InterlockError as exc:  # refused: no such schedule, a conflicting definition
        print(f"interlock schedule {args.action}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
