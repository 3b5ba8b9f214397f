"""One Temporal worker subprocess for the refund baselines (docs/design.md#refund-case).

    python -m baselines.worker --address HOST:PORT --task-queue Q
        --mode temporal_idem|temporal_check --target-url URL --payment ID --tier N
        --model-url URL [--grants-dsn DSN] [--attempt-log FILE] --id W
        [--namespace default] [--http-timeout 3] [--concurrency 8]
        [--sticky-timeout 10] [--connect-timeout 30] [--api local|stripe] [--no-lookup]

It registers ``RefundWorkflow``, the ``decide`` activity and the ``refund`` activity of the
mode (see baselines/refund.py), and polls until SIGTERM or SIGINT (a clean shutdown) or a
SIGKILL (a crash: the harness's external kill, or an instrumented kill point armed by
ILR_KILL_AT / ILR_STOP_AT in this process's environment, docs/design.md#kill-points).

stdout gets one JSON line per lifecycle event: ``{"event": "ready", "id", "pid", "mode",
"task_queue", "address", "kill_at", "stop_at"}`` once the worker polls, ``{"event": "stopped"}``
at a clean exit; errors go to stderr with exit status 2 (bad flags, server unreachable).
``--sticky-timeout`` is the SDK's ``sticky_queue_schedule_to_start_timeout`` (default 10 s, the
SDK's default): after a worker dies, its workflows' next workflow task waits that long on the
dead worker's sticky queue before another worker gets it.
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

from temporalio.client import Client
from temporalio.worker import Worker

from . import MODES, refund


def _say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


async def _connect(address: str, namespace: str, timeout: float, identity: str) -> Client:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await Client.connect(address, namespace=namespace, identity=identity)
        except Exception as e:  # noqa: BLE001 - the server may still be starting or restarting
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"cannot reach the Temporal server at {address} within {timeout:.0f}s: {e}"
                ) from e
            await asyncio.sleep(0.25)


async def run(args: argparse.Namespace) -> int:
    from world.model_stub import warm_sdk

    warm_sdk()  # the SDK's first import is not decision latency (as the runtime's worker)
    identity = f"{args.id}@{os.getpid()}"
    client = await _connect(args.address, args.namespace, args.connect_timeout, identity)
    activities = refund.configure(
        mode=args.mode,
        target_url=args.target_url,
        payment=args.payment,
        tier=args.tier,
        model_url=args.model_url,
        grants_dsn=args.grants_dsn,
        attempt_log_path=args.attempt_log,
        worker=args.id,
        http_timeout=args.http_timeout,
        api=args.api,
        lookup=not args.no_lookup,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with ThreadPoolExecutor(max_workers=args.concurrency) as executor:
        worker = Worker(
            client,
            task_queue=args.task_queue,
            workflows=[refund.RefundWorkflow],
            activities=activities,
            activity_executor=executor,
            max_concurrent_activities=args.concurrency,
            identity=identity,
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=args.sticky_timeout),
        )
        async with worker:
            _say("ready", id=args.id, pid=os.getpid(), mode=args.mode, task_queue=args.task_queue,
                 address=args.address, kill_at=os.environ.get("ILR_KILL_AT", ""),
                 stop_at=os.environ.get("ILR_STOP_AT", ""))  # fmt: skip
            await stop.wait()
    _say("stopped", id=args.id, pid=os.getpid())
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m baselines.worker", description="A Temporal worker for the refund baseline."
    )
    ap.add_argument("--address", required=True, help="Temporal frontend HOST:PORT")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--task-queue", required=True)
    ap.add_argument("--mode", required=True, choices=MODES)
    ap.add_argument("--target-url", required=True, help="the payment target's base URL")
    ap.add_argument("--payment", required=True, help="payment id (the lookup's payment)")
    ap.add_argument("--tier", type=int, required=True, choices=(1, 2, 3))
    ap.add_argument("--model-url", required=True, help="the (EMULATED) model stub's base URL")
    ap.add_argument("--grants-dsn", default=None, help="Postgres DSN with ilr.grants (mode b)")
    ap.add_argument("--attempt-log", default=None, help="append attempt JSON lines here")
    ap.add_argument("--id", required=True, help="worker id (logs, X-ILR-Worker header)")
    ap.add_argument("--http-timeout", type=float, default=3.0, help="target HTTP timeout (s)")
    ap.add_argument(
        "--api",
        default="local",
        choices=refund.APIS,
        help="the target's JSON API or its Stripe-compatible subset (EMULATED)",
    )
    ap.add_argument(
        "--no-lookup",
        action="store_true",
        help="the target answers no lookups (a tier-1/2 target without GET /refunds)",
    )
    ap.add_argument("--concurrency", type=int, default=8, help="max concurrent activities")
    ap.add_argument("--sticky-timeout", type=float, default=10.0,
                    help="sticky queue schedule-to-start timeout (s; SDK default 10)")  # fmt: skip
    ap.add_argument("--connect-timeout", type=float, default=30.0,
                    help="keep retrying the first connection this long (s)")  # fmt: skip
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.mode == "temporal_check" and not args.grants_dsn:
        print("baselines.worker: --mode temporal_check needs --grants-dsn", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(args))
    except (ConnectionError, ValueError) as e:
        print(f"baselines.worker: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    status = main()
    # Leave without interpreter finalization: the SDK's core (Rust) threads can still hold the
    # GIL machinery then, and a failed connect sometimes ended in "Fatal Python error:
    # PyGILState_Release" (SIGABRT) instead of our exit status. Nothing is left to flush.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
