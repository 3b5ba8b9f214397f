"""`interlock worker` and `python -m interlock_runtime.cli.worker`: the worker's options, each
checked, the modules it serves, and its process (signals, logs, exit statuses)."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import signal
import sys
from types import ModuleType

from .. import local_postgres, validate
from ..aio.worker import AsyncWorker
from ..cli_parsing import Parser, checked
from ..errors import CodeChanged, UnsafeDatabase
from ..events import LOG_FORMATS, LOG_LEVELS, formatter, log
from ..queues import served
from ..telemetry_env import configure_from_env
from ..worker import Worker
from ..workflow import WorkflowDef, collect

MAX_CONCURRENCY = 256  # runs at once in one worker process


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The worker's options, each checked (finite, in range) so that `python -m
    interlock_runtime.cli.worker` refuses nonsense with one line and exit status 2, as `interlock
    worker` does."""
    p = Parser(prog="interlock worker", description="Run an Interlock worker.")
    p.add_argument(
        "--dsn", default=None, help="Postgres DSN (default: ILR_DSN or the local cluster)"
    )
    p.add_argument("--module", action="append", required=True,
                   type=checked(lambda t: validate.name(t, "--module")),
                   help="module defining @workflow functions (repeatable)")  # fmt: skip
    p.add_argument("--id", dest="worker_id", default=None,
                   type=checked(lambda t: validate.name(t, "--id")),
                   help="worker id (default: host-pid)")  # fmt: skip
    p.add_argument("--concurrency", default=4, help="runs at once",
                   type=checked(lambda t: validate.count(t, "--concurrency", high=MAX_CONCURRENCY,
                                                         from_text=True)))  # fmt: skip
    p.add_argument("--lease-ttl", default=30.0, help="seconds a claim lives without a heartbeat",
                   type=checked(lambda t: validate.number(t, "--lease-ttl", low=0.5, high=86_400,
                                                          unit="seconds", from_text=True)))  # fmt: skip
    p.add_argument("--max-clock-skew", default=0.0,
                   help="seconds the clocks of the database servers a failover moves between may "
                        "differ; the local lease deadline runs this much short of the lease",
                   type=checked(lambda t: validate.number(t, "--max-clock-skew", low=0,
                                                          high=3600, unit="seconds",
                                                          from_text=True)))  # fmt: skip
    p.add_argument("--poll", default=1.0, help="seconds between polls when no NOTIFY wakes it",
                   type=checked(lambda t: validate.number(t, "--poll", low=0.01, high=3600,
                                                          unit="seconds", from_text=True)))  # fmt: skip
    p.add_argument("--only", default=None, help="serve only these name@version pairs (comma list)")
    p.add_argument("--queue", default=None, metavar="Q[,Q...]",
                   type=checked(lambda t: ",".join(served(t) or [])),
                   help="serve only these queues, comma-separated (default: every queue)")  # fmt: skip
    p.add_argument("--no-schedules", action="store_true",
                   help="do not fire schedules (another worker does; default: fire them)")  # fmt: skip
    p.add_argument("--allow-code-change", action="store_true",
                   help="accept a changed code hash for a deployed (name, version)")  # fmt: skip
    p.add_argument("--async", dest="use_async", action="store_true",
                   help="an asyncio worker, for `async def` workflows (docs/async.md); chosen "
                        "by itself when every workflow it serves is async")  # fmt: skip
    p.add_argument("--log-format", choices=LOG_FORMATS, default=None,
                   help="events on stderr as text lines or JSON lines (default: text on a "
                        "terminal, json otherwise)")  # fmt: skip
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                   help="the least level of event shown: info shows every event, warning only "
                        "the ones that say something went wrong or was refused (fenced, stuck, "
                        "failed, timed_out, ...; docs/observability.md#logs)")  # fmt: skip
    return p.parse_args(argv)


class CannotServe(Exception):
    """A --module or --only the worker cannot serve: its one line, exit status 2."""


def _siblings(name: str) -> list[str]:
    """The importable names beside `name`: top-level modules, or the parent's submodules."""
    parent, _, _ = name.rpartition(".")
    if not parent:
        return [m.name for m in pkgutil.iter_modules()]
    try:
        path = getattr(importlib.import_module(parent), "__path__", [])
    except ImportError:
        return []
    return [f"{parent}.{m.name}" for m in pkgutil.iter_modules(path)]


def load_module(name: str) -> ModuleType:
    """Import a --module as Python imports anything (its directory must be on sys.path)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        if missing != name and not name.startswith(missing + "."):
            raise CannotServe(
                f"{name!r} imports {missing!r}, which is not installed where this worker runs: "
                f"install it into the worker's environment"
            ) from None
        raise CannotServe(
            f"cannot import {name!r}{validate.did_you_mean(name, _siblings(name))}; put the "
            f"directory that holds it on PYTHONPATH (or run `python -m "
            f"interlock_runtime.cli.worker` from that directory)"
        ) from None


def select_workflows(modules: list[str], only: str | None) -> list[WorkflowDef]:
    defs = collect([load_module(m) for m in modules])
    if not defs:
        raise CannotServe(f"no @workflow found in {', '.join(modules)}")
    if not only:
        return defs
    wanted = {item.strip() for item in only.split(",") if item.strip()}
    keys = [d.key for d in defs]
    unknown = sorted(wanted - set(keys))
    if unknown:
        hint = validate.did_you_mean(unknown[0], keys) if len(unknown) == 1 else ""
        raise CannotServe(
            f"--only names {', '.join(unknown)}{hint}, which the modules do not define; "
            f"they define: {', '.join(keys)}"
        )
    return [d for d in defs if d.key in wanted]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(args.log_format or ("text" if sys.stderr.isatty() else "json")))
    log.addHandler(handler)
    log.setLevel(args.log_level.upper())
    log.propagate = False
    try:
        defs = select_workflows(args.module, args.only)
    except CannotServe as exc:
        print(f"interlock worker: {exc}", file=sys.stderr)
        return 2
    cls = AsyncWorker if args.use_async or all(d.is_async for d in defs) else Worker
    try:
        # before the worker: Worker() looks once whether a tracer provider is set
        configure_from_env("interlock-worker")  # OTEL_* (docs/observability.md#configuring)
        worker = cls(
            args.dsn or local_postgres.dsn(),
            defs,
            worker_id=args.worker_id,
            concurrency=args.concurrency,
            lease_ttl=args.lease_ttl,
            max_clock_skew=args.max_clock_skew,
            poll=args.poll,
            allow_code_change=args.allow_code_change,
            queues=None if args.queue is None else args.queue.split(","),
            schedules=not args.no_schedules,
        )
    except ValueError as exc:
        print(f"interlock worker: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    try:
        worker.run()
    except UnsafeDatabase as exc:
        print(f"interlock worker: {exc}", file=sys.stderr)
        return 2
    except CodeChanged as exc:
        print(f"interlock worker: {exc}", file=sys.stderr)
        print(
            f"  recorded sha256: {exc.recorded}\n  this worker:     {exc.offered}", file=sys.stderr
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
