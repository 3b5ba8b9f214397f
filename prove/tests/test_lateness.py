"""The harness's lateness monitor (prove/lateness.py) sees a stalled harness."""

from __future__ import annotations

import sys
import time

from prove import lateness
from prove.lateness import LatenessMonitor


def test_a_quiet_window_is_on_time_and_a_held_gil_is_seen() -> None:
    with LatenessMonitor(period=0.01) as m:
        t0 = time.time()
        time.sleep(0.3)
        quiet = m.window(t0)
        assert quiet["samples"] >= 10 and quiet["max"] < 0.25
        old = sys.getswitchinterval()
        sys.setswitchinterval(2.0)  # this thread keeps the GIL while it computes
        try:
            t1 = time.time()
            end = time.monotonic() + 0.6
            while time.monotonic() < end:
                pass
        finally:
            sys.setswitchinterval(old)
        time.sleep(0.1)
        stalled = m.window(t1)
    assert stalled["max"] >= 0.4, stalled
    assert lateness.verdict(quiet, 0.25) is None
    assert "harness too late" in lateness.verdict(stalled, 0.25)


def test_windows_and_recorded_samples() -> None:
    m = LatenessMonitor()
    m.record(0.01, at=100.0)
    m.record(0.5, at=101.0)
    m.record(0.02, at=102.0)
    assert m.window(99.5, 100.5) == {"samples": 1, "max": 0.01, "p99": 0.01}
    assert m.window(99.0, 103.0)["max"] == 0.5
    assert m.window(200.0, 300.0) == {"samples": 0, "max": None, "p99": None}
    assert lateness.verdict(m.window(200.0, 300.0), 0.25) is None  # nothing to judge by
