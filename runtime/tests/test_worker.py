"""Worker behaviour in real subprocesses: SIGTERM, code-hash pinning, kill and stop points."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from flows import three_steps

from conftest import TESTS, read_jsonl, wait_for
from interlock_runtime import Runtime, WorkflowFailed


def test_sigterm_finishes_the_current_step_and_hands_the_run_back(dsn, workers, tmp_path) -> None:
    log = tmp_path / "invocations.jsonl"
    with Runtime(dsn) as rt:
        rt.start(three_steps, "wf-term", {"log": str(log), "sleep": {"s2": 1.5}})
        first = workers("T1", lease_ttl=30)  # a long lease: a peer could only start via release
        wait_for(lambda: [i for i in read_jsonl(log) if i["step"] == "s2"], 30, "s2 to start")
        first.signal(signal.SIGTERM)
        assert first.proc.wait(timeout=15) == 0
        row = rt.describe("wf-term")
        assert (row["status"], row["owner"], row["lease_expires_at"]) == ("pending", None, None)
        assert [s["name"] for s in row["steps"]] == ["s1", "s2"]  # s2 finished and recorded

        t0 = time.monotonic()
        workers("T2", lease_ttl=30)
        assert [r["worker"] for r in rt.result("wf-term", timeout=20)] == ["T1", "T1", "T2"]
        assert time.monotonic() - t0 < 15  # no wait for the 30 s lease
        claims = rt.claim_history("wf-term")
    assert [(c["owner"], c["prev_status"]) for c in claims] == [
        ("T1", "pending"),
        ("T2", "pending"),
    ]
    assert [i["step"] for i in read_jsonl(log)] == ["s1", "s2", "s3"]  # nothing ran twice
    events = [e["event"] for e in first.events()]
    assert "released" in events and events[-1] == "stopped"


def test_log_level_warning_keeps_the_trouble_and_drops_the_routine_events(dsn, workers) -> None:
    """--log-level warning: a failed run's `failed` is written, the routine `claimed`,
    `step_started`, `completed` and `stopped` are not (by default every event is)."""
    quiet = workers("Wq", extra_args=("--log-level", "warning"))
    with Runtime(dsn) as rt:
        rt.start("echo", "wf-ok", {"x": 1})
        rt.start("non_retryable", "wf-no", {})
        rt.result("wf-ok", timeout=20)
        with pytest.raises(WorkflowFailed):
            rt.result("wf-no", timeout=20)
    quiet.signal(signal.SIGTERM)
    assert quiet.proc.wait(timeout=15) == 0
    events = [e["event"] for e in quiet.events()]
    assert events == ["failed"], events


def _write_module(path: Path, body: str) -> None:
    path.write_text(textwrap.dedent(body))


MODULE_V1 = """
from interlock_runtime import workflow

@workflow(name="pinned", version="1")
def pinned(ctx, inp):
    return ctx.step("a", lambda: 1)
"""


def _worker_cmd(dsn: str, module_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "interlock_runtime.cli.worker", "--dsn", dsn, "--module",
            "pinned_flows", "--id", "P", "--poll", "0.2", *extra]  # fmt: skip


def test_changed_code_hash_exits_2_unless_allowed(dsn, tmp_path) -> None:
    mod = tmp_path / "pinned_flows.py"
    _write_module(mod, MODULE_V1)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.Popen(_worker_cmd(dsn, tmp_path), env=env, stderr=subprocess.PIPE, text=True)
    with Runtime(dsn) as rt:
        wait_for(lambda: rt.deployments(), 20, "the worker to register")
        recorded = rt.deployments()[0]["code_sha256"]
    proc.terminate()
    assert proc.wait(timeout=15) == 0

    _write_module(mod, MODULE_V1.replace("lambda: 1", "lambda: 2"))
    changed = subprocess.run(_worker_cmd(dsn, tmp_path), env=env, capture_output=True, text=True,
                             timeout=30)  # fmt: skip
    assert changed.returncode == 2
    assert recorded in changed.stderr and "--allow-code-change" in changed.stderr
    assert "pinned@1" in changed.stderr

    allowed = subprocess.Popen(_worker_cmd(dsn, tmp_path, "--allow-code-change"), env=env,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        with Runtime(dsn) as rt:
            wait_for(lambda: rt.deployments()[0]["code_sha256"] != recorded, 20, "the new hash")
            rt.start("pinned", "wf-p", {})
            assert rt.result("wf-p", timeout=20) == 2
    finally:
        allowed.terminate()
        allowed.wait(timeout=15)


def test_only_serves_the_named_pairs_and_rejects_unknown_ones(dsn, tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "interlock_runtime.cli.worker", "--dsn", dsn, "--module", "flows",
         "--only", "three_steps@9"],
        env=dict(os.environ, PYTHONPATH=str(TESTS)), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "three_steps@9" in proc.stderr and "three_steps@1" in proc.stderr


def test_kill_point_is_a_real_sigkill_at_the_named_point(dsn, workers, tmp_path) -> None:
    log = tmp_path / "invocations.jsonl"
    with Runtime(dsn) as rt:
        rt.start(three_steps, "wf-kp", {"log": str(log)})
        dying = workers("K", env={"ILR_KILL_AT": "step_before_record@2"})
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        # s1 recorded, s2's body ran but its row was never written.
        assert [s["name"] for s in rt.describe("wf-kp")["steps"]] == ["s1"]
        assert [i["step"] for i in read_jsonl(log)] == ["s1", "s2"]


def test_stop_point_pauses_until_sigcont(dsn, workers, tmp_path) -> None:
    log = tmp_path / "invocations.jsonl"
    with Runtime(dsn) as rt:
        rt.start(three_steps, "wf-sp", {"log": str(log)})
        paused = workers("S", env={"ILR_STOP_AT": "step_after_record"}, lease_ttl=30)
        paused.wait_stopped()
        time.sleep(0.3)
        assert [s["name"] for s in rt.describe("wf-sp")["steps"]] == ["s1"]
        assert [i["step"] for i in read_jsonl(log)] == ["s1"]  # nothing ran while stopped
        paused.signal(signal.SIGCONT)
        assert len(rt.result("wf-sp", timeout=20)) == 3


def test_unknown_kill_point_is_an_error_naming_the_known_ones() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import interlock_runtime.killpoints"],
        env=dict(os.environ, ILR_KILL_AT="after_lunch"), capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "after_lunch" in proc.stderr and "effect_after_send" in proc.stderr


@pytest.mark.parametrize("value", ["0", "-1"])
def test_worker_refuses_nonsense_settings(value) -> None:
    from interlock_runtime import Worker

    with pytest.raises(ValueError, match="lease_ttl"):
        Worker("postgresql://unused", [three_steps], lease_ttl=float(value))
