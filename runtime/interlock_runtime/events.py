"""Structured worker events (claimed, step_started, suspended, fenced, ...).

Workers print them as JSON lines on stderr; the conformance checks and the Prove harness read
them as evidence (NoRerunAfterComplete needs to know when each step body started).
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("interlock_runtime.worker")


def emit(event: str, **fields: Any) -> None:
    log.info(event, extra={"event": event, "fields": fields})


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body = {
            "ts": round(record.created, 6),
            "event": getattr(record, "event", record.getMessage()),
        }
        body.update(getattr(record, "fields", {}))
        body["pid"] = record.process
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)
