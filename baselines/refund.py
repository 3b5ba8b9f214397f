"""The refund case of docs/design.md#refund-case on temporalio, as a careful Temporal user writes it.

Workflow ``RefundWorkflow`` (input ``{case, payment, sleep_seconds}``): the decision activity
``decide`` (the model, EMULATED model variance, through the official anthropic SDK), then
``workflow.wait_condition`` on an ``approve`` signal ``{amount, grant_id}``, then the activity
``refund`` with ``start_to_close_timeout`` 3 s and the default retry policy (initial interval
1 s, backoff 2, unlimited attempts), then ``workflow.sleep(sleep_seconds)`` (the spec's long
sleep, shortened and labeled so), and a summary as the result.

Two bodies for the activity named ``refund``; a worker registers one of them (``--mode``):

- (a) ``temporal_idem``: ``refund_temporal_idem``, Temporal's recommended idempotency key
  ``f"{info.workflow_run_id}-{info.activity_id}"`` (stable across retries of one activity,
  new after a reset, since the run id changes).
- (b) ``temporal_check``: ``refund_temporal_check``, the check a competent engineer writes:
  the key ``f"{info.workflow_id}-refund"`` (stable across retry and reset), the lookup "did my
  operation already happen?" where the tier has one (tiers 1, 2), the grant check by a plain
  SELECT from ``ilr.grants``, the approved-amount check, the eligibility check via
  ``GET /payments/{id}``, then the POST.

``activity_source(mode)`` returns a body verbatim (``inspect.getsource``) for the report.
Differences from the spec's text, all outside the two bodies or forced by types: a grant with
no ``amount`` bound in its constraints has no cap (the spec's ``>`` would raise on None); a missing grant raises
``not authorized`` (non-retryable) from ``grants_db.fetch``; a definite 4xx from the target
(``insufficient_funds``, ``key_reused``) is a non-retryable ``ApplicationError`` of type
``TargetRejected`` raised by ``http_target.post_refund`` (any Temporal user marks those
non-retryable; timeouts, connection errors and 5xx stay retryable).

Kill points (docs/design.md#kill-points, ``interlock_runtime.killpoints``, armed with ILR_KILL_AT / ILR_STOP_AT
in the worker's environment): ``http_target.post_refund`` calls ``hit("effect_before_dispatch")``
right before the HTTP send and ``hit("effect_after_send")`` after the response, before
returning; ``decide`` calls ``hit("decide_after_response")`` after the model's answer.

The attempt log (one file per worker, ``--attempt-log``): every activity attempt appends JSON
lines as it goes, each carrying everything known so far (so an attempt whose worker is
SIGKILLed keeps its last phase): ``phase`` begin, send (right before the HTTP send), response
(right after it, before ``effect_after_send``) and end (outcome). ``read_attempts(path)``
merges them into one record per attempt: worker, pid, activity, mode, workflow_id, run_id,
activity_id, attempt, key, checks (lookup, grant, amount, eligibility: what was read and
whether it passed), times, request/response, outcome (``returned``, ``raised``, or
``incomplete`` when the worker died first).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from interlock_runtime import killpoints
    from world.model_stub import decide_amount
    from world.target_client import LocalRefunds, TargetRejected

from . import MODES

WORKFLOW_NAME = "RefundWorkflow"
APIS = ("local", "stripe")  # the target's JSON API, or its Stripe-compatible subset (EMULATED)
DECIDE_START_TO_CLOSE = timedelta(seconds=10)
REFUND_START_TO_CLOSE = timedelta(
    seconds=3
)  # docs/design.md#refund-case; the retry policy is the default one
DEFAULT_SLEEP_SECONDS = 1.0  # stands in for the spec's long sleep (shortened, labeled)


# -- the workflow


@workflow.defn(name=WORKFLOW_NAME)
class RefundWorkflow:
    def __init__(self) -> None:
        self.approval: dict | None = None
        self.stage = "deciding"

    @workflow.signal
    def approve(self, approval: dict) -> None:
        self.approval = approval

    @workflow.query
    def state(self) -> dict:
        return {"stage": self.stage, "approval": self.approval}

    @workflow.run
    async def run(self, case: dict) -> dict:
        decision = await workflow.execute_activity(
            "decide",
            {"case": case["case"], "payment": case["payment"]},
            start_to_close_timeout=DECIDE_START_TO_CLOSE,
        )
        self.stage = "waiting_approval"
        await workflow.wait_condition(lambda: self.approval is not None)
        assert self.approval is not None
        if case.get("timer_seconds"):  # S10: a durable timer between the approval and the effect
            self.stage = "timer"
            await workflow.sleep(float(case["timer_seconds"]))
        self.stage = "refunding"
        refund = await workflow.execute_activity(
            "refund",
            {
                "payment": case["payment"],
                "amount": decision["amount"],
                "approved_amount": self.approval["amount"],
                "grant_id": self.approval["grant_id"],
            },
            start_to_close_timeout=REFUND_START_TO_CLOSE,
        )
        self.stage = "sleeping"
        sleep_seconds = float(case.get("sleep_seconds", DEFAULT_SLEEP_SECONDS))
        await workflow.sleep(sleep_seconds)  # shortened from the spec's long sleep
        self.stage = "done"
        info = workflow.info()
        return {
            "case": case["case"],
            "payment": case["payment"],
            "workflow_id": info.workflow_id,
            "run_id": info.run_id,
            "decision": decision,
            "approval": self.approval,
            "refund": refund,
            "slept_seconds": sleep_seconds,
        }


# -- the activities' collaborators, configured once per worker process (configure())


def now() -> datetime:
    return datetime.now(timezone.utc)


class HttpTarget:
    """The payment target as the activities see it, over the same wire format as the runtime's
    ``LocalRefunds`` (tier 1 sends ``Idempotency-Key``; every POST carries ``metadata.key``)."""

    def __init__(
        self,
        url: str,
        payment: str,
        tier: int,
        worker: str,
        timeout: float = 3.0,
        *,
        api: str = "local",
        lookup: bool = True,
    ) -> None:
        if api not in APIS:
            raise ValueError(f"api must be one of {APIS}, not {api!r}")
        self.url, self.payment, self.tier = url.rstrip("/"), payment, int(tier)
        self.worker = worker
        self.timeout = float(timeout)
        self.api = api
        # lookup=False: the target answers no lookups (S04's non-queryable variant)
        self.tier_has_lookup = self.tier in (1, 2) and lookup

    def _client(self, payment: str | None = None) -> LocalRefunds:
        if self.api == "stripe":  # EMULATED: the stripe SDK against the local /v1 subset
            from world.stripe_target import StripeRefunds

            return StripeRefunds(self.url, payment or self.payment, self.tier,
                                 send_timeout=self.timeout)  # fmt: skip
        return LocalRefunds(self.url, payment or self.payment, self.tier, send_timeout=self.timeout)

    def find_refund(self, key: str) -> dict | None:
        """GET /refunds?payment=&key=: the first refund carrying ``key``, or None."""
        found = self._client().query(key)
        rec = current_attempt()
        if rec is not None:
            rec.key = key
            rec.check("lookup", key=key, found=found and found["id"],
                      count=found["count"] if found else 0)  # fmt: skip
        return found

    def get_payment(self, payment: str) -> dict:
        """GET /payments/{id}: {id, paid, refunded_total}."""
        p = self._client(payment).payment_state()
        rec = current_attempt()
        if rec is not None:
            rec.check("eligibility", payment=p)
        return p

    def post_refund(self, payment: str, amount: int, idempotency_key: str) -> dict:
        """POST /refunds, between the two kill points of docs/design.md#kill-points."""
        rec = current_attempt()
        if rec is not None:
            rec.key = idempotency_key
            rec.before_send(payment, amount)
        killpoints.hit("effect_before_dispatch")
        headers_epoch = rec.attempt if rec is not None else None
        try:
            result = self._client(payment).apply(
                idempotency_key,
                {"payment": payment, "amount": amount},
                worker=self.worker,
                epoch=headers_epoch,
            )
        except TargetRejected as e:
            if rec is not None:
                rec.after_send(error=f"TargetRejected: {e.reason}")
            raise ApplicationError(
                f"target rejected the refund: {e.reason}",
                e.response,
                type="TargetRejected",
                non_retryable=True,
            ) from e
        except Exception as e:
            if rec is not None:
                rec.after_send(error=f"{type(e).__name__}: {e}")
            raise
        if rec is not None:
            rec.after_send(response=result)
        killpoints.hit("effect_after_send")
        return result


class GrantsDB:
    """A plain SELECT from ilr.grants (no lock, no transaction with the send)."""

    def __init__(self, dsn: str | None) -> None:
        self.dsn = dsn

    def fetch(self, grant_id: str) -> dict:
        if not self.dsn:
            raise ApplicationError("not authorized: the worker has no --grants-dsn",
                                   non_retryable=True)  # fmt: skip
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row,
                             connect_timeout=5) as conn:  # fmt: skip
            g = conn.execute("select * from ilr.grants where id = %s", (grant_id,)).fetchone()
        rec = current_attempt()
        if rec is not None:
            rec.check("grant", id=grant_id, row=_jsonable(g))
        if g is None:
            raise ApplicationError(f"not authorized: no grant {grant_id!r}", non_retryable=True)
        return g


class ModelClient:
    """The decision call through the official anthropic SDK (EMULATED model variance)."""

    def __init__(self, base_url: str, worker: str) -> None:
        self.base_url, self.worker = base_url, worker
        # The SDK takes seconds to import here: pay it at worker start, not in the first decision.
        import anthropic  # noqa: F401

    def decide(self, case: str, context: dict | None = None) -> dict:
        return decide_amount(self.base_url, case, context=context, worker=self.worker)


http_target: HttpTarget = None  # type: ignore[assignment]  # set by configure()
grants_db: GrantsDB = None  # type: ignore[assignment]
model: ModelClient = None  # type: ignore[assignment]
attempt_log: AttemptLog | None = None
worker_id = ""
worker_mode = ""


# -- the activities


@activity.defn(name="decide")
def decide(req: dict) -> dict:
    decision = model.decide(req["case"], context={"payment": req["payment"]})
    killpoints.hit("decide_after_response")
    return decision


@activity.defn(name="refund")
def refund_temporal_idem(req: dict) -> dict:
    info = activity.info()
    key = f"{info.workflow_run_id}-{info.activity_id}"  # Temporal's recommended key
    return http_target.post_refund(req["payment"], req["amount"], idempotency_key=key)


def _cap(grant: dict) -> float:
    """The grant's bound on the payload's amount (constraints {"amount": {"max": N}}); no
    bound: infinity (the spec's `>` would raise on None)."""
    bound = ((grant.get("constraints") or {}).get("amount") or {}).get("max")
    return float("inf") if bound is None else bound


@activity.defn(name="refund")
def refund_temporal_check(req: dict) -> dict:
    info = activity.info()
    key = f"{info.workflow_id}-refund"  # stable across retry and reset
    if http_target.tier_has_lookup:
        existing = http_target.find_refund(key)  # "did my operation already happen?"
        if existing:
            return existing
    g = grants_db.fetch(req["grant_id"])  # plain SELECT from the same ilr.grants table
    if g["revoked_at"] or (g["expires_at"] and g["expires_at"] <= now()) or req["amount"] > _cap(g):
        raise ApplicationError("not authorized", non_retryable=True)
    if req["amount"] != req["approved_amount"]:
        raise ApplicationError("amount differs from approval", non_retryable=True)
    p = http_target.get_payment(req["payment"])
    if p["refunded_total"] + req["amount"] > p["paid"]:
        raise ApplicationError("not eligible", non_retryable=True)
    return http_target.post_refund(req["payment"], req["amount"], idempotency_key=key)


REFUND_BODIES: dict[str, Callable[[dict], dict]] = {
    "temporal_idem": refund_temporal_idem,
    "temporal_check": refund_temporal_check,
}
assert tuple(REFUND_BODIES) == MODES


def activity_source(mode: str) -> str:
    """The refund activity of a mode, verbatim as it runs (for the report)."""
    return inspect.getsource(REFUND_BODIES[mode])


# -- the attempt log

_current: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar(
    "baseline_attempt", default=None
)

# Which check a non-retryable error of refund_temporal_check reports as failed.
_FAILED_CHECK = {
    "not authorized": "grant",
    "amount differs from approval": "amount",
    "not eligible": "eligibility",
}


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


def current_attempt() -> Attempt | None:
    return _current.get()


class AttemptLog:
    """Appends JSON lines to one file; each line is written and closed at once, so it survives
    a SIGKILL of the worker right after."""

    def __init__(self, path: str, worker: str) -> None:
        self.path, self.worker = path, worker
        self._lock = threading.Lock()

    def write(self, record: dict) -> None:
        line = json.dumps(record, default=str, sort_keys=True) + "\n"
        with self._lock, open(self.path, "a") as f:
            f.write(line)


class Attempt:
    """One activity attempt, logged phase by phase."""

    def __init__(self, log: AttemptLog | None, activity_name: str, mode: str, req: dict) -> None:
        info = activity.info()
        self.log = log
        self.req = req
        self.key: str | None = None
        self.attempt = info.attempt
        self.checks: dict[str, dict] = {}
        self.base = {
            "worker": worker_id,
            "pid": os.getpid(),
            "activity": activity_name,
            "mode": mode if activity_name == "refund" else None,
            "workflow_id": info.workflow_id,
            "run_id": info.workflow_run_id,
            "activity_id": info.activity_id,
            "attempt": info.attempt,
            "scheduled": info.current_attempt_scheduled_time.timestamp(),
            "started": time.time(),
        }
        self.fields: dict[str, Any] = {"request": req}

    def check(self, name: str, **facts: Any) -> None:
        self.checks[name] = {**self.checks.get(name, {}), **_jsonable(facts)}

    def emit(self, phase: str, **extra: Any) -> None:
        self.fields.update(extra)
        if self.log is not None:
            self.log.write({**self.base, "phase": phase, "t": time.time(), "key": self.key,
                            "checks": self.checks, **self.fields})  # fmt: skip

    def before_send(self, payment: str, amount: int) -> None:
        # Every check read so far passed: the body only reaches the POST when none raised.
        for name in ("grant", "eligibility"):
            if name in self.checks:
                self.checks[name]["passed"] = True
        if "approved_amount" in self.req and self.base["mode"] == "temporal_check":
            self.check("amount", amount=amount, approved_amount=self.req["approved_amount"],
                       passed=True)  # fmt: skip
        self.emit("send", send_at=time.time(), sent={"payment": payment, "amount": amount})

    def after_send(self, response: Any = None, error: str | None = None) -> None:
        self.emit("response", response_at=time.time(), response=response, send_error=error)

    def end(self, result: Any = None, error: BaseException | None = None) -> None:
        if error is None:
            self.emit("end", outcome="returned", result=result, ended=time.time())
            return
        msg = error.message if isinstance(error, ApplicationError) else str(error)
        failed = _FAILED_CHECK.get(msg.split(":", 1)[0])
        if failed is not None and self.base["mode"] == "temporal_check":
            if failed == "amount":
                self.check("amount", amount=self.req.get("amount"),
                           approved_amount=self.req.get("approved_amount"))  # fmt: skip
            self.checks.setdefault(failed, {})["passed"] = False
            for name in ("grant", "amount", "eligibility"):
                if name == failed:
                    break
                self.checks.setdefault(name, {})["passed"] = True
        retryable = not (isinstance(error, ApplicationError) and error.non_retryable)
        self.emit("end", outcome="raised", error=f"{type(error).__name__}: {msg}",
                  retryable=retryable, ended=time.time())  # fmt: skip


def logged(body: Callable[[dict], Any], mode: str) -> Callable[[dict], Any]:
    """The activity the worker registers: ``body`` under the same activity name, with each
    attempt written to the attempt log."""
    name = activity._Definition.must_from_callable(body).name

    @functools.wraps(body, updated=())  # not __dict__: it holds body's activity definition
    def run(req: dict) -> Any:
        rec = Attempt(attempt_log, name, mode, req)
        token = _current.set(rec)
        try:
            rec.emit("begin")
            result = body(req)
        except BaseException as e:
            rec.end(error=e)
            raise
        else:
            if name == "refund" and "lookup" in rec.checks and rec.checks["lookup"].get("found"):
                rec.fields["returned_existing"] = True
            rec.end(result=result)
            return result
        finally:
            _current.reset(token)

    return activity.defn(name=name)(run)


def configure(
    *,
    mode: str,
    target_url: str,
    payment: str,
    tier: int,
    model_url: str,
    grants_dsn: str | None,
    attempt_log_path: str | None,
    worker: str,
    http_timeout: float = 3.0,
    api: str = "local",
    lookup: bool = True,
) -> list[Callable]:
    """Set this process's collaborators; returns the activities to register for ``mode``."""
    global http_target, grants_db, model, attempt_log, worker_id, worker_mode
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    worker_id, worker_mode = worker, mode
    http_target = HttpTarget(target_url, payment, tier, worker, http_timeout, api=api,
                             lookup=lookup)  # fmt: skip
    grants_db = GrantsDB(grants_dsn)
    model = ModelClient(model_url, worker)
    attempt_log = AttemptLog(attempt_log_path, worker) if attempt_log_path else None
    return [logged(decide, mode), logged(REFUND_BODIES[mode], mode)]


def read_attempts(path: str | os.PathLike[str]) -> list[dict]:
    """One record per activity attempt (merged from its phase lines), in order of first line.
    ``outcome`` is ``incomplete`` when the attempt has no end line (its worker died first)."""
    merged: dict[tuple, dict] = {}
    try:
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
    for line in lines:
        ident = (line["worker"], line["pid"], line["workflow_id"], line["run_id"],
                 line["activity_id"], line["attempt"])  # fmt: skip
        rec = merged.setdefault(ident, {"phases": []})
        rec["phases"].append(line["phase"])
        rec.update({k: v for k, v in line.items() if k not in ("phase", "t")})
        rec["last_phase_at"] = line["t"]
    for rec in merged.values():
        rec.setdefault("outcome", "incomplete")
    return list(merged.values())
