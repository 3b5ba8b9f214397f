"""Postgres for the asyncio worker (docs/async.md): a small pool of async connections, the
fence as an async transaction, and a pool of plain connections for the work the asyncio
worker hands to threads (the effect gate).

The SQL is db.py's: the same named queries, the same fence statement. psycopg_pool is not a
dependency of the runtime, so the pools here are the few lines a worker needs: connections
are made on demand up to a size, lent for one transaction at a time, and dropped when they
come back broken or inside a transaction (a cancelled task may leave one so).
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from .. import db

AConn = psycopg.AsyncConnection[db.Row]
"""An async connection: autocommit, rows as dicts, like db.Conn."""


async def connect(dsn: str, **kwargs: Any) -> AConn:
    return await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, row_factory=dict_row, connect_timeout=10, **kwargs
    )


def _reusable(conn: AConn | db.Conn) -> bool:
    return not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE


class AsyncPool:
    """Up to `size` async connections, each lent for one transaction (a run holds none while
    its step bodies, model calls or waits are in flight)."""

    def __init__(self, dsn: str, size: int, **kwargs: Any):
        self._dsn, self._kwargs = dsn, kwargs
        self._slots = asyncio.Semaphore(size)
        self._idle: list[AConn] = []

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AConn]:
        async with self._slots:
            conn = self._idle.pop() if self._idle else await connect(self._dsn, **self._kwargs)
            try:
                yield conn
            finally:
                if _reusable(conn):
                    self._idle.append(conn)
                else:
                    await conn.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


class SyncPool:
    """Plain connections for threads (the effect gate runs the sync pipeline in one)."""

    def __init__(self, dsn: str, **kwargs: Any):
        self._dsn, self._kwargs = dsn, kwargs
        self._idle: queue.LifoQueue[db.Conn] = queue.LifoQueue()

    @contextmanager
    def connection(self) -> Iterator[db.Conn]:
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            conn = db.connect(self._dsn, **self._kwargs)
        try:
            yield conn
        finally:
            if _reusable(conn):
                self._idle.put(conn)
            else:
                conn.close()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


async def rows(conn: AConn, name: str, params: dict[str, Any] | None = None) -> list[db.Row]:
    cur = await conn.execute(db.query(name), params)
    return await cur.fetchall()


@asynccontextmanager
async def fenced(conn: AConn, wf: str, epoch: int, ttl: float) -> AsyncIterator[db.Row]:
    """db.fenced as an async transaction: the fence UPDATE first; zero rows raises Fenced and
    the transaction rolls back (docs/design.md#fence)."""
    async with conn.transaction():
        cursor = await conn.execute(db.query("fence"), {"wf": wf, "epoch": epoch, "ttl": ttl})
        row = await cursor.fetchone()
        if row is None:
            raise db.fence_lost(wf, epoch)
        yield row
