"""Run cells of the fault matrix, judge each from its evidence, write the report.

The rule, stated before the data: a cell passes when every invariant named for it (and every
code check of the invariant catalog that has evidence in it) finds 0 violations. A cell whose
harness failed (a fault that could not be driven, a run that never reached the fault's moment)
is an ERROR, counted apart, never a pass. The matrix holds when every declared cell of a
driven fault passed in both modes.

results/matrix.json holds every cell's verdict and evidence counts (the raw data) and, since
the matrix's declaration can change after a run, the `layout` it rendered (features, faults,
modes): matrix.md and the JSON's totals are pure functions of it (`render`, `aggregate`).
`--verify` recomputes both in memory and compares; `--render` rewrites matrix.md from the JSON
(docs/results.md).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from conformance.matrix.cells import Cell, run_cell
from conformance.matrix.checks import CHECKS, TWINS
from conformance.matrix.plan import Matrix, load
from interlock_runtime import testing
from world import verify_common as vc

REPO = Path(__file__).resolve().parents[2]


def predicted_breaks(matrix: Matrix, cell: Cell) -> dict[str, str]:
    """The invariants the catalog predicts to break (V) for the runtime in this cell's setting
    (its tier, the toggles its fault lifts), each with the assumptions lifted; {} when the
    fault lifts none."""
    from models.catalog import load as load_catalog
    from models.catalog import prediction

    lifted = tuple(matrix.lifts(cell.fault))
    if not lifted:
        return {}
    tier = matrix.tier(cell.feature)
    out = {}
    for row in load_catalog().invariants.values():
        if "interlock" in row.predict and prediction(row.predict["interlock"], tier,
                                                     toggles=lifted) == "V":  # fmt: skip
            out[row.name] = "+".join(lifted)
    for twin, name in TWINS.items():
        if name in out:
            out[twin] = out[name]
    return out


DB_FAULT_EVENTS = ("db_unavailable", "heartbeat_failed", "abandoned", "schedule_error")


def fault_trace(ev: dict[str, Any]) -> dict[str, int]:
    """What the fault left behind, so a reader sees it landed: takeovers of a running claim
    (the claims table), and the workers' reports of a lost database (their event logs)."""
    runs = set(ev["runs"])
    return {
        "takeovers": sum(1 for c in ev["claims"] if c["workflow_id"] in runs
                         and c["prev_status"] == "running"),
        "db_fault_events": sum(1 for e in ev["events"] if e.get("event") in DB_FAULT_EVENTS),
        "abandoned": sum(1 for e in ev["events"] if e.get("event") == "abandoned"),
        "fenced": sum(1 for e in ev["events"] if e.get("event") == "fenced"),
    }  # fmt: skip


def _named(name: str, ev: dict[str, Any]) -> list[str]:
    """A feature's invariant: a matrix check, or a catalog check that must find its evidence."""
    if name in CHECKS:
        return CHECKS[name](ev)
    found = ev["catalog"][name]
    return found if isinstance(found, list) else [f"{name}: {found}"]


def judge(matrix: Matrix, cell: Cell, ev: dict[str, Any]) -> dict[str, Any]:
    """The verdict of one cell: each invariant's violations, recomputed from the evidence. A
    violation of an invariant the catalog predicts to break under the assumption the fault
    lifted is conceded (reported with the assumption), not a failure."""
    ev["expect"] = matrix.expect(cell.feature)
    checks = {name: _named(name, ev) for name in matrix.invariants(cell.feature)}
    catalog = {name: found for name, found in ev["catalog"].items() if isinstance(found, list)}
    found = {k: v for k, v in {**checks, **catalog}.items() if v}
    breaks = predicted_breaks(matrix, cell)
    conceded = {k: {"lifted": breaks[k], "found": v} for k, v in found.items() if k in breaks}
    violations = {k: v for k, v in found.items() if k not in breaks}
    return {"cell": cell.name, "feature": cell.feature, "fault": cell.fault, "mode": cell.mode,
            "seed": cell.seed, "runs": len(ev["runs"]), "checks": sorted(checks),
            "trace": fault_trace(ev),
            "catalog_checked": sorted(catalog),
            "catalog_without_evidence": sorted(set(ev["catalog"]) - set(catalog)),
            "violations": violations, "verdict": "FAIL" if violations else "PASS",
            "conceded": conceded, "predicted_breaks": sorted(breaks),
            "statuses": sorted({w["status"] for w in ev["workflows"] if w["id"] in ev["runs"]})}  # fmt: skip


def run(cells: list[Cell], matrix: Matrix, log_root: Path | None = None) -> list[dict[str, Any]]:
    """Run and judge each cell in turn; a harness failure is recorded as ERROR."""
    admin = testing.admin_dsn()
    out = []
    with testing.template_database(admin) as template:
        root = log_root or Path(tempfile.mkdtemp(prefix="ilr-matrix-"))
        for cell in cells:
            t0 = time.monotonic()
            print(f"matrix: {cell.name} (seed {cell.seed}) ...", flush=True)
            try:
                ev = run_cell(cell, admin, template, root / cell.name.replace("/", "-"))
                verdict = judge(matrix, cell, ev)
            except Exception as exc:
                verdict = {"cell": cell.name, "feature": cell.feature, "fault": cell.fault,
                           "mode": cell.mode, "seed": cell.seed, "verdict": "ERROR",
                           "error": f"{type(exc).__name__}: {exc}",
                           "traceback": traceback.format_exc(limit=6)}  # fmt: skip
            verdict["seconds"] = round(time.monotonic() - t0, 1)
            print(f"matrix: {cell.name}: {verdict['verdict']} in {verdict['seconds']} s"
                  + (f" {verdict.get('violations') or verdict.get('error')}"
                     if verdict["verdict"] != "PASS" else ""), flush=True)  # fmt: skip
            out.append(verdict)
    return out


def layout(matrix: Matrix) -> dict[str, Any]:
    """What the report renders of models/faults.yaml, kept in the JSON: the Markdown and the
    totals are then a function of the JSON alone, whatever the declaration became since."""
    return {
        "modes": list(matrix.modes),
        "features": {
            f: {"meaning": spec["meaning"], "invariants": matrix.invariants(f)}
            for f, spec in matrix.features.items()
        },
        "faults": {
            x: {"meaning": spec["meaning"], "driven": bool(spec["driven"])}
            for x, spec in matrix.faults.items()
        },
        "not_applying": [
            f"{f}/{x}" for f in matrix.features for x in matrix.faults if not matrix.applies(f, x)
        ],
    }


def layout_of(rep: dict[str, Any], matrix: Matrix | None = None) -> dict[str, Any]:
    """The report's own layout; a report made before it kept one reads the declaration now."""
    return rep.get("layout") or layout(matrix or load())


def aggregate(cells: list[dict[str, Any]], lay: dict[str, Any]) -> dict[str, Any]:
    """The report's counts, from its cells and its layout."""
    declared = [
        f"{f}/{x}/{m}" for f in lay["features"] for x in lay["faults"] for m in lay["modes"]
    ]
    ran = {r["cell"] for r in cells}
    off = set(lay["not_applying"])
    not_driven = [c for c in declared if not lay["faults"][c.split("/")[1]]["driven"]]
    not_applying = [c for c in declared if c.rsplit("/", 1)[0] in off]
    return {
        "size": {
            "features": len(lay["features"]),
            "faults": len(lay["faults"]),
            "driven_faults": sum(1 for x in lay["faults"].values() if x["driven"]),
            "modes": len(lay["modes"]),
            "declared_cells": len(declared),
            "not_applying": len(not_applying),
            "driven_cells": len(declared) - len(not_driven) - len(not_applying),
            "cells_run": len(cells),
        },
        "totals": {
            v: sum(1 for r in cells if r["verdict"] == v) for v in ("PASS", "FAIL", "ERROR")
        },
        "runs": sum(r.get("runs", 0) for r in cells),
        "violations": sum(len(v) for r in cells for v in r.get("violations", {}).values()),
        "conceded": sum(len(c["found"]) for r in cells for c in r.get("conceded", {}).values()),
        "not_run": [c for c in declared if c not in ran and c not in not_applying],
        "not_driven": not_driven,
    }


def report(matrix: Matrix, results: list[dict[str, Any]], seed: int, wall: float,
           scope: str, git: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    lay = layout(matrix)
    return {
        "commit": git["commit"], "dirty": git["dirty"], "seed": seed, "scope": scope,
        "python": platform.python_version(), "wall_seconds": round(wall, 1),
        **aggregate(results, lay),
        "layout": lay,
        "cells": results,
    }  # fmt: skip


def modes_compared(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each (feature, fault) run in more than one mode: its verdict and end statuses per mode,
    and whether they agree (`same`)."""
    by_pair: dict[tuple[str, str], dict[str, tuple[str, frozenset[str]]]] = {}
    for r in cells:
        modes = by_pair.setdefault((r["feature"], r["fault"]), {})
        modes[r["mode"]] = (r["verdict"], frozenset(r.get("statuses") or ()))
    return [{"feature": f, "fault": x, "modes": modes, "same": len(set(modes.values())) == 1}
            for (f, x), modes in by_pair.items() if len(modes) > 1]  # fmt: skip


def render(rep: dict[str, Any], matrix: Matrix | None = None) -> str:
    """matrix.md from matrix.json: its layout and cells (the counts are recomputed from them)."""
    lay = layout_of(rep, matrix)
    rep = {**rep, **aggregate(rep["cells"], lay)}
    features, faults = lay["features"], lay["faults"]
    off = set(lay["not_applying"])
    size, totals = rep["size"], rep["totals"]
    dirty = " (dirty)" if rep["dirty"] else ""
    lines = [
        "# The fault matrix",
        "",
        f"Made by `python -m conformance.matrix` at {rep['commit'][:12]}{dirty}, seed "
        f"{rep['seed']}, Python {rep['python']}, {rep['scope']}; wall time "
        f"{rep['wall_seconds'] / 60:.1f} min. Declared in models/faults.yaml; how to read it: "
        "docs/matrix.md.",
        "",
        "**Rule** (stated before the data): a cell passes when every invariant named for it, "
        "and every code check of the invariant catalog with evidence in it, finds 0 "
        "violations, each recomputed from ground truth (tables with the database's "
        "timestamps, side logs, the target's ledger). A harness failure is an ERROR, never a "
        "pass. A fault marked not driven is NOT RUN, never a pass.",
        "",
        f"**Size**: {size['features']} features x {size['faults']} faults x {size['modes']} "
        f"modes = {size['declared_cells']} declared cells, of which {size['not_applying']} "
        "pair a fault with a feature it cannot touch (a slow target with a feature that sends "
        f"nothing); {size['driven_faults']} faults driven, {size['driven_cells']} driven cells; "
        f"{size['cells_run']} run here.",
        "",
        f"**Result**: {totals['PASS']} PASS, {totals['FAIL']} FAIL, {totals['ERROR']} ERROR; "
        f"{rep['runs']} workflow runs, {rep['violations']} violations; "
        f"{rep['conceded']} conceded under a lifted assumption; "
        f"{len(rep['not_run'])} declared cells not run "
        f"({len(rep['not_driven'])} of them under faults not yet driven).",
        "",
    ]
    ran = {r["cell"]: r for r in rep["cells"]}
    lines += [
        "Each cell: its verdict, the runs it judged, the takeovers of a running claim "
        "(tk, from the claims table) and the workers' reports of a lost database (db) "
        "that show where the fault landed, and its wall time.",
        "",
    ]
    for mode in lay["modes"]:
        lines += [f"## Mode {mode}", "",
                  "| feature | " + " | ".join(faults) + " |",
                  "|---|" + "---|" * len(faults)]  # fmt: skip
        for feature in features:
            row = []
            for fault in faults:
                r = ran.get(f"{feature}/{fault}/{mode}")
                if r is None and f"{feature}/{fault}" in off:
                    row.append("does not apply")
                elif r is None:
                    row.append("not driven" if not faults[fault]["driven"] else "not run")
                else:
                    t = r.get("trace") or {}
                    row.append(f"{r['verdict']} ({r.get('runs', 0)} runs, "
                               f"{t.get('takeovers', 0)} tk, {t.get('db_fault_events', 0)} db, "
                               f"{r['seconds']} s)")  # fmt: skip
            lines.append(f"| {feature} | " + " | ".join(row) + " |")
        lines.append("")
    pairs = modes_compared(rep["cells"])
    differ = [p for p in pairs if not p["same"]]
    lines += [
        "## Both modes", "",
        "The sync and the asyncio worker run one engine (docs/design.md#run-engine); each "
        "(feature, fault) run in both modes is compared: the same verdict and the same set of "
        "statuses its runs ended in, read from the workflows table. "
        f"**{len(pairs) - len(differ)} of {len(pairs)} pairs behave the same.**", "",
    ]  # fmt: skip
    for p in differ:
        lines.append(f"- {p['feature']}/{p['fault']}: " + "; ".join(
            f"{m} {v} {sorted(st)}" for m, (v, st) in p["modes"].items()))  # fmt: skip
    if differ:
        lines.append("")
    bad = [r for r in rep["cells"] if r["verdict"] != "PASS"]
    lines += ["## Violations and errors", ""]
    if not bad:
        lines += ["None.", ""]
    for r in bad:
        lines.append(f"- {r['cell']} (seed {r['seed']}): {r['verdict']}")
        for name, found in (r.get("violations") or {}).items():
            for v in found[:5]:
                lines.append(f"  - {name}: {v}")
        if r.get("error"):
            lines.append(f"  - {r['error']}")
    lines += [
        "",
        "## Conceded under a lifted assumption",
        "",
        "A fault that lifts an assumption of docs/design.md#assumptions (SIGSTOP at a "
        "moment nobody chooses can pause a worker across its send deadline: A1) is "
        "judged against the catalog's prediction for that setting. These violations "
        "are what the catalog predicts (V); they are the conceded boundary, measured.",
        "",
    ]
    conceded = [r for r in rep["cells"] if r.get("conceded")]
    if not conceded:
        lines.append("None.")
    for r in conceded:
        for name, c in r["conceded"].items():
            lines.append(f"- {r['cell']} (seed {r['seed']}), {name}, {c['lifted']} lifted: "
                         + "; ".join(c["found"][:3]))  # fmt: skip
    lines += ["", "## Invariants per feature", ""]
    for feature, spec in features.items():
        lines.append(f"- **{feature}** ({spec['meaning']}): " + ", ".join(spec["invariants"]))
    lines += ["", "## Faults", ""]
    for fault, spec in faults.items():
        driven = "" if spec["driven"] else " (not driven yet)"
        lines.append(f"- **{fault}**{driven}: {spec['meaning']}")
    return "\n".join(lines) + "\n"


def select(matrix: Matrix, args: argparse.Namespace) -> list[Cell]:
    cells = matrix.sample(args.seed) if args.sample else matrix.cells(args.seed)
    if args.only:
        wanted = set(args.only.split(","))
        every = {c.name: c for c in matrix.cells(args.seed)}
        unknown = wanted - set(every)
        if unknown:
            raise SystemExit(f"conformance.matrix: no driven cell {', '.join(sorted(unknown))}; "
                             "cells are feature/fault/mode")  # fmt: skip
        cells = [every[name] for name in sorted(wanted)]
    if args.exclusive == "only":
        cells = [c for c in cells if matrix.exclusive(c)]
    elif args.exclusive == "skip":
        cells = [c for c in cells if not matrix.exclusive(c)]
    return cells


REGENERATE = "make matrix (python -m conformance.matrix)"
# The committed matrices, as directories of the repository: the whole one, and a re-run of
# some cells (python -m conformance.matrix --only ... --results-dir results/matrix_rerun).
COMMITTED = ("results", "results/matrix_rerun")


def verify(where: Path = REPO / "results", label: str = "results") -> vc.Outcome:
    """WHERE/matrix.md and the JSON's counts against their recomputation from its cells."""
    name = f"{label}/matrix.md"
    js = where / "matrix.json"
    render_cmd = "python -m conformance.matrix --render" + (
        f" --results-dir {label}" if label != "results" else ""
    )
    if not js.exists():
        return vc.unverifiable(name, REGENERATE, "no matrix.json to render it from")
    rep = json.loads(js.read_text())
    again = vc.json_roundtrip(aggregate(rep["cells"], layout_of(rep)))
    stored = {k: rep.get(k) for k in again}
    md = where / "matrix.md"
    return vc.text_outcome(
        name,
        md.read_text() if md.exists() else "",
        render(rep),
        REGENERATE,
        render_cmd,
        vc.diff_json(stored, again),
    )


def _from_json(args: argparse.Namespace) -> int:
    """--verify and --render: read matrix.json, run nothing."""
    if args.results_dir:
        dirs = [(Path(args.results_dir), args.results_dir.rstrip("/"))]
    else:
        dirs = [(REPO / d, d) for d in COMMITTED]
    if args.verify:
        return vc.finish([verify(where, label) for where, label in dirs])
    for where, label in dirs:
        (where / "matrix.md").write_text(render(json.loads((where / "matrix.json").read_text())))
        print(f"wrote {label}/matrix.md from {label}/matrix.json")
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m conformance.matrix", description=__doc__)
    ap.add_argument("--seed", type=int, default=1, help="the seed every cell's own derives from")
    ap.add_argument("--sample", action="store_true", help="the seeded sample, not every cell")
    ap.add_argument("--only", default=None, help="cells to run: feature/fault/mode,...")
    ap.add_argument("--exclusive", choices=("any", "only", "skip"), default="any")
    ap.add_argument("--results-dir", default=None,
                    help="write matrix.md and .json here (default: results/ for the whole "
                         "matrix, .data/matrix/ for a sample or a selection)")  # fmt: skip
    ap.add_argument(
        "--verify",
        action="store_true",
        help="recompute matrix.md and the JSON's counts from its cells in memory "
        "and compare (results/ and results/matrix_rerun/, or --results-dir); "
        "runs nothing",
    )
    ap.add_argument(
        "--render",
        action="store_true",
        help="rewrite matrix.md from matrix.json (the template changed); runs nothing",
    )
    args = ap.parse_args(argv)
    if args.verify or args.render:
        return _from_json(args)
    matrix = load()
    cells = select(matrix, args)
    whole = not (args.sample or args.only or args.exclusive != "any")
    out = Path(args.results_dir or (REPO / "results" if whole else REPO / ".data" / "matrix"))
    print(f"matrix: {len(cells)} cells, seed {args.seed} (rerun with --seed {args.seed})")
    from world import gitstate

    git = {"commit": gitstate.commit(), "dirty": gitstate.dirty()}  # the code that runs
    t0 = time.monotonic()
    results = run(cells, matrix)
    scope = "every driven cell" if whole else f"{len(cells)} selected cells"
    rep = report(matrix, results, args.seed, time.monotonic() - t0, scope, git)
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.json").write_text(json.dumps(rep, indent=1, default=str) + "\n")
    (out / "matrix.md").write_text(render(rep))
    print(f"matrix: {rep['totals']} -> {out / 'matrix.md'}")
    return 0 if rep["totals"]["FAIL"] == 0 and rep["totals"]["ERROR"] == 0 else 1
