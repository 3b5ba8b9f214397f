"""`make refresh`: regenerate every published result in turn, then the index; resumable.

The steps are the results of prove/results_sources.yaml, in its order, each running its
`command` (one list for the index and for this runner). A result declared `refresh: false`
needs an input only its author can name (a checkout of an older commit, a chosen set of
cells), so it is listed but not run.

Resuming. After each step that exits 0 the state file .data/refresh/state.json records the
step, the HEAD it ran at and its wall time in seconds (every attempt, failed or not, is kept in
its `attempts` list, so the time of a sweep split over several sittings adds up). A rerun skips
a step finished at HEAD, or at an earlier commit when no commit since touched the code the
result measures (so committing each result as it comes does not start the sweep over). A step that fails stops the run; the next run starts
there. `--fresh` (`make refresh FRESH=1`) forgets the state.

    python -m prove.refresh --list           # the steps, and which are done
    python -m prove.refresh                  # every step not done, then the index
    python -m prove.refresh --only soak      # one step
    python -m prove.refresh --stale-only     # the steps whose result the index says is not current
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prove import freshness
from prove.freshness import REPO, Source, SourcesError

STATE = ".data/refresh/state.json"

Runner = Callable[[str, Path], int]


def run_command(command: str, root: Path) -> int:
    """Run a declared command from the repository root; `python` is this interpreter."""
    if command.startswith("python "):
        command = shlex.quote(sys.executable) + command[len("python") :]
    print(f"prove.refresh: $ {command}", flush=True)
    return subprocess.run(command, shell=True, cwd=root).returncode


def head(root: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"prove.refresh: not a git checkout: {out.stderr.strip()}")
    return out.stdout.strip()


def load_state(root: Path) -> dict[str, Any]:
    """The finished steps, {"done": {name: {"head": sha, "seconds": s}}}, and every attempt,
    {"attempts": [{"step", "head", "seconds", "exit"}]}; empty when absent or unreadable."""
    try:
        state = json.loads((root / STATE).read_text())
    except (OSError, ValueError):
        return {"done": {}, "attempts": []}
    done = state.get("done") if isinstance(state, dict) else None
    attempts = state.get("attempts") if isinstance(state, dict) else None
    return {
        "done": done if isinstance(done, dict) else {},
        "attempts": attempts if isinstance(attempts, list) else [],
    }


def save_state(root: Path, state: dict[str, Any]) -> None:
    path = root / STATE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)  # atomic: an interrupted write leaves the old state


def finished(root: Path, source: Source, state: dict[str, Any]) -> str | None:
    """The commit a step finished at, when no commit since touched its code; else None."""
    at = state["done"].get(source.name, {}).get("head")
    if not isinstance(at, str):
        return None
    if freshness.resolve(root, at) is None:
        return None
    return at if freshness.touched(root, at, source.paths).count == 0 else None


def select(root: Path, sources: list[Source], only: str | None, stale_only: bool) -> list[Source]:
    """The steps to consider, in declared order; SystemExit(2) naming what to do on a bad name."""
    if only is not None:
        by_name = {s.name: s for s in sources}
        if only not in by_name:
            raise SystemExit(f"prove.refresh: no step {only!r}; steps: {', '.join(by_name)}")
        step = by_name[only]
        if not step.refresh:
            raise SystemExit(
                f"prove.refresh: {only} is not run by refresh (see "
                f"{freshness.SOURCES}); run `{step.command}` yourself"
            )
        return [step]
    steps = [s for s in sources if s.refresh]
    if stale_only:
        index = freshness.build_index(root, sources)
        behind = {r["name"] for r in index["results"] if r["status"] != "current"}
        steps = [s for s in steps if s.name in behind]
    return steps


def refresh(
    root: Path = REPO,
    *,
    only: str | None = None,
    stale_only: bool = False,
    fresh: bool = False,
    runner: Runner = run_command,
    index: bool = True,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Run the selected steps not yet done, then write the index; the first failing exit code."""
    sources = freshness.load_sources(root)
    steps = select(root, sources, only, stale_only)
    state: dict[str, Any] = {"done": {}, "attempts": []} if fresh else load_state(root)
    if fresh:
        save_state(root, state)
    now = head(root)
    for step in steps:
        at = finished(root, step, state)
        if at is not None:
            print(f"prove.refresh: {step.name}: done at {at[:7]}, skipped", flush=True)
            continue
        began = clock()
        rc = runner(step.command, root)
        seconds = round(clock() - began, 1)
        state["attempts"].append({"step": step.name, "head": now, "seconds": seconds, "exit": rc})
        save_state(root, state)
        print(f"prove.refresh: {step.name}: exit {rc} after {seconds:.0f} s", flush=True)
        if rc != 0:
            print(
                f"prove.refresh: {step.name} failed (exit {rc}); fix it and run again to "
                "resume here",
                file=sys.stderr,
            )
            return rc
        state["done"][step.name] = {"head": now, "seconds": seconds}
        save_state(root, state)
    if index:
        return freshness.main(["--root", str(root)])
    return 0


def listing(root: Path = REPO) -> str:
    """One line per step: its name, whether it is done (at which commit, in how long), its
    command; then the wall time of the finished steps and of every attempt."""
    sources = freshness.load_sources(root)
    state = load_state(root)
    lines, total = [], 0.0
    for s in sources:
        took = ""
        if not s.refresh:
            mark = "manual"
        else:
            at = finished(root, s, state)
            mark = f"done at {at[:7]}" if at else "to do"
            seconds = state["done"].get(s.name, {}).get("seconds") if at else None
            if isinstance(seconds, (int, float)):
                total += seconds
                took = f"{seconds / 60:.1f} min"
        lines.append(f"{s.name:<16} {mark:<16} {took:>10}  {s.command}")
    spent = sum(a.get("seconds", 0) for a in state["attempts"] if isinstance(a, dict))
    lines.append(
        f"finished steps: {total / 60:.1f} min; every attempt, failed and repeated ones "
        f"included: {spent / 60:.1f} min"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m prove.refresh", description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="print the steps and which are done")
    ap.add_argument("--only", metavar="NAME", help="run this step alone")
    ap.add_argument(
        "--stale-only",
        action="store_true",
        help="run only the steps whose result the index says is not current",
    )
    ap.add_argument("--fresh", action="store_true", help="forget finished steps, start over")
    args = ap.parse_args(argv)
    try:
        if args.list:
            print(listing())
            return 0
        return refresh(only=args.only, stale_only=args.stale_only, fresh=args.fresh)
    except SourcesError as e:
        print(f"prove.refresh: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
