"""The worker's clock-skew allowance (docs/deployment.md#clocks, the model's MaxSkew).

After a failover the database judges leases by the new primary's clock. If that clock runs
ahead by up to `max_clock_skew`, the new primary ends a lease that much early in real time, so
the worker's own (monotonic) deadline must end that much before the lease does.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from flows import three_steps

from conftest import TESTS
from interlock_runtime import Worker
from interlock_runtime.run_state import Run


def _run(ttl: float, skew: float, deadline: float) -> Run:
    return Run(workflow_id="wf", name="n", version="1", input=None, epoch=1, waiting=None,
               takeovers=0, cancel_requested_at=None, lease_ttl=ttl, local_deadline=deadline,
               clock_skew=skew)  # fmt: skip


def test_a_renewal_rearms_the_local_deadline_short_of_the_lease_by_the_skew() -> None:
    run = _run(ttl=30.0, skew=2.0, deadline=100.0 + 28.0)
    run.renewed(110.0)  # a fenced write at t0 = 110 renewed the lease until 110 + 30
    assert run.local_deadline == 138.0
    plain = _run(ttl=30.0, skew=0.0, deadline=130.0)
    plain.renewed(110.0)
    assert plain.local_deadline == 140.0


def test_the_worker_refuses_a_skew_it_cannot_honour(dsn) -> None:
    w = Worker(dsn, [three_steps], lease_ttl=9.0, max_clock_skew=2.5, schedules=False)
    assert w.max_clock_skew == 2.5
    with pytest.raises(ValueError, match="max_clock_skew"):
        Worker(dsn, [three_steps], lease_ttl=4.0, max_clock_skew=2.0)
    with pytest.raises(ValueError, match="max_clock_skew"):
        Worker(dsn, [three_steps], lease_ttl=4.0, max_clock_skew=-0.1)


@pytest.mark.parametrize("args", [["--max-clock-skew", "20", "--lease-ttl", "30"],
                                  ["--max-clock-skew", "nan"]])  # fmt: skip
def test_the_cli_refuses_a_skew_it_cannot_honour_with_exit_2(dsn, args) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "interlock_runtime.cli.worker", "--dsn", dsn, "--module", "flows",
         *args], cwd=TESTS, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "max-clock-skew" in proc.stderr or "max_clock_skew" in proc.stderr
    assert "Traceback" not in proc.stderr
