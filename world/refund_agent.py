"""The refund agent of docs/design.md#refund-case: THE refund workflow body of the repository.

Every registered refund workflow (runtime/tests/flows.py, prove/flows.py, prove/stripe_flows.py,
prove/soak_flows.py, prove/bench_flows.py, conformance/parity_flows.py,
conformance/trace_replay.py) is a few lines around `run_refund`, or `run_refund_async` in an
`async def` workflow (docs/async.md): one body, `refund_steps`, driven by either. It records, in
this order:

1. ``decide`` "pick_amount" (optional, ``decide=``): the model's amount, recorded once with the
   premises the target's ``capture`` gave at that moment;
2. ``step`` "capture" (optional, ``capture=True``): the premises read as a plain step, for the
   flows that have no decision;
3. the authority: ``wait_approval`` (a ``signal`` step "approve": a person approves the proposed
   payload, rt.approve makes a grant bound to it) or, under ``authority="grant"``, the case's
   standing grant (no step);
4. ``before_effect(ctx)`` (optional): what the flow records between the authority and the effect
   (S10's durable timer; a wait for cancellation);
5. ``effect`` with key ``refund:{case id}`` and payload ``{payment, amount}`` (``payload_for``),
   under the grant, with the premises and the decision's ref.

Prove's kill points, the Temporal baseline's reset-to-before-decision and ``rt.fork(at_seq=...)``
in the tests depend on these positions: a change in the order is a change of every flow's history.
A worker pins a (name, version) pair to the sha256 of the module that *registers* it, not of this
one: a change to the recorded steps here needs new versions of the flows, not an edit in place.

The workflows stay where they are (their modules are what the workers load); only what they share
is here. world/ imports the runtime's public API alone (`.venv/bin/lint-imports`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from typing import Any, Literal, TypeVar

from interlock_runtime import Decision, EffectResult, WorkflowContext
from world.target_client import LocalRefunds

DECIDE_STEP = "pick_amount"
CAPTURE_STEP = "capture"

Authority = Literal["approval", "grant"]
Offer = Literal["approved", "proposed"]
T = TypeVar("T")


def refund_target(case: dict[str, Any], *, cls: type[LocalRefunds] = LocalRefunds,
                  send_timeout: float = 3.0, settle_margin: float = 5.0) -> LocalRefunds:  # fmt: skip
    """The refund target of one case: ``case["target_url"]``, ``case["payment"]``,
    ``case["tier"]`` (default 1).

    The timing knobs come from the case when it carries them (``send_timeout``,
    ``settle_margin``, ``dedup_window``, ``queryable``, ``dedup_margin``), else from the keyword
    defaults, which are each harness's own (Prove 3 s / 5 s, the tests and the soak 2.5 s / 1 s).
    ``dedup_margin`` is an attribute the runtime reads with getattr (the C2 check), set only when
    the case names it. ``cls`` is LocalRefunds or a subclass (a test's lying target)."""
    target = cls(case["target_url"], case["payment"], int(case.get("tier", 1)),
                 send_timeout=case.get("send_timeout", send_timeout),
                 settle_margin=case.get("settle_margin", settle_margin),
                 dedup_window=case.get("dedup_window", float("inf")),
                 queryable=case.get("queryable"))  # fmt: skip
    if "dedup_margin" in case:
        target.dedup_margin = case["dedup_margin"]  # type: ignore[attr-defined]
    return target


def payload_for(case: dict[str, Any], amount: int) -> dict[str, Any]:
    """The refund payload; rt.approve binds an approval's grant to exactly this shape's hash."""
    return {"payment": case["payment"], "amount": int(amount)}


def refund_steps(
    ctx: Any,
    case: dict[str, Any],
    *,
    target: Any,
    decide: Callable[[Any], Any] | None = None,
    request: Any = None,
    capture: bool = False,
    amount: int | Callable[[], int] | None = None,
    payload: Any = None,
    authority: Authority = "approval",
    approval_timeout: float | None = None,
    offer: Offer = "approved",
    premises: Any = None,
    before_effect: Callable[[Any], Any] | None = None,
    **effect_options: Any,
) -> Generator[Any, Any, tuple[Decision | None, EffectResult | None]]:
    """The refund workflow body (see the module's docstring for the steps it records), written
    once for both APIs: a generator that yields each durable call as the context returns it
    (a value in a plain workflow, an awaitable in an `async def` one) and receives its result;
    `run_refund` and `run_refund_async` drive it (`drive` / `drive_async`).

    Returns (the decision or None, the effect's result or None when the approval expired).

    - ``case``: the workflow input: ``id`` (the effect key is ``refund:{id}``), ``payment``,
      and ``grant`` under ``authority="grant"``.
    - ``target``: the effect target (``refund_target(case)``, a StripeRefunds, ...).
    - ``decide``: the model call ``decide(request) -> {"amount": ..., ...}``; None: no decision.
      ``request``: what it is asked (default ``{"case": case["id"]}``); its hash is recorded.
    - ``capture``: record the target's premises as a plain step "capture" (after the decision,
      if any); they are the effect's premises under a grant unless ``premises`` is given.
    - ``amount``: the refund amount; None: the decision's. A callable is called where the body
      offers the payload, outside any step, on every run of the body (the trace replay's
      "Redecide" changes what a later call offers).
    - ``payload``: the whole payload instead of ``payload_for(case, amount)`` (a test's input).
    - ``authority``: "approval": wait for a person (``ctx.wait_approval`` of the payload, with
      ``approval_timeout`` seconds, None: no limit); the effect runs under the approval's grant
      with the facts the approver saw as premises. "grant": the case's standing grant, with
      ``premises`` or else the captured premises or else the decision's.
    - ``offer`` (approval only): "approved": the effect offers the payload the person approved
      (it may differ from the proposal); "proposed": it offers what it proposed, so an approval
      of another payload is refused by the gate (payload_not_approved).
    - ``before_effect``: called with ``ctx`` between the authority and the effect (an async
      flow's returns the awaitable of its durable call, e.g. ``ctx.sleep(...)``).
    - ``effect_options``: passed to ``ctx.effect`` (local_premises, action, compensation,
      postcondition, ...).
    """
    if authority not in ("approval", "grant"):
        raise ValueError(f"run_refund: authority must be 'approval' or 'grant', not {authority!r}")
    if offer not in ("approved", "proposed"):
        raise ValueError(f"run_refund: offer must be 'approved' or 'proposed', not {offer!r}")
    decision = None
    if decide is not None:
        ask = {"case": case["id"]} if request is None else request
        decision = yield ctx.decide(DECIDE_STEP, decide, ask, premises=target.capture)
    captured = (yield ctx.step(CAPTURE_STEP, target.capture)) if capture else None
    if payload is None:
        if callable(amount):
            value = amount()
        elif amount is not None:
            value = amount
        elif decision is not None:
            value = decision.output["amount"]
        else:
            raise ValueError("run_refund: no amount, no payload and no decision to take one from")
        payload = payload_for(case, value)
    if authority == "approval":
        approval = yield ctx.wait_approval(payload, timeout=approval_timeout)
        if approval is None:
            return decision, None
        grant, facts = approval["grant_id"], approval["facts_seen"]
        if offer == "approved":
            payload = approval["payload"]
    else:
        grant = case["grant"]
        if premises is not None:
            facts = premises
        elif capture:
            facts = captured
        elif decision is not None:
            facts = decision.premises
        else:
            raise ValueError("run_refund: under a standing grant, the premises come from "
                             "premises=, capture=True or a decision")  # fmt: skip
    if before_effect is not None:
        yield before_effect(ctx)  # an awaitable (async) or its result (plain): driven alike
    r = yield ctx.effect(target, key=f"refund:{case['id']}", payload=payload, premises=facts,
                   grant=grant, decision=None if decision is None else decision.ref,
                   **effect_options)  # fmt: skip
    return decision, r


def drive(steps: Generator[Any, Any, T]) -> T:
    """Run a body like `refund_steps` in a plain workflow: each yielded call has already run
    (the context returned its result), so the result goes straight back in."""
    try:
        value = next(steps)
        while True:
            if inspect.isawaitable(value):
                getattr(value, "close", lambda: None)()  # a coroutine never awaited: closed
                raise TypeError("a plain workflow's body yielded an awaitable: an `async def` "
                                "workflow drives it with drive_async")  # fmt: skip
            value = steps.send(value)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def drive_async(steps: Generator[Any, Any, T]) -> T:
    """Run a body like `refund_steps` in an `async def` workflow: each yielded awaitable is
    awaited here. The call was made inside the body, so its place (seq) was taken in the body's
    order (docs/async.md#places); an exception from the await is thrown back into the body at
    that call, as a plain call would raise it there."""
    try:
        value = next(steps)
        while True:
            try:
                got = (await value) if inspect.isawaitable(value) else value
            except BaseException as exc:  # noqa: BLE001 - raised inside the body, where it belongs
                value = steps.throw(exc)
            else:
                value = steps.send(got)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def run_refund(ctx: WorkflowContext, case: dict[str, Any], **options: Any
               ) -> tuple[Decision | None, EffectResult | None]:  # fmt: skip
    """The refund body in a plain workflow (`refund_steps` for the options)."""
    return drive(refund_steps(ctx, case, **options))


async def run_refund_async(ctx: Any, case: dict[str, Any], **options: Any
                           ) -> tuple[Decision | None, EffectResult | None]:  # fmt: skip
    """The refund body in an `async def` workflow (`refund_steps` for the options): the same
    steps at the same places as `run_refund`."""
    return await drive_async(refund_steps(ctx, case, **options))
