"""`make mutants`: write each catalog mutant into a copy of the tree and run the tests the
catalog says must kill it (docs/verification.md#mutants). Writes results/mutants.md and .json.

The working tree is never touched: the tree (tracked and untracked, not ignored) is copied once,
the named tests run on the unmutated copy first (all must pass, or no verdict means anything),
then each mutant gets its own fresh copy. The copy's code wins over the editable install by
PYTHONPATH, which worker subprocesses inherit.

Verdicts: killed (a named test failed), timeout (the tests did not finish within the budget:
a hang fails CI too, but it is reported apart), survived (every named test passed) and error
(pytest could not run the tests: a collection error is not a kill).

results/mutants.json holds every mutant's verdict: it is the raw data, and mutants.md is a pure
function of it (`render`). `--verify` renders it again in memory and compares; `--render`
rewrites mutants.md from the JSON, for when only this template changed (docs/results.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from interlock_runtime import testing
from models import catalog as catalog_mod
from models import mutant_catalog
from models.mutant_catalog import Mutant
from world import gitstate
from world import verify_common as vc

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
FAILED = re.compile(r"^FAILED (.+?)(?: - .*)?$", re.M)
SKIPPED = re.compile(r"\b\d+ skipped\b")


@dataclass
class Outcome:
    name: str
    verdict: str  # killed | timeout | survived | error | baseline
    killed_by: list[str]  # the node ids that failed
    seconds: float
    tail: str  # the end of pytest's output, for a survivor or an error


def _copy_tree(dest: Path) -> None:
    """The files git would commit (tracked, and untracked but not ignored), as they are now."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, check=True).stdout.split(b"\0")  # fmt: skip
    for raw in files:
        if not raw:
            continue
        rel = raw.decode()
        src = REPO / rel
        if not src.is_file():
            continue  # deleted in the working tree
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def _env(root: Path) -> dict[str, str]:
    """The copy's code first on the path; the cluster of the working tree (a copy elsewhere
    would look for a cluster of its own, keyed by its path)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "runtime"), str(root)]),
                ILR_DSN=testing.admin_dsn())  # fmt: skip


def _run_tests(
    root: Path, tests: tuple[str, ...] | list[str], timeout: float
) -> tuple[str, list[str], str]:
    env = _env(root)
    env.pop("PYTHONSAFEPATH", None)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", *tests]
    try:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return "timeout", [], out[-3000:]
    out = proc.stdout + proc.stderr
    failed = FAILED.findall(proc.stdout)
    if proc.returncode == 1 and failed:  # a test failed; an error in setup is no kill
        return "killed", failed, out[-3000:]
    if SKIPPED.search(proc.stdout):  # a skipped test judges nothing: not a pass either
        return "error", failed, out[-3000:]
    if proc.returncode == 0:
        return "survived", [], out[-3000:]
    return "error", failed, out[-3000:]


def _judge(m: Mutant, pristine: Path, scratch: Path, timeout: float) -> Outcome:
    root = scratch / m.name
    shutil.copytree(pristine, root, symlinks=True)
    try:
        m.apply(root)
        t = time.monotonic()
        verdict, failed, tail = _run_tests(root, m.killed_by, timeout)
        return Outcome(m.name, verdict, failed, round(time.monotonic() - t, 1),
                       tail if verdict in ("survived", "error") else "")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _verify_tree(root: Path) -> None:
    """The copy's code must be what the tests import, or every verdict is about the wrong tree."""
    env = _env(root)
    code = "import interlock_runtime, world; print(interlock_runtime.__file__, world.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    if not all(Path(p).resolve().is_relative_to(root.resolve()) for p in out):
        raise SystemExit(f"the copy's packages are not the ones imported: {out}")


def run(names: list[str] | None, jobs: int, timeout: float) -> dict:
    mutants = mutant_catalog.load()
    bad = mutant_catalog.problems(mutants, coverage=False)
    if bad:
        raise SystemExit("the mutant catalog has problems:\n  " + "\n  ".join(bad))
    if names:
        unknown = sorted(set(names) - {m.name for m in mutants})
        if unknown:
            raise SystemExit(f"no mutant named {', '.join(unknown)}")
        mutants = [m for m in mutants if m.name in names]
    started = datetime.now(timezone.utc)
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ilr-mutants-") as tmp:
        scratch = Path(tmp)
        pristine = scratch / "_pristine"
        pristine.mkdir()
        _copy_tree(pristine)
        _verify_tree(pristine)
        tests = sorted({t for m in mutants for t in m.killed_by})
        print(f"baseline: {len(tests)} tests on the unmutated tree", flush=True)
        t = time.monotonic()
        verdict, failed, tail = _run_tests(pristine, tests, timeout * 4)
        baseline = Outcome("(unmutated)", "baseline", failed, round(time.monotonic() - t, 1), "")
        if verdict != "survived":
            raise SystemExit(
                f"the named tests do not pass on the unmutated tree ({verdict}):\n{tail}"
            )
        print(f"baseline passed in {baseline.seconds} s", flush=True)

        def one(m: Mutant) -> Outcome:
            o = _judge(m, pristine, scratch, timeout)
            print(f"{o.verdict:9} {m.name} ({o.seconds} s) {' '.join(o.killed_by)}", flush=True)
            return o

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            outcomes = list(pool.map(one, mutants))
    by_name = {m.name: m for m in mutants}
    rows = []
    for o in outcomes:
        m = by_name[o.name]
        rows.append({**asdict(o), "area": m.area, "meaning": m.meaning,
                     "invariants": list(m.invariants), "broken": m.broken, "model": m.model,
                     "named_tests": list(m.killed_by)})  # fmt: skip
    return {
        "generated_at": started.isoformat(timespec="seconds"),
        # the catalog's invariants as the run saw them: the "By invariant" table renders from
        # these, not from a catalog edited since
        "catalog_invariants": catalog_invariants(),
        "commit": gitstate.commit(),
        "dirty": gitstate.dirty(),
        "python": platform.python_version(),
        "jobs": jobs,
        "timeout_s": timeout,
        "wall_s": round(time.monotonic() - t_all, 1),
        "baseline": {"tests": len(tests), "seconds": baseline.seconds},
        "mutants": rows,
    }


def catalog_invariants() -> list[list]:
    """[name, [BROKEN model variants]] of each catalog invariant, in the catalog's order."""
    return [[name, list(inv.broken_by)] for name, inv in catalog_mod.load().invariants.items()]


def render(res: dict) -> str:
    """mutants.md from mutants.json (nothing else: a result made before the JSON kept the
    catalog's invariants reads them from the catalog as it is now)."""
    rows = res["mutants"]
    count = {
        v: sum(r["verdict"] == v for r in rows) for v in ("killed", "timeout", "survived", "error")
    }
    dirty = " (**dirty tree**: not a result to publish)" if res["dirty"] else ""
    out = [
        "# Mutants: the catalog's bugs written into the code",
        "",
        f"Generated by `make mutants` (`python -m conformance.mutants`) at {res['generated_at']}, "
        f"commit {res['commit'][:7]}{dirty}; Python {res['python']}; {res['jobs']} at a time; "
        f"a mutant's tests get {res['timeout_s']:.0f} s; wall time {res['wall_s'] / 60:.1f} min.",
        "",
        "Each mutant is one bug, applied as a text patch to a copy of the tree "
        "(models/mutants/*.yaml); the tests the catalog names for it run on that copy. "
        "Rule, fixed before the run: a mutant is killed when at least one named test fails; a "
        "test run that exceeds the time budget is reported as timeout (a hang fails CI, but "
        "it is not a clean kill); a mutant whose tests all pass survived. The named tests "
        f"first ran on the unmutated copy and passed ({res['baseline']['tests']} tests, "
        f"{res['baseline']['seconds']:.0f} s).",
        "",
        f"**{len(rows)} mutants: {count['killed']} killed, {count['timeout']} timeout, "
        f"{count['survived']} survived, {count['error']} error.**",
        "",
        "| mutant | area | invariants | model counterpart | verdict | killed by | time (s) |",
        "|---|---|---|---|---|---|---:|",
    ]
    for r in rows:
        model = f"BROKEN {r['broken']}" if r["broken"] else "none (see below)"
        verdict = r["verdict"] if r["verdict"] == "killed" else f"**{r['verdict']}**"
        killers = "<br>".join(f"`{k}`" for k in r["killed_by"]) or "-"
        out.append(f"| {r['name']} | {r['area']} | {', '.join(r['invariants'])} | {model} "
                   f"| {verdict} | {killers} | {r['seconds']:.1f} |")  # fmt: skip
    out += ["", "## By invariant", "",
            "Each catalog invariant with the BROKEN model variants the catalog names for it "
            "(`broken_by`) and the code mutants that break it.", "",
            "| invariant | BROKEN model variants | code mutants |", "|---|---|---|"]  # fmt: skip
    for name, broken_by in res.get("catalog_invariants") or catalog_invariants():
        mutants = [r["name"] for r in rows if name in r["invariants"]]
        if broken_by or mutants:
            out.append(f"| {name} | {', '.join(broken_by) or '-'} "
                       f"| {', '.join(mutants) or '-'} |")  # fmt: skip
    out += ["", "## What each mutant does", ""]
    for r in rows:
        out.append(f"- **{r['name']}**: {r['meaning']}")
        if r["model"]:
            out.append(f"  Not in the model: {r['model']}")
    bad = [r for r in rows if r["verdict"] in ("survived", "error")]
    if bad:
        out += ["", "## Survivors and errors", ""]
        for r in bad:
            out += [f"### {r['name']} ({r['verdict']})", "", "```", r["tail"].strip(), "```", ""]
    return "\n".join(out) + "\n"


REGENERATE = "make mutants (python -m conformance.mutants)"
RENDER = "python -m conformance.mutants --render"


def verify(results: Path = RESULTS, name: str = "mutants") -> vc.Outcome:
    """NAME.md against its rendering from NAME.json."""
    md, js = results / f"{name}.md", results / f"{name}.json"
    label = f"results/{name}.md"
    if not js.exists():
        return vc.unverifiable(label, REGENERATE, f"no {name}.json to render it from")
    committed = md.read_text() if md.exists() else ""
    rendered = render(json.loads(js.read_text()))
    return vc.text_outcome(label, committed, rendered, REGENERATE, RENDER)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m conformance.mutants", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--only", help="comma-separated mutant names (default: all)")
    ap.add_argument("--jobs", type=int, default=1, help="mutants judged at once (default 1)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds for one mutant's tests (default 600)")  # fmt: skip
    ap.add_argument("--out", default=str(RESULTS / "mutants"),
                    help="write OUT.md and OUT.json (default results/mutants)")  # fmt: skip
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument(
        "--verify",
        action="store_true",
        help="render OUT.md from OUT.json in memory and compare; runs nothing",
    )
    ap.add_argument(
        "--render",
        action="store_true",
        help="rewrite OUT.md from OUT.json (the template changed); runs nothing",
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.verify:
        return vc.finish([verify(out.parent, out.name)])
    if args.render:
        out.with_suffix(".md").write_text(render(json.loads(out.with_suffix(".json").read_text())))
        print(f"wrote {out.with_suffix('.md')} from {out.with_suffix('.json')}")
        return 0
    if args.list:
        for m in mutant_catalog.load():
            print(f"{m.name:32} {m.area:12} {', '.join(m.invariants)}")
        return 0
    names = [n.strip() for n in args.only.split(",")] if args.only else None
    res = run(names, max(1, args.jobs), args.timeout)
    if names is None:
        out.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
        out.with_suffix(".md").write_text(render(res))
        print(f"wrote {out.with_suffix('.md')}")
    left = [r["name"] for r in res["mutants"] if r["verdict"] in ("survived", "error")]
    if left:
        print(f"not killed: {', '.join(left)}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
