"""The client's parts (runtime.py's list) and its handles (docs/api.md#handles).

Runtime is composed of parts and defines nothing itself; each method lives in exactly one
part. A handle is a view: each of its methods is the client's call of the same name with the
handle's id, nothing more, so sync and async share the client's one implementation. Then
handles against a real worker: start, handle, query, signal, result, cancel, sync and async.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import async_flows
import pytest

from conftest import wait_for
from interlock_runtime import (
    AsyncRuntime,
    AsyncWorkflowHandle,
    InvalidInput,
    Runtime,
    WorkflowFailed,
    WorkflowFinished,
    WorkflowHandle,
    WorkflowNotFound,
)
from interlock_runtime.client.connection import ClientConnection

MODULE = "async_flows"
UNREACHABLE = "postgresql://nobody@127.0.0.1:9/none?connect_timeout=1"
DONE = {"one": "async_one", "two": "plain_two"}
BEFORE_THE_SPLIT = {
    "ambiguous", "approve", "breakers", "cancel", "claim_history", "close", "create_schedule",
    "delete_schedule", "deployments", "describe", "describe_queue", "describe_schedule",
    "drain_report", "effects", "fork", "grant", "list", "migrate", "pause_schedule", "query",
    "queue", "queues", "receipt", "reconcile", "recover_orphans", "register", "reset_breaker",
    "result", "result_now", "resume_schedule", "revoke", "schedules", "signal", "start",
    "status_record", "trigger_schedule",
}  # fmt: skip
"""Runtime's public methods when it was one class: each must keep working as it did."""


def _defined(cls: type) -> set[str]:
    """The methods and properties a class itself defines (not what Python adds to each)."""
    return {
        name
        for name, value in vars(cls).items()
        if inspect.isfunction(value) or isinstance(value, (property, staticmethod, classmethod))
    }


def test_each_runtime_method_is_defined_in_exactly_one_part() -> None:
    parts = [c for c in Runtime.__mro__ if c not in (Runtime, object)]
    assert all(issubclass(c, ClientConnection) for c in parts), parts
    assert _defined(Runtime) == set(), "Runtime itself must define nothing: add it to a part"
    owners: dict[str, list[str]] = {}
    for part in parts:
        for name in _defined(part):
            owners.setdefault(name, []).append(part.__name__)
    twice = {name: where for name, where in owners.items() if len(where) > 1}
    assert twice == {}, f"defined in more than one part: {twice}"
    public = {n for n in dir(Runtime) if not n.startswith("_") and callable(getattr(Runtime, n))}
    assert public <= owners.keys()
    assert public == BEFORE_THE_SPLIT | {"handle"}


def _client_call(method: Callable[..., Any]) -> tuple[str, ast.expr]:
    """The one statement of a handle's method, `return [await] self._client.NAME(self._id,
    ...)` or `... self._client._run(Runtime.NAME, self._id, ...)`: (NAME, its first argument
    after the method). Fails on anything else: a handle holds no logic of its own."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    fn = tree.body[0]
    assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
    body = [
        s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    assert len(body) == 1 and isinstance(body[0], ast.Return), f"{fn.name}: one return only"
    call = body[0].value
    if isinstance(call, ast.Await):
        call = call.value
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute), fn.name
    assert ast.unparse(call.func.value) == "self._client", fn.name
    args = list(call.args)
    if call.func.attr == "_run":  # AsyncRuntime._run(Runtime.NAME, ...): the sync method
        target = args.pop(0)
        assert isinstance(target, ast.Attribute) and ast.unparse(target.value) == "Runtime"
        return target.attr, args[0]
    return call.func.attr, args[0]


@pytest.mark.parametrize("handle_class", [WorkflowHandle, AsyncWorkflowHandle])
def test_a_handle_method_is_the_client_call_of_its_name_with_the_id(handle_class: type) -> None:
    methods = {n: m for n, m in vars(handle_class).items()
               if inspect.isfunction(m) and not n.startswith("_")}  # fmt: skip
    assert set(methods) == {"result", "result_now", "signal", "query", "status_record",
                            "cancel", "describe", "claim_history", "effects", "migrate",
                            "fork"}  # fmt: skip
    for name, method in methods.items():
        called, first = _client_call(method)
        assert called == name, f"{handle_class.__name__}.{name} calls {called}"
        assert ast.unparse(first) == "self._id", f"{name} passes {ast.unparse(first)} first"
        # the same parameters as the client's call, less the id
        mine = list(inspect.signature(method).parameters.values())[1:]
        theirs = list(inspect.signature(getattr(Runtime, name)).parameters.values())[2:]
        assert [(p.name, p.kind, p.default) for p in mine] == [
            (p.name, p.kind, p.default) for p in theirs
        ], name
        assert inspect.iscoroutinefunction(method) == (handle_class is AsyncWorkflowHandle)


def test_a_handle_checks_its_id_and_reads_nothing() -> None:
    """rt.handle makes no round trip: AsyncRuntime connects on first use, and this one never
    could (its DSN reaches nothing), yet its handles are made and a bad id is refused."""
    rt = AsyncRuntime(UNREACHABLE)
    h = rt.handle("inv-1")
    assert (h.id, repr(h)) == ("inv-1", "AsyncWorkflowHandle('inv-1')")
    for bad in ["", "a b", None, 7]:
        with pytest.raises(InvalidInput, match="workflow id"):
            rt.handle(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="workflow id"):
            WorkflowHandle(None, bad)  # type: ignore[arg-type]


def _parked(h: WorkflowHandle) -> bool:
    return h.query() == {"waiting": "go"}


def test_sync_handle_start_query_signal_result_and_cancel(dsn, workers, tmp_path: Path) -> None:
    workers("H1", module=MODULE)
    with Runtime(dsn) as rt:
        assert rt.start(async_flows.a_basics, "h-1", {"log": str(tmp_path / "1")}) == "h-1"
        h = rt.handle("h-1")
        assert isinstance(h, WorkflowHandle) and h.id == "h-1"
        wait_for(lambda: _parked(h), 30, "h-1 to publish its status")
        assert h.status_record()["id"] == "h-1"
        assert isinstance(h.signal("go", {"n": 1}), int)
        assert h.result(timeout=30) == {**DONE, "go": {"n": 1}}
        assert h.result_now() == (True, {**DONE, "go": {"n": 1}}, "completed")
        assert h.describe()["status"] == "completed" == rt.describe("h-1")["status"]
        assert [c["epoch"] for c in h.claim_history()] == [
            c["epoch"] for c in rt.claim_history("h-1")
        ]
        with pytest.raises(WorkflowFinished, match="nothing was signalled"):
            h.signal("go")

        rt.start("a_basics", "h-2", {"log": str(tmp_path / "2")})
        h2 = rt.handle("h-2")
        wait_for(lambda: _parked(h2), 30, "h-2 to publish its status")
        h2.cancel(by="test")
        with pytest.raises(WorkflowFailed) as failed:
            h2.result(timeout=30)
        assert failed.value.status == "cancelled"
        with pytest.raises(WorkflowNotFound):
            rt.handle("nobody").result(timeout=1)


def test_async_handle_start_query_signal_result_and_cancel(dsn, workers, tmp_path: Path) -> None:
    workers("H2", module=MODULE)

    async def scenario() -> None:
        async with AsyncRuntime(dsn) as rt:
            await rt.start("a_basics", "ah-1", {"log": str(tmp_path / "1")})
            await rt.start("a_basics", "ah-2", {"log": str(tmp_path / "2")})
            h, h2 = rt.handle("ah-1"), rt.handle("ah-2")
            for each in (h, h2):
                for _ in range(600):
                    if await each.query() == {"waiting": "go"}:
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError(f"{each.id} never published its status")
            waiting = asyncio.create_task(h.result(timeout=30, poll=0.05))
            assert isinstance(await h.signal("go", [1, 2]), int)
            assert await waiting == {**DONE, "go": [1, 2]}
            assert (await h.result_now())[0] is True
            assert (await h.describe())["status"] == "completed"
            await h2.cancel(by="test")
            with pytest.raises(WorkflowFailed) as failed:
                await h2.result(timeout=30)
            assert failed.value.status == "cancelled"
            with pytest.raises(WorkflowFinished):
                await h2.signal("go")
            with pytest.raises(WorkflowNotFound):
                await rt.handle("nobody").describe()

    asyncio.run(scenario())
