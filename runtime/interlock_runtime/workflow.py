"""Workflow definitions: the @workflow decorator and the code hash that pins a deployment."""

from __future__ import annotations

import hashlib
import inspect
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar, cast

_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class WorkflowDef:
    name: str
    version: str
    fn: Callable[..., Any]
    code_sha256: str
    # an `async def` workflow: served by the asyncio worker only (docs/async.md)
    is_async: bool = False

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"


def module_sha256(fn: Callable[..., Any]) -> str:
    """sha256 of the source bytes of the module defining fn (docs/design.md#schema: ilr.deployments)."""
    module = sys.modules.get(fn.__module__)
    path = inspect.getsourcefile(module) if module else None
    if path:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()


def workflow(name: str | None = None, version: str = "1") -> Callable[[F], F]:
    """Declare a durable workflow `fn(ctx, input)`; the function stays callable as before.

    An `async def fn(ctx, input)` is an async workflow (docs/async.md): its ctx is an
    AsyncWorkflowContext and an asyncio worker (`interlock worker --async`) serves it."""

    def decorate(fn: F) -> F:
        wf_name = name or fn.__name__
        for label, value in (("name", wf_name), ("version", version)):
            if not _NAME.match(value):
                raise ValueError(
                    f"workflow {label} {value!r} must be 1-100 characters of letters, digits "
                    "and _ . : -"
                )
        cast(Any, fn).__interlock_workflow__ = WorkflowDef(
            wf_name, version, fn, module_sha256(fn), inspect.iscoroutinefunction(fn)
        )
        return fn

    return decorate


def definition(obj: Any) -> WorkflowDef:
    """The WorkflowDef of a decorated function (or a WorkflowDef itself)."""
    if isinstance(obj, WorkflowDef):
        return obj
    found: WorkflowDef | None = getattr(obj, "__interlock_workflow__", None)
    if found is None:
        raise TypeError(f"{obj!r} is not a workflow: decorate it with @workflow(name, version)")
    return found


def collect(modules: Iterable[ModuleType]) -> list[WorkflowDef]:
    """Every decorated workflow defined in the given modules, in a stable order."""
    found: dict[str, WorkflowDef] = {}
    for module in modules:
        for value in vars(module).values():
            wf = getattr(value, "__interlock_workflow__", None)
            if isinstance(wf, WorkflowDef):
                found[wf.key] = wf
    return [found[k] for k in sorted(found)]
