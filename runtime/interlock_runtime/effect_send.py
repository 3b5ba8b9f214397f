"""The watched send (docs/design.md#send-deadline): a watchdog timer ends the worker process if a send outlives
its local deadline, so no byte can leave after it while the process runs (assumption A1)."""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

from .telemetry import SEND, effect_stage

if TYPE_CHECKING:
    from .effect_call import EffectCall

MIN_SEND_BUDGET = 1.0  # seconds: below this, do not start a send (docs/design.md#send-deadline)
WATCHDOG_EXIT = 75  # os._exit status when a send outlives its deadline
NOT_SENT = object()  # what watched_apply returns when the budget left is below the minimum


@effect_stage(SEND)  # current while the target is called: its traceparent header
def watched_apply(call: EffectCall, t0: float) -> Any:
    """Send call.payload with the watchdog; `t0` is when the send's stopwatch started (before
    T_dispatch or T_resolve). Returns the target's answer, or NOT_SENT."""
    remaining = call.spec.send_timeout - (time.monotonic() - t0)
    if remaining < MIN_SEND_BUDGET:
        return NOT_SENT
    timer = threading.Timer(remaining, os._exit, args=(WATCHDOG_EXIT,))
    timer.daemon = True
    timer.start()
    try:
        return call.target.apply(call.eid, call.payload, worker=call.port.worker_id,
                                 epoch=call.port.epoch, timeout=remaining)  # fmt: skip
    finally:
        timer.cancel()
