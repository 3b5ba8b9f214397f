"""Before/after measurements: another checkout's runtime measured beside this one's.

prove.profile_onestep and prove.result_wait take `--before CHECKOUT` (a clone at an older
commit); each repetition runs the "before" runtime and then this one ("after"), each in a
subprocess whose PYTHONPATH puts that checkout's runtime first. The report names each
checkout's commit and whether its tree was dirty, and shows the command without the path.
"""

from __future__ import annotations

import argparse
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
