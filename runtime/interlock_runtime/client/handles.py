"""WorkflowHandle: one workflow's operations bound to its id (docs/api.md#handles), as
Temporal's handles are: `h = rt.handle("inv-1")`, then `h.signal("go")`, `h.result()`.

A handle holds the client and the id, nothing else: it reads nothing when made, and every
method is the client's operation of the same name (client/operations.py, client/results.py) with
this id, so it checks, refuses and raises exactly as that does.
"""

from __future__ import annotations

from typing import Any

from .. import db
from .connection import check_id
from .operations import WorkflowOperations


class WorkflowHandle:
    """One workflow of one client, by id. Made by `rt.handle(wf_id)`; cheap, holds no
    connection of its own, safe to share between threads as the client is."""

    def __init__(self, client: WorkflowOperations, wf_id: str) -> None:
        self._client = client
        self._id = check_id(wf_id)

    @property
    def id(self) -> str:
        """The workflow id."""
        return self._id

    def __repr__(self) -> str:
        return f"WorkflowHandle({self._id!r})"

    def result(self, timeout: float | None = None, poll: float = 1.0, *,
               raw: bool = False) -> Any:  # fmt: skip
        """Wait until the workflow ends: Runtime.result."""
        return self._client.result(self._id, timeout, poll, raw=raw)

    def result_now(self, *, raw: bool = False) -> tuple[bool, Any, str]:
        """One look at its end: Runtime.result_now."""
        return self._client.result_now(self._id, raw=raw)

    def signal(self, name: str, payload: Any = None, sender: str | None = None) -> int:
        """Deliver a durable signal: Runtime.signal."""
        return self._client.signal(self._id, name, payload, sender)

    def query(self, default: Any = None, *, raw: bool = False) -> Any:
        """The status it last published: Runtime.query."""
        return self._client.query(self._id, default, raw=raw)

    def status_record(self, *, follow: bool = True) -> db.Row:
        """That status with where it comes from: Runtime.status_record."""
        return self._client.status_record(self._id, follow=follow)

    def cancel(self, by: str | None = None) -> None:
        """Request cancellation: Runtime.cancel."""
        return self._client.cancel(self._id, by)

    def describe(self) -> db.Row:
        """Its row, steps, claims, effects and timeouts: Runtime.describe."""
        return self._client.describe(self._id)

    def claim_history(self) -> list[db.Row]:
        """Its claims by epoch: Runtime.claim_history."""
        return self._client.claim_history(self._id)

    def effects(self) -> list[db.Row]:
        """The effects it dispatched: Runtime.effects."""
        return self._client.effects(self._id)

    def migrate(self, to_version: str) -> None:
        """Move it, pending or sleeping, to another deployed version: Runtime.migrate."""
        return self._client.migrate(self._id, to_version)

    def fork(self, at_seq: int, new_id: str) -> str:
        """A new workflow from its steps below at_seq: Runtime.fork; returns the new id
        (`rt.handle(new_id)` is its handle)."""
        return self._client.fork(self._id, at_seq, new_id)
