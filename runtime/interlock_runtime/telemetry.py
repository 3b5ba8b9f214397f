"""OpenTelemetry traces, metrics and log correlation (docs/observability.md).

opentelemetry-api is optional (the `otel` extra; `otel-sdk` adds the SDK). Without it every
hook below costs one function call or nothing: the decorators return the function they are
given unchanged and the calls return at their first line. With the API but no SDK configured,
the API's own no-op tracer and meter apply, and no trace context is ever stored.

The rest of the runtime touches this module only through small hooks: decorators on the
functions that make a span (a step attempt, a wait, each stage of an effect, a claimed run),
`claimed`/`started` one-liners, and `on_event`, which events.emit calls for every worker
event (outcomes, heartbeat gaps). All the telemetry logic lives here, except setting an SDK
from the OTEL_* environment variables (telemetry_env.py, which only the CLI calls by itself).

One trace per workflow run: rt.start stores the W3C traceparent of its `interlock.start` span
with the workflow (column ilr.workflows.traceparent); every claim's `interlock.run` span is a
child of it, so a takeover after a crash continues the same trace under a new epoch. A run
started without a trace context gets one from its first traced claim.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import inspect
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from . import db
from .errors import Cancelled, ContinuedAsNew, Fenced, Release, StepFailed, Suspend, TargetRejected

F = TypeVar("F", bound=Callable[..., Any])

# -- vocabulary: span names -----------------------------------------------------------------------

START = "interlock.start"  # rt.start (the client); the parent of every run span
SIGNAL = "interlock.signal"  # rt.signal (the client): a signal sent, in the caller's trace
RUN = "interlock.run"  # one claim of one workflow, from the claim to suspend or end
CLAIM = "interlock.claim"  # the claim statement, inside its run span
STEP = "interlock.step"  # one attempt of a step body
DECIDE = "interlock.decide"  # one attempt of a model call
WAIT = "interlock.wait"  # a sleep or signal wait at the frontier: ready, or suspended
EFFECT = "interlock.effect"  # a ctx.effect at the frontier; parent of the stages below
DISPATCH = "interlock.effect.dispatch"  # T_dispatch
SEND = "interlock.effect.send"  # the watched send (the target's request carries its context)
COMMIT = "interlock.effect.commit"  # T_commit
RECOVERY = "interlock.effect.recovery"  # recovery of an open send (T_resolve, maybe a resend)
SPANS = (START, SIGNAL, RUN, CLAIM, STEP, DECIDE, WAIT, EFFECT, DISPATCH, SEND, COMMIT, RECOVERY)

# -- vocabulary: attributes ------------------------------------------------------------------------

WORKFLOW_ID = "interlock.workflow_id"
WORKFLOW = "interlock.workflow"  # the workflow's name
EPOCH = "interlock.epoch"
WORKER = "interlock.worker_id"
SEQ = "interlock.seq"
NAME = "interlock.name"  # the step, wait or effect call's name
KIND = "interlock.kind"  # sleep | signal, on a wait
ATTEMPT = "interlock.attempt"
PREV_STATUS = "interlock.prev_status"  # on a claim: pending, sleeping, or running (a takeover)
TAKEOVER = "interlock.takeover"
EFFECT_ID = "interlock.effect_id"
TIER = "interlock.tier"
TARGET = "interlock.target"
OUTCOME = "interlock.outcome"
QUEUE = "interlock.queue"

# -- vocabulary: metrics -----------------------------------------------------------------------------

STARTED = "interlock.workflows.started"
COMPLETED = "interlock.workflows.completed"
FAILED = "interlock.workflows.failed"
RETRIES = "interlock.step.retries"
EFFECTS = "interlock.effects"
AMBIGUOUS_OPEN = "interlock.effects.ambiguous_open"
TAKEOVERS = "interlock.lease.takeovers"
HEARTBEAT_GAP = "interlock.heartbeat.gap"
QUEUE_DEPTH = "interlock.queue.depth"
METRICS = (STARTED, COMPLETED, FAILED, RETRIES, EFFECTS, AMBIGUOUS_OPEN, TAKEOVERS,
           HEARTBEAT_GAP, QUEUE_DEPTH)  # fmt: skip

# Run outcomes, as the worker's events name them; the run span's interlock.outcome.
RUN_OUTCOMES = frozenset({"completed", "failed", "cancelled", "stuck", "suspended", "fenced",
                          "released", "continued", "abandoned", "timed_out"})  # fmt: skip


def _load() -> tuple[Any, Any, Any, Any]:
    """The API's modules, imported once; (None, ...) when opentelemetry-api is missing. By
    name, so that mypy checks this module the same with and without the package."""
    try:
        return tuple(importlib.import_module(f"opentelemetry.{m}") for m in  # type: ignore[return-value]
                     ("trace", "metrics", "propagate", "trace.propagation.tracecontext"))  # fmt: skip
    except ImportError:
        return None, None, None, None


_trace, _metrics, _propagate, _tracecontext = _load()
ENABLED = _trace is not None

# Per run (a thread's context in the plain worker, a task's in the asyncio worker): the
# workflow's name, and whether the Suspend about to end a span is a retry's.
_WORKFLOW: contextvars.ContextVar[str | None] = contextvars.ContextVar("ilr_wf", default=None)
_RETRY: contextvars.ContextVar[bool] = contextvars.ContextVar("ilr_retry", default=False)


class _Instruments:
    """The meter's instruments, created once; proxies until an SDK MeterProvider is set."""

    def __init__(self, metrics: Any) -> None:
        meter = metrics.get_meter("interlock_runtime")
        self.started = meter.create_counter(STARTED, unit="{workflow}",
                                            description="workflows started by rt.start")  # fmt: skip
        self.completed = meter.create_counter(COMPLETED, unit="{workflow}",
                                              description="workflows that completed")  # fmt: skip
        self.failed = meter.create_counter(FAILED, unit="{workflow}",
                                           description="workflows that failed")  # fmt: skip
        self.retries = meter.create_counter(RETRIES, unit="{retry}",
                                            description="step retries scheduled after a failure")  # fmt: skip
        self.effects = meter.create_counter(EFFECTS, unit="{effect}",
                                            description="effect calls at the frontier, by outcome")  # fmt: skip
        self.takeovers = meter.create_counter(TAKEOVERS, unit="{claim}",
                                              description="claims of a run whose lease expired")  # fmt: skip
        self.heartbeat_gap = meter.create_histogram(HEARTBEAT_GAP, unit="s",
                                                    description="time between two lease renewals")  # fmt: skip
        meter.create_observable_gauge(QUEUE_DEPTH, callbacks=[_observe_queue_depth],
                                      unit="{workflow}",
                                      description="runs due and not claimed, by queue")  # fmt: skip
        meter.create_observable_gauge(AMBIGUOUS_OPEN, callbacks=[_observe_ambiguous],
                                      unit="{effect}",
                                      description="AMBIGUOUS effects not yet reconciled")  # fmt: skip


# -- the database gauges ----------------------------------------------------------------------------


class _Watch:
    """One database the gauges read, on its own connection (the metric reader's thread)."""

    def __init__(self, dsn: str) -> None:
        self.dsn, self.users = dsn, 0
        self.conn: db.Conn | None = None
        self.lock = threading.Lock()

    def rows(self, query: str) -> list[db.Row]:
        with self.lock:
            try:
                if self.conn is None or self.conn.closed:
                    # a gauge must never hold up a collection: short connect, short statements
                    self.conn = db.connect(self.dsn, options="-c statement_timeout=2000")
                rows: list[db.Row] = self.conn.execute(db.query(query)).fetchall()
                return rows
            except Exception:  # noqa: BLE001 - the database is away: no observation this time
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                return []

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
            self.conn = None


_watched: dict[str, _Watch] = {}
_watched_lock = threading.Lock()


def watch_database(dsn: str) -> Callable[[], None]:
    """Report queue depth and open AMBIGUOUS effects of this database while the returned
    function is not called (Worker.run). Every worker reports the same cluster-wide values."""
    if not ENABLED:
        return _nothing
    with _watched_lock:
        watch = _watched.setdefault(dsn, _Watch(dsn))
        watch.users += 1

    def unwatch() -> None:
        with _watched_lock:
            watch.users -= 1
            if watch.users == 0 and _watched.get(dsn) is watch:
                del _watched[dsn]
                watch.close()

    return unwatch


def _nothing() -> None:
    return None


def _watches() -> list[_Watch]:
    with _watched_lock:
        return list(_watched.values())


def _observe_queue_depth(options: Any) -> list[Any]:
    out = []
    for watch in _watches():
        for row in watch.rows("telemetry_queue_depth"):
            out.append(_metrics.Observation(row["depth"], {QUEUE: row["queue"]}))
    return out


def _observe_ambiguous(options: Any) -> list[Any]:
    out = []
    for watch in _watches():
        for row in watch.rows("telemetry_ambiguous_open"):
            out.append(_metrics.Observation(row["open"]))
    return out


_instruments = _Instruments(_metrics) if ENABLED else None
_tracing = False  # a tracer provider was set when setup() last looked: make spans


def setup() -> bool:
    """Look once (Worker() calls it, and telemetry_env.configure_from_env after it sets a
    provider) whether a tracer provider is set: with the API alone (its proxy or no-op
    provider) every span would be a no-op object made and dropped on the hot path, so the
    worker's spans are skipped altogether. Returns whether spans are made."""
    global _tracing
    provider = type(_trace.get_tracer_provider()).__name__ if ENABLED else None
    _tracing = provider not in (None, "ProxyTracerProvider", "NoOpTracerProvider")
    return _tracing


_tracer: Any = _trace.get_tracer("interlock_runtime") if ENABLED else None  # a proxy until set
_w3c: Any = _tracecontext.TraceContextTextMapPropagator() if ENABLED else None

# -- trace context ------------------------------------------------------------------------------------


def traceparent() -> str | None:
    """The current span's W3C traceparent, or None when there is no valid one."""
    if not ENABLED:
        return None
    carrier: dict[str, str] = {}
    _w3c.inject(carrier)
    return carrier.get("traceparent")


def _context_of(parent: str | None) -> Any:
    return _w3c.extract({"traceparent": parent}) if parent else None


def trace_headers() -> dict[str, str]:
    """Headers carrying the current trace context to a target (the global propagator's: W3C
    `traceparent`, and `tracestate`/`baggage` when set); {} without a valid span."""
    if not ENABLED or not _trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    return carrier


def log_ids() -> tuple[str, str] | None:
    """(trace_id, span_id) in hex of the current span, for log lines; None without one."""
    if not ENABLED:
        return None
    ctx = _trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


# -- spans ---------------------------------------------------------------------------------------------


def _outcome_of(exc: BaseException, span_name: str) -> str:
    if span_name == SEND and isinstance(exc, Exception):  # the target's answer, not ours
        return "rejected" if isinstance(exc, TargetRejected) else "unknown"
    if isinstance(exc, Suspend):
        return "retry" if _RETRY.get() else "suspended"
    for kind, outcome in ((StepFailed, "failed"), (Fenced, "fenced"), (Release, "released"),
                          (Cancelled, "cancelled"), (ContinuedAsNew, "continued")):  # fmt: skip
        if isinstance(exc, kind):
            return outcome
    return "error"


@contextmanager
def _span(name: str, attributes: Mapping[str, Any], kind: str = "INTERNAL") -> Iterator[Any]:
    """A span made current around a block; interlock.outcome from how the block ended (the
    runtime's unwinding exceptions are outcomes, not errors)."""
    with _tracer.start_as_current_span(name, kind=getattr(_trace.SpanKind, kind),
                                       attributes={k: v for k, v in attributes.items()
                                                   if v is not None},
                                       record_exception=False,
                                       set_status_on_exception=False) as span:  # fmt: skip
        _RETRY.set(False)
        try:
            yield span
        except BaseException as exc:
            outcome = _outcome_of(exc, name)
            span.set_attribute(OUTCOME, outcome)
            if outcome in ("error", "failed", "rejected", "unknown"):
                span.record_exception(exc)
                span.set_status(_trace.Status(_trace.StatusCode.ERROR, f"{type(exc).__name__}"))
            raise
        finally:
            _RETRY.set(False)


def traced(
    name: str, kind: str = "INTERNAL", attributes: Callable[..., dict[str, Any]] | None = None
) -> Callable[[F], F]:
    """A plain span around every call of the decorated function (rt.start: `interlock.start`,
    a PRODUCER span; `started` stores its context with the workflow). `attributes(*args,
    **kwargs)`, given the call's arguments, names what the span is about (rt.signal: the
    workflow and the signal)."""

    def decorate(fn: F) -> F:
        if not ENABLED:
            return fn

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _span(name, attributes(*args, **kwargs) if attributes else {}, kind):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def signal_attrs(client: Any, wf_id: Any, name: Any, *rest: Any, **kwargs: Any) -> dict[str, Any]:
    """rt.signal(wf_id, name, ...)'s span attributes: the workflow and the signal's name."""
    return {WORKFLOW_ID: str(wf_id), NAME: str(name)}


def _wrap(
    fn: F,
    span_of: Callable[..., tuple[str, dict[str, Any]]],
    ended: Callable[[Any, Any], None],
    counted: Callable[..., None] | None = None,
) -> F:
    """fn with a span around each call: `span_of(*args)` names it and gives its attributes,
    `ended(span, out)` marks a normal end, `counted(out, *args)` counts it (with or without a
    span). fn may be a plain function, a coroutine function or a generator function (the
    effect gate's parts, effects.send.Io): the span lasts until it returns. Without a tracer
    provider at setup() the call goes straight through: no span object is made."""

    def opened(args: tuple[Any, ...]) -> Any:
        name, attrs = span_of(*args)
        return _span(name, attrs)

    def count(out: Any, args: tuple[Any, ...]) -> None:
        if counted is not None:
            counted(out, *args)

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stages(*args: Any, **kwargs: Any) -> Any:
            if not _tracing:
                out = yield from fn(*args, **kwargs)
            else:
                with opened(args) as span:
                    out = yield from fn(*args, **kwargs)
                    ended(span, out)
            count(out, args)
            return out

        return stages  # type: ignore[return-value]
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awaited(*args: Any, **kwargs: Any) -> Any:
            if not _tracing:
                out = await fn(*args, **kwargs)
            else:
                with opened(args) as span:
                    out = await fn(*args, **kwargs)
                    ended(span, out)
            count(out, args)
            return out

        return awaited  # type: ignore[return-value]

    @functools.wraps(fn)
    def called(*args: Any, **kwargs: Any) -> Any:
        if not _tracing:
            out = fn(*args, **kwargs)
        else:
            with opened(args) as span:
                out = fn(*args, **kwargs)
                ended(span, out)
        count(out, args)
        return out

    return called  # type: ignore[return-value]


def _call_span(ctx: Any, seq: int, kind: str, name: str, *rest: Any) -> tuple[str, dict[str, Any]]:
    """A step attempt, a model call or a wait: `fn(ctx, seq, kind, name, ...)`."""
    attrs = {WORKFLOW_ID: ctx.workflow_id, EPOCH: ctx.epoch, SEQ: seq, NAME: name}
    if kind in ("sleep", "signal"):
        return WAIT, {**attrs, KIND: kind}
    return (DECIDE if kind == "decide" else STEP), attrs


def _outcome(value: str) -> Callable[[Any, Any], None]:
    def ended(span: Any, out: Any) -> None:
        span.set_attribute(OUTCOME, value)

    return ended


def body_span(fn: F) -> F:
    """RunEngine.run_body(engine, seq, kind, name, ...), in either shell: one span per attempt of a step
    body (`interlock.step`) or a model call (`interlock.decide`); the attempt number comes
    from the step_started event (on_event)."""
    return fn if not ENABLED else _wrap(fn, _call_span, _outcome("ok"))


def wait_span(fn: F) -> F:
    """RunEngine.suspend(engine, seq, kind, name, ...), in either shell: `interlock.wait`, outcome `ready`
    (the timer was due or the signal there) or `suspended`."""
    return fn if not ENABLED else _wrap(fn, _call_span, _outcome("ready"))


def retry_span(fn: F) -> F:
    """RunEngine.suspend_for_retry(engine, seq, name, attempt, delay), in either shell: counts the retry,
    and the step's span ends with outcome `retry` (not just `suspended`). Marked when called,
    in the caller's context, so a generator function needs nothing more."""
    if not ENABLED:
        return fn

    @functools.wraps(fn)
    def wrapper(ctx: Any, seq: int, name: str, *args: Any, **kwargs: Any) -> Any:
        assert _instruments is not None
        _instruments.retries.add(1, {WORKFLOW: _WORKFLOW.get() or "", NAME: name})
        _RETRY.set(True)
        return fn(ctx, seq, name, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _effect_attrs(call: Any) -> dict[str, Any]:
    port = call.port
    return {WORKFLOW_ID: port.workflow_id, EPOCH: port.epoch, EFFECT_ID: call.eid,
            TIER: call.spec.tier, TARGET: call.spec.name, NAME: call.name}  # fmt: skip


def _count_effect(out: Any, call: Any, *rest: Any) -> None:
    assert _instruments is not None
    _instruments.effects.add(1, {OUTCOME: out.status, TIER: call.spec.tier,
                                 TARGET: call.spec.name})  # fmt: skip


def effect_span(fn: F) -> F:
    """effects._run(call): `interlock.effect` around one ctx.effect at the frontier, outcome
    its EffectResult status; counted in interlock.effects by outcome, tier and target. The
    gate's parts are generators (effects.send.Io): the span lasts until the generator ends."""
    if not ENABLED:
        return fn
    return _wrap(fn, lambda call, *rest: (EFFECT, _effect_attrs(call)),
                 lambda span, out: span.set_attribute(OUTCOME, out.status), _count_effect)  # fmt: skip


def effect_stage(name: str, on_none: str = "ok") -> Callable[[F], F]:
    """A stage of the gate, `fn(call, ...)`: dispatch, send, commit, recovery; a plain
    function, a generator (effects.send.Io) or a coroutine function (the async send). Outcome:
    the EffectResult status it returns, `on_none` for None (dispatch: authorized to send),
    `ok` for anything else; a send that raises ends `rejected` (TargetRejected) or `unknown`."""

    def ended(span: Any, out: Any) -> None:
        status = getattr(out, "status", None)
        if out is None:
            status = on_none
        elif type(out) is object:  # effects.send.NOT_SENT or NOT_LIVE: nothing was sent
            status = "not_sent"
        span.set_attribute(OUTCOME, status if isinstance(status, str) else "ok")

    def decorate(fn: F) -> F:
        if not ENABLED:
            return fn
        return _wrap(fn, lambda call, *rest: (name, _effect_attrs(call)), ended)

    return decorate


# -- the worker's runs -------------------------------------------------------------------------------------

_runs: dict[tuple[str, int], Any] = {}  # (workflow id, epoch) -> its run span, claim to thread


def claimed(conn: db.Conn, row: db.Row, t0: float) -> None:
    """After a claim (Worker._claim_and_wait), for each claimed row: its `interlock.run` span
    starts at `t0` (time.monotonic() before the claim statement) as a child of the stored
    trace context, with an `interlock.claim` child for the statement. A run with no stored
    context adopts its first traced claim's (one update, only while tracing). Counts a
    takeover. Never raises: the claimed runs must reach the pool whatever happens here."""
    if not ENABLED:
        return
    try:
        takeover = row["prev_status"] == "running"
        if takeover:
            assert _instruments is not None
            _instruments.takeovers.add(1, {WORKFLOW: row["name"]})
        if not _tracing:
            return
        end = time.time_ns()
        start = end - int((time.monotonic() - t0) * 1e9)
        attrs = {WORKFLOW_ID: row["id"], WORKFLOW: row["name"], EPOCH: row["epoch"],
                 PREV_STATUS: row["prev_status"], TAKEOVER: takeover}  # fmt: skip
        parent = row.get("traceparent")
        run = _tracer.start_span(RUN, context=_context_of(parent), kind=_trace.SpanKind.CONSUMER,
                                 attributes=attrs, start_time=start)  # fmt: skip
        claim = _tracer.start_span(CLAIM, context=_trace.set_span_in_context(run),
                                   attributes=attrs, start_time=start)  # fmt: skip
        claim.end(end_time=end)
        _runs[(row["id"], row["epoch"])] = run
        if parent is None and run.get_span_context().is_valid:
            carrier: dict[str, str] = {}
            _w3c.inject(carrier, context=_trace.set_span_in_context(run))
            conn.execute(db.query("telemetry_adopt_context"),
                         {"id": row["id"], "traceparent": carrier["traceparent"]})  # fmt: skip
    except Exception:  # noqa: BLE001 - telemetry never costs a claimed run
        return


def run_span(fn: F) -> F:
    """Worker._execute(self, run) or AsyncWorker._execute_async(self, run, env): runs inside
    the run span `claimed` started (made current in the run's thread, or in its task's
    context), ended with the run's outcome (set by on_event)."""
    if not ENABLED:
        return fn

    def entered(worker: Any, run: Any) -> Any:
        span = _runs.pop((run.workflow_id, run.epoch), None)
        if span is None:  # not claimed through Worker._claim_and_wait: a root of its own
            span = _tracer.start_span(RUN, kind=_trace.SpanKind.CONSUMER,
                                      attributes={WORKFLOW_ID: run.workflow_id, EPOCH: run.epoch})  # fmt: skip
        span.set_attribute(WORKER, worker.worker_id)
        return _trace.use_span(span, end_on_exit=True, record_exception=False,
                               set_status_on_exception=False)  # fmt: skip

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awaited(worker: Any, run: Any, *args: Any, **kwargs: Any) -> Any:
            token = _WORKFLOW.set(run.name)
            try:
                if not _tracing:
                    return await fn(worker, run, *args, **kwargs)
                with entered(worker, run):
                    return await fn(worker, run, *args, **kwargs)
            finally:
                _WORKFLOW.reset(token)

        return awaited  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(worker: Any, run: Any, *args: Any, **kwargs: Any) -> Any:
        token = _WORKFLOW.set(run.name)
        try:
            if not _tracing:
                return fn(worker, run, *args, **kwargs)
            with entered(worker, run):
                return fn(worker, run, *args, **kwargs)
        finally:
            _WORKFLOW.reset(token)

    return wrapper  # type: ignore[return-value]


def started(conn: db.Conn, wf_id: str, name: str) -> None:
    """rt.start inserted `wf_id` (inside its transaction): store the current span's trace
    context with it (only when there is a valid one) and count the start."""
    start_noted(wf_id, name)
    parent = traceparent()
    if parent is not None:
        conn.execute(db.query("telemetry_store_context"), {"id": wf_id, "traceparent": parent})


def start_noted(wf_id: str, name: str) -> None:
    """Count a start and name its run on the current span (if a valid one). rt.start's
    one-statement form inserts traceparent() with the row itself."""
    if not ENABLED:
        return
    assert _instruments is not None
    _instruments.started.add(1, {WORKFLOW: name})
    span = _trace.get_current_span()
    if span.get_span_context().is_valid:
        span.set_attribute(WORKFLOW_ID, wf_id)
        span.set_attribute(WORKFLOW, name)


def _on_outcome(event: str, fields: Mapping[str, Any]) -> None:
    span = _trace.get_current_span()
    span.set_attribute(OUTCOME, event)
    assert _instruments is not None
    name = _WORKFLOW.get() or ""
    if event == "completed":
        _instruments.completed.add(1, {WORKFLOW: name})
    elif event == "failed":
        _instruments.failed.add(1, {WORKFLOW: name})
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, "the workflow failed"))


def on_event(event: str, fields: Mapping[str, Any]) -> None:
    """Every worker event (events.emit): a run's outcome ends up on its span and in the
    counters, a heartbeat's gap in the histogram, a step attempt's number on its span."""
    if not ENABLED:
        return
    if event in RUN_OUTCOMES:
        if event != "fenced" or fields.get("by") != "heartbeat":  # that one is not in a run
            _on_outcome(event, fields)
    elif event == "step_started":
        _trace.get_current_span().set_attribute(ATTEMPT, fields.get("attempt", 1))
    elif event == "heartbeat" and fields.get("gap") is not None:
        assert _instruments is not None
        _instruments.heartbeat_gap.record(fields["gap"])
