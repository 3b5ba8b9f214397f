"""The requests a durable call makes of its shell, and the plain way to serve them
(docs/design.md#run-engine).

The run engine (run_engine.py) does no I/O: a durable call is a generator that yields these
requests and receives their answers. `Calling` steps one such generator; `drive` serves it
in this thread (the sync shell, and the gate's stages in either shell); the asyncio shell
awaits each answer around the same `Calling`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import db

T = TypeVar("T")
Thrown = Callable[[Any, BaseException], BaseException]  # (request, exception) -> thrown in


@dataclass(frozen=True)
class Query:
    """One named statement (db.query) on the run's connection, or inside the Transaction whose
    body yields it. `fetch`: "one" (its row; LookupError if none), "first" (a row or None),
    "all" (the rows) or None (nothing)."""

    name: str
    params: dict[str, Any] | None = None
    fetch: str | None = None


@dataclass(frozen=True)
class Transaction:
    """A fenced transaction (docs/design.md#fence): the fence statement (zero rows raises Fenced,
    nothing written), the deferred step records in seq order, then the Queries `body(fence)`
    yields. Answered with (the fence row, the body's value)."""

    fence: dict[str, Any]
    records: list[dict[str, Any]]
    body: Callable[[db.Row], Generator[Query, Any, Any]] | None


@dataclass(frozen=True)
class Body:
    """Workflow code: fn(*args, **kwargs), then `check` of its output, outside the wall-clock
    guard. With a `deadline` (monotonic) the driver stops waiting for it there and raises
    timeouts.Abandoned (the code runs on, its outcome dropped). `label` names it."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    deadline: float | None = None
    check: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Gate:
    """The effect gate (effects.gate) for a prepared call at `seq`: its recorded `row`'s result
    with no I/O, or the gate at the frontier."""

    prepared: Any  # effects.Prepared (the gate imports this module's users, not this)
    seq: int
    row: db.Row | None
    options: dict[str, Any]


Request = Query | Transaction | Body | Gate
Io = Generator[Request, Any, T]  # a durable call: yields requests, returns its value
Write = Callable[[db.Row], Generator[Query, Any, T]]  # a transaction's body, given the fence


def query(conn: db.Conn, request: Query) -> Any:
    """Serve one Query on a plain connection."""
    cursor = conn.execute(db.query(request.name), request.params)
    if request.fetch == "one":
        return db.one(cursor)
    if request.fetch == "first":
        return cursor.fetchone()
    return cursor.fetchall() if request.fetch == "all" else None


class Calling:
    """A durable call being driven: its next `request`, until it returns (`running` False,
    its `value`). Each answer, or the exception serving the request raised (as `thrown` maps
    it: the shells turn a database fault into the run's DatabaseLost), goes in where the
    request was made. Both shells' drivers are this, around their own way of serving."""

    def __init__(self, io: Generator[Any, Any, Any], thrown: Thrown = lambda _, exc: exc):
        self._io, self._thrown = io, thrown
        self.running, self.value = True, None
        self.request: Any = None
        self._step(lambda: io.send(None))

    def answer(self, value: Any, failed: BaseException | None) -> None:
        if failed is None:
            self._step(lambda: self._io.send(value))
        else:
            exc = self._thrown(self.request, failed)
            self._step(lambda: self._io.throw(exc))

    def _step(self, step: Callable[[], Any]) -> None:
        try:
            self.request = step()
        except StopIteration as stop:
            self.running, self.value = False, stop.value


def outcome(serve: Callable[[Any], Any], request: Any) -> tuple[Any, BaseException | None]:
    """serve(request) as (its value, None) or (None, the exception it raised)."""
    try:
        return serve(request), None
    except BaseException as exc:
        return None, exc


def drive(io: Generator[Any, Any, T], serve: Callable[[Any], Any],
          thrown: Thrown = lambda _, exc: exc) -> T:  # fmt: skip
    """Drive a durable call in this thread, each request answered by `serve`."""
    call = Calling(io, thrown)
    while call.running:
        call.answer(*outcome(serve, call.request))
    value: T = call.value  # type: ignore[assignment]
    return value


def serve_queries(io: Generator[Any, Any, T], conn: db.Conn) -> T:
    """Drive a generator whose every request is a Query or a Transaction on `conn` (a
    transaction's body; the frontier from the gate's stages)."""

    def serve(request: Query | Transaction) -> Any:
        return (
            transaction(conn, request) if isinstance(request, Transaction) else query(conn, request)
        )

    return drive(io, serve)


def transaction(conn: db.Conn, request: Transaction) -> tuple[db.Row, Any]:
    """Serve a Transaction on a plain connection."""
    fence = request.fence
    with db.fenced(conn, fence["wf"], fence["epoch"], fence["ttl"]) as row:
        for params in request.records:
            conn.execute(db.query("insert_step"), params)
        value = serve_queries(request.body(row), conn) if request.body else None
    return row, value
