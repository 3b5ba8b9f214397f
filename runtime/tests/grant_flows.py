"""Workflows of test_workflow_grants.py (`--module grant_flows`): each waits for an approval,
then ends the way its input says."""

from __future__ import annotations

from interlock_runtime import workflow


@workflow(name="approved_then", version="1")
def approved_then(ctx, inp):
    if inp["outcome"] == "successor":
        return "the successor is done"
    approval = ctx.wait_approval({"outcome": inp["outcome"]}, timeout=600)
    if inp["outcome"] == "fail":
        raise RuntimeError("the workflow fails after its approval")
    if inp["outcome"] == "cancel":
        ctx.wait_signal("never")  # until cancelled
    if inp["outcome"] == "continue":
        ctx.continue_as_new({"outcome": "successor"})
    if inp["outcome"] == "sleep":
        ctx.wait_signal("go")
    return approval["grant_id"]
