"""The Temporal dev server manager: a real `temporal server start-dev`, SIGKILLed and restarted."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from world.temporal_server import (
    TemporalDevServer,
    TemporalServerError,
    find_binary,
    free_port,
    port_open,
)

REPO = Path(__file__).resolve().parents[2]


async def _start_unworked_workflow(address: str, wf_id: str) -> str:
    """Start a workflow no worker serves: it stays RUNNING with a scheduled workflow task."""
    client = await Client.connect(address)
    handle = await client.start_workflow(
        "NobodyServesThis", {"case": "case-4471"}, id=wf_id, task_queue=f"tq-{wf_id}"
    )
    return handle.result_run_id or ""


async def _describe(address: str, wf_id: str):
    client = await Client.connect(address)
    return await client.get_workflow_handle(wf_id).describe()


def test_binary_is_the_venv_cli():
    binary = find_binary()
    assert os.access(binary, os.X_OK)
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    assert "temporal version" in out.stdout


def test_sigkill_and_restart_on_the_same_file_keeps_a_workflow(tmp_path):
    server = TemporalDevServer(tmp_path / "temporal.db")
    try:
        server.start()
        assert server.address == f"127.0.0.1:{server.port}"
        assert server.running and server.ready()
        wf_id = f"survives-{uuid.uuid4().hex[:8]}"
        run_id = asyncio.run(_start_unworked_workflow(server.address, wf_id))
        first_pid = server.pid

        server.kill()  # a real SIGKILL: the process is gone at once, no clean shutdown
        assert not server.running
        with pytest.raises(ProcessLookupError):
            os.kill(first_pid, 0)
        assert not port_open(server.port)

        server.restart()  # same db file, same ports
        assert server.pid != first_pid and server.running
        desc = asyncio.run(_describe(server.address, wf_id))
        assert desc.run_id == run_id
        assert desc.status == WorkflowExecutionStatus.RUNNING
        assert desc.workflow_type == "NobodyServesThis"
    finally:
        server.stop()
    assert not server.running
    assert (tmp_path / "temporal.db").exists()


def test_taken_port_is_a_clear_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        server = TemporalDevServer(tmp_path / "t.db", port=s.getsockname()[1])
        with pytest.raises(TemporalServerError, match="already taken"):
            server.start()
    assert server.pid is None


def test_missing_binary_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ILR_TEMPORAL_BIN", str(tmp_path / "no-such-temporal"))
    with pytest.raises(TemporalServerError, match="ILR_TEMPORAL_BIN"):
        TemporalDevServer(tmp_path / "t.db").start()


def test_cli_start_status_stop(tmp_path):
    env = dict(os.environ, ILR_DATA=str(tmp_path), ILR_TEMPORAL_PORT=str(free_port()))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "world.temporal_server", *args],
                              capture_output=True, text=True, env=env, cwd=REPO, timeout=90)  # fmt: skip

    started = cli("start")
    try:
        assert started.returncode == 0, started.stderr
        info = json.loads(started.stdout)
        assert info["db_file"] == str(tmp_path / "temporal.db")
        recorded = json.loads((tmp_path / "temporal.json").read_text())
        assert recorded["pid"] == info["pid"] and recorded["address"] == info["address"]
        again = cli("start")  # harmless when already running
        assert again.returncode == 0 and json.loads(again.stdout)["pid"] == info["pid"]
        st = cli("status")
        assert st.returncode == 0 and json.loads(st.stdout)["ready"] is True
    finally:
        stopped = cli("stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    st = cli("status")
    assert st.returncode == 1 and json.loads(st.stdout)["running"] is False


def _bound_not_listening() -> socket.socket:
    """A port held the way a racing process holds it: bound, not yet listening (the pre-start
    check, a connect, sees it free; the server's bind fails with "address already in use")."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


def test_a_chosen_port_lost_to_a_race_is_chosen_again(tmp_path, monkeypatch):
    import world.temporal_server as ts

    held = _bound_not_listening()
    real = ts.free_port
    ports = iter([held.getsockname()[1]])
    monkeypatch.setattr(ts, "free_port", lambda ip="127.0.0.1": next(ports, None) or real(ip))
    server = TemporalDevServer(tmp_path / "t.db")
    try:
        with server:
            assert server.port != held.getsockname()[1] and server.ready()
        assert "address already in use" in Path(server.log_file).read_text()  # lost it once
    finally:
        held.close()


def test_a_port_the_caller_chose_is_not_changed(tmp_path):
    held = _bound_not_listening()
    try:
        server = TemporalDevServer(tmp_path / "t.db", port=held.getsockname()[1])
        with pytest.raises(TemporalServerError, match="address already in use"):
            server.start()
        assert server.port == held.getsockname()[1]
    finally:
        held.close()


def test_a_chosen_port_someone_listens_on_is_chosen_again(tmp_path, monkeypatch):
    import world.temporal_server as ts

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        real = ts.free_port
        ports = iter([taken.getsockname()[1]])
        monkeypatch.setattr(ts, "free_port", lambda ip="127.0.0.1": next(ports, None) or real(ip))
        with TemporalDevServer(tmp_path / "t.db") as server:
            assert server.port != taken.getsockname()[1] and server.ready()
