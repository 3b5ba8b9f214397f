"""Workflow definitions: the @workflow decorator and what it records (the code hash: code_hash.py)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar, cast

from . import code_hash

_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class WorkflowDef:
    name: str
    version: str
    fn: Callable[..., Any]
    code_sha256: str  # code_hash.workflow_sha256: the function and what it uses of its module
    # an `async def` workflow: served by the asyncio worker only (docs/async.md)
    is_async: bool = False
    legacy_sha256: str = ""  # the whole module's hash, as runtimes before 0.2 recorded it

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"


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
            wf_name,
            version,
            fn,
            code_hash.workflow_sha256(fn),
            inspect.iscoroutinefunction(fn),
            code_hash.module_sha256(fn),
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
