"""OpenTelemetry (interlock_runtime.telemetry, docs/observability.md): one trace per workflow run
from rt.start through claims, step attempts, waits and the effect's stages, the traceparent
header at a real HTTP server, a takeover continuing the trace, the metrics, trace ids in both
log formats, and the no-op path without opentelemetry.

The SDK's in-memory exporter and reader are installed once, for this module: a process can
set its global providers only once, and the runtime's tracer is the API's proxy to them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import metrics, trace  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from interlock_runtime import (  # noqa: E402
    AsyncHttpTarget,
    HttpTarget,
    RetryPolicy,
    Runtime,
    Worker,
    db,
    telemetry,
    workflow,
)
from interlock_runtime.aio.worker import AsyncWorker  # noqa: E402
from interlock_runtime.events import JsonLines, TextLines, log  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def sdk() -> Iterator[None]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
    yield
    provider.shutdown()  # later modules' spans are made but no longer kept


TRACER = trace.get_tracer("test_telemetry")

# -- workflows, run by an in-process worker ---------------------------------------------------


@workflow(name="otel_pay", version="1")
def otel_pay(ctx, inp):
    amount = ctx.step("prepare", lambda: inp["amount"])
    target = HttpTarget("otel-http", inp["url"], 1, action="refund")
    r = ctx.effect(target, key=f"pay:{ctx.workflow_id}", payload={"amount": amount},
                   premises={"checked": True}, grant=inp["grant"])  # fmt: skip
    return r.status


FAILED_ONCE: set[str] = set()


@workflow(name="otel_retry", version="1")
def otel_retry(ctx, inp):
    def flaky():
        if ctx.workflow_id not in FAILED_ONCE:
            FAILED_ONCE.add(ctx.workflow_id)
            raise RuntimeError("the first attempt fails")
        return "ok"

    ctx.step("flaky", flaky, retry=RetryPolicy(initial=0.1))
    ctx.sleep(0.3)
    return ctx.step("slow", time.sleep, inp.get("hold", 0))


@workflow(name="otel_takeover", version="1")
def otel_takeover(ctx, inp):
    return ctx.step("quick", lambda: 1)


@workflow(name="otel_kid", version="1")
def otel_kid(ctx, inp):
    return ctx.step("kid", lambda: 2)


@workflow(name="otel_family", version="1")
def otel_family(ctx, inp):
    """A child, then continue-as-new once: three workflows, one trace."""
    if not (inp or {}).get("again"):
        ctx.wait_child(ctx.child(otel_kid))
        ctx.continue_as_new({"again": True})
    return ctx.step("last", lambda: 3)


@workflow(name="otel_async", version="1")
async def otel_async(ctx, inp):
    """The async API's spans: a step, a failed attempt and its retry, a sleep, an effect."""

    async def flaky():
        if ctx.workflow_id not in FAILED_ONCE:
            FAILED_ONCE.add(ctx.workflow_id)
            raise RuntimeError("the first attempt fails")
        return inp["amount"]

    await ctx.step("prepare", asyncio.sleep, 0, "ready")
    amount = await ctx.step("flaky", flaky, retry=RetryPolicy(initial=0.1))
    await ctx.sleep(0.2)
    target = AsyncHttpTarget("otel-async-http", inp["url"], 1, action="refund")
    r = await ctx.effect(target, key=f"pay:{ctx.workflow_id}", payload={"amount": amount},
                         premises={"checked": True}, grant=inp["grant"])  # fmt: skip
    return r.status


# -- helpers -----------------------------------------------------------------------------------


@contextmanager
def running(dsn: str, *wfs, cls: type = Worker, **kwargs) -> Iterator[Worker]:
    kwargs.setdefault("poll", 0.05)
    worker = cls(dsn, list(wfs), **kwargs)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(20)


class _Capture(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append(dict(self.headers))  # type: ignore[attr-defined]
        body = b'{"refund": "re_1"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    """A local HTTP target that keeps the headers of every POST (server.seen)."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    srv.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def spans_of(trace_id: int) -> list:
    return [s for s in EXPORTER.get_finished_spans() if s.context.trace_id == trace_id]


def named(spans: list, name: str) -> list:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_time)


def points(name: str) -> list:
    data = READER.get_metrics_data()
    found = []
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    found.extend(m.data.data_points)
    return found


def total(name: str, **attrs) -> float:
    want = {f"interlock.{k}": v for k, v in attrs.items()}
    return sum(getattr(p, "value", None) or getattr(p, "count", 0) for p in points(name)
               if all(p.attributes.get(k) == v for k, v in want.items()))  # fmt: skip


# -- one trace, start to effect ------------------------------------------------------------------


def test_one_trace_from_start_through_claim_step_and_effect_to_the_target(dsn, server):
    rt = Runtime(dsn)
    grant = rt.grant("agent", "refund", by="policy")
    url = f"http://127.0.0.1:{server.server_address[1]}/refunds"
    lines: list[dict] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(json.loads(JsonLines().format(record)))  # type: ignore[method-assign]
    log.addHandler(handler)
    # setLevel, not `log.level =`: it clears the logger's cache of isEnabledFor answers, which
    # an earlier in-process worker of this test process may have filled while INFO was off
    level = log.level
    log.setLevel(logging.INFO)
    try:
        with TRACER.start_as_current_span("caller") as caller:
            rt.start(otel_pay, "pay-1", {"amount": 700, "url": url, "grant": grant})
        with running(dsn, otel_pay, worker_id="w-otel"):
            assert rt.result("pay-1", timeout=20) == "COMMITTED"
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    tid = caller.get_span_context().trace_id
    spans = spans_of(tid)
    by_id = {s.context.span_id: s for s in spans}

    def parent(span):
        return by_id.get(span.parent.span_id) if span.parent else None

    (start,) = named(spans, telemetry.START)
    assert start.parent.span_id == caller.get_span_context().span_id
    assert start.attributes[telemetry.WORKFLOW_ID] == "pay-1"
    (run,) = named(spans, telemetry.RUN)
    assert parent(run) is start and run.kind == trace.SpanKind.CONSUMER
    assert run.attributes[telemetry.WORKFLOW_ID] == "pay-1"
    assert run.attributes[telemetry.EPOCH] == 1 and run.attributes[telemetry.OUTCOME] == "completed"
    assert run.attributes[telemetry.WORKER] == "w-otel"
    (claim,) = named(spans, telemetry.CLAIM)
    assert parent(claim) is run and claim.attributes[telemetry.PREV_STATUS] == "pending"
    assert claim.attributes[telemetry.TAKEOVER] is False
    (step,) = named(spans, telemetry.STEP)
    assert parent(step) is run
    assert step.attributes[telemetry.NAME] == "prepare" and step.attributes[telemetry.ATTEMPT] == 1
    assert step.attributes[telemetry.OUTCOME] == "ok"
    (effect,) = named(spans, telemetry.EFFECT)
    assert parent(effect) is run and effect.attributes[telemetry.OUTCOME] == "COMMITTED"
    stages = [named(spans, n) for n in (telemetry.DISPATCH, telemetry.SEND, telemetry.COMMIT)]
    assert [len(s) for s in stages] == [1, 1, 1]
    dispatch, send, commit = (s[0] for s in stages)
    for stage in (dispatch, send, commit):
        assert parent(stage) is effect
        assert stage.attributes[telemetry.EFFECT_ID] == effect.attributes[telemetry.EFFECT_ID]
        assert stage.attributes[telemetry.TIER] == 1 and stage.attributes[telemetry.EPOCH] == 1
    assert dispatch.attributes[telemetry.OUTCOME] == "authorized"
    assert commit.attributes[telemetry.OUTCOME] == "COMMITTED"
    assert dispatch.end_time <= send.start_time and send.end_time <= commit.start_time
    # the target saw the send span's context in the traceparent header
    (headers,) = server.seen
    traceparent = {k.lower(): v for k, v in headers.items()}["traceparent"]
    assert traceparent.startswith(f"00-{tid:032x}-{send.context.span_id:016x}-")
    # the worker's log lines carry the trace: the outcome is logged inside the run span
    (done,) = [line for line in lines if line["event"] == "completed"]
    assert (done["trace_id"], done["span_id"]) == (f"{tid:032x}", f"{run.context.span_id:016x}")
    assert total(telemetry.EFFECTS, outcome="COMMITTED", target="otel-http") >= 1
    assert total(telemetry.STARTED, workflow="otel_pay") >= 1


def test_an_async_run_makes_the_same_spans_in_one_trace(dsn, server):
    """The asyncio worker: run spans per claim under rt.start's, step attempts (a retry),
    the sleep's waits, the effect's stages with the async send's traceparent at the target."""
    rt = Runtime(dsn)
    grant = rt.grant("agent", "refund", by="policy")
    url = f"http://127.0.0.1:{server.server_address[1]}/refunds"
    with TRACER.start_as_current_span("caller") as caller:
        rt.start(otel_async, "async-1", {"amount": 300, "url": url, "grant": grant})
    with running(dsn, otel_async, cls=AsyncWorker, worker_id="w-async"):
        assert rt.result("async-1", timeout=20) == "COMMITTED"
    tid = caller.get_span_context().trace_id
    spans = spans_of(tid)
    by_id = {s.context.span_id: s for s in spans}

    def parent(span):
        return by_id.get(span.parent.span_id) if span.parent else None

    (start,) = named(spans, telemetry.START)
    runs = named(spans, telemetry.RUN)
    # the retry's backoff, the sleep, then the end; every claim a child of the start
    assert [r.attributes[telemetry.OUTCOME] for r in runs] == ["suspended"] * 2 + ["completed"]
    assert [r.attributes[telemetry.EPOCH] for r in runs] == [1, 2, 3]
    assert all(parent(r) is start and r.attributes[telemetry.WORKER] == "w-async" for r in runs)
    assert len(named(spans, telemetry.CLAIM)) == 3
    steps = [(s.attributes[telemetry.NAME], s.attributes[telemetry.ATTEMPT],
              s.attributes[telemetry.OUTCOME], parent(s)) for s in named(spans, telemetry.STEP)]  # fmt: skip
    assert steps == [("prepare", 1, "ok", runs[0]), ("flaky", 1, "retry", runs[0]),
                     ("flaky", 2, "ok", runs[1])]  # fmt: skip
    waits = named(spans, telemetry.WAIT)
    assert [(w.attributes[telemetry.OUTCOME], parent(w)) for w in waits] == [
        ("suspended", runs[1]), ("ready", runs[2])]  # fmt: skip
    (effect,) = named(spans, telemetry.EFFECT)
    assert parent(effect) is runs[2] and effect.attributes[telemetry.OUTCOME] == "COMMITTED"
    dispatch, send, commit = (named(spans, n)[0] for n in (telemetry.DISPATCH, telemetry.SEND,
                                                             telemetry.COMMIT))  # fmt: skip
    assert all(parent(stage) is effect for stage in (dispatch, send, commit))
    assert dispatch.end_time <= send.start_time and send.end_time <= commit.start_time
    (headers,) = server.seen
    traceparent = {k.lower(): v for k, v in headers.items()}["traceparent"]
    assert traceparent.startswith(f"00-{tid:032x}-{send.context.span_id:016x}-")
    assert total(telemetry.RETRIES, workflow="otel_async") == 1


def test_without_a_tracer_provider_no_span_object_is_made_on_the_step_path(dsn, tmp_path):
    """opentelemetry-api installed, no SDK provider: setup() sees the API's proxy provider and
    the worker's hooks make no span at all (counted at the API's tracer)."""
    script = tmp_path / "no_provider.py"
    script.write_text(textwrap.dedent(NO_PROVIDER))
    env = dict(os.environ, PYTHONPATH=str(REPO / "runtime"))
    out = subprocess.run([sys.executable, str(script), dsn], capture_output=True, text=True,
                         timeout=60, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"enabled": True, "tracing": False, "result": 2, "spans": 0}


NO_PROVIDER = """
import json, sys, threading
from opentelemetry import trace
from interlock_runtime import Runtime, Worker, telemetry, workflow

made = []
for cls in (trace.ProxyTracer, trace.NoOpTracer):
    for attr in ("start_span", "start_as_current_span"):
        original = getattr(cls, attr)
        def counting(self, *a, _original=original, **k):
            made.append(a[0] if a else k.get("name"))
            return _original(self, *a, **k)
        setattr(cls, attr, counting)

@workflow(name="steps_only", version="1")
def steps_only(ctx, inp):
    one = ctx.step("one", lambda: 1)
    ctx.sleep(0)
    return one + ctx.step("two", lambda: 1)

rt = Runtime(sys.argv[1])
rt.start(steps_only, "s-1")
w = Worker(sys.argv[1], [steps_only], poll=0.05)
th = threading.Thread(target=w.run, daemon=True); th.start()
result = rt.result("s-1", timeout=20)
w.stop(); th.join(10)
worker_spans = [n for n in made if n != telemetry.START]  # rt.start's own span is the client's
print(json.dumps({"enabled": telemetry.ENABLED, "tracing": telemetry._tracing,
                  "result": result, "spans": len(worker_spans)}))
"""


# -- attempts, waits, metrics --------------------------------------------------------------------


def test_each_attempt_and_wait_is_a_span_in_the_runs_trace_and_the_counters_count(dsn):
    rt = Runtime(dsn)
    before = {m: total(m, workflow="otel_retry")
              for m in (telemetry.STARTED, telemetry.COMPLETED, telemetry.RETRIES)}  # fmt: skip
    gaps_before = total(telemetry.HEARTBEAT_GAP)
    with TRACER.start_as_current_span("caller") as caller:
        rt.start(otel_retry, "retry-1", {"hold": 0.9})
    with running(dsn, otel_retry, lease_ttl=0.6):  # heartbeats every 0.2 s during the hold
        assert rt.result("retry-1", timeout=20) is None
    spans = spans_of(caller.get_span_context().trace_id)
    runs = named(spans, telemetry.RUN)
    # attempt 1 fails (retry), the backoff, attempt 2 then the sleep (suspended), the end
    assert [r.attributes[telemetry.OUTCOME] for r in runs] == ["suspended"] * 2 + ["completed"]
    assert [r.attributes[telemetry.EPOCH] for r in runs] == [1, 2, 3]
    (start,) = named(spans, telemetry.START)
    assert all(r.parent.span_id == start.context.span_id for r in runs)
    flaky = [s for s in named(spans, telemetry.STEP) if s.attributes[telemetry.NAME] == "flaky"]
    assert [(s.attributes[telemetry.ATTEMPT], s.attributes[telemetry.OUTCOME]) for s in flaky] == [
        (1, "retry"), (2, "ok")]  # fmt: skip
    assert flaky[0].parent.span_id == runs[0].context.span_id
    assert flaky[1].parent.span_id == runs[1].context.span_id
    waits = named(spans, telemetry.WAIT)
    assert [(w.attributes[telemetry.KIND], w.attributes[telemetry.OUTCOME]) for w in waits] == [
        ("sleep", "suspended"), ("sleep", "ready")]  # fmt: skip
    after = {m: total(m, workflow="otel_retry") for m in before}
    assert after[telemetry.STARTED] - before[telemetry.STARTED] == 1
    assert after[telemetry.COMPLETED] - before[telemetry.COMPLETED] == 1
    assert after[telemetry.RETRIES] - before[telemetry.RETRIES] == 1
    assert total(telemetry.HEARTBEAT_GAP) > gaps_before  # the histogram's count


def test_a_takeover_continues_the_trace_with_a_new_claim_and_epoch(dsn):
    """Worker A claims two runs and dies (its run spans are never exported); B takes both over
    once A's lease expires. One was started in a trace; the other was started with none and
    adopted A's first claim's context, which B continues."""
    rt = Runtime(dsn)
    with TRACER.start_as_current_span("caller") as caller:
        rt.start(otel_takeover, "tk-traced")
    rt.start(otel_takeover, "tk-adopted")
    with db.connect(dsn) as conn:
        conn.execute("update ilr.workflows set traceparent = null where id = 'tk-adopted'")
        takeovers_before = total(telemetry.TAKEOVERS, workflow="otel_takeover")
        a = Worker(dsn, [otel_takeover], worker_id="A", lease_ttl=1.0)
        a.register()
        t0 = time.monotonic()
        rows = a._claim(conn, 2)
        assert sorted(r["id"] for r in rows) == ["tk-adopted", "tk-traced"]
        for row in rows:
            telemetry.claimed(conn, row, t0)  # then A "crashes": nothing more runs
        a_runs = {r["id"]: telemetry._runs.pop((r["id"], r["epoch"])) for r in rows}
        stored = conn.execute("select traceparent from ilr.workflows where id = 'tk-adopted'"
                              ).fetchone()["traceparent"]  # fmt: skip
        adopted = a_runs["tk-adopted"].get_span_context()
        assert stored.startswith(f"00-{adopted.trace_id:032x}-{adopted.span_id:016x}-")
    with running(dsn, otel_takeover, worker_id="B", lease_ttl=1.0):
        assert rt.result("tk-traced", timeout=20) == 1
        assert rt.result("tk-adopted", timeout=20) == 1
    traced = spans_of(caller.get_span_context().trace_id)
    (start,) = named(traced, telemetry.START)
    (run,) = named(traced, telemetry.RUN)  # B's: A's never ended
    assert run.parent.span_id == start.context.span_id
    assert run.attributes[telemetry.EPOCH] == 2 and run.attributes[telemetry.TAKEOVER] is True
    assert run.attributes[telemetry.PREV_STATUS] == "running"
    # A's claim span ended before it "crashed" (its run span did not): both claims are there
    claims = named(traced, telemetry.CLAIM)
    assert [c.attributes[telemetry.EPOCH] for c in claims] == [1, 2]
    assert claims[1].parent.span_id == run.context.span_id
    (b_run,) = named(spans_of(adopted.trace_id), telemetry.RUN)
    assert b_run.parent.span_id == adopted.span_id and b_run.attributes[telemetry.EPOCH] == 2
    taken = total(telemetry.TAKEOVERS, workflow="otel_takeover") - takeovers_before
    assert taken == 2
    for span in a_runs.values():
        span.end()


def test_a_child_and_a_successor_continue_the_trace(dsn):
    """The child's runs are children of the parent run that started it; the successor's
    runs, like its predecessor's, of the start span."""
    rt = Runtime(dsn)
    with TRACER.start_as_current_span("caller") as caller:
        rt.start(otel_family, "fam-1")
    with running(dsn, otel_family, otel_kid):
        assert rt.result("fam-1", timeout=30) == 3  # followed to the successor
    spans = spans_of(caller.get_span_context().trace_id)
    (start,) = named(spans, telemetry.START)
    runs: dict[str, list] = {}
    for r in named(spans, telemetry.RUN):
        runs.setdefault(r.attributes[telemetry.WORKFLOW_ID], []).append(r)
    assert sorted(runs) == ["fam-1", "fam-1#1", "fam-1/1"]
    (kid,) = runs["fam-1/1"]
    assert kid.parent.span_id in {r.context.span_id for r in runs["fam-1"]}
    assert all(r.parent.span_id == start.context.span_id
               for r in runs["fam-1"] + runs["fam-1#1"])  # fmt: skip


def test_queue_depth_and_open_ambiguous_gauges_read_the_database(dsn):
    rt = Runtime(dsn)
    rt.register(otel_takeover)
    for i in range(3):
        rt.start(otel_takeover, f"q-{i}")  # no worker runs: all three wait in the default queue
    with db.connect(dsn) as conn:
        conn.execute("insert into ilr.effects (effect_id, workflow_id, target, tier, payload, "
                     "payload_hash, state) values ('e-amb', 'q-0', 't', 3, '{}', 'h', 'ambiguous')")  # fmt: skip
    unwatch = telemetry.watch_database(dsn)
    try:
        depth = {p.attributes[telemetry.QUEUE]: p.value for p in points(telemetry.QUEUE_DEPTH)}
        (ambiguous,) = points(telemetry.AMBIGUOUS_OPEN)
    finally:
        unwatch()
    assert depth == {"default": 3} and ambiguous.value == 1
    assert points(telemetry.QUEUE_DEPTH) == []  # nothing is read once no worker watches


# -- logs ---------------------------------------------------------------------------------------


def _record() -> logging.LogRecord:
    record = logging.LogRecord("interlock_runtime.worker", logging.INFO, __file__, 1, "claimed",
                               None, None)  # fmt: skip
    record.event, record.fields = "claimed", {"wf": "a b", "epoch": 3, "worker": "w1"}
    return record


def test_both_log_formats_carry_the_trace_ids_while_a_span_is_current():
    with TRACER.start_as_current_span("t") as span:
        as_json = json.loads(JsonLines().format(_record()))
        as_text = TextLines().format(_record())
    ctx = span.get_span_context()
    ids = (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    assert (as_json["trace_id"], as_json["span_id"]) == ids
    assert as_json["event"] == "claimed" and as_json["wf"] == "a b"
    assert as_text.split()[1] == "claimed" and 'wf="a b" epoch=3 worker=w1' in as_text
    assert as_text.endswith(f"trace_id={ids[0]} span_id={ids[1]}")
    outside_json = json.loads(JsonLines().format(_record()))
    assert "trace_id" not in outside_json and "trace_id" not in TextLines().format(_record())


def test_worker_logs_json_when_stderr_is_not_a_terminal_and_text_when_asked(workers):
    plain, text = workers("log-json"), workers("log-text", extra_args=("--log-format", "text"))
    plain.wait_event("registered")  # parsed as JSON: the harnesses' format by default
    deadline = time.monotonic() + 20
    while "registered" not in text.events_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    first = text.events_path.read_text().splitlines()[0]
    assert first.split()[1] == "registered" and "worker=log-text" in first
    with pytest.raises(json.JSONDecodeError):
        json.loads(first)


# -- without opentelemetry ----------------------------------------------------------------------

NO_OTEL = """
import json, sys, threading
sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from interlock_runtime import HttpTarget, Runtime, Worker, telemetry, workflow
from interlock_runtime.run_engine import RunEngine
from interlock_runtime.worker import Worker as W

seen = []

class Capture(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        seen.append({k.lower(): v for k, v in self.headers.items()})
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *a): pass

@workflow(name="plain_pay", version="1")
def plain_pay(ctx, inp):
    ctx.step("prepare", lambda: 1)
    ctx.sleep(0)
    t = HttpTarget("plain-http", inp["url"], 1, action="refund")
    return ctx.effect(t, key="k1", payload={"a": 1}, premises={}, grant=inp["grant"]).status

srv = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
threading.Thread(target=srv.serve_forever, daemon=True).start()
rt = Runtime(sys.argv[1])
grant = rt.grant("agent", "refund", by="policy")
rt.start(plain_pay, "plain-1", {"url": f"http://127.0.0.1:{srv.server_address[1]}/", "grant": grant})
w = Worker(sys.argv[1], [plain_pay], poll=0.05)
th = threading.Thread(target=w.run, daemon=True); th.start()
status = rt.result("plain-1", timeout=20)
w.stop(); th.join(10)
print(json.dumps({
    "enabled": telemetry.ENABLED, "status": status, "headers": sorted(seen[0]),
    "wrapped": [hasattr(f, "__wrapped__") for f in (RunEngine.run_body, W._execute,
                                                    Runtime.start)],
    "traceparent": telemetry.traceparent(),
    "stored": rt._execute("select traceparent from ilr.workflows").fetchone()["traceparent"],
}))
"""


def test_without_opentelemetry_every_hook_is_a_no_op(dsn, tmp_path):
    script = tmp_path / "no_otel.py"
    script.write_text(textwrap.dedent(NO_OTEL))
    env = dict(os.environ, PYTHONPATH=str(REPO / "runtime"))
    out = subprocess.run([sys.executable, str(script), dsn], capture_output=True, text=True,
                         timeout=60, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["enabled"] is False and got["status"] == "COMMITTED"
    assert got["wrapped"] == [False, False, False]  # the decorators returned the functions
    assert "traceparent" not in got["headers"] and "idempotency-key" in got["headers"]
    assert got["traceparent"] is None and got["stored"] is None
