"""The workflow context: replay from the top with the step cache (spec 5.1, 5.5).

A workflow is a plain function f(ctx, input). Each durable call takes the next seq. If a step
row exists at that seq, its kind and name must match the call (else NonDeterminism) and the
recorded output is returned, or the recorded error re-raised: nothing runs. With no row the
call runs for real and is recorded in one fenced transaction.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from . import db, killpoints
from .errors import Fenced, NonDeterminism, Release, StepFailed, Suspend


@dataclass(frozen=True)
class RetryPolicy:
    """Temporal's retry defaults: 1 s initial, x2 backoff, cap 100 x initial, unlimited attempts.

    non_retryable holds exception classes or class names; a matching error fails the step at once.
    """

    initial: float = 1.0
    backoff: float = 2.0
    max_interval: float | None = None
    max_attempts: int = 0
    non_retryable: tuple[type[BaseException] | str, ...] = ()

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        cap = self.max_interval if self.max_interval is not None else 100 * self.initial
        return min(self.initial * self.backoff ** (attempt - 1), cap)

    def retries(self, exc: BaseException, attempt: int) -> bool:
        if self.max_attempts and attempt >= self.max_attempts:
            return False
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
    waiting: dict | None
    takeovers: int
    cancel_requested_at: Any
    lease_ttl: float
    # DESIGN B10 C1: t0 + lease_ttl, with t0 read before the claim and before every renewing
    # write. Checked before every step body, so a stalled load can never start a body after
    # the lease (as the database sees it) may have expired.
    local_deadline: float
    fenced: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def renewed(self, t0: float) -> None:
        with self.lock:
            self.local_deadline = max(self.local_deadline, t0 + self.lease_ttl)


def _error_record(exc: BaseException, attempt: int) -> dict:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {
        "type": type(exc).__qualname__,
        "message": str(exc),
        "attempt": attempt,
        "traceback": "".join(tb[-12:]),
    }


class WorkflowContext:
    """What workflow code calls. One context per run; not shared between threads."""

    def __init__(
        self,
        run: Run,
        conn: psycopg.Connection,
        steps: list[dict],
        worker_id: str,
        stopping: threading.Event | None = None,
    ):
        self._run = run
        self._conn = conn
        self._recorded = {row["seq"]: row for row in steps}
        self._seq = 0
        self._stopping = stopping or threading.Event()
        self._unwinding: BaseException | None = None  # re-raised if workflow code swallows it
        self.worker_id = worker_id

    # -- identity -------------------------------------------------------------------------

    @property
    def workflow_id(self) -> str:
        return self._run.workflow_id

    @property
    def epoch(self) -> int:
        return self._run.epoch

    @property
    def unwinding(self) -> BaseException | None:
        """The Suspend/Fenced/Release/NonDeterminism that must end this run, if any."""
        return self._unwinding

    # -- the replay cursor ----------------------------------------------------------------

    def _raise(self, exc: BaseException) -> None:
        self._unwinding = exc
        raise exc

    def _next(
        self, kind: str, name: str, fingerprint: str | None = None
    ) -> tuple[int, dict | None]:
        """Take the next seq; return its recorded row (checked against this call) or None."""
        if self._unwinding is not None:
            raise self._unwinding
        self._seq += 1
        row = self._recorded.get(self._seq)
        if row is not None:
            recorded = {"kind": row["kind"], "name": row["name"], "fingerprint": row["fingerprint"]}
            called = {"kind": kind, "name": name, "fingerprint": fingerprint}
            if recorded != called:
                self._raise(NonDeterminism(self._seq, recorded, called))
        return self._seq, row

    def _ensure_live(self) -> None:
        """Before anything runs for real: the claim must still be ours, locally and remotely."""
        run = self._run
        if run.fenced:
            self._raise(Fenced(f"{run.workflow_id}: heartbeat found epoch {run.epoch} fenced"))
        if time.monotonic() >= run.local_deadline:
            self._raise(
                Fenced(f"{run.workflow_id}: local lease deadline passed (epoch {run.epoch})")
            )
        if self._stopping.is_set():
            self._raise(Release(f"{run.workflow_id}: worker stopping"))

    def _fenced_write(self) -> Any:
        """A fenced transaction that also renews the local deadline when it commits."""
        return _FencedWrite(self)

    def _record(self, seq: int, kind: str, name: str, output: Any = None, error: Any = None,
                fingerprint: str | None = None) -> None:  # fmt: skip
        params = {
            "wf": self.workflow_id,
            "seq": seq,
            "name": name,
            "kind": kind,
            "fingerprint": fingerprint,
            "output": db.jsonb(output) if error is None else None,
            "error": db.jsonb(error) if error is not None else None,
            "epoch": self.epoch,
        }
        with self._fenced_write() as conn:
            conn.execute(db.query("insert_step"), params)
        self._recorded[seq] = {"seq": seq, "kind": kind, "name": name, "fingerprint": fingerprint,
                               "output": params["output"], "error": error}  # fmt: skip

    # -- durable calls ----------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], *args: Any, retry: RetryPolicy | None = None,
             **kwargs: Any) -> Any:  # fmt: skip
        """Run fn(*args, **kwargs) at least once and record its JSON result; replay returns it.

        A step body may run again after a crash before its record (like a Temporal activity), so
        anything with an external side effect belongs in ctx.effect, never in a step.
        """
        for value in (fn, *args, *kwargs.values()):
            if hasattr(value, "apply"):
                raise TypeError(
                    f"step {name!r} was given an effect target ({value!r}); external effects must "
                    "go through ctx.effect(target, key, payload, ...)"
                )
        seq, row = self._next("step", name)
        if row is not None:
            if row["error"] is not None:
                raise StepFailed(name, row["error"])
            return row["output"]

        policy = retry or RetryPolicy()
        attempt = self._attempt(seq)
        if policy.max_attempts and attempt > policy.max_attempts:
            error = {
                "type": "AttemptsExhausted",
                "message": f"{attempt - 1} attempts used (worker crashes count as attempts)",
                "attempt": attempt,
            }
            self._record(seq, "step", name, error=error)
            raise StepFailed(name, error)

        self._ensure_live()
        try:
            output = fn(*args, **kwargs)
        except Exception as exc:  # the body failed: retry later, or record the failure
            if policy.retries(exc, attempt):
                self._suspend_for_retry(seq, name, attempt, policy.delay(attempt))
            self._fail_step(seq, name, exc, attempt)
        try:
            text = db.to_json_text(output, f"the result of step {name!r}")
        except TypeError as exc:  # a bug in the step, not a transient failure: no retry
            self._fail_step(seq, name, exc, attempt)
        killpoints.hit("step_before_record")
        output = json.loads(text)
        self._record(seq, "step", name, output=output)
        killpoints.hit("step_after_record")
        return output

    def _fail_step(self, seq: int, name: str, exc: Exception, attempt: int) -> None:
        error = _error_record(exc, attempt)
        self._record(seq, "step", name, error=error)
        raise StepFailed(name, error) from exc

    def _attempt(self, seq: int) -> int:
        """Spec B4: attempt = waiting.attempt + takeovers, so a crash loop spends retries."""
        waiting = self._run.waiting or {}
        base = waiting.get("attempt", 1) if waiting.get("seq") == seq else 1
        return base + self._run.takeovers

    def _suspend_for_retry(self, seq: int, name: str, attempt: int, delay: float) -> None:
        waiting = {"seq": seq, "kind": "retry", "name": name, "attempt": attempt + 1}
        with self._fenced_write() as conn:
            conn.execute(
                db.query("suspend_retry"),
                {"wf": self.workflow_id, "waiting": db.jsonb(waiting), "delay": delay},
            )
        self._raise(Suspend(f"{self.workflow_id}: step {name!r} retry {attempt + 1} in {delay}s"))


class _FencedWrite:
    """Context manager: db.fenced plus the local-deadline renewal (t0 read before the write)."""

    def __init__(self, ctx: WorkflowContext):
        self._ctx = ctx

    def __enter__(self) -> psycopg.Connection:
        ctx = self._ctx
        self._t0 = time.monotonic()
        self._cm = db.fenced(ctx._conn, ctx.workflow_id, ctx.epoch, ctx._run.lease_ttl)
        try:
            self._fence = self._cm.__enter__()
        except Fenced as exc:
            ctx._unwinding = exc
            raise
        return ctx._conn

    def __exit__(self, *exc_info: Any) -> bool:
        suppressed = self._cm.__exit__(*exc_info)
        if exc_info[0] is None:
            self._ctx._run.renewed(self._t0)
        return bool(suppressed)
