"""The fork server (prove/zygote.py): forked workers are real processes with their own
environment, exit status, signals and kill points, and nothing is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from prove import runner
from prove.zygote import ForkedProcess, Zygote


@pytest.fixture(scope="module")
def zygote():
    with Zygote(cwd=runner.REPO, env=runner.child_env()) as z:
        yield z


def test_a_forked_worker_runs_its_main_and_reports_its_exit_status(zygote, tmp_path) -> None:
    err = open(tmp_path / "err", "w")  # noqa: SIM115 - closed below
    t0 = time.monotonic()
    p = zygote.popen([sys.executable, "-m", "baselines.worker", "--help"],
                     stdout=subprocess.PIPE, stderr=err, text=True)  # fmt: skip
    assert isinstance(p, ForkedProcess) and p.pid != os.getpid()
    assert p.wait(timeout=30) == 0
    assert time.monotonic() - t0 < 5  # no interpreter start, no imports
    assert "--task-queue" in p.stdout.read()
    # argparse's own error: exit status 2, message on the stderr we handed over
    p = zygote.popen([sys.executable, "-m", "baselines.worker", "--no-such-flag"], stderr=err)
    assert p.wait(timeout=30) == 2
    err.close()
    assert "the following arguments are required: --address" in (tmp_path / "err").read_text()


def test_each_child_reads_its_own_kill_points_from_its_environment(zygote, tmp_path) -> None:
    # An unknown kill point is refused when the child configures itself from ITS environment
    # (the zygote's own has none): status 1 and the killpoints error.
    err = tmp_path / "err"
    with open(err, "w") as f:
        env = dict(runner.child_env(), ILR_KILL_AT="no_such_point")
        p = zygote.popen([sys.executable, "-m", "baselines.worker", "--help"], stderr=f, env=env)
        assert p.wait(timeout=30) == 1
    assert "unknown kill point 'no_such_point'" in err.read_text()
    with open(err, "w") as f:
        env = dict(runner.child_env(), ILR_KILL_AT="claimed")
        p = zygote.popen([sys.executable, "-m", "baselines.worker", "--help"], stderr=f,
                         stdout=subprocess.DEVNULL, env=env)  # fmt: skip
        assert p.wait(timeout=30) == 0


def test_signals_reach_the_child_and_the_status_says_which(zygote, tmp_path) -> None:
    with open(tmp_path / "err", "w") as f:
        # a worker that waits for a server that never answers: alive until signalled
        p = zygote.popen([sys.executable, "-m", "baselines.worker", "--address", "127.0.0.1:9",
                          "--task-queue", "q", "--mode", "temporal_idem", "--target-url",
                          "http://127.0.0.1:9", "--payment", "p", "--tier", "1", "--model-url",
                          "http://127.0.0.1:9", "--id", "z", "--connect-timeout", "60"],
                         stderr=f, stdout=subprocess.DEVNULL)  # fmt: skip
        time.sleep(0.3)
        assert p.poll() is None
        os.kill(p.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while runner._proc_state(p.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert runner._proc_state(p.pid) == "T"
        p.send_signal(signal.SIGCONT)
        p.kill()
        assert p.wait(timeout=10) == -signal.SIGKILL
        p.kill()  # a second kill after the exit is a no-op, never a signal to a reused pid
    with pytest.raises(subprocess.TimeoutExpired):
        q = zygote.popen([sys.executable, "-m", "baselines.worker", "--address", "127.0.0.1:9",
                          "--task-queue", "q", "--mode", "temporal_idem", "--target-url", "x",
                          "--payment", "p", "--tier", "1", "--model-url", "x", "--id", "z",
                          "--connect-timeout", "60"], stderr=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL)  # fmt: skip
        q.wait(timeout=0.2)
    q.kill()
    assert q.wait(timeout=10) == -signal.SIGKILL


def test_other_commands_run_as_plain_subprocesses(zygote) -> None:
    before = zygote.fallbacks
    p = zygote.popen([sys.executable, "-c", "print('plain')"], stdout=subprocess.PIPE, text=True)
    assert isinstance(p, subprocess.Popen) and p.communicate()[0].strip() == "plain"
    assert zygote.fallbacks == before + 1


def test_closing_the_zygote_kills_its_children(tmp_path) -> None:
    z = Zygote(cwd=runner.REPO, env=runner.child_env()).start()
    p = z.popen([sys.executable, "-m", "baselines.worker", "--address", "127.0.0.1:9",
                 "--task-queue", "q", "--mode", "temporal_idem", "--target-url", "x",
                 "--payment", "p", "--tier", "1", "--model-url", "x", "--id", "z",
                 "--connect-timeout", "60"], stderr=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL)  # fmt: skip
    pid = p.pid
    z.close()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and runner._proc_state(pid) != "Z" \
            and time.monotonic() < deadline:  # fmt: skip
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}") or runner._proc_state(pid) == "Z"
    assert not os.path.exists(z.path)
