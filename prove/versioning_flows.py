"""S14's runtime workflows: `s14_flow` at version 1 and at version 2 (docs/design.md#scenarios S14, B8).

Why a module of its own: a worker serves (name, version) pairs and pins each pair to the
sha256 of the module that defines it, so S14 needs a v1 and a v2 it can hand to different
workers (`--only s14_flow@1`, `--only s14_flow@2`) and, in prove/versioning_flows_changed.py,
a v1 whose code changed without a patch (another file: another hash, the same pair).

Both versions have the same shape, so what a worker ran is visible in the world:
1. the step `prepare` (v2: `prepare_v2`), which records the worker that ran it;
2. a durable sleep of `case["sleep_seconds"]` (the v1 workflows sleep through the version
   change);
3. one refund of `case["amount"]` cents through ctx.effect on the local target, under the
   run's policy grant; the payload's metadata names the code that sent it (`v1`, `v2`), so
   the target's ledger says which code ran each workflow's effect.
"""

from __future__ import annotations

from interlock_runtime import workflow
from world.target_client import LocalRefunds

NAME = "s14_flow"


def s14_target(case: dict) -> LocalRefunds:
    return LocalRefunds(case["target_url"], case["payment"], int(case.get("tier", 1)),
                        send_timeout=case.get("send_timeout", 3.0),
                        settle_margin=case.get("settle_margin", 5.0))  # fmt: skip


def s14_payload(case: dict, wf_id: str, code: str, amount: int | None = None) -> dict:
    """The refund payload: the metadata ties the ledger row to the workflow and its code."""
    return {"payment": case["payment"], "amount": int(amount or case["amount"]),
            "metadata": {"wf": wf_id, "code": code}}  # fmt: skip


def prepared(code: str, worker: str) -> dict:
    return {"code": code, "worker": worker}


def refund(ctx, case: dict, code: str, amount: int | None = None):
    return ctx.effect(s14_target(case), key=f"s14:{ctx.workflow_id}",
                      payload=s14_payload(case, ctx.workflow_id, code, amount),
                      premises={"payment": case["payment"]}, grant=case["grant"])  # fmt: skip


@workflow(name=NAME, version="1")
def s14_v1(ctx, case):
    prep = ctx.step("prepare", prepared, "v1", ctx.worker_id)
    ctx.sleep(float(case["sleep_seconds"]))
    r = refund(ctx, case, "v1")
    return {"version": "1", "status": r.status, "effect_id": r.effect_id,
            "prepared_by": prep["worker"], "finished_by": ctx.worker_id}  # fmt: skip


@workflow(name=NAME, version="2")
def s14_v2(ctx, case):
    prep = ctx.step("prepare_v2", prepared, "v2", ctx.worker_id)
    ctx.sleep(float(case["sleep_seconds"]))
    r = refund(ctx, case, "v2")
    return {"version": "2", "status": r.status, "effect_id": r.effect_id,
            "prepared_by": prep["worker"], "finished_by": ctx.worker_id}  # fmt: skip
