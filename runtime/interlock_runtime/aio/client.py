"""AsyncRuntime: the client for asyncio code (docs/async.md#client).

    async with AsyncRuntime(dsn) as rt:
        await rt.start(triage, "ticket-42", {"ticket": 42})
        answer = await rt.result("ticket-42", timeout=60)
        # or through its handle: h = rt.handle("ticket-42"); await h.result(timeout=60)

Every method of Runtime is here as a coroutine that runs the Runtime's own code in a thread
(asyncio.to_thread), so an await never blocks the event loop and every check, error and
guarantee is the sync client's, not a second implementation of them. result() is the one
that differs: between its looks it awaits the run's end (or its next look), so a thousand
awaited results hold no thread while they wait. recover_orphans() with an async target works
here too: in its thread each send runs on a loop of its own, which it could not do inside the
caller's.

rt.handle(wf_id) is not a coroutine (it reads nothing): it returns an AsyncWorkflowHandle,
WorkflowHandle (client/handles.py) for this client, each method awaiting the call of the same name
with the handle's id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import psycopg

from .. import db, db_faults
from ..client.connection import check_id
from ..runtime import ResultWait, Runtime

_P = ParamSpec("_P")
_T = TypeVar("_T")


class AsyncRuntime:
    """A client of one Interlock database for asyncio code. Connects on first use (or on
    `async with`); `aclose()` closes it. Safe to share between the tasks of one loop."""

    def __init__(self, dsn: str | None = None, *, create_schema: bool = True) -> None:
        self._dsn, self._create_schema = dsn, create_schema
        self._rt: Runtime | None = None
        self._opening = asyncio.Lock()

    async def runtime(self) -> Runtime:
        """The sync client underneath, connected in a thread the first time."""
        if self._rt is None:
            async with self._opening:
                if self._rt is None:
                    self._rt = await asyncio.to_thread(Runtime, self._dsn,
                                                       create_schema=self._create_schema)  # fmt: skip
        return self._rt

    async def __aenter__(self) -> AsyncRuntime:
        await self.runtime()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client's connections (what leaving `async with` does); safe to repeat."""
        if self._rt is not None:
            rt, self._rt = self._rt, None
            await asyncio.to_thread(rt.close)

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        rt = await self.runtime()
        return await asyncio.to_thread(getattr(rt, name), *args, **kwargs)

    async def _run(self, method: Callable[Concatenate[Runtime, _P], _T], *args: _P.args,
                   **kwargs: _P.kwargs) -> _T:  # fmt: skip
        """`method` of Runtime (e.g. Runtime.cancel) on the sync client, in a thread; typed,
        so a handle's call is checked against the sync signature."""
        rt = await self.runtime()
        return await asyncio.to_thread(method, rt, *args, **kwargs)

    # The usual calls, typed; every other Runtime method comes through __getattr__.

    async def start(self, workflow: Any, wf_id: str, input: Any = None,
                    version: str | None = None, **options: Any) -> str:  # fmt: skip
        """Runtime.start: idempotent on wf_id; `options` are its keywords (queue, priority,
        queue_key, dedup_id, wait_for_worker, execution_timeout)."""
        return await self._run(Runtime.start, workflow, wf_id, input, version, **options)

    async def signal(self, wf_id: str, name: str, payload: Any = None,
                     sender: str | None = None) -> int:  # fmt: skip
        """Runtime.signal: a durable signal, one transaction."""
        return await self._run(Runtime.signal, wf_id, name, payload, sender)

    async def describe(self, wf_id: str) -> dict[str, Any]:
        """Runtime.describe: the workflow row, its steps, claims and effects."""
        return await self._run(Runtime.describe, wf_id)

    async def result(self, wf_id: str, timeout: float | None = None, poll: float = 1.0, *,
                     raw: bool = False) -> Any:  # fmt: skip
        """Runtime.result, awaited: its result, WorkflowFailed if it ended otherwise, a run
        that continued as new followed to its successor, TimeoutError after `timeout`; woken
        by the run's end as the sync one is. Each look runs in a thread; between looks it
        holds none."""
        rt = await self.runtime()
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:  # from the thread that hears the end
            try:
                loop.call_soon_threadsafe(woken.set)
            except RuntimeError:
                pass  # the loop is closed: nobody waits any more

        with ResultWait(rt, wf_id, timeout, poll, wake) as wait:
            while True:
                woken.clear()
                try:
                    ended, value, pause = await asyncio.to_thread(wait.look, raw)
                except psycopg.Error as exc:  # past the deadline: docs/errors.md#database-faults
                    fault = db_faults.answer(exc, "result", rt.dsn)
                    if fault is exc:
                        raise
                    raise fault from None
                if ended:
                    return value
                try:
                    await asyncio.wait_for(woken.wait(), pause)
                except asyncio.TimeoutError:  # noqa: UP041 - not TimeoutError before 3.11
                    pass

    def handle(self, wf_id: str) -> AsyncWorkflowHandle:
        """The handle of workflow `wf_id`: its operations without the id, each a coroutine
        (`await h.result()`, `await h.signal(...)`). Reads nothing, as Runtime.handle."""
        return AsyncWorkflowHandle(self, wf_id)

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name == "close":
            raise AttributeError("AsyncRuntime closes with `await rt.aclose()` (or `async with`)")
        if name.startswith("_") or not callable(getattr(Runtime, name, None)):
            raise AttributeError(f"AsyncRuntime has no attribute {name!r} (it has Runtime's "
                                 "public methods, each as a coroutine)")  # fmt: skip

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._call(name, *args, **kwargs)

        call.__name__ = call.__qualname__ = name
        call.__doc__ = getattr(Runtime, name).__doc__
        return call


class AsyncWorkflowHandle:
    """One workflow of one AsyncRuntime, by id: WorkflowHandle's methods as coroutines."""

    def __init__(self, client: AsyncRuntime, wf_id: str) -> None:
        self._client = client
        self._id = check_id(wf_id)

    @property
    def id(self) -> str:
        """The workflow id."""
        return self._id

    def __repr__(self) -> str:
        return f"AsyncWorkflowHandle({self._id!r})"

    async def result(self, timeout: float | None = None, poll: float = 1.0, *,
                     raw: bool = False) -> Any:  # fmt: skip
        """Await the workflow's end: AsyncRuntime.result."""
        return await self._client.result(self._id, timeout, poll, raw=raw)

    async def result_now(self, *, raw: bool = False) -> tuple[bool, Any, str]:
        """One look at its end: Runtime.result_now."""
        return await self._client._run(Runtime.result_now, self._id, raw=raw)

    async def signal(self, name: str, payload: Any = None, sender: str | None = None) -> int:
        """Deliver a durable signal: Runtime.signal."""
        return await self._client.signal(self._id, name, payload, sender)

    async def query(self, default: Any = None, *, raw: bool = False) -> Any:
        """The status it last published: Runtime.query."""
        return await self._client._run(Runtime.query, self._id, default, raw=raw)

    async def status_record(self, *, follow: bool = True) -> db.Row:
        """That status with where it comes from: Runtime.status_record."""
        return await self._client._run(Runtime.status_record, self._id, follow=follow)

    async def cancel(self, by: str | None = None) -> None:
        """Request cancellation: Runtime.cancel."""
        return await self._client._run(Runtime.cancel, self._id, by)

    async def describe(self) -> db.Row:
        """Its row, steps, claims, effects and timeouts: Runtime.describe."""
        return await self._client.describe(self._id)

    async def claim_history(self) -> list[db.Row]:
        """Its claims by epoch: Runtime.claim_history."""
        return await self._client._run(Runtime.claim_history, self._id)

    async def effects(self) -> list[db.Row]:
        """The effects it dispatched: Runtime.effects."""
        return await self._client._run(Runtime.effects, self._id)

    async def migrate(self, to_version: str) -> None:
        """Move it, pending or sleeping, to another deployed version: Runtime.migrate."""
        return await self._client._run(Runtime.migrate, self._id, to_version)

    async def fork(self, at_seq: int, new_id: str) -> str:
        """A new workflow from its steps below at_seq: Runtime.fork; returns the new id."""
        return await self._client._run(Runtime.fork, self._id, at_seq, new_id)
