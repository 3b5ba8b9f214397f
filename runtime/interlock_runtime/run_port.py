"""RunPort: the internal interface of a workflow run, the one way into a run from outside the
run engine (run_engine.py; its EnginePort implements it over a connection).

Its users are the effect gate (effects/ and the effect_* modules) and orphan recovery
(runtime.py); context.port_of(ctx) returns a context's port. Every member is listed here and
nothing else of the engine is reached into. Workflow code never sees it: it is not part of
the public API.

The gate imports only this module, never the engine or a context, so they and the gate import
each other in one direction only (engine -> effects).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, NoReturn, Protocol

from .db import Conn, Row


class RunPort(Protocol):
    """What the gate, the worker and orphan recovery may use of one claimed run."""

    @property
    def conn(self) -> Conn:
        """The run's connection: every read and write of the run goes through it."""

    @property
    def workflow_id(self) -> str:
        """The id of the workflow run."""

    @property
    def workflow_name(self) -> str:
        """The workflow's name (the agent a PROPOSED journal entry names)."""

    @property
    def epoch(self) -> int:
        """The claim's epoch: every fenced write checks it."""

    @property
    def worker_id(self) -> str:
        """The worker running the claim (sent to a target with each send)."""

    @property
    def parent_id(self) -> str | None:
        """The parent workflow of a child run, told of the child's completion; else None."""

    def next_call(
        self, kind: str, name: str, fingerprint: str | None = None
    ) -> tuple[int, Row | None]:
        """Take the next seq of the replay: (seq, its recorded row checked against this call)
        or (seq, None) at the frontier. A mismatch raises NonDeterminism."""

    def frontier(self) -> None:
        """Before a call runs for real: the claim must still be ours (else Fenced or
        Release), a deferred step record is committed, and a pending cancel is delivered."""

    def fenced_write(self) -> AbstractContextManager[Row]:
        """A fenced transaction on conn that renews the claim when it commits; yields the
        fence row (cancel_requested_at, now, lease_expires_at). A lost claim raises Fenced."""

    def insert_step(
        self,
        seq: int,
        kind: str,
        name: str,
        output: Any = None,
        error: Any = None,
        fingerprint: str | None = None,
    ) -> Any:
        """Insert a step row inside an open fenced_write(); returns the output as stored."""

    def unwind(self, exc: BaseException) -> NoReturn:
        """Raise exc (Suspend, Fenced, ...) as the exception that ends the run: the run
        re-raises it even if workflow code catches it."""
