"""Queue administration, the client's part (queues.py, docs/queues.md): declare a queue's
limits, list the queues, look into one."""

from __future__ import annotations

from typing import Any

from .. import db
from .. import queues as queueing
from .connection import ClientConnection


class QueueAdmin(ClientConnection):
    """Declare queues and read their use."""

    def queue(self, name: str, *, concurrency: int | None = None,
              worker_concurrency: int | None = None, per_key_concurrency: int | None = None,
              rate: Any = None, per_key_rate: Any = None) -> db.Row:  # fmt: skip
        """Declare a queue, or replace all its limits (a limit left out is lifted). Enforced
        by the claim in Postgres, so they hold across every worker: `concurrency` runs at once
        over all workers, `worker_concurrency` in one worker, `per_key_concurrency` per
        queue_key; `rate` and `per_key_rate` as (limit, period_seconds) or {"limit": N,
        "period": seconds}: at most that many first starts in any window of that period.
        Returns the queue with its current use, as queues() lists it."""
        with self._transaction() as conn:
            return queueing.set_queue(conn, name, concurrency=concurrency,
                                      worker_concurrency=worker_concurrency,
                                      per_key_concurrency=per_key_concurrency,
                                      rate_limit=rate, per_key_rate=per_key_rate)  # fmt: skip

    def queues(self) -> list[db.Row]:
        """Declared queues and the queues live runs name: limits, runs running, ready,
        waiting, awaiting a worker, first starts in the rate window."""
        with self._lock:
            return queueing.list_queues(self._live())

    def describe_queue(self, name: str, keys: int = 20) -> db.Row:
        """One queue as queues() shows it, plus its busiest queue keys (at most `keys`)."""
        with self._lock:
            return queueing.describe_queue(self._live(), name, keys)
