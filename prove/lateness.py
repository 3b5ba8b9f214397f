"""The harness's own scheduling lateness: how late a timer that should fire at t really fired.

Every scenario rests on timing assumptions (a SIGCONT 2 s after a stop, a revoke within +/-20 ms
of a dispatch, a kill window after an approval). When the machine is too loaded, the harness
itself is late (its threads wait for a core or for the GIL) and a run no longer measures the
scenario it claims to. A sweep therefore runs one `LatenessMonitor`: a thread that asks to wake
every `period` seconds and records how late each wake-up came. A run then asks for the worst
lateness inside its own window, and a run whose worst lateness exceeds its scenario's bound
(`max_harness_lateness` in its timing constants) is a harness error, not a verdict: it never
counts as correct or incorrect, and it is run again.

The monitor lives in the harness process, where the timeline's timers, the target and the
model stub run, so it sees both a starved CPU and a held GIL.
"""

from __future__ import annotations

import bisect
import threading
import time

DEFAULT_PERIOD = 0.02  # seconds between wake-ups; cheap (50 wake-ups a second)
DEFAULT_BOUND = 0.25  # seconds: a run whose harness was later than this is not a measurement


class LatenessMonitor:
    """A background thread sampling its own wake-up lateness; thread-safe queries."""

    def __init__(self, period: float = DEFAULT_PERIOD, keep_seconds: float = 4 * 3600) -> None:
        self.period = period
        self._keep = keep_seconds
        self._times: list[float] = []  # wall-clock wake-up times, ascending
        self._late: list[float] = []  # lateness of that wake-up, seconds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LatenessMonitor:
        self._thread = threading.Thread(target=self._loop, name="lateness", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> LatenessMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        due = time.monotonic() + self.period
        while not self._stop.is_set():
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            now_m, now_w = time.monotonic(), time.time()
            late = max(0.0, now_m - due)
            with self._lock:
                self._times.append(now_w)
                self._late.append(late)
                if self._times[0] < now_w - self._keep:  # forget old samples in one go
                    cut = bisect.bisect_left(self._times, now_w - self._keep)
                    del self._times[:cut], self._late[:cut]
            due = max(due + self.period, now_m)  # after a long stall, do not fire a burst

    def record(self, lateness: float, at: float | None = None) -> None:
        """Add one observation by hand (tests; a timer elsewhere that measured itself)."""
        with self._lock:
            t = time.time() if at is None else at
            i = bisect.bisect_right(self._times, t)
            self._times.insert(i, t)
            self._late.insert(i, lateness)

    def window(self, t0: float, t1: float | None = None) -> dict:
        """The lateness seen between wall-clock times t0 and t1 (default: now): the worst,
        the 99th percentile (nearest rank) and the number of samples."""
        t1 = time.time() if t1 is None else t1
        with self._lock:
            lo = bisect.bisect_left(self._times, t0)
            hi = bisect.bisect_right(self._times, t1)
            xs = sorted(self._late[lo:hi])
        if not xs:
            return {"samples": 0, "max": None, "p99": None}
        p99 = xs[min(len(xs) - 1, max(0, -(-99 * len(xs) // 100) - 1))]
        return {"samples": len(xs), "max": round(xs[-1], 4), "p99": round(p99, 4)}


def verdict(window: dict, bound: float) -> str | None:
    """None when the run's timing held, else the harness-error text naming the numbers."""
    worst = window.get("max")
    if worst is None:
        return None  # no monitor (a single run outside a sweep): nothing to judge by
    if worst > bound:
        return (f"harness too late: the harness's timer fired up to {worst:.3f} s late during "
                f"the run (bound {bound:.3f} s for this scenario); the machine was too loaded for "
                f"the run's timing assumptions; not a measurement")  # fmt: skip
    return None
