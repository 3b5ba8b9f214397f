"""The runtime refuses a database that can lose a commit it acknowledged (durability.py):
synchronous_commit off (here as a session option in the DSN, as a role setting would be) stops
a client and a worker process before anything is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from interlock_runtime import Runtime, UnsafeDatabase


def _with_options(dsn: str, options: str) -> str:
    return make_conninfo(**{**conninfo_to_dict(dsn), "options": options})


def test_a_client_refuses_synchronous_commit_off(dsn: str) -> None:
    with pytest.raises(UnsafeDatabase, match="synchronous_commit = off"):
        Runtime(_with_options(dsn, "-c synchronous_commit=off"))
    with Runtime(_with_options(dsn, "-c synchronous_commit=local")) as rt:  # one node: safe
        assert rt.list() is not None


def test_a_worker_refuses_to_start_and_says_what_to_change(dsn: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "interlock_runtime.cli.worker", "--module", "flows",
         "--dsn", _with_options(dsn, "-c synchronous_commit=off")],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "synchronous_commit = off" in proc.stderr and "Traceback" not in proc.stderr
    assert "synchronous_commit = on" in proc.stderr  # what to do
