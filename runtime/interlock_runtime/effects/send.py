"""The watched send (docs/design.md#send-deadline): a watchdog ends the worker process if a send
outlives its local deadline, so no byte can leave after it while the process runs (A1).

The gate is written once, without I/O at the target: where it sends, looks a target up or
waits, it yields a request (Send, Read, Pause) and receives the answer (or the exception it
raised, thrown in at the same place). Two drivers serve the requests:

    drive        a plain worker's: each request served inline in the run's thread (the gate
                 as it always ran: watched_apply with its threading.Timer)
    drive_async  the asyncio worker's (docs/async.md#effects): the gate's database parts run
                 in a few threads, one stage at a time, and the requests on the event loop;
                 an async `apply` is awaited there under the shared Watchdog thread
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import heapq
import inspect
import itertools
import os
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..telemetry import SEND, effect_stage
from .targets import SHORT_LOOP

if TYPE_CHECKING:
    from .call import EffectCall

MIN_SEND_BUDGET = 1.0  # seconds: below this, do not start a send (docs/design.md#send-deadline)
WATCHDOG_EXIT = 75  # os._exit status when a send outlives its deadline
NOT_SENT = object()  # what watched_apply returns when the budget left is below the minimum
NOT_LIVE = object()  # what the async driver answers when the local lease deadline passed (C1)

T = TypeVar("T")


@dataclass(frozen=True)
class Send:
    """Send call.payload to call.target under the watch; `t0`: when the stopwatch started.
    Answered with the target's answer, NOT_SENT or NOT_LIVE; raises what the target raised."""

    call: EffectCall
    t0: float


@dataclass(frozen=True)
class Read:
    """Read the target outside any transaction: `fn(*args)` (a lookup, a postcondition)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Pause:
    """Wait `seconds` outside any transaction (the settle audit)."""

    seconds: float


Request = Send | Read | Pause
Io = Generator[Request, Any, T]  # a part of the gate: yields requests, returns its value


def target_read(fn: Callable[..., Any], *args: Any) -> Io[Any]:
    """`found = yield from target_read(call.target.query, eid, payload)`."""
    return (yield Read(fn, args))


# -- the plain driver --------------------------------------------------------------------------


def drive(io: Io[T]) -> T:
    """Run a part of the gate in this thread, serving each request inline."""
    try:
        request = next(io)
        while True:
            try:
                answer = _serve(request)
            except BaseException as exc:  # thrown in where it was asked, as a call would raise
                request = io.throw(exc)
            else:
                request = io.send(answer)
    except StopIteration as stop:
        value: T = stop.value
        return value


def _serve(request: Request) -> Any:
    if isinstance(request, Send):
        return watched_apply(request.call, request.t0)
    if isinstance(request, Read):
        return _settled(request.fn(*request.args))
    time.sleep(request.seconds)
    return None


def _settled(value: Any) -> Any:
    """A coroutine from an async target, in a plain thread: run it on a loop of its own."""
    if not inspect.isawaitable(value):
        return value
    token = SHORT_LOOP.set(True)
    try:
        return asyncio.run(_awaited(value))
    finally:
        SHORT_LOOP.reset(token)


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


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
        return _settled(call.target.apply(call.eid, call.payload, worker=call.port.worker_id,
                                          epoch=call.port.epoch, timeout=remaining))  # fmt: skip
    finally:
        timer.cancel()


# -- the asyncio driver ------------------------------------------------------------------------


class Watchdog:
    """One thread that ends the process (os._exit(WATCHDOG_EXIT)) when an armed deadline
    passes: the asyncio worker's sends share it instead of a timer thread each. A thread, not
    the event loop, so it fires while the loop is blocked. Started with the worker."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, float] = {}
        self._heap: list[tuple[float, int]] = []
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
                self._thread.start()

    def arm(self, seconds: float) -> int:
        self.start()
        with self._cond:
            token = next(self._tokens)
            deadline = time.monotonic() + seconds
            self._armed[token] = deadline
            heapq.heappush(self._heap, (deadline, token))
            self._cond.notify()
            return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)

    def _watch(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)  # disarmed
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait <= 0:
                    os._exit(WATCHDOG_EXIT)
                self._cond.wait(wait)


WATCHDOG = Watchdog()


async def drive_async(io: Io[T], stage: Callable[[Callable[[], Any]], Awaitable[Any]],
                      reads: Executor, live: Callable[[], bool],
                      context: contextvars.Context | None = None) -> T:  # fmt: skip
    """Run a part of the gate from the event loop: each stage between two requests (the
    database parts: T_dispatch, T_commit, the late result, T_resolve) through `stage` (a
    thread with a connection lent), each request on the loop: a send or an async read
    awaited, a plain read in `reads`. `live()`: the local lease check (C1), made right
    before the send. `context`: the one the gate runs in (a copy of the current one)."""

    def advance(answer: Any, failed: BaseException | None) -> tuple[bool, Any]:
        try:
            return False, io.throw(failed) if failed is not None else io.send(answer)
        except StopIteration as stop:
            return True, stop.value

    # One context for the whole effect, entered by one stage at a time (a request runs in a
    # copy): the gate's spans stay current across the hops between threads and the loop.
    context = context or contextvars.copy_context()
    answer: Any = None
    failed: BaseException | None = None
    while True:
        done, request = await stage(functools.partial(context.run, advance, answer, failed))
        if done:
            value: T = request
            return value
        answer, failed = None, None
        try:
            loop = asyncio.get_running_loop()
            answer = await context.run(loop.create_task, _serve_async(request, reads, live))
        except BaseException as exc:  # thrown in where it was asked, as in drive()
            failed = exc


async def _serve_async(request: Request, reads: Executor, live: Callable[[], bool]) -> Any:
    if isinstance(request, Send):
        if not inspect.iscoroutinefunction(request.call.target.apply):
            # a plain target: the plain watched send in a thread (a thread while it is out)
            return await _in_thread(reads, _plain_send, request.call, request.t0, live)
        return await watched_apply_async(request.call, request.t0, live)
    if isinstance(request, Read):
        if inspect.iscoroutinefunction(request.fn):
            return await request.fn(*request.args)
        out = await _in_thread(reads, request.fn, *request.args)
        return await out if inspect.isawaitable(out) else out
    await asyncio.sleep(request.seconds)
    return None


async def _in_thread(reads: Executor, fn: Callable[..., Any], *args: Any) -> Any:
    call = functools.partial(contextvars.copy_context().run, fn, *args)  # the current span too
    return await asyncio.get_running_loop().run_in_executor(reads, call)


def _plain_send(call: EffectCall, t0: float, live: Callable[[], bool]) -> Any:
    return watched_apply(call, t0) if live() else NOT_LIVE


@effect_stage(SEND)  # current while the target is called: its traceparent header
async def watched_apply_async(call: EffectCall, t0: float, live: Callable[[], bool]) -> Any:
    """watched_apply for an async `apply`, awaited on the loop: the local lease check (C1)
    right before the send, the same budget and minimum, the send's timeout = the budget left,
    and the shared Watchdog armed with it."""
    if not live():
        return NOT_LIVE
    remaining = call.spec.send_timeout - (time.monotonic() - t0)
    if remaining < MIN_SEND_BUDGET:
        return NOT_SENT
    token = WATCHDOG.arm(remaining)
    try:
        return await call.target.apply(call.eid, call.payload, worker=call.port.worker_id,
                                       epoch=call.port.epoch, timeout=remaining)  # fmt: skip
    finally:
        WATCHDOG.disarm(token)
