"""`make prove`: run the Prove sweep over scenarios/ and write results/runtime_prove.{md,json}.

    python -m prove [--quick | --full] [--scenarios S01,S02] [--seeds N]
                    [--systems runtime,runtime_async,temporal_idem,temporal_check]
                    [--tiers 1,2,3]
                    [--jobs 6] [--resume] [--no-report] [--no-stripe]
                    [--crash-plans seeded|instrumented|external]
                    [--scenario-dir DIR] [--runs-dir DIR] [--results-dir DIR]
                    [--temporal-port N] [--no-zygote]

With no flags this is the quick sweep (each scenario's `seeds.quick` per cell, plus the Stripe
table: S01-S03 at tier 1 through the Stripe-compatible subset, EMULATED). `--full` uses the
spec's sizes (docs/design.md#prove: 100 per cell, fewer for some scenarios). It starts what it needs
itself: the project's Postgres (or ILR_DSN) and a Temporal dev server on a throwaway SQLite
file. Each run writes .data/prove/runs/<run_id>.json; `--resume` reuses finished runs.
Exit status: 0 when the sweep ran (incorrect runs are results, not errors), 2 on bad input
or a service that cannot start (finished run files are left intact: the runs directory is
cleared only once every service is up).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from prove import report, runner
from prove.lateness import LatenessMonitor
from prove.scenario import FAMILY, SYSTEMS, ScenarioError, load_all
from prove.zygote import Zygote

# The default sweep keeps each cell to one fault plan (a cell mixing instrumented and random
# kills has a rate that depends on the mix, and its differences need far more runs to decide);
# the full sweep follows docs/design.md#prove's half-external seeding.
CRASH_PLANS = {"quick": "instrumented", "full": "seeded"}


def _csv(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m prove", description=__doc__.split("\n\n")[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the quick sweep (the default)")
    size.add_argument(
        "--full", action="store_true", help="the spec's sweep sizes (docs/design.md#prove)"
    )
    ap.add_argument("--scenarios", help="comma list of scenario ids (default: all)")
    ap.add_argument("--seeds", type=int, help="seeds per cell (overrides the scenario's)")
    ap.add_argument("--systems", help=f"comma list of {','.join(SYSTEMS)}")
    ap.add_argument("--tiers", help="comma list of tiers 1,2,3")
    ap.add_argument(
        "--jobs",
        type=int,
        default=6,
        help="sweep slots (default 6 on 2 cores: most runs wait on their faults and take "
        "one slot; a CPU-bound scenario declares a larger weight, MIX 3; a run the "
        "machine was too loaded for is a harness error and runs again)",
    )
    ap.add_argument("--resume", action="store_true", help="reuse finished run files")
    ap.add_argument("--no-report", action="store_true", help="do not write results/")
    ap.add_argument(
        "--no-stripe",
        action="store_true",
        help="leave out the Stripe table (S01-S03 at tier 1 via Stripe, EMULATED)",
    )
    ap.add_argument(
        "--crash-plans",
        default=None,
        choices=("seeded", "instrumented", "external"),
        help="instrumented: every seed at the scenario's kill point (the default sweep: a "
        "cell measures one fault, so n = 5 can decide); seeded: half the seeds an external "
        "SIGKILL at a random time (docs/design.md#prove; the default of --full); random crashes are "
        "also MIX's",
    )
    ap.add_argument("--scenario-dir", default=None, help="read scenarios here (default scenarios/)")
    ap.add_argument("--runs-dir", default=None, help="write run files here (.data/prove/runs)")
    ap.add_argument("--results-dir", default=None,
                    help="write the report here instead of results/ (a partial sweep's report "
                         "must not replace the full one)")  # fmt: skip
    ap.add_argument(
        "--no-zygote",
        action="store_true",
        help="start every worker as a fresh interpreter instead of forking it from the "
        "sweep's fork server (prove/zygote.py); slower, same processes",
    )
    ap.add_argument(
        "--temporal-port",
        type=int,
        default=0,
        help="the Temporal dev server's frontend port (default: a free one)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    systems = _csv(args.systems)
    bad = [s for s in systems or [] if s not in SYSTEMS]
    if bad:
        print(f"prove: unknown system(s) {bad}; known: {', '.join(SYSTEMS)}", file=sys.stderr)
        return 2
    try:
        tiers = [int(t) for t in _csv(args.tiers) or []] or None
    except ValueError:
        print(f"prove: --tiers takes a comma list of 1, 2, 3, not {args.tiers!r}", file=sys.stderr)
        return 2
    if tiers and any(t not in (1, 2, 3) for t in tiers):
        print(f"prove: --tiers takes 1, 2, 3, not {tiers}", file=sys.stderr)
        return 2
    try:
        if args.scenario_dir:
            scns = load_all(_csv(args.scenarios), directory=args.scenario_dir)
        else:
            scns = load_all(_csv(args.scenarios))
    except ScenarioError as e:
        print(f"prove: {e}", file=sys.stderr)
        return 2
    if not scns:
        print("prove: no scenarios (scenarios/*.yaml); nothing to run", file=sys.stderr)
        return 2
    size = "full" if args.full else "quick"
    runs = runner.plan(scns, args.seeds, size, systems, tiers, stripe=not args.no_stripe)
    if not runs:
        print("prove: the filters leave no run to do", file=sys.stderr)
        return 2
    need_temporal = any(FAMILY[item[2]] != "runtime" for item in runs)
    out_dir = Path(args.runs_dir) if args.runs_dir else runner.DATA / "runs"

    t0 = time.time()
    from interlock_runtime.testing import admin_dsn, template_database

    with ExitStack() as stack:
        try:
            admin = admin_dsn()
            template = stack.enter_context(template_database(admin))
        except Exception as e:  # noqa: BLE001 - a clear message, not a traceback
            print(f"prove: cannot start or reach Postgres: {e}", file=sys.stderr)
            return 2
        temporal = None
        if need_temporal:
            from world.temporal_server import TemporalDevServer

            db_file = out_dir.parent / "temporal.db"
            db_file.parent.mkdir(parents=True, exist_ok=True)
            for suffix in ("", "-wal", "-shm"):
                db_file.with_name(db_file.name + suffix).unlink(missing_ok=True)
            try:
                temporal = TemporalDevServer(db_file, port=args.temporal_port).start()
            except Exception as e:  # noqa: BLE001
                print(f"prove: cannot start the Temporal dev server: {e}", file=sys.stderr)
                return 2
            stack.callback(temporal.kill)
        # Every service is up: only now may the previous sweep's run files go.
        if not args.resume and out_dir.exists():
            shutil.rmtree(out_dir)
        zygote = None
        if not args.no_zygote:
            try:
                zygote = stack.enter_context(Zygote(cwd=runner.REPO, env=runner.child_env()))
            except Exception as e:  # noqa: BLE001
                print(f"prove: cannot start the worker fork server: {e}", file=sys.stderr)
                return 2
        monitor = stack.enter_context(LatenessMonitor())
        services = runner.Services(admin_dsn=admin, template=template, temporal=temporal,
                                   runs_dir=out_dir, versions=runner.versions(admin),
                                   crash_plans=args.crash_plans or CRASH_PLANS[size],
                                   size=size,
                                   lateness=monitor, resume=args.resume,
                                   zygote=zygote,
                                   progress=lambda line: print(f"  {line}", flush=True))  # fmt: skip
        print(f"prove: {len(runs)} runs ({size} sweep) over {len(scns)} scenario(s), "
              f"{args.jobs} at a time", flush=True)  # fmt: skip
        results = runner.sweep(services, runs, out_dir, jobs=args.jobs, resume=args.resume,
                               progress=lambda line: print(line, flush=True))  # fmt: skip
        wall = time.time() - t0
        if not args.no_report:
            out = Path(args.results_dir) if args.results_dir else report.RESULTS
            md, js = report.write(scns, results, services.versions, wall, size=size,
                                  argv=sys.argv[1:] if argv is None else argv, out_dir=out)  # fmt: skip
            print(f"prove: wrote {md} and {js} ({wall:.0f}s)")
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # SIGTERM (a CI time-out, `kill`) unwinds like Ctrl-C: the servers, the fork server and
    # the run databases this sweep started are closed on the way out, not left running
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
