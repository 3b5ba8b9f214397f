"""Before/after measurements: another checkout's runtime measured beside this one's.

prove.profile_onestep and prove.result_wait take `--before CHECKOUT` (a clone at an older
commit); each repetition runs the "before" runtime and then this one ("after"), each in a
subprocess whose PYTHONPATH puts that checkout's runtime first. The report names each
checkout's commit and whether its tree was dirty, and shows the command without the path.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any


def commit_of(path: Path) -> dict[str, Any]:
    """A checkout's commit, and whether its tree (results/ aside) differs from it."""

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=path, capture_output=True, text=True).stdout.strip()

    return {"commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--", ".", ":!results"))}  # fmt: skip


def add_before(ap: argparse.ArgumentParser, what: str) -> None:
    ap.add_argument("--before", default=None, metavar="CHECKOUT",
                    help=f"also {what} the runtime of this checkout (a clone at an older "
                         "commit), interleaved with this one's: the before/after comparison")  # fmt: skip


def variants(before: str | None, root: Path) -> dict[str, Path]:
    """{"before": that checkout, "after": root}, or {"this": root} without --before."""
    out = {"before": Path(before).resolve()} if before else {}
    out["after" if before else "this"] = root
    return out


def command(prog: str, argv: list[str], measured: dict[str, dict[str, Any]]) -> str:
    """The command line as run, the --before path shown as the commit it held."""
    shown = [f"<a checkout of {measured['before']['commit'][:12]}>"
             if i > 0 and argv[i - 1] == "--before" else a for i, a in enumerate(argv)]  # fmt: skip
    return " ".join([f"python -m {prog}", *shown])


def parse(prog: str, doc: str, full: dict[str, Any], what: str,
          argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:  # fmt: skip
    """The options of a before/after measurement: one per `full` size (an int, or a bool
    turned off by --no-NAME), --before and --json. Returns the args and the sizes."""
    ap = argparse.ArgumentParser(prog=f"python -m {prog}", description=doc.split("\n")[0])
    for k, v in full.items():
        if isinstance(v, bool):
            ap.add_argument(f"--no-{k}", dest=k, action="store_false")
        else:
            ap.add_argument(f"--{k.replace('_', '-')}", type=int, default=v)
    add_before(ap, what)
    ap.add_argument("--json", default=None, help="write the report here instead of results/")
    args = ap.parse_args(argv)
    return args, {k: getattr(args, k) for k in full}


def save(report: dict[str, Any], markdown: str, name: str, results: Path,
         json_path: str | None) -> None:  # fmt: skip
    """The report as JSON and markdown: at json_path (and beside it), or as results/NAME.*
    with machine paths scrubbed from the JSON."""
    text = json.dumps(report, indent=1, default=str)
    if json_path:
        Path(json_path).write_text(text)
        Path(json_path).with_suffix(".md").write_text(markdown)
        return
    from prove.scrub import scrub

    (results / f"{name}.json").write_text(scrub(text))
    (results / f"{name}.md").write_text(markdown)
