"""AsyncRuntime: the client for asyncio code (docs/async.md#client), against a real worker."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from interlock_runtime import AsyncRuntime, Runtime, WorkflowFailed, WorkflowNotFound


def test_awaited_results_hold_no_thread_while_they_wait(dsn, workers) -> None:
    """Three results are awaited on a loop whose executor has ONE thread, while their runs
    wait for signals that are sent through that same executor: a result() that held its
    thread while waiting would leave no thread for the signals, and the test would time out.
    A ticker shows the loop kept running throughout."""
    workers("A1")

    async def scenario() -> list:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        tick_task = asyncio.create_task(ticker())
        async with AsyncRuntime(dsn) as rt:
            ids = [f"wf-a{i}" for i in range(3)]
            for wf in ids:
                assert await rt.start("waiter", wf, {"timeout": 0.2}) == wf
            waits = [asyncio.create_task(rt.result(wf, timeout=30, poll=0.02)) for wf in ids]
            await asyncio.sleep(0.5)  # every result is waiting by now
            for wf in ids:
                await rt.signal(wf, "go", 1)
                await rt.signal(wf, "go", 2)
            results = await asyncio.wait_for(asyncio.gather(*waits), timeout=40)
            assert (await rt.describe(ids[0]))["status"] == "completed"
        tick_task.cancel()
        assert ticks > 20, ticks
        return results

    assert asyncio.run(scenario()) == [[1, 2, None]] * 3


def test_every_runtime_method_is_a_coroutine_and_errors_are_the_sync_clients(dsn, workers) -> None:
    workers("A2")

    async def scenario() -> None:
        rt = AsyncRuntime(dsn)
        try:
            await rt.start("non_retryable", "wf-no", {})
            with pytest.raises(WorkflowFailed):
                await rt.result("wf-no", timeout=20)
            with pytest.raises(WorkflowNotFound):
                await rt.result("nope", timeout=1)
            with pytest.raises(TimeoutError, match="is still (running|sleeping) after 0.3s"):
                await rt.start("waiter", "wf-wait", {})
                await rt.result("wf-wait", timeout=0.3, poll=0.05)
            listed = await rt.list(status="failed")  # through __getattr__: Runtime.list
            assert [w["id"] for w in listed] == ["wf-no"]
            assert rt.list.__doc__ == Runtime.list.__doc__
            with pytest.raises(AttributeError, match="Runtime's public methods"):
                rt.no_such_method  # noqa: B018
            with pytest.raises(AttributeError, match="aclose"):
                rt.close  # noqa: B018
        finally:
            await rt.aclose()

    asyncio.run(scenario())
