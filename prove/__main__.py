"""`make prove`: run the Prove sweep over scenarios/ and write results/runtime_prove.{md,json}.

    python -m prove [--quick | --full] [--scenarios S01,S02] [--seeds N]
                    [--systems runtime,temporal_idem,temporal_check] [--tiers 1,2,3]
                    [--jobs 2] [--resume] [--no-report]

With no flags this is the quick sweep (each scenario's `seeds.quick`, 3 per cell). `--full`
uses the spec's sizes (DESIGN B12: 100 per cell, fewer for some scenarios). It starts what it
needs itself: the project's Postgres (or ILR_DSN) and a Temporal dev server on a throwaway
SQLite file. Each run writes .data/prove/runs/<run_id>.json; `--resume` reuses finished runs.
Exit status: 0 when the sweep ran (incorrect runs are results, not errors), 2 on bad input
or a service that cannot start (finished run files are left intact).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from contextlib import ExitStack

from prove import report, runner
from prove.scenario import SYSTEMS, ScenarioError, load_all


def _csv(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m prove", description=__doc__.split("\n\n")[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the quick sweep (the default)")
    size.add_argument("--full", action="store_true", help="the spec's sweep sizes (DESIGN B12)")
    ap.add_argument("--scenarios", help="comma list of scenario ids (default: all)")
    ap.add_argument("--seeds", type=int, help="seeds per cell (overrides the scenario's)")
    ap.add_argument("--systems", help=f"comma list of {','.join(SYSTEMS)}")
    ap.add_argument("--tiers", help="comma list of tiers 1,2,3")
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel (2 on 2 cores)")
    ap.add_argument("--resume", action="store_true", help="reuse finished run files")
    ap.add_argument("--no-report", action="store_true", help="do not write results/")
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
        scns = load_all(_csv(args.scenarios))
    except ScenarioError as e:
        print(f"prove: {e}", file=sys.stderr)
        return 2
    if not scns:
        print("prove: no scenarios (scenarios/*.yaml); nothing to run", file=sys.stderr)
        return 2
    size = "full" if args.full else "quick"
    runs = runner.plan(scns, args.seeds, size, systems, tiers)
    if not runs:
        print("prove: the filters leave no run to do", file=sys.stderr)
        return 2
    need_temporal = any(system != "runtime" for _, _, system, _, _ in runs)
    out_dir = runner.DATA / "runs"
    if not args.resume and out_dir.exists():
        shutil.rmtree(out_dir)

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
            from prove.temporal_server import TemporalDevServer

            db_file = runner.DATA / "temporal.db"
            db_file.parent.mkdir(parents=True, exist_ok=True)
            for suffix in ("", "-wal", "-shm"):
                db_file.with_name(db_file.name + suffix).unlink(missing_ok=True)
            try:
                temporal = TemporalDevServer(db_file).start()
            except Exception as e:  # noqa: BLE001
                print(f"prove: cannot start the Temporal dev server: {e}", file=sys.stderr)
                return 2
            stack.callback(temporal.kill)
        services = runner.Services(admin_dsn=admin, template=template, temporal=temporal,
                                   runs_dir=out_dir, versions=runner.versions(admin))  # fmt: skip
        print(f"prove: {len(runs)} runs ({size} sweep) over {len(scns)} scenario(s), "
              f"{args.jobs} at a time", flush=True)  # fmt: skip
        results = runner.sweep(services, runs, out_dir, jobs=args.jobs, resume=args.resume,
                               progress=lambda line: print(line, flush=True))  # fmt: skip
        wall = time.time() - t0
        if not args.no_report:
            md, js = report.write(scns, results, services.versions, wall, size=size,
                                  argv=sys.argv[1:] if argv is None else argv)  # fmt: skip
            print(f"prove: wrote {md} and {js} ({wall:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
