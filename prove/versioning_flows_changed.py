"""S14's "v1 code change without a patch": `s14_flow` version 1, edited in place.

Someone adds a balance check in front of `prepare` and doubles the refund, keeps the version
string "1" and does not guard the change with ctx.patched(). A workflow recorded under the
old v1 code has `prepare` at seq 1; this code calls `check_balance` there. Replay must refuse
(NonDeterminism: the workflow becomes stuck, loudly) and run nothing of the new code: neither
the balance check (a GET to the target, which its access log would show) nor the refund.

The runtime already catches the change at deploy time: this file's sha256 differs from the
deployed one, so a worker serving it exits 2 unless started with --allow-code-change. S14
measures both: the refusal at deploy time, then, with the override, the refusal at replay.
"""

from __future__ import annotations

from interlock_runtime import workflow
from prove.versioning_flows import NAME, prepared, refund, s14_target


def check_balance(case: dict) -> dict:
    return s14_target(case).payment_state()


@workflow(name=NAME, version="1")
def s14_v1_changed(ctx, case):
    ctx.step("check_balance", check_balance, case)  # new, with no ctx.patched() guard
    prep = ctx.step("prepare", prepared, "v1-changed", ctx.worker_id)
    ctx.sleep(float(case["sleep_seconds"]))
    r = refund(ctx, case, "v1-changed", amount=2 * int(case["amount"]))
    return {"version": "1", "status": r.status, "effect_id": r.effect_id,
            "prepared_by": prep["worker"], "finished_by": ctx.worker_id}  # fmt: skip
