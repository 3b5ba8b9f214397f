"""Structured worker events (claimed, step_started, suspended, fenced, ...).

Workers print them as JSON lines on stderr (or as text for a terminal: `--log-format`); the
conformance checks and the Prove harness read the JSON as evidence (NoRerunAfterComplete needs
to know when each step body started). Both carry trace_id/span_id while a span is current.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from . import telemetry

log = logging.getLogger("interlock_runtime.worker")


# Events that say something went wrong or was refused are WARNING, the routine ones (claimed,
# step_started, completed, heartbeat, ...) INFO: `interlock worker --log-level warning` keeps
# only these, and spares a busy worker three formatted lines per workflow.
WARNING_EVENTS = frozenset({
    "fenced", "stuck", "failed", "timed_out", "abandoned", "step_abandoned", "heartbeat_failed",
    "db_unavailable", "loop_blocked", "loop_lag", "schedule_error", "settle_audit_failed",
})  # fmt: skip

LOG_LEVELS = ("debug", "info", "warning", "error")


def emit(event: str, **fields: Any) -> None:
    level = logging.WARNING if event in WARNING_EVENTS else logging.INFO
    if log.isEnabledFor(level):
        # the record made directly, not log.log(): no walk up the stack for the caller's file
        # and line, which no event shows
        log.handle(log.makeRecord(log.name, level, "", 0, event, (), None,
                                  extra={"event": event, "fields": fields}))  # fmt: skip
    telemetry.on_event(event, fields)  # a run's outcome, a heartbeat's gap (docs/observability.md)


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body = {
            "ts": round(record.created, 6),
            "event": getattr(record, "event", record.getMessage()),
        }
        body.update(getattr(record, "fields", {}))
        body["pid"] = record.process
        ids = telemetry.log_ids()  # only while a span is current: no field otherwise
        if ids is not None:
            body["trace_id"], body["span_id"] = ids
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


class TextLines(logging.Formatter):
    """For a person at a terminal: `HH:MM:SS.mmm event key=value ...`, trace ids last."""

    def format(self, record: logging.LogRecord) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(record.created))
        parts = [
            f"{clock}.{int(record.msecs):03d}",
            f"{getattr(record, 'event', record.getMessage()):<12}",
        ]
        for key, value in getattr(record, "fields", {}).items():
            shown = value if isinstance(value, (int, float)) else json.dumps(value, default=str)
            if isinstance(value, str) and value and not any(c in value for c in ' "='):
                shown = value
            parts.append(f"{key}={shown}")
        ids = telemetry.log_ids()
        if ids is not None:
            parts += [f"trace_id={ids[0]}", f"span_id={ids[1]}"]
        text = " ".join(parts)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


LOG_FORMATS = ("text", "json")


def formatter(kind: str) -> logging.Formatter:
    """The worker's log formatter: `json` (one object a line, what harnesses parse) or `text`."""
    return JsonLines() if kind == "json" else TextLines()
