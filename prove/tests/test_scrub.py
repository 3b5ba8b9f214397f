"""Committed results never name a path of this machine (prove/scrub.py)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from prove.scrub import REPO, scrub


def test_scrub_names_every_machine_path() -> None:
    trace = (f'File "{REPO}/baselines/refund.py", line 1\n'
             f'File "{sys.base_prefix}/lib/python3/concurrent/futures/thread.py", line 58\n'
             f"{Path.home()}/x {tempfile.gettempdir()}/ilr-abc/ledger.db /tmp/other")  # fmt: skip
    out = scrub(trace)
    assert '"<repo>/baselines/refund.py"' in out and '"<python>/lib/python3/' in out
    for path in (str(REPO), sys.base_prefix, str(Path.home()), "/tmp/"):
        assert path not in out, (path, out)


def test_no_tracked_result_names_a_machine_path() -> None:
    files = subprocess.run(["git", "ls-files", "results"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()  # fmt: skip
    assert files, "no tracked results"
    leaks = [f for f in files if f.endswith((".md", ".json"))
             and any(p in (REPO / f).read_text() for p in (str(REPO), sys.base_prefix, "/tmp/"))]  # fmt: skip
    assert not leaks, leaks
