"""world/refund_agent.py's one refund body, driven plain (drive) and async (drive_async).

A recording context stands in for the runtime's: it answers each durable call and logs the
order the calls were made in. No database is needed to check the drivers themselves; the
bodies under real workers are the conformance suite's (gate parity, the trace replay, the run
sources, Prove), in both modes."""

from __future__ import annotations

import asyncio

import pytest

from world import refund_agent


class Ref:
    def __init__(self, amount: int) -> None:
        self.output = {"amount": amount}
        self.premises = {"refunded_by_others": 0}
        self.ref = {"seq": 1}


class Ctx:
    """Answers the calls run_refund makes; `wrap` makes each answer an awaitable (async)."""

    def __init__(self, wrap: bool, refuse_approval: bool = False) -> None:
        self.calls: list[str] = []
        self.wrap, self.refuse_approval = wrap, refuse_approval

    def _answer(self, name: str, value):
        self.calls.append(name)
        if not self.wrap:
            if isinstance(value, Exception):
                raise value
            return value

        async def later():
            await asyncio.sleep(0)
            if isinstance(value, Exception):
                raise value
            return value

        return later()

    def decide(self, name, call, request, premises):
        return self._answer(f"decide:{name}", Ref(call(request)["amount"]))

    def wait_approval(self, payload, timeout=None):
        if self.refuse_approval:
            return self._answer("approval", LookupError("no approval"))
        return self._answer("approval", {"grant_id": "g", "facts_seen": {}, "payload": payload})

    def sleep(self, seconds, name="sleep"):
        return self._answer(f"sleep:{name}", None)

    def effect(self, target, key, payload, premises, grant, decision=None, **options):
        return self._answer(f"effect:{key}", {"key": key, "payload": payload, "grant": grant})


CASE = {"id": "c1", "payment": "pay_1"}


def _options() -> dict:
    return {"target": type("T", (), {"capture": staticmethod(lambda: {})})(),
            "decide": lambda request: {"amount": 2000},
            "before_effect": lambda ctx: ctx.sleep(1, name="timer")}  # fmt: skip


def test_both_drivers_make_the_same_calls_in_the_same_order_and_return_the_same() -> None:
    plain, awaited = Ctx(wrap=False), Ctx(wrap=True)
    d1, r1 = refund_agent.run_refund(plain, CASE, **_options())
    d2, r2 = asyncio.run(refund_agent.run_refund_async(awaited, CASE, **_options()))
    assert plain.calls == awaited.calls == ["decide:pick_amount", "approval", "sleep:timer",
                                            "effect:refund:c1"]  # fmt: skip
    assert r1 == r2 == {"key": "refund:c1", "payload": {"payment": "pay_1", "amount": 2000},
                        "grant": "g"}  # fmt: skip
    assert d1.output == d2.output


def test_an_awaited_calls_exception_is_raised_inside_the_body_at_that_call() -> None:
    """drive_async throws it into the body at the call, where a plain call raises it: the body
    may catch it there, as a plain workflow's body can; uncaught, it reaches the workflow and
    nothing after the call runs."""

    def body(ctx):
        try:
            yield ctx.wait_approval({"amount": 1})
        except LookupError as exc:
            after = yield ctx.sleep(1, name="after_refusal")
            return f"caught {exc}, then {after}"
        return "approved"

    plain, awaited = Ctx(wrap=False, refuse_approval=True), Ctx(wrap=True, refuse_approval=True)
    assert refund_agent.drive(body(plain)) == "caught no approval, then None"
    assert asyncio.run(refund_agent.drive_async(body(awaited))) == "caught no approval, then None"
    assert plain.calls == awaited.calls == ["approval", "sleep:after_refusal"]
    for wrap in (False, True):
        ctx = Ctx(wrap=wrap, refuse_approval=True)
        with pytest.raises(LookupError, match="no approval"):
            if wrap:
                asyncio.run(refund_agent.run_refund_async(ctx, CASE, **_options()))
            else:
                refund_agent.run_refund(ctx, CASE, **_options())
        assert ctx.calls == ["decide:pick_amount", "approval"]


def test_a_plain_driver_refuses_an_awaitable() -> None:
    with pytest.raises(TypeError, match="drive_async"):
        refund_agent.run_refund(Ctx(wrap=True), CASE, **_options())
