"""The chaos soak's workflow (prove/soak.py): the refund of docs/design.md#refund-case, kept cheap per run.

Run by real worker subprocesses (`python -m interlock_runtime.cli.worker --module prove.soak_flows`).
The shape is the Prove refund's (decide, wait for the approval, the gated refund), without the
model stub's HTTP round trip: the decision is an EMULATED model answer computed in-process, so
the soak spends its CPU on the runtime, Postgres and the target rather than on a model server.
The body is the shared refund of world/refund_agent.py.
Each case carries its own target URL, tier and payment (one payment per workflow, so a hand
refund on one case never makes another case's premises stale).
"""

from __future__ import annotations

from interlock_runtime import workflow
from world import refund_agent
from world.target_client import LocalRefunds

EMULATED = "EMULATED model: the amount is a fixed answer computed in the worker, not a model call"


def soak_target(case: dict) -> LocalRefunds:
    return refund_agent.refund_target(case, send_timeout=2.5, settle_margin=1.0)


def emulated_model(request: dict) -> dict:
    """EMULATED model answer in the shape the runtime records (model, amount, usage)."""
    return {"model": "soak-emulated", "amount": int(request["amount"]), "usage": {}}


@workflow(name="soak_refund", version="1")
def soak_refund(ctx, case):
    _, r = refund_agent.run_refund(ctx, case, target=soak_target(case), decide=emulated_model,
                                   request={"case": case["id"], "amount": case["amount"]},
                                   approval_timeout=case.get("approval_timeout", 900))  # fmt: skip
    if r is None:
        return {"status": "approval expired"}
    return {"status": r.status, "effect_id": r.effect_id}
