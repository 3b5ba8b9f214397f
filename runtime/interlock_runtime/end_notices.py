"""Hearing runs end: the LISTEN behind result() (docs/api.md#results).

A client that waits on a result marks the run (sql: await_end); the status change that ends
a marked run sends its id on the channel ilr_ended at commit (migration 0008). EndNotices
keeps one connection per client LISTENing there and one daemon thread reading it, and wakes
whoever watches that id. It is an accelerator, never the source of truth: a waiter still
looks at the row itself, and still looks every `poll` seconds when no notice comes (a lost
connection, a pooler that drops LISTEN).
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable

import psycopg

from . import db

CHANNEL = "ilr_ended"
RETRY_AFTER = 1.0  # seconds between attempts to listen again after a failure


class EndNotices:
    """The ends of the runs this client waits on, as they are announced."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._lock = threading.Lock()
        self._watchers: dict[str, list[Callable[[], None]]] = {}
        self._conn: db.Conn | None = None
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1
        self._retry_at = 0.0
        self._closed = False

    def watch(self, wf_id: str, wake: Callable[[], None]) -> None:
        """Call `wake` (from the listening thread) when `wf_id`'s end is announced, or when
        the listening stops (then look, and ask `listening()` again)."""
        with self._lock:
            self._watchers.setdefault(wf_id, []).append(wake)

    def listening(self) -> bool:
        """True when the channel is listened to now, so that an end committed from here on is
        heard; False when it cannot be (the caller then polls). Listens if not yet, or again
        RETRY_AFTER seconds after a failure."""
        with self._lock:
            return self._listening()

    def unwatch(self, wf_id: str, wake: Callable[[], None]) -> None:
        with self._lock:
            found = self._watchers.get(wf_id, [])
            if wake in found:
                found.remove(wake)
            if not found:
                self._watchers.pop(wf_id, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
            if thread is not None:
                os.write(self._wake_w, b"x")
        if thread is not None:
            thread.join(timeout=5)

    def _listening(self) -> bool:  # lock held
        if self._thread is not None:
            return True
        if self._closed or time.monotonic() < self._retry_at:
            return False
        try:
            conn = db.connect(self._dsn)
            conn.execute(f"listen {CHANNEL}")
        except psycopg.Error:
            self._retry_at = time.monotonic() + RETRY_AFTER
            return False
        self._conn = conn
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._listen, args=(conn, self._wake_r),
                                        name="ilr-end-notices", daemon=True)  # fmt: skip
        self._thread.start()
        return True

    def _listen(self, conn: db.Conn, wake_r: int) -> None:
        pgconn = conn.pgconn
        try:
            while True:
                ready, _, _ = select.select([pgconn.socket, wake_r], [], [])
                if wake_r in ready:
                    return  # closed
                pgconn.consume_input()  # raises when the connection is gone
                while (notice := pgconn.notifies()) is not None:
                    self._announce(notice.extra.decode())
        except (psycopg.Error, OSError):
            pass
        finally:
            self._stopped(conn, wake_r)

    def _announce(self, wf_id: str) -> None:
        with self._lock:
            wakes = list(self._watchers.get(wf_id, ()))
        for wake in wakes:
            wake()

    def _stopped(self, conn: db.Conn, wake_r: int) -> None:
        """The thread's end (closed, or the connection lost): every waiter is woken to look
        at its row again and, watching again, to listen again."""
        conn.close()
        with self._lock:
            os.close(wake_r)
            os.close(self._wake_w)
            self._thread, self._conn = None, None
            self._retry_at = time.monotonic() + RETRY_AFTER
            wakes = [w for found in self._watchers.values() for w in found]
        for wake in wakes:
            wake()
