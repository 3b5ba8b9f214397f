"""The `interlock` CLI end to end: the README walk-through with a real SIGKILL, and the verbs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, wait_for

EXAMPLES = REPO / "runtime" / "examples"


def interlock(dsn: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", *args, "--dsn", dsn],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def worker(dsn: str, worker_id: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "interlock_runtime.cli", "worker", "--dsn", dsn, "--module",
         "hello_flows", "--id", worker_id, "--lease-ttl", "2", "--poll", "0.2"],
        env=dict(os.environ, PYTHONPATH=str(EXAMPLES)), stderr=log.open("w"),
    )  # fmt: skip


def test_readme_walkthrough_survives_a_worker_sigkill(dsn, tmp_path) -> None:
    first = worker(dsn, "w1", tmp_path / "w1.log")
    try:
        wait_for(lambda: "registered" in (tmp_path / "w1.log").read_text(), 30, "w1 to register")
        assert "started greet@1 as greet-1" in interlock(dsn, "start", "greet", "greet-1",
                                                        "--input", '{"name": "Ada"}').stdout  # fmt: skip
        wait_for(lambda: '"claimed"' in (tmp_path / "w1.log").read_text(), 30, "the claim")
        time.sleep(0.5)  # inside the 2 s step
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL
        listed = interlock(dsn, "list").stdout
        assert "greet-1" in listed and "running" in listed
        second = worker(dsn, "w2", tmp_path / "w2.log")
        try:
            out = interlock(dsn, "result", "greet-1", "--timeout", "30").stdout
            assert json.loads(out) == "Hello, ADA!"
        finally:
            second.terminate()
            second.wait(timeout=20)
    finally:
        if first.poll() is None:
            first.kill()
    described = json.loads(interlock(dsn, "describe", "greet-1", "--json").stdout)
    assert [c["owner"] for c in described["claims"]][:2] == ["w1", "w2"]
    assert [s["name"] for s in described["steps"]] == ["shout", "sleep", "compose"]
    table = interlock(dsn, "describe", "greet-1").stdout
    assert "claims" in table and "w2" in table
    report = json.loads(interlock(dsn, "drain-report", "--json").stdout)
    assert report == [{"name": "greet", "version": "1", "status": "completed", "workflows": 1}]


def test_signal_cancel_and_bad_input_through_the_cli(dsn, tmp_path) -> None:
    w = worker(dsn, "w1", tmp_path / "w.log")
    try:
        wait_for(lambda: "registered" in (tmp_path / "w.log").read_text(), 30, "registration")
        bad = interlock(dsn, "start", "greet", "g-bad", "--input", "{nope", check=False)
        assert bad.returncode == 2 and "not JSON" in bad.stderr
        unknown = interlock(dsn, "start", "refund", "g-x", check=False)
        assert unknown.returncode == 1 and "greet@1" in unknown.stderr
        missing = interlock(dsn, "signal", "nobody", "go", check=False)
        assert missing.returncode == 1 and "no workflow with id 'nobody'" in missing.stderr
        interlock(dsn, "start", "greet", "g-2", "--input", '{"name": "Bo"}')
        interlock(dsn, "cancel", "g-2", "--by", "ops")
        wait_for(lambda: "cancelled" in interlock(dsn, "list", "--status", "cancelled").stdout,
                 30, "the cancel")  # fmt: skip
        done = interlock(dsn, "cancel", "g-2", check=False)
        assert done.returncode == 1 and "is cancelled; nothing was cancelled" in done.stderr
        late = interlock(dsn, "result", "nobody", "--timeout", "0.1", check=False)
        assert late.returncode == 1
    finally:
        w.terminate()
        w.wait(timeout=20)
