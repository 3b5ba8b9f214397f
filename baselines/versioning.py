"""S14 on temporalio: Worker Versioning with pinned workflows, and a code change without a
patch (docs/design.md#scenarios S14; the Temporal side of prove/versioning.py).

Why: the spec predicts S14 "equal", Temporal's mechanisms being Worker Versioning (a workflow
pinned to the deployment version it started on runs only on that version's workers) and the
NonDeterminismError workflow-task retry (a replay that issues other commands than the history
fails the task, again and again, and runs nothing). This module is what a Temporal user writes
to get both, so the harness can measure them on the dev server.

Three workflow classes share the workflow type ``S14Flow`` (a worker registers exactly one):

- ``S14FlowV1``: activity ``s14_prepare``, ``workflow.sleep(sleep_seconds)``, activity
  ``s14_refund`` (one POST /refunds to the local target, metadata ``code: v1``);
- ``S14FlowV2``: the same with ``code: v2`` (the new deployment version);
- ``S14FlowV1Changed``: v1 edited in place, no ``workflow.patched()``: an ``s14_check_balance``
  activity before ``s14_prepare`` and a doubled refund. Run under the v1 build id, its replay of
  a v1 history schedules another activity first: NonDeterminismError.

The worker (``python -m baselines.versioning --address A --task-queue Q --deployment D
--build-id B --code v1|v2|changed --target-url URL --payment P --mode M --id W``) opts into
Worker Versioning (``WorkerDeploymentConfig(version=WorkerDeploymentVersion(D, B),
use_worker_versioning=True, default_versioning_behavior=PINNED)``) and prints one JSON line
``{"event": "ready", ...}`` once it polls; SIGTERM shuts it down cleanly.

``VersioningClient`` (a ``baselines.client.BaselineClient``) adds what the harness drives:
setting a deployment's current version, starting S14Flow (optionally pinned to a version by a
versioning override), the describe fields versioning needs, and waiting on history events.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy, VersioningBehavior, WorkerDeploymentVersion

with workflow.unsafe.imports_passed_through():
    from world.target_client import LocalRefunds

from baselines import MODES
from baselines.client import BaselineClient

WORKFLOW_NAME = "S14Flow"
CODES = ("v1", "v2", "changed")
ACTIVITY_TIMEOUT = timedelta(seconds=5)


# -- the workflows ----------------------------------------------------------------------------


async def _activity(name: str, arg: dict) -> Any:
    return await workflow.execute_activity(
        name, arg, start_to_close_timeout=ACTIVITY_TIMEOUT,
        retry_policy=RetryPolicy(maximum_attempts=3),
    )  # fmt: skip


async def _body(case: dict, code: str, amount: int) -> dict:
    info = workflow.info()
    prep = await _activity("s14_prepare", {"code": code})
    await workflow.sleep(float(case["sleep_seconds"]))
    sent = await _activity("s14_refund", {"wf": info.workflow_id, "run_id": info.run_id,
                                          "code": code, "amount": amount})  # fmt: skip
    return {"code": code, "prepared_by": prep["worker"], "refund": sent}


@workflow.defn(name=WORKFLOW_NAME)
class S14FlowV1:
    @workflow.run
    async def run(self, case: dict) -> dict:
        return await _body(case, "v1", int(case["amount"]))


@workflow.defn(name=WORKFLOW_NAME)
class S14FlowV2:
    @workflow.run
    async def run(self, case: dict) -> dict:
        return await _body(case, "v2", int(case["amount"]))


@workflow.defn(name=WORKFLOW_NAME)
class S14FlowV1Changed:
    @workflow.run
    async def run(self, case: dict) -> dict:
        await _activity("s14_check_balance", {})  # new, with no workflow.patched() guard
        return await _body(case, "v1-changed", 2 * int(case["amount"]))


WORKFLOWS = {"v1": S14FlowV1, "v2": S14FlowV2, "changed": S14FlowV1Changed}


# -- the activities ---------------------------------------------------------------------------


class Activities:
    """The three activities of one worker; a refund POST names the worker (X-ILR-Worker)."""

    def __init__(self, target_url: str, payment: str, worker: str, mode: str) -> None:
        self.target = LocalRefunds(target_url, payment, 1)
        self.payment, self.worker, self.mode = payment, worker, mode

    def prepare(self, req: dict) -> dict:
        return {"code": req["code"], "worker": self.worker}

    def check_balance(self, req: dict) -> dict:
        return self.target.payment_state()

    def refund(self, req: dict) -> dict:
        info = activity.info()
        # The key scheme of each baseline (baselines/refund.py): (a) Temporal's recommended
        # run id + activity id; (b) the workflow id, with a lookup before the send.
        if self.mode == "temporal_idem":
            key = f"{info.workflow_run_id}-{info.activity_id}"
        else:
            key = f"{info.workflow_id}-refund"
            found = self.target.query(key)
            if found is not None:
                return {"key": key, "found": found["id"], "sent": False}
        payload = {"payment": self.payment, "amount": int(req["amount"]),
                   "metadata": {"wf": req["wf"], "code": req["code"]}}  # fmt: skip
        out = self.target.apply(key, payload, worker=self.worker, epoch=info.attempt)
        return {"key": key, "refund": out.get("id"), "sent": True}

    def definitions(self) -> list:
        """The activities as plain functions (activity.defn cannot mark a bound method)."""

        @activity.defn(name="s14_prepare")
        def s14_prepare(req: dict) -> dict:
            return self.prepare(req)

        @activity.defn(name="s14_check_balance")
        def s14_check_balance(req: dict) -> dict:
            return self.check_balance(req)

        @activity.defn(name="s14_refund")
        def s14_refund(req: dict) -> dict:
            return self.refund(req)

        return [s14_prepare, s14_check_balance, s14_refund]


# -- the worker subprocess --------------------------------------------------------------------


def _say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


async def _connect(address: str, identity: str, timeout: float = 30.0) -> Any:
    from temporalio.client import Client

    deadline = time.monotonic() + timeout
    while True:
        try:
            return await Client.connect(address, identity=identity)
        except Exception as e:  # noqa: BLE001 - the server may still be starting
            if time.monotonic() >= deadline:
                raise ConnectionError(f"cannot reach Temporal at {address}: {e}") from e
            await asyncio.sleep(0.25)


async def serve(args: argparse.Namespace) -> int:
    from temporalio.worker import Worker, WorkerDeploymentConfig

    identity = f"{args.id}@{os.getpid()}"
    client = await _connect(args.address, identity)
    acts = Activities(args.target_url, args.payment, args.id, args.mode)
    deployment = WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(args.deployment, args.build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with ThreadPoolExecutor(max_workers=4) as executor:
        worker = Worker(client, task_queue=args.task_queue, workflows=[WORKFLOWS[args.code]],
                        activities=acts.definitions(), activity_executor=executor,
                        identity=identity, deployment_config=deployment,
                        sticky_queue_schedule_to_start_timeout=timedelta(
                            seconds=args.sticky_timeout))  # fmt: skip
        async with worker:
            _say("ready", id=args.id, pid=os.getpid(), identity=identity, code=args.code,
                 deployment=args.deployment, build_id=args.build_id,
                 task_queue=args.task_queue)  # fmt: skip
            await stop.wait()
    _say("stopped", id=args.id, pid=os.getpid())
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m baselines.versioning",
                                 description="A versioned Temporal worker for S14.")  # fmt: skip
    ap.add_argument("--address", required=True)
    ap.add_argument("--task-queue", required=True)
    ap.add_argument("--deployment", required=True, help="worker deployment name (no dots)")
    ap.add_argument("--build-id", required=True)
    ap.add_argument("--code", required=True, choices=CODES, help="which S14Flow to register")
    ap.add_argument("--target-url", required=True)
    ap.add_argument("--payment", required=True)
    ap.add_argument("--mode", required=True, choices=MODES)
    ap.add_argument("--id", required=True)
    ap.add_argument("--sticky-timeout", type=float, default=2.0)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return asyncio.run(serve(args))
    except ConnectionError as e:
        print(f"baselines.versioning: {e}", file=sys.stderr)
        return 2


# -- the harness's client ---------------------------------------------------------------------


class VersioningClient(BaselineClient):
    """BaselineClient plus the deployment and history calls S14 needs."""

    def set_current(self, deployment: str, build_id: str, timeout: float = 30.0) -> dict:
        """Make (deployment, build_id) the deployment's current version. The server knows a
        version only once one of its workers polled, so this retries until `timeout`."""
        from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest

        req = SetWorkerDeploymentCurrentVersionRequest(
            namespace=self.namespace, deployment_name=deployment, build_id=build_id,
            identity="prove-s14")  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = self._run(
                    self.client.workflow_service.set_worker_deployment_current_version(req)
                )
                prev = reply.previous_deployment_version
                return {"current": f"{deployment}.{build_id}",
                        "previous": f"{prev.deployment_name}.{prev.build_id}"
                        if prev.build_id else None}  # fmt: skip
            except Exception as e:  # noqa: BLE001 - the version may not be known yet
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"cannot make {deployment}.{build_id} current: {e}") from e
                time.sleep(0.5)

    def start_s14(self, workflow_id: str, task_queue: str, case: dict,
                  pin: tuple[str, str] | None = None) -> str:  # fmt: skip
        """Start S14Flow; `pin` = (deployment, build_id) pins it there by a versioning override
        (otherwise it goes to the deployment's current version)."""
        from temporalio.common import PinnedVersioningOverride

        override = PinnedVersioningOverride(WorkerDeploymentVersion(*pin)) if pin else None

        async def start() -> str:
            h = await self.client.start_workflow(WORKFLOW_NAME, case, id=workflow_id,
                                                 task_queue=task_queue,
                                                 versioning_override=override)  # fmt: skip
            return h.result_run_id or ""

        return self._run(start())

    def versioning(self, workflow_id: str) -> dict:
        """Status, the versioning info (behavior, pinned version) and the pending workflow
        task's attempt (a NonDeterminismError retry loop shows a growing attempt)."""

        async def read() -> dict:
            d = await self.client.get_workflow_handle(workflow_id).describe()
            raw = d.raw_description
            vi = raw.workflow_execution_info.versioning_info
            dv = vi.deployment_version
            pending = raw.pending_workflow_task if raw.HasField("pending_workflow_task") else None
            return {
                "status": d.status.name if d.status is not None else None,
                "behavior": VersioningBehavior(vi.behavior).name if vi.behavior else None,
                "version": f"{dv.deployment_name}.{dv.build_id}" if dv.build_id else None,
                "override": bool(vi.HasField("versioning_override")),
                "pending_task_attempt": pending.attempt if pending else None,
                "pending_task_state": pending.state if pending else None,
            }

        return self._run(read())

    def events(self, workflow_id: str) -> list[dict]:
        """The history's events as Temporal's JSON (camelCase keys)."""
        return self.history(workflow_id)["events"]


def event_attrs(e: dict) -> dict:
    """The one `...EventAttributes` object of a history event (JSON form)."""
    return next((v for k, v in e.items() if k.endswith("EventAttributes")), {})


if __name__ == "__main__":
    # Run the copy imported under its package name: the workflow sandbox re-imports the module
    # that defines a workflow, and cannot re-import __main__.
    from baselines import versioning

    status = versioning.main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # as baselines.worker: skip finalization with the SDK's core threads
