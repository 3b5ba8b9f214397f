"""Workflows with typed inputs, step results, signals, statuses and results (test_typed_flows.py).

Every value that crosses the journal here is a dataclass, a pydantic model, an Enum, a
datetime or a Decimal; each workflow checks the types it gets and reports what it saw, so a
test can tell a replayed dict from a replayed dataclass.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import os
from decimal import Decimal

import pydantic

from interlock_runtime import workflow


class Stage(enum.Enum):
    WAITING = "waiting for approval"
    LABELLED = "labelled"


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    qty: int


@dataclasses.dataclass
class Order:
    id: str
    lines: list[Line]
    placed: datetime.datetime
    total: Decimal
    gift: Line | None = None


@dataclasses.dataclass
class Job:
    order: Order
    log: str  # a file each step body appends to: proves what ran, and where


class Approval(pydantic.BaseModel):
    by: str
    at: datetime.datetime
    lines: list[Line]
    note: str | None = None


@dataclasses.dataclass(frozen=True)
class Progress:
    stage: Stage
    packed: tuple[Line, ...]
    approval: Approval | None = None


@dataclasses.dataclass
class Shipment:
    order: Order
    packed: list[Line]
    approval: Approval
    label: Label
    seen: dict[str, str]  # what type each value had in the run that completed


@dataclasses.dataclass(frozen=True)
class Label:
    text: str
    printed: datetime.date


def _ran(log: str, step: str) -> None:
    with open(log, "a") as f:
        f.write(json.dumps({"step": step, "worker": os.environ.get("ILR_WORKER_TAG")}) + "\n")


def pack(job: Job) -> list[Line]:
    _ran(job.log, "pack")
    return [Line(line.sku, line.qty) for line in job.order.lines]


def print_label(job: Job, approval: Approval) -> Label:
    _ran(job.log, "label")
    return Label(f"{job.order.id} approved by {approval.by}", approval.at.date())


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "list[" + ",".join(sorted({_kind(v) for v in value})) + "]"
    return type(value).__name__


@workflow(name="typed_order", version="1")
def typed_order(ctx, job: Job) -> Shipment:
    packed = ctx.step("pack", pack, job)
    ctx.set_status(Progress(Stage.WAITING, tuple(packed)))
    approval = ctx.wait_signal("approve")
    label = ctx.step("label", print_label, job, approval)
    ctx.set_status(Progress(Stage.LABELLED, tuple(packed), approval))
    seen = {"input": _kind(job), "order": _kind(job.order), "placed": _kind(job.order.placed),
            "total": _kind(job.order.total), "packed": _kind(packed),
            "approval": _kind(approval), "approval.lines": _kind(approval.lines),
            "label": _kind(label), "printed": _kind(label.printed)}  # fmt: skip
    return Shipment(job.order, packed, approval, label, seen)


@workflow(name="typed_echo", version="1")
def typed_echo(ctx, line: Line) -> dict:
    """Started from the CLI with plain JSON: the declared type turns it into a Line."""
    return {"type": type(line).__name__, "line": line}


@workflow(name="status_refusal", version="1")
def status_refusal(ctx, inp: dict) -> dict:
    """An unrecordable status is refused at the call, and nothing is recorded for it."""
    refused = "not refused"
    try:
        ctx.set_status({"tags": {"a", "b"}})
    except TypeError as exc:  # NotRecordable is an InvalidInput and a TypeError
        refused = f"{type(exc).__name__}: {exc}"
    ctx.set_status(Stage.LABELLED)
    return {"refused": refused}


@workflow(name="typed_input_only", version="1")
def typed_input_only(ctx, inp: object) -> str:
    """Whatever it is given, it only reports the type (its decode may leave it stuck)."""
    return type(inp).__name__


@workflow(name="typed_child", version="1")
def typed_child(ctx, line: Line) -> Label:
    return Label(f"{line.qty} x {line.sku}", datetime.date(2026, 1, 1))


@workflow(name="typed_parent", version="1")
def typed_parent(ctx, line: Line) -> dict:
    """A typed input to a child, its typed result back through the $done signal, then a typed
    input across continue-as-new."""
    child = ctx.child(typed_child, Line(line.sku, line.qty + 1))
    label = ctx.wait_child(child)
    if line.qty < 2:
        ctx.continue_as_new(Line(line.sku, line.qty + 1))
    return {"label": label, "label_type": type(label).__name__, "input": line}
