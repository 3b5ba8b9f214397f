"""Workflows the runtime's tests run in real worker subprocesses (`--module flows`)."""

from __future__ import annotations

import json
import os
import time

from interlock_runtime import workflow


def log_invocation(path: str, step: str, worker: str, epoch: int, first_sleep: float) -> dict:
    """Append one line per body start; sleep only on the first invocation of this step."""
    earlier = 0
    if os.path.exists(path):
        with open(path) as f:
            earlier = sum(1 for line in f if json.loads(line)["step"] == step)
    with open(path, "a") as f:
        f.write(json.dumps({"step": step, "worker": worker, "epoch": epoch, "pid": os.getpid(),
                            "t": time.time()}) + "\n")  # fmt: skip
        f.flush()
        os.fsync(f.fileno())
    if earlier == 0 and first_sleep:
        time.sleep(first_sleep)
    return {"step": step, "worker": worker}


@workflow(name="three_steps", version="1")
def three_steps(ctx, inp):
    sleeps = inp.get("sleep", {})
    return [
        ctx.step(
            name, log_invocation, inp["log"], name, ctx.worker_id, ctx.epoch, sleeps.get(name, 0)
        )
        for name in ("s1", "s2", "s3")
    ]


@workflow(name="echo", version="1")
def echo(ctx, inp):
    return ctx.step("echo", lambda value: value, inp)


@workflow(name="stored_echo", version="1")
def stored_echo(ctx, inp):
    """Reports what the first run's step call returned, before any jsonb round trip of the
    result: the key order and the number types a replay would see."""
    out = ctx.step("echo", lambda value: value, inp)
    return {"keys": list(out), "types": {k: type(v).__name__ for k, v in out.items()}}


# -- durable execution flows (test_durable.py) ------------------------------------------------

from interlock_runtime import Cancelled, RetryPolicy  # noqa: E402


def flaky(counter_path: str, failures: int) -> str:
    """Fail `failures` times (counted in a file), then succeed."""
    n = int(open(counter_path).read()) if os.path.exists(counter_path) else 0
    with open(counter_path, "w") as f:
        f.write(str(n + 1))
    if n < failures:
        raise ConnectionError(f"transient failure {n + 1}")
    return f"ok after {n + 1} attempts"


@workflow(name="retrying", version="1")
def retrying(ctx, inp):
    policy = RetryPolicy(initial=inp["initial"], backoff=2.0, max_attempts=inp.get("max", 0))
    return ctx.step("flaky", flaky, inp["counter"], inp["failures"], retry=policy)


class NotEligible(Exception):
    pass


def refuse() -> None:
    raise NotEligible("payment pay_881 is not eligible")


@workflow(name="non_retryable", version="1")
def non_retryable(ctx, inp):
    return ctx.step("refuse", refuse, retry=RetryPolicy(non_retryable=("NotEligible",)))


@workflow(name="sleeper", version="1")
def sleeper(ctx, inp):
    before = ctx.step("before", log_invocation, inp["log"], "before", ctx.worker_id, ctx.epoch, 0)
    ctx.sleep(inp["seconds"])
    after = ctx.step("after", log_invocation, inp["log"], "after", ctx.worker_id, ctx.epoch, 0)
    return [before, after]


@workflow(name="waiter", version="1")
def waiter(ctx, inp):
    first = ctx.wait_signal("go")
    second = ctx.wait_signal("go")
    late = ctx.wait_signal("never", timeout=inp.get("timeout", 0.5))
    return [first, second, late]


@workflow(name="cancellable", version="1")
def cancellable(ctx, inp):
    ctx.step("start", lambda: "started")
    try:
        ctx.sleep(600)
    except Cancelled:
        ctx.step(
            "compensate", log_invocation, inp["log"], "compensate", ctx.worker_id, ctx.epoch, 0
        )
        raise
    return "slept"


@workflow(name="swallower", version="1")
def swallower(ctx, inp):
    try:
        ctx.sleep(600)
    except BaseException:  # the bug this test is about: never do this in workflow code
        pass
    return "escaped"


STEP_NAME = os.environ.get("ILR_TEST_STEP_NAME", "a")
USE_PATCH = os.environ.get("ILR_TEST_PATCH", "1") == "1"


@workflow(name="renamed", version="1")
def renamed(ctx, inp):
    ctx.step(STEP_NAME, log_invocation, inp["log"], STEP_NAME, ctx.worker_id, ctx.epoch, 0)
    ctx.wait_signal("go")
    ctx.step("b", log_invocation, inp["log"], "b", ctx.worker_id, ctx.epoch, 0)
    return "done"


@workflow(name="patchy", version="1")
def patchy(ctx, inp):
    ctx.step("a", lambda: "a")
    if USE_PATCH and ctx.patched("fix-amount"):
        path = ctx.step("new", lambda: "new")
    else:
        path = ctx.step("old", lambda: "old")
    ctx.wait_signal("go")
    return path


@workflow(name="pinned_flow", version="1")
def pinned_v1(ctx, inp):
    return ctx.step("which", lambda w: {"version": "1", "worker": w}, ctx.worker_id)


@workflow(name="pinned_flow", version="2")
def pinned_v2(ctx, inp):
    return ctx.step("which", lambda w: {"version": "2", "worker": w}, ctx.worker_id)


def stub_model(request: dict) -> dict:
    """EMULATED model: a scripted answer in the shape the runtime records."""
    return {"model": "stub-emulated", "amount": 2000, "usage": {"input_tokens": 10}}


@workflow(name="decider", version="1")
def decider(ctx, inp):
    d = ctx.decide("pick_amount", stub_model, {"case": inp["case"]},
                   premises=lambda: {"refunded_by_others": 0})  # fmt: skip
    return {"amount": d.output["amount"], "premises": d.premises, "seq": d.ref["seq"]}


@workflow(name="load_then_decide", version="1")
def load_then_decide(ctx, inp):
    case = ctx.step("load", lambda c: c, inp["case"])
    d = ctx.decide("pick_amount", stub_model, {"case": case})
    return {"amount": d.output["amount"]}


@workflow(name="child_flow", version="1")
def child_flow(ctx, inp):
    return ctx.step("double", lambda x: x * 2, inp["x"])


@workflow(name="parent_flow", version="1")
def parent_flow(ctx, inp):
    kid = ctx.child(child_flow, {"x": inp["x"]})
    return {"child": kid, "result": ctx.wait_child(kid)}


@workflow(name="placed_parent", version="1")
def placed_parent(ctx, inp):
    """Starts a child where the input says (None: where this workflow runs) and waits for it
    (test_queues.py)."""
    kid = ctx.child(child_flow, {"x": inp["x"]}, queue=inp.get("queue"),
                    priority=inp.get("priority"))  # fmt: skip
    return {"child": kid, "result": ctx.wait_child(kid)}


@workflow(name="counter", version="1")
def counter(ctx, inp):
    n = ctx.step("count", lambda n: n + 1, inp["n"])
    if n < inp["until"]:
        ctx.continue_as_new({"n": n, "until": inp["until"]})
    return n


@workflow(name="forkable", version="1")
def forkable(ctx, inp):
    return [
        ctx.step(name, log_invocation, inp["log"], name, ctx.worker_id, ctx.epoch, 0)["step"]
        for name in ("a", "b", "c")
    ]


# -- gated effects (test_effects.py) ----------------------------------------------------------

from world import refund_agent  # noqa: E402
from world.target_client import LocalRefunds  # noqa: E402


def refund_target(case: dict, cls: type[LocalRefunds] = LocalRefunds) -> LocalRefunds:
    """The tests' refund target: short timeouts (2.5 s send, 1 s settle) unless the case says."""
    return refund_agent.refund_target(case, cls=cls, send_timeout=2.5, settle_margin=1.0)


def local_premises(case: dict) -> list:
    return [(fn, args) for fn, args in case.get("local_premises", [])]


@workflow(name="refund", version="1")
def refund(ctx, case):
    """The case of docs/design.md#refund-case, shortened: decide, wait for approval, refund through the gate."""
    decision, r = refund_agent.run_refund(ctx, case, target=refund_target(case), decide=stub_model,
                                          approval_timeout=case.get("approval_timeout", 600),
                                          local_premises=local_premises(case))  # fmt: skip
    if r is None:
        return {"status": "approval expired"}
    return {"status": r.status, "effect_id": r.effect_id, "result": r.result}


@workflow(name="approve_only", version="1")
def approve_only(ctx, inp):
    """Waits for a person to approve what it proposes; no decision, no effect."""
    approval = ctx.wait_approval({"to": inp["to"], "template": "invoice"}, timeout=600)
    return {"approval": approval}


@workflow(name="policy_refund", version="1")
def policy_refund(ctx, case):
    """A refund under a standing policy grant (no approval step): the payload is the input's."""
    _, r = refund_agent.run_refund(ctx, case, target=refund_target(case), capture=True,
                                   payload=case["payload"], authority="grant",
                                   local_premises=local_premises(case), action=case.get("action"),
                                   compensation=case.get("compensation", False))  # fmt: skip
    return {"status": r.status, "effect_id": r.effect_id, "reason": r.reason}


def wait_for_cancel(ctx) -> None:
    try:
        ctx.wait_signal("never")
    except Cancelled:
        pass


@workflow(name="cancel_then_refund", version="1")
def cancel_then_refund(ctx, case):
    """Cancelled while it waits, it still sends its refund (under the standing grant)."""
    _, r = refund_agent.run_refund(ctx, case, target=refund_target(case), payload=case["payload"],
                                   authority="grant", premises={"payment": case["payment"]},
                                   before_effect=wait_for_cancel)  # fmt: skip
    return {"status": r.status}


@workflow(name="breaker_refund", version="1")
def breaker_refund(ctx, case):
    """A policy refund to a target with a circuit breaker (threshold and cool-down from input)."""
    target = refund_target(case)
    target.breaker_threshold = case["threshold"]
    target.breaker_cooldown = case.get("cooldown", 60)
    _, r = refund_agent.run_refund(ctx, case, target=target, amount=case["amount"],
                                   authority="grant", premises={"payment": case["payment"]})  # fmt: skip
    return r.status


class LyingRefunds(LocalRefunds):
    """EMULATED target bug: answers ok without applying anything."""

    def apply(self, effect_id, payload, *, worker=None, epoch=None, timeout=None):
        return {"ok": True, "id": "re_fake", "amount": payload["amount"]}


def refund_landed(target, effect_id, payload) -> bool:
    """A post-condition: read the target back; the refund must be there with the amount."""
    found = target.query(effect_id, payload)
    return found is not None and found["amount"] == payload["amount"]


def exploding_check(target, effect_id, payload) -> bool:
    raise RuntimeError("the checker itself is broken")


@workflow(name="verified_refund", version="1")
def verified_refund(ctx, case):
    target = refund_target(case, LyingRefunds if case.get("lie") else LocalRefunds)
    post = {"landed": refund_landed, "explode": exploding_check}[case["post"]]
    _, r = refund_agent.run_refund(ctx, case, target=target, amount=case["amount"],
                                   authority="grant", premises={"payment": case["payment"]},
                                   postcondition=post)  # fmt: skip
    return {"status": r.status, "effect_id": r.effect_id}


def count_up(path: str) -> int:
    n = int(open(path).read()) + 1 if os.path.exists(path) else 1
    with open(path, "w") as f:
        f.write(str(n))
    return n


@workflow(name="verified_step", version="1")
def verified_step(ctx, inp):
    checks = {"even": lambda n: n % 2 == 0, "never": lambda n: False,
              "explode": lambda n: 1 / 0}  # fmt: skip
    return ctx.step("count", count_up, inp["path"], postcondition=checks[inp["check"]],
                    retry=RetryPolicy(initial=0.1, max_attempts=inp.get("max", 3)))  # fmt: skip


# -- issue 22's mutant classes (test_zombie_fence, test_settle_window, test_falsy_replay,
#    test_payload_binding) -------------------------------------------------------------------

FALSY = {"none": None, "zero": 0, "empty_dict": {}, "empty_list": [], "empty_str": "",
         "false": False}  # fmt: skip


def logged(path: str, name: str, value):
    """Append one line per body run (the count a replay must not raise), then return value."""
    with open(path, "a") as f:
        f.write(json.dumps({"step": name, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return value


@workflow(name="falsy_steps", version="1")
def falsy_steps(ctx, inp):
    """One step per falsy JSON value, then one more; returns what the steps returned and the
    type of each as this run saw it (0, False and None compare equal in places)."""
    got = {name: ctx.step(name, logged, inp["log"], name, value) for name, value in FALSY.items()}
    ctx.step("last", logged, inp["log"], "last", 1)
    return {"values": got, "types": {k: type(v).__name__ for k, v in got.items()}}


@workflow(name="redecided_refund", version="1")
def redecided_refund(ctx, case):
    """A person approves one payload; the workflow then re-decides the amount and offers the
    new payload under the approval's grant (bound to the approved payload's hash)."""
    target = refund_target(case)
    approval = ctx.wait_approval(refund_agent.payload_for(case, case["amount"]), timeout=600)
    amount = ctx.step("redecide", lambda a: a, case["redecided"])
    r = ctx.effect(target, key=f"refund:{case['id']}", grant=approval["grant_id"],
                   payload=refund_agent.payload_for(case, amount),
                   premises=approval["facts_seen"])  # fmt: skip
    return {"status": r.status, "effect_id": r.effect_id, "reason": r.reason}


class DeafRefunds(LocalRefunds):
    """EMULATED client bug: ignores the send timeout the runtime passes and waits up to 60 s
    for the answer, so only the send watchdog bounds the send."""

    def apply(self, effect_id, payload, *, worker=None, epoch=None, timeout=None):
        return super().apply(effect_id, payload, worker=worker, epoch=epoch, timeout=60.0)


@workflow(name="deaf_refund", version="1")
def deaf_refund(ctx, case):
    """policy_refund through a client that ignores its timeout."""
    _, r = refund_agent.run_refund(ctx, case, target=refund_target(case, DeafRefunds),
                                   capture=True, payload=case["payload"], authority="grant")  # fmt: skip
    return {"status": r.status, "effect_id": r.effect_id, "reason": r.reason}


@workflow(name="falsy_signals", version="1")
def falsy_signals(ctx, inp):
    """Five waits for signals with falsy payloads, one that times out (None), then a wait for
    `finish`: every claim after a suspend replays the earlier waits."""
    got = [ctx.wait_signal("value") for _ in range(5)]
    got.append(ctx.wait_signal("never", timeout=inp.get("timeout", 0.2)))
    ctx.wait_signal("finish")
    return {"values": got, "types": [type(v).__name__ for v in got]}


@workflow(name="zombie_steps", version="1")
def zombie_steps(ctx, inp):
    """three_steps under its own name, for a worker that must hold this run and no other (one
    SIGSTOPped to become a zombie: a pause inside any other run it held would lift A1 there)."""
    return three_steps(ctx, inp)


def timed_hold(folder: str, wf_id: str, hold: float) -> dict:
    """Hold for `hold` seconds and write when this run's work began and ended, by the machine's
    clock, to <folder>/<wf_id>.json: the ground truth test_queues.py judges limits from."""
    began = time.time()
    time.sleep(hold)
    times = {"id": wf_id, "began": began, "ended": time.time(), "pid": os.getpid()}
    with open(os.path.join(folder, f"{wf_id}.json"), "w") as f:
        json.dump(times, f)
    return times


@workflow(name="queued_work", version="1")
def queued_work(ctx, inp):
    """One unit of work on a queue (test_queues.py): a step that holds for input.hold seconds."""
    return ctx.step("work", timed_hold, inp["dir"], ctx.workflow_id, inp.get("hold", 0.2))


@workflow(name="scheduled", version="1")
def scheduled(ctx, inp):
    """A scheduled run (test_schedules.py): holds for input.hold seconds on a durable timer, so
    that the schedule's next ticks find it live."""
    hold = (inp.get("input") or {}).get("hold", 0)
    if hold:
        ctx.sleep(hold)
    return {"scheduled_at": inp["scheduled_at"], "source": inp["source"]}
