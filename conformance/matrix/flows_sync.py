"""The fault matrix's workflows, plain (mode "sync"); flows_async.py has their `async def` twins
with the same names, the same steps and the same bodies. Each body appends one line to the
run's side log when it starts (fsynced), so what ran is judged apart from the runtime's own
records."""

from __future__ import annotations

from conformance.matrix.bodies import hang_first, hold, once_then_fail_first, plus_one
from interlock_runtime import RetryPolicy, workflow

RETRY = RetryPolicy(initial=0.2, backoff=1.0, max_attempts=20)


@workflow(name="m_steps", version="1")
def m_steps(ctx, inp):
    """Three steps, the second failing its first attempt (a retry), each holding a while."""
    out = [ctx.step("s1", hold, inp["log"], ctx.workflow_id, "s1", inp["hold"], retry=RETRY)]
    out.append(ctx.step("s2", once_then_fail_first, inp["log"], ctx.workflow_id, "s2",
                        inp["hold"], retry=RETRY))  # fmt: skip
    out.append(ctx.step("s3", hold, inp["log"], ctx.workflow_id, "s3", inp["hold"], retry=RETRY))
    return out


@workflow(name="m_timer", version="1")
def m_timer(ctx, inp):
    before = ctx.step("before", hold, inp["log"], ctx.workflow_id, "before", 0, retry=RETRY)
    ctx.sleep(inp["seconds"])
    after = ctx.step("after", hold, inp["log"], ctx.workflow_id, "after", 0, retry=RETRY)
    return [before, after]


@workflow(name="m_signals", version="1")
def m_signals(ctx, inp):
    first = ctx.wait_signal("go")
    second = ctx.wait_signal("go")
    return [first, second]


@workflow(name="m_queued", version="1")
def m_queued(ctx, inp):
    return ctx.step("work", hold, inp["log"], ctx.workflow_id, "work", inp["hold"], retry=RETRY)


@workflow(name="m_deadline", version="1")
def m_deadline(ctx, inp):
    """Steps that outlast the execution timeout it is started with."""
    for i in range(inp["steps"]):
        ctx.step(f"s{i}", hold, inp["log"], ctx.workflow_id, f"s{i}", inp["hold"], retry=RETRY)
    return "finished"


@workflow(name="m_scheduled", version="1")
def m_scheduled(ctx, inp):
    ctx.step(
        "tick",
        hold,
        inp["input"]["log"],
        ctx.workflow_id,
        "tick",
        inp["input"].get("hold", 0),
        retry=RETRY,
    )
    return inp["scheduled_at"]


@workflow(name="m_child", version="1")
def m_child(ctx, inp):
    return ctx.step("work", hold, inp["log"], ctx.workflow_id, "work", inp["hold"], retry=RETRY)


@workflow(name="m_parent", version="1")
def m_parent(ctx, inp):
    """Two children, started one after the other, each awaited."""
    out = []
    for _ in range(2):
        kid = ctx.child(m_child, {"log": inp["log"], "hold": inp["hold"]})
        out.append(ctx.wait_child(kid))
    return out


@workflow(name="m_chain", version="1")
def m_chain(ctx, inp):
    """Counts to `until` in as many runs, each continuing as new."""
    n = ctx.step("count", plus_one, inp["n"], retry=RETRY)
    hold_for = inp["hold"]
    ctx.step("work", hold, inp["log"], ctx.workflow_id, "work", hold_for, retry=RETRY)
    if n < inp["until"]:
        ctx.continue_as_new({"n": n, "until": inp["until"], "log": inp["log"], "hold": hold_for})
    return n


STEP_LIMIT = RetryPolicy(initial=0.2, backoff=1.0, max_attempts=20, start_to_close=1.0)


@workflow(name="m_step_timeout", version="1")
def m_step_timeout(ctx, inp):
    """A step whose first attempt hangs past its start_to_close: abandoned, then retried."""
    return ctx.step("slow", hang_first, inp["log"], ctx.workflow_id, "slow", inp["hang"],
                    retry=STEP_LIMIT)  # fmt: skip


@workflow(name="m_published", version="1")
def m_published(ctx, inp):
    """Publishes its progress for queries (ctx.set_status) around each of three steps."""
    out = []
    for i in range(3):
        ctx.set_status({"phase": i})
        out.append(ctx.step(f"s{i}", hold, inp["log"], ctx.workflow_id, f"s{i}", inp["hold"],
                            retry=RETRY))  # fmt: skip
    ctx.set_status({"phase": "done"})
    return out
