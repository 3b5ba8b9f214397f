"""How long a sweep of another size will take, from the run files of one that finished.

    python -m prove.estimate [--runs-dir .data/prove/runs] [--full] [--jobs 6]

For each scenario and system: the median wall time of one timeline run, or of one loop
iteration, in the finished sweep; times the runs (iterations) the chosen size plans; summed
and divided by the parallel jobs, scaled by how well the finished sweep used its jobs (its
measured span against the sum of its run walls). A plan, not a promise: it assumes the
machine is as loaded as it was during the measured sweep.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from prove import runner
from prove.scenario import ScenarioError, load_all


def measured(runs_dir: Path) -> tuple[dict, float, float]:
    """Per (scenario, system): the median seconds of one run (timeline) or one iteration
    (loop); the sum of every run's wall; the sweep's span, first start to last end."""
    per: dict[tuple[str, str], list[float]] = defaultdict(list)
    starts, ends, walls = [], [], 0.0
    for path in runs_dir.glob("*.json"):
        rec = json.loads(path.read_text())
        ident, t = rec.get("identity") or {}, rec.get("timings") or {}
        wall = t.get("wall")
        if not isinstance(wall, (int, float)) or not isinstance(t.get("started_at"), float):
            continue
        walls += wall
        starts.append(t["started_at"])
        ends.append(t["started_at"] + wall)
        if rec.get("error"):
            continue
        n = len(rec.get("iterations") or []) if ident.get("driver") else 1
        per[(ident["scenario"], ident["system"])].append(wall / max(1, n))
    span = (max(ends) - min(starts)) if starts else 0.0
    return {k: statistics.median(v) for k, v in per.items()}, walls, span


def estimate(runs_dir: Path, size: str, jobs: int, measured_jobs: int) -> dict:
    """The planned size's runs times their measured unit cost, spread over `jobs` as well
    as the measured sweep spread its own (its packing: run walls / (span x its jobs))."""
    unit, walls, span = measured(runs_dir)
    if not unit:
        raise ValueError(f"no finished run files in {runs_dir}")
    total, cells, missing = 0.0, 0, []
    for scn in load_all(None):
        for vname, system, _ in scn.cells():
            n_units = scn.runs_per_cell(scn.variant(vname), size) * (
                int(scn.iterations.get(size) or 1) if scn.driver else 1
            )
            cost = unit.get((scn.id, system))
            if cost is None:
                missing.append(f"{scn.id}/{system}")
                continue
            total += cost * n_units
            cells += 1
    packing = min(1.0, walls / (span * measured_jobs)) if span else 1.0
    hours = total / (jobs * max(packing, 0.05)) / 3600
    return {"size": size, "sequential_hours": total / 3600, "jobs": jobs, "packing": packing,
            "hours": hours, "cells": cells, "missing": sorted(set(missing))}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m prove.estimate", description=__doc__)
    ap.add_argument("--runs-dir", default=str(runner.DATA / "runs"))
    ap.add_argument("--full", action="store_true", help="estimate the full sweep")
    ap.add_argument("--jobs", type=int, default=6, help="sweep slots")
    ap.add_argument("--measured-jobs", type=int, default=6, help="slots of the measured sweep")
    args = ap.parse_args(argv)
    try:
        out = estimate(Path(args.runs_dir), "full" if args.full else "quick", args.jobs,
                       args.measured_jobs)  # fmt: skip
    except (ValueError, ScenarioError, OSError) as e:
        print(f"prove.estimate: {e}", file=sys.stderr)
        return 2
    print(f"{out['size']} sweep: {out['cells']} cells, {out['sequential_hours']:.1f} h of runs "
          f"back to back; at {out['jobs']} jobs with the measured packing "
          f"{out['packing']:.2f}: about {out['hours']:.1f} h"
          + (f"; no measurement for {', '.join(out['missing'])}" if out["missing"] else ""))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
