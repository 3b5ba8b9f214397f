"""What a claimed run is, and the rules its durable calls follow that need no I/O
(docs/design.md#run-engine): the claim (Run), the retry policy, a recorded decision, the
names the runtime reserves, and the checks and shapes of call arguments and recorded rows.

Read by the run engine (run_engine.py), both contexts, both workers and the clients.
"""

from __future__ import annotations

import hashlib
import re
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import codec, queues, stored, telemetry, timeouts
from .errors import InvalidInput, StepFailed, StepTimedOut

APPROVAL_SIGNAL = "approve"  # the signal rt.approve sends with its grant
# ctx.set_status records a step of this name; rt.query reads the latest one. ctx.step refuses
# the name, so no workflow's own step can pass for a status.
STATUS_STEP = "$status"
# A workflow ending so ends its own grants (its approvals: principal workflow:<id>), revoked as
# 'workflow finished' in the transaction that ends it (query end_workflow_grants). A stuck one
# keeps them: an operator may still resolve its open effects (rt.recover_orphans) under them.
ENDS_GRANTS = ("completed", "failed", "cancelled", "continued", "timed_out")


@dataclass(frozen=True)
class RetryPolicy:
    """Temporal's retry defaults: 1 s initial, x2 backoff, cap 100 x initial, unlimited attempts.

    non_retryable holds exception classes or class names; a matching error fails the step at once.

    Timeouts (seconds, None: no limit; docs/timeouts.md): `start_to_close` bounds one attempt
    (an attempt past it is abandoned and counts as failed, StepTimedOut, retried like any
    failure), `schedule_to_close` bounds the whole step, all attempts and backoffs, from its
    first attempt's start as recorded in the database (a crash does not restart it); past it
    the step fails with StepTimedOut, not retried.
    """

    initial: float = 1.0
    backoff: float = 2.0
    max_interval: float | None = None
    max_attempts: int = 0
    non_retryable: tuple[type[BaseException] | str, ...] = ()
    start_to_close: float | None = None
    schedule_to_close: float | None = None

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.backoff < 1 or self.max_attempts < 0:
            raise ValueError("RetryPolicy needs initial > 0, backoff >= 1 and max_attempts >= 0")
        # InvalidInput is a ValueError too: NaN, negative, zero, over ten years, not a number
        for limit in ("start_to_close", "schedule_to_close"):
            object.__setattr__(self, limit, timeouts.check_seconds(getattr(self, limit), limit))

    @property
    def timed(self) -> bool:
        """True when the policy sets a step timeout (start_to_close or schedule_to_close)."""
        return self.start_to_close is not None or self.schedule_to_close is not None

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        cap = self.max_interval if self.max_interval is not None else 100 * self.initial
        return min(self.initial * self.backoff ** (attempt - 1), cap)

    def retries(self, exc: BaseException, attempt: int) -> bool:
        """Whether attempt number `attempt` (1-based), which raised `exc`, is retried: not
        once max_attempts is reached, not when schedule_to_close is spent, not for an
        exception in non_retryable (a class, or a class name matched along its MRO)."""
        if self.max_attempts and attempt >= self.max_attempts:
            return False
        if isinstance(exc, StepTimedOut) and exc.timeout == "schedule_to_close":
            return False  # the step's whole budget is spent
        for item in self.non_retryable:
            if isinstance(item, str):
                if any(item in (c.__name__, c.__qualname__) for c in type(exc).__mro__):
                    return False
            elif isinstance(exc, item):
                return False
        return True


@dataclass
class Run:
    """One claim of one workflow by this worker, shared with the heartbeat thread."""

    workflow_id: str
    name: str
    version: str
    input: Any
    epoch: int
    waiting: dict[str, Any] | None
    takeovers: int
    cancel_requested_at: Any
    lease_ttl: float
    # docs/design.md#model-findings C1: t0 + lease_ttl, with t0 read before the claim and before every renewing
    # write. Checked before every step body and model call, so a stalled load can never start
    # a body after the lease (as the database sees it) may have expired.
    local_deadline: float
    # The clock jump a failover may bring (Worker max_clock_skew): the local deadline runs this
    # much short of the lease, so a new primary whose clock is ahead takes over only after
    # this worker stopped (docs/deployment.md#clocks).
    clock_skew: float = 0.0
    parent_id: str | None = None
    claimed_now: datetime | None = None  # database time of the claim
    # docs/timeouts.md: the workflow's execution deadline (database time) and the same as a
    # local monotonic time, set from the claim's now() (so it can only fall late)
    execution_deadline: datetime | None = None
    execution_local: float | None = None
    has_steps: bool = True  # False when the claim saw no recorded steps (nothing to replay)
    fenced: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def renewed(self, t0: float) -> None:
        with self.lock:
            self.local_deadline = max(self.local_deadline, t0 + self.lease_ttl - self.clock_skew)

    @property
    def claimed_past_deadline(self) -> bool:
        """Claimed at or past its execution deadline (docs/timeouts.md): it ends, no code runs."""
        deadline, now = self.execution_deadline, self.claimed_now
        return deadline is not None and now is not None and now >= deadline


@dataclass(frozen=True)
class Decision:
    """A recorded model decision: its output, the premises it was made on, and where it lives."""

    output: Any
    premises: Any
    captured_at: str | None
    ref: dict[str, Any]


def error_record(exc: BaseException, attempt: int) -> dict[str, Any]:
    """A failed attempt as recorded in its step row."""
    if isinstance(exc, StepTimedOut):  # which limit fired, not a traceback of the waiting
        return {**exc.error, "attempt": attempt}
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {
        "type": type(exc).__qualname__,
        "message": str(exc),
        "attempt": attempt,
        "traceback": "".join(tb[-12:]),
    }


def check_step_call(name: str, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                    postcondition: Any) -> None:  # fmt: skip
    """A step call's arguments, checked before it takes its place."""
    for value in (fn, *args, *kwargs.values()):
        if hasattr(value, "apply"):
            raise TypeError(
                f"step {name!r} was given an effect target ({value!r}); external effects must "
                "go through ctx.effect(target, key, payload, ...)"
            )
    if postcondition is not None and not callable(postcondition):
        raise TypeError(f"step {name!r}: postcondition {postcondition!r} is not callable")
    if name == STATUS_STEP:
        raise InvalidInput(f"step name {STATUS_STEP!r} is the runtime's own (ctx.set_status); "
                           "choose another")  # fmt: skip


def step_error(name: str, error: dict[str, Any]) -> StepFailed:
    """The exception a recorded step failure raises, on the first run and on every replay."""
    if isinstance(error, dict) and error.get("type") == "StepTimedOut":
        return StepTimedOut(name, error)
    return StepFailed(name, error)


def request_hash(request: Any) -> str:
    return hashlib.sha256(stored.to_json_text(request, "the decide request").encode()).hexdigest()


def child_placement(queue: Any, priority: Any) -> dict[str, Any]:
    """insert_child's queue, priority (None: the parent's) and trace context (the current
    span's: the parent's run; None: the parent's stored one)."""
    return {"queue": None if queue is None else queues.queue_name(queue, "queue"),
            "priority": None if priority is None else queues.priority(priority),
            "traceparent": telemetry.traceparent()}  # fmt: skip


def successor_id(wf_id: str) -> str:
    """continue_as_new names the next run <id>#<n> (docs/design.md#refinements)."""
    m = re.match(r"^(.*)#(\d+)$", wf_id)
    return f"{m.group(1)}#{int(m.group(2)) + 1}" if m else f"{wf_id}#1"


def checked_proposal(proposal: Any) -> None:
    """ctx.wait_approval's proposal must be a JSON value (it is shown to the approver)."""
    try:
        stored.to_json_text(proposal, "the proposal")
    except TypeError as exc:
        raise InvalidInput(str(exc)) from None


def approval(payload: Any) -> dict[str, Any] | None:
    """An approval signal's payload, checked: a bare `approve` signal carries no grant."""
    if payload is None:
        return None
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("grant_id"), str)
        or ("payload" not in payload)
    ):
        raise InvalidInput(
            "the 'approve' signal this workflow received carries no grant_id and payload: "
            "approvals go through rt.approve() or `interlock approve WF --by WHO`, which create "
            "the grant the effect needs"
        )
    return payload


def workflow_input(ctx: Any, fn: Callable[..., Any]) -> Any:
    """The input the worker hands `fn(ctx, input)`: typed values rebuilt, and a plain document
    read as the type `fn` declares for its input (a dataclass or a pydantic model), so a
    workflow started from the CLI with JSON gets its declared type."""
    value = ctx.input
    hint = codec.input_hint(fn)
    return value if hint is None else codec.convert(value, hint, "the workflow input")
