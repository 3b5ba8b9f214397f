"""Instrumented crash and pause points (docs/design.md#kill-points).

ILR_KILL_AT and ILR_STOP_AT hold a comma list of `name` (the first hit in this process) or
`name@n` (the nth hit). At a kill
point the process SIGKILLs itself; at a stop point it SIGSTOPs itself and goes on after the
harness sends SIGCONT. The signal is sent to the calling thread (pthread_kill), so it is taken
before that thread returns to Python; a kill point also blocks the thread afterwards, since a
signal to oneself is not synchronous in general (docs/design.md#refinements).
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

POINTS = (
    "claimed",
    "step_before_record",
    "step_after_record",
    "decide_after_response",
    "effect_before_dispatch",
    "effect_after_dispatch",
    "effect_after_send",
    "effect_after_commit",
    "resolve_before_begin",  # recovery read and judged the effect, before T_resolve begins
    "resolve_after_commit",
    "resolve_after_send",
    "wait_after_suspend",
    "schedule_before_commit",  # a firing pass has recorded and inserted its starts
)


def _parse(value: str) -> dict[str, int]:
    plan: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, _, nth = item.partition("@")
        if name not in POINTS:
            raise ValueError(f"unknown kill point {name!r}; known points: {', '.join(POINTS)}")
        plan[name] = int(nth) if nth else 1
    return plan


_kill = _parse(os.environ.get("ILR_KILL_AT", ""))
_stop = _parse(os.environ.get("ILR_STOP_AT", ""))
_hits: Counter[str] = Counter()
_lock = threading.Lock()


def configure_from_env() -> None:
    """Read ILR_KILL_AT / ILR_STOP_AT again and forget the hits so far: for a process that
    was forked after this module was imported (a fork server), with an environment of its own."""
    global _kill, _stop
    with _lock:
        _kill = _parse(os.environ.get("ILR_KILL_AT", ""))
        _stop = _parse(os.environ.get("ILR_STOP_AT", ""))
        _hits.clear()


def _due(plan: dict[str, int], point: str, count: int) -> bool:
    return plan.get(point) == count


def hit(point: str) -> None:
    """Mark that execution reached `point`; kill or stop here if the environment asks."""
    if not (_kill or _stop):
        return
    with _lock:
        _hits[point] += 1
        count = _hits[point]
    if _due(_kill, point, count):
        signal.pthread_kill(threading.get_ident(), signal.SIGKILL)
        threading.Event().wait()  # never returns: the process is already dying
    if _due(_stop, point, count):
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
