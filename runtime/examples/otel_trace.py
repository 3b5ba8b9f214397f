"""One workflow run as an OpenTelemetry trace, printed as a tree (docs/observability.md).

    python runtime/examples/otel_trace.py      (needs the otel-sdk extra and the project's Postgres)

In a scratch database: a caller span starts a refund workflow whose first attempt at a step
fails, which sleeps, and then sends a gated effect to a local HTTP server; an in-process worker
runs it; the SDK's in-memory exporter collects the spans, printed with their attributes, and
the header the server received.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from interlock_runtime import HttpTarget, RetryPolicy, Runtime, Worker, testing, workflow

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

failed_once: set[str] = set()
headers_seen: list[str] = []


def look_up_order(order: str) -> dict:
    if order not in failed_once:  # the first attempt fails: the step is retried
        failed_once.add(order)
        raise ConnectionError("order service timed out")
    return {"order": order, "amount": 1200}


@workflow(name="refund_demo", version="1")
def refund_demo(ctx, inp):
    order = ctx.step("look_up_order", look_up_order, inp["order"], retry=RetryPolicy(initial=0.2))
    ctx.sleep(0.5, name="cool_off")
    target = HttpTarget("payments", inp["url"], 1, action="refund")
    result = ctx.effect(target, key=f"refund:{inp['order']}", payload=order,
                        premises={"order": inp["order"]}, grant=inp["grant"])  # fmt: skip
    return result.status


class Payments(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers_seen.append(self.headers.get("traceparent") or "(none)")
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def show(spans: list, parent: int | None, depth: int, t0: int) -> None:
    keep = ("interlock.workflow_id", "interlock.epoch", "interlock.name", "interlock.kind",
            "interlock.attempt", "interlock.prev_status", "interlock.effect_id",
            "interlock.tier", "interlock.outcome")  # fmt: skip
    for s in sorted(spans, key=lambda s: s.start_time):
        if (s.parent.span_id if s.parent else None) != parent:
            continue
        attrs = " ".join(f"{k.split('.', 1)[1]}={s.attributes[k]}" for k in keep
                         if k in s.attributes)  # fmt: skip
        start, took = (s.start_time - t0) / 1e6, (s.end_time - s.start_time) / 1e6
        print(f"{start:8.1f} ms {took:7.1f} ms  {'  ' * depth}{s.name}  {attrs}".rstrip())
        show(spans, s.context.span_id, depth + 1, t0)


def main() -> int:
    admin = testing.admin_dsn()
    with (
        testing.template_database(admin) as template,
        testing.fresh_database(admin, template) as dsn,
    ):
        server = ThreadingHTTPServer(("127.0.0.1", 0), Payments)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        rt = Runtime(dsn)
        grant = rt.grant("refund-agent", "refund", by="policy")
        url = f"http://127.0.0.1:{server.server_address[1]}/refunds"
        with trace.get_tracer("example").start_as_current_span("handle_support_ticket") as caller:
            rt.start(refund_demo, "refund-42", {"order": "ord_42", "url": url, "grant": grant})
        worker = Worker(dsn, [refund_demo], worker_id="w1", poll=0.05)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        status = rt.result("refund-42", timeout=30)
        worker.stop()
        thread.join(10)
        rt.close()
        server.shutdown()
    spans = [s for s in exporter.get_finished_spans()
             if s.context.trace_id == caller.get_span_context().trace_id]  # fmt: skip
    print(f"trace {caller.get_span_context().trace_id:032x}: {len(spans)} spans, result {status}")
    print(f"{'start':>11} {'duration':>10}  span  attributes")
    show(spans, None, 0, min(s.start_time for s in spans))
    print(f"traceparent received by the payments server: {headers_seen[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
