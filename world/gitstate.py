"""Which code made a result (Prove, bench, TLC, mutants): the commit, and whether the code differed from it.

One rule for every report (Prove, bench): the tree is dirty when a tracked or untracked file
outside results/ differs from the commit. Generated results do not make the code dirty, so a
benchmark run after a sweep in the same clone still records a clean commit.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip()


def commit() -> str:
    return _git("rev-parse", "HEAD")


def dirty() -> bool:
    return bool(_git("status", "--porcelain", "--", ".", ":!results"))
