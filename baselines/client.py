"""Driving the refund baseline from the harness: start, approve, wait, describe, history, reset.

Async functions take a connected ``temporalio.client.Client``; ``BaselineClient(address)`` is
the same API for synchronous callers (it runs its own event loop in a thread).

- ``start_refund(client, workflow_id, task_queue, case=..., payment=..., sleep_seconds=...)``
- ``approve(client, workflow_id, amount, grant_id)``: the ``approve`` signal ``{amount,
  grant_id}`` to the workflow's current run.
- ``wait_result(client, workflow_id, timeout)``: the result of the current run, following
  resets (a reset run's result is the workflow's result).
- ``describe(client, workflow_id)``: ``{workflow_id, run_id, status, type, task_queue, start,
  close, history_length}``.
- ``history_json(client, workflow_id, run_id=None)``: the event history as Temporal's JSON
  (``await handle.fetch_history()`` then ``.to_json()``).
- ``reset_to_before_decision(client, workflow_id, ...)``: a reset to the first workflow task
  completion, i.e. before the ``decide`` activity was scheduled; the approve signal is
  reapplied to the new run (Temporal's default). ``reset_to_before_decision_cli`` does the same
  with ``temporal workflow reset --type FirstWorkflowTask`` (docs/design.md#scenarios S05). Both return the
  new run id.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import uuid
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHandle

from .refund import DEFAULT_SLEEP_SECONDS, WORKFLOW_NAME

T = TypeVar("T")


async def connect(address: str, namespace: str = "default") -> Client:
    return await Client.connect(address, namespace=namespace)


async def start_refund(
    client: Client,
    workflow_id: str,
    task_queue: str,
    *,
    case: str = "case-4471",
    payment: str = "pay_881",
    sleep_seconds: float = DEFAULT_SLEEP_SECONDS,
    timer_seconds: float = 0.0,
    execution_timeout: timedelta | None = None,
) -> WorkflowHandle:
    body: dict = {"case": case, "payment": payment, "sleep_seconds": sleep_seconds}
    if timer_seconds:
        body["timer_seconds"] = timer_seconds
    return await client.start_workflow(
        WORKFLOW_NAME,
        body,
        id=workflow_id,
        task_queue=task_queue,
        execution_timeout=execution_timeout,
    )


async def approve(client: Client, workflow_id: str, amount: int, grant_id: str) -> None:
    await client.get_workflow_handle(workflow_id).signal(
        "approve", {"amount": amount, "grant_id": grant_id}
    )


async def wait_result(client: Client, workflow_id: str, timeout: float = 60.0,
                      run_id: str | None = None) -> dict:  # fmt: skip
    """The result of `run_id` (following its continue-as-new and retries), or of the latest
    run. A run id matters after a duplicate start of a finished workflow: Temporal's default
    id reuse policy starts a new run, which would otherwise be the one waited for."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    return await asyncio.wait_for(handle.result(follow_runs=True), timeout)


async def describe(client: Client, workflow_id: str, run_id: str | None = None) -> dict:
    d = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    return {
        "workflow_id": d.id,
        "run_id": d.run_id,
        "status": d.status.name if d.status is not None else None,
        "type": d.workflow_type,
        "task_queue": d.task_queue,
        "start": d.start_time.timestamp() if d.start_time else None,
        "close": d.close_time.timestamp() if d.close_time else None,
        "history_length": d.history_length,
    }


async def history_json(client: Client, workflow_id: str, run_id: str | None = None) -> str:
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    return history.to_json()


async def history(client: Client, workflow_id: str, run_id: str | None = None) -> dict:
    return json.loads(await history_json(client, workflow_id, run_id))


async def first_workflow_task_completed(
    client: Client, workflow_id: str, run_id: str | None = None
) -> int:
    """The event id of the run's first WorkflowTaskCompleted (the decision is scheduled by the
    commands of that task, so resetting there re-runs the decision)."""
    h = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    for e in h.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return e.event_id
    raise LookupError(f"{workflow_id} has no completed workflow task yet")


async def reset_to_before_decision(
    client: Client,
    workflow_id: str,
    run_id: str | None = None,
    *,
    reason: str = "prove: reset to before the decision",
) -> str:
    """Reset through the SDK's service call; returns the new run id."""
    if run_id is None:
        run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    event_id = await first_workflow_task_completed(client, workflow_id, run_id)
    resp = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            reason=reason,
            workflow_task_finish_event_id=event_id,
            request_id=str(uuid.uuid4()),
        )
    )
    return resp.run_id


def reset_to_before_decision_cli(
    address: str,
    workflow_id: str,
    run_id: str | None = None,
    *,
    namespace: str = "default",
    reason: str = "prove: reset to before the decision",
    binary: str | None = None,
) -> str:
    """``temporal workflow reset --type FirstWorkflowTask``; returns the new run id."""
    from world.temporal_server import find_binary

    cmd = [binary or find_binary(), "workflow", "reset", "--address", address,
           "--namespace", namespace, "--workflow-id", workflow_id,
           "--type", "FirstWorkflowTask", "--reason", reason, "--output", "json"]  # fmt: skip
    if run_id:
        cmd += ["--run-id", run_id]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"temporal workflow reset failed ({out.returncode}): {out.stderr}")
    try:
        reply = json.loads(out.stdout)
    except ValueError:
        raise RuntimeError(f"unexpected reset output: {out.stdout!r}") from None
    new_run = reply.get("runId") or reply.get("run_id")
    if not new_run:
        raise RuntimeError(f"reset output has no run id: {reply}")
    return new_run


class BaselineClient:
    """The async API above for synchronous callers, on a private event loop thread."""

    def __init__(self, address: str, namespace: str = "default", timeout: float = 30.0) -> None:
        self.address, self.namespace = address, namespace
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        try:
            self.client: Client = self._run(connect(address, namespace), timeout)
        except BaseException:
            self.close()
            raise

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start_refund(self, workflow_id: str, task_queue: str, **kw: Any) -> str:
        """Start the workflow; returns its first run id."""
        handle = self._run(start_refund(self.client, workflow_id, task_queue, **kw))
        return handle.result_run_id or ""

    def approve(self, workflow_id: str, amount: int, grant_id: str) -> None:
        self._run(approve(self.client, workflow_id, amount, grant_id))

    def cancel(self, workflow_id: str) -> None:
        """Request cancellation (the workflow sees CancelledError at its next await)."""
        self._run(self.client.get_workflow_handle(workflow_id).cancel())

    def wait_result(self, workflow_id: str, timeout: float = 60.0,
                    run_id: str | None = None) -> dict:  # fmt: skip
        return self._run(wait_result(self.client, workflow_id, timeout, run_id), timeout + 5)

    def describe(self, workflow_id: str, run_id: str | None = None) -> dict:
        return self._run(describe(self.client, workflow_id, run_id))

    def history_json(self, workflow_id: str, run_id: str | None = None) -> str:
        return self._run(history_json(self.client, workflow_id, run_id))

    def history(self, workflow_id: str, run_id: str | None = None) -> dict:
        return self._run(history(self.client, workflow_id, run_id))

    def reset_to_before_decision(self, workflow_id: str, run_id: str | None = None) -> str:
        return self._run(reset_to_before_decision(self.client, workflow_id, run_id))

    def close(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> BaselineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
