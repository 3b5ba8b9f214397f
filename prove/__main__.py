"""`make prove`: run the Prove sweep over scenarios/ and write its report.

    python -m prove [--quick | --full] [--publish] [--scenarios S01,S02] [--seeds N]
                    [--systems runtime,runtime_async,temporal_idem,temporal_check]
                    [--tiers 1,2,3]
                    [--jobs 6] [--resume | --fresh] [--no-report] [--no-stripe]
                    [--crash-plans seeded|instrumented|external]
                    [--scenario-dir DIR] [--runs-dir DIR] [--results-dir DIR]
                    [--temporal-port N] [--no-zygote]

Working runs never touch the published results: without `--publish` the run files go to
.data/prove/scratch/runs/ and the report to .data/prove/scratch/results/ (or --runs-dir,
--results-dir), and the last line says where. Only `make prove` passes `--publish`, which writes
results/runtime_prove.{md,json} and its raw data, and is refused with any selection (scenarios,
seeds, systems, tiers, crash plans, no Stripe table, another scenario or results directory):
a partial sweep's report must never replace the published one. Run files are deleted only
with `--fresh` (the runs directory is emptied once every service is up); otherwise a run
overwrites only its own file, and `--resume` reuses finished ones.

With no flags this is the quick sweep (each scenario's `seeds.quick` per cell, plus the Stripe
table: S01-S03 at tier 1 through the Stripe-compatible subset, EMULATED). `--full` uses the
spec's sizes (docs/design.md#prove: 100 per cell, fewer for some scenarios). It starts what it needs
itself: the project's Postgres (or ILR_DSN) and a Temporal dev server on a throwaway SQLite
file. Each run writes <runs dir>/<run_id>.json (published: .data/prove/runs/).
Exit status: 0 when the sweep ran (incorrect runs are results, not errors), 2 on bad input
or a service that cannot start (finished run files are left intact).
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
# Where a sweep writes: published (make prove) or a working run, which never touches results/.
PUBLISHED_RUNS = runner.DATA / "runs"
WORK = runner.DATA / "scratch"
# Options that select part of the sweep or change how it runs: a published report has none.
SELECTIONS = ("scenarios", "seeds", "systems", "tiers", "crash_plans", "scenario_dir",
              "results_dir")  # fmt: skip


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
    ap.add_argument(
        "--publish",
        action="store_true",
        help="write the report into results/ (what `make prove` does); refused with any "
        "selection of scenarios, seeds, systems, tiers or crash plans, --no-stripe, "
        "--scenario-dir or --results-dir",
    )
    again = ap.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="reuse finished run files")
    again.add_argument(
        "--fresh",
        action="store_true",
        help="delete the runs directory's files first (nothing is deleted without it)",
    )
    ap.add_argument("--no-report", action="store_true", help="run, but write no report")
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
    ap.add_argument(
        "--runs-dir",
        default=None,
        help=f"write run files here (default {_in_repo(WORK / 'runs')}; with --publish "
        f"{_in_repo(PUBLISHED_RUNS)})",
    )
    ap.add_argument(
        "--results-dir",
        default=None,
        help=f"write the report here (default {_in_repo(WORK / 'results')}; only --publish "
        "writes results/)",
    )
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


def _in_repo(path: Path) -> Path:
    """A folder of the sweep as the user sees it: relative to the repository when inside it."""
    return path.relative_to(runner.REPO) if path.is_relative_to(runner.REPO) else path


def destinations(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """(runs dir, report dir or None: no report) for the parsed options; ValueError says why a
    published report is refused."""
    if args.publish:
        chosen = [f"--{k.replace('_', '-')}" for k in SELECTIONS if getattr(args, k) is not None]
        chosen += ["--no-stripe"] * args.no_stripe + ["--no-report"] * args.no_report
        if chosen:
            raise ValueError(f"--publish writes the published report, which is the whole sweep: "
                             f"drop {', '.join(chosen)}, or drop --publish to write under "
                             f"{_in_repo(WORK)}/")  # fmt: skip
    runs = (
        Path(args.runs_dir) if args.runs_dir else PUBLISHED_RUNS if args.publish else WORK / "runs"
    )
    if args.no_report:
        return runs, None
    if args.publish:
        return runs, report.RESULTS
    return runs, Path(args.results_dir) if args.results_dir else WORK / "results"


def _show(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        out_dir, report_dir = destinations(args)
    except ValueError as e:
        print(f"prove: {e}", file=sys.stderr)
        return 2
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
        # Every service is up: only now, and only when asked, may earlier run files go.
        if args.fresh and out_dir.exists():
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
        where = f"run files in {_show(out_dir)}"
        if report_dir is None:
            print(f"prove: {where}; no report (--no-report) ({wall:.0f}s)")
        else:
            md, js = report.write(scns, results, services.versions, wall, size=size,
                                  argv=sys.argv[1:] if argv is None else argv,
                                  out_dir=report_dir)  # fmt: skip
            print(f"prove: wrote {_show(md)} and {_show(js)}; {where} ({wall:.0f}s)")
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # SIGTERM (a CI time-out, `kill`) unwinds like Ctrl-C: the servers, the fork server and
    # the run databases this sweep started are closed on the way out, not left running
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
