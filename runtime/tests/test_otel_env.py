"""OpenTelemetry configured by the OTEL_* environment variables alone
(docs/observability.md#configuring), through real processes: `interlock worker` (plain and
asyncio) with a console exporter, the `traceparent` a real local HTTP target receives from
its gated effect, `interlock start` and `interlock signal` in the same trace, library clients
that configure only when the application asks, and the one-line refusal of an exporter that
is not installed.

The console exporter writes each span as a JSON object on the process's stdout (a file here);
spans_in() reads them back. Every check is on those spans, the header and the database.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from interlock_runtime import Runtime  # noqa: E402

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parents[1]
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
OTEL_ENV = {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "console",
            "OTEL_SERVICE_NAME": "otel-env-worker",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=otel-env-test"}  # fmt: skip
MODES = {"sync": ("otel_env_pay", ()), "async": ("otel_env_apay", ("--async",))}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any OTEL_* of its own, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    path = os.pathsep.join(p for p in (str(TESTS), str(REPO / "runtime"), str(REPO),
                                       os.environ.get("PYTHONPATH", "")) if p)  # fmt: skip
    return {**env, "PYTHONPATH": path, **extra}


def interlock(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`interlock ARGS` (what the console script runs), to the end."""
    return subprocess.run([sys.executable, "-m", "interlock_runtime.cli", *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd=TESTS)  # fmt: skip


def spans_in(text: str) -> list[dict[str, Any]]:
    """The spans a console exporter printed (JSON objects starting at a line's start), in the
    middle of whatever else the process printed."""
    decoder, spans, end = json.JSONDecoder(), [], 0
    for m in re.finditer(r"^\{", text, re.M):
        if m.start() < end:
            continue
        try:
            obj, end = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(obj, dict) and "context" in obj and "name" in obj:
            spans.append(obj)
    return spans


def hex_id(value: str) -> str:
    return value.removeprefix("0x")


def one(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [s for s in spans if s["name"] == name]
    assert len(found) == 1, f"{len(found)} spans named {name}: {[s['name'] for s in spans]}"
    return found[0]


class Headers(BaseHTTPRequestHandler):
    seen: list[dict[str, str]]

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append({k.lower(): v for k, v in self.headers.items()})  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def target() -> Iterator[ThreadingHTTPServer]:
    """A local HTTP target that records the headers of every request it gets."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Headers)
    srv.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


class WorkerWithStdout:
    """`interlock worker` with its stdout (the console exporter's) and stderr in files."""

    def __init__(self, dsn: str, tmp: Path, args: tuple[str, ...], env: dict[str, str]) -> None:
        self.out, self.err = tmp / "worker.stdout", tmp / "worker.stderr"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "interlock_runtime.cli", "worker", "--dsn", dsn,
                 "--module", "otel_env_flows", "--poll", "0.1", "--log-format", "json", *args],
                stdout=out, stderr=err, env=env, cwd=TESTS)  # fmt: skip

    def wait_for(self, event: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if f'"event": "{event}"' in self.err.read_text():
                return
            assert self.proc.poll() is None, self.err.read_text()[-3000:]
            time.sleep(0.05)
        raise AssertionError(f"no {event} event: {self.err.read_text()[-3000:]}")

    def stop(self) -> str:
        """SIGTERM, the exit (the SDK flushes at exit), and what it printed on stdout."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0, self.err.read_text()[-3000:]
        return self.out.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_otel_env_alone_traces_the_cli_start_the_worker_run_and_the_target(
    dsn: str, tmp_path: Path, target: ThreadingHTTPServer, mode: str
) -> None:
    name, worker_args = MODES[mode]
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", by="policy")
    worker = WorkerWithStdout(dsn, tmp_path, (*worker_args, "--only", f"{name}@1"),
                              clean_env(**OTEL_ENV))  # fmt: skip
    try:
        worker.wait_for("registered")
        url = f"http://127.0.0.1:{target.server_address[1]}/refunds"
        cli_env = clean_env(OTEL_TRACES_EXPORTER="console")  # service.name: interlock-cli
        wf_input = json.dumps({"url": url, "grant": grant})
        started = interlock("start", name, "otel-1", "--input", wf_input, "--dsn", dsn, env=cli_env)
        assert started.returncode == 0, started.stderr
        worker.wait_for("suspended")  # the effect is done; the run waits for "go"
        signalled = interlock("signal", "otel-1", "go", "--dsn", dsn, env=cli_env)
        assert signalled.returncode == 0, signalled.stderr
        with Runtime(dsn) as rt:
            assert rt.result("otel-1", timeout=30) == "COMMITTED"
            stored = rt._execute("select traceparent from ilr.workflows where id = 'otel-1'")
            stored_parent = stored.fetchone()["traceparent"]
        printed = worker.stop()
    finally:
        worker.close()

    # the worker: spans for the run, all in one trace, made by the service the variables name
    spans = spans_in(printed)
    runs = [s for s in spans if s["name"] == "interlock.run"]
    assert [r["attributes"]["interlock.outcome"] for r in runs] == ["suspended", "completed"]
    trace_id = hex_id(runs[0]["context"]["trace_id"])
    assert {hex_id(s["context"]["trace_id"]) for s in spans} == {trace_id}
    assert {s["resource"]["attributes"]["service.name"] for s in spans} == {"otel-env-worker"}
    assert {s["resource"]["attributes"]["deployment.environment"] for s in spans} == {
        "otel-env-test"
    }
    for stage in ("claim", "effect", "effect.dispatch", "effect.send", "effect.commit", "wait"):
        assert any(s["name"] == f"interlock.{stage}" for s in spans), stage
    send = one(spans, "interlock.effect.send")

    # the target: a well-formed traceparent naming the run's trace and the send's span
    (request,) = target.seen  # type: ignore[attr-defined]
    got = TRACEPARENT.match(request.get("traceparent") or "")
    assert got, f"traceparent at the target: {request.get('traceparent')!r}"
    assert got.group(1) == trace_id and got.group(1) != "0" * 32
    assert got.group(2) == hex_id(send["context"]["span_id"])

    # the client: `interlock start`'s span is the runs' parent; its context is the stored one
    start = one(spans_in(started.stdout), "interlock.start")
    assert hex_id(start["context"]["trace_id"]) == trace_id
    assert {r["parent_id"] for r in runs} == {start["context"]["span_id"]}
    assert start["kind"] == "SpanKind.PRODUCER"
    assert start["attributes"]["interlock.workflow_id"] == "otel-1"
    assert start["resource"]["attributes"]["service.name"] == "interlock-cli"
    assert TRACEPARENT.match(stored_parent or "")
    assert stored_parent.split("-")[1:3] == [trace_id, hex_id(start["context"]["span_id"])]
    sent = one(spans_in(signalled.stdout), "interlock.signal")
    assert sent["attributes"] == {"interlock.workflow_id": "otel-1", "interlock.name": "go"}

    # the metrics: OTEL_METRICS_EXPORTER=console exported the worker's counters at exit
    assert '"name": "interlock.workflows.completed"' in printed


LIBRARY = """
import asyncio, json, sys
from opentelemetry import trace
from interlock_runtime import AsyncRuntime, Runtime, telemetry
from interlock_runtime.telemetry_env import configure_from_env

dsn, client = sys.argv[1], sys.argv[2]

def stored(wf_id):
    with Runtime(dsn) as rt:
        row = rt._execute("select traceparent from ilr.workflows where id = %(id)s", {"id": wf_id})
        return row.fetchone()["traceparent"]

async def start_async(wf_id):
    async with AsyncRuntime(dsn) as rt:
        await rt.start("otel_env_pay", wf_id, {})

def start(wf_id):
    if client == "async":
        asyncio.run(start_async(wf_id))
    else:
        with Runtime(dsn) as rt:
            rt.start("otel_env_pay", wf_id, {})

start("lib-before")  # OTEL_* set, nothing configured: a library installs no provider
before = type(trace.get_tracer_provider()).__name__
configured = configure_from_env("library-app")  # the application asks
start("lib-after")
print(json.dumps({"before": before, "configured": configured, "worker_spans": telemetry._tracing,
                  "stored": [stored("lib-before"), stored("lib-after")]}))
"""

APP_PROVIDER = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from interlock_runtime import Runtime
from interlock_runtime.telemetry_env import configure_from_env

exporter, provider = InMemorySpanExporter(), TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
configured = configure_from_env("library-app")
with Runtime(sys.argv[1]) as rt:
    rt.start("otel_env_pay", "app-1", {})
print(json.dumps({"configured": configured, "same": trace.get_tracer_provider() is provider,
                  "mine": [s.name for s in exporter.get_finished_spans()]}))
"""


def run_script(source: str, tmp_path: Path, *args: str, env: dict[str, str]) -> Any:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                         timeout=60, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    # the script's one line of JSON; the exporter's spans (indented JSON) may follow it at exit
    (line,) = [x for x in out.stdout.splitlines() if x.startswith('{"')]
    return out, json.loads(line)


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_library_client_is_configured_by_otel_env_only_when_the_application_asks(
    dsn: str, tmp_path: Path, client: str
) -> None:
    out, got = run_script(LIBRARY, tmp_path, dsn, client,
                          env=clean_env(OTEL_TRACES_EXPORTER="console"))  # fmt: skip
    assert got["before"] == "ProxyTracerProvider"  # Runtime(...) set nothing by itself
    assert got["configured"] == ["traces"]
    assert got["worker_spans"] is True  # a Worker made before it would make its spans now
    before, after = got["stored"]
    assert before is None  # no provider: no trace context stored
    (start,) = [s for s in spans_in(out.stdout) if s["name"] == "interlock.start"]
    assert start["attributes"]["interlock.workflow_id"] == "lib-after"
    assert start["resource"]["attributes"]["service.name"] == "library-app"
    ids = [hex_id(start["context"]["trace_id"]), hex_id(start["context"]["span_id"])]
    assert TRACEPARENT.match(after) and after.split("-")[1:3] == ids  # the run's trace: this span


def test_a_provider_the_application_set_is_left_alone(dsn: str, tmp_path: Path) -> None:
    out, got = run_script(APP_PROVIDER, tmp_path, dsn,
                          env=clean_env(OTEL_TRACES_EXPORTER="console"))  # fmt: skip
    assert got == {"configured": [], "same": True, "mine": ["interlock.start"]}
    assert spans_in(out.stdout) == []  # nothing went to the console exporter


GRPC = [
    e for e in entry_points(group="opentelemetry_traces_exporter") if e.name == "otlp_proto_grpc"
]


@pytest.mark.skipif(bool(GRPC), reason="the OTLP gRPC exporter is installed here")
def test_an_exporter_that_is_not_installed_is_one_line_and_exit_2(dsn: str) -> None:
    env = clean_env(OTEL_TRACES_EXPORTER="otlp")  # the SDK's otlp: gRPC by default
    for args in (("worker", "--dsn", dsn, "--module", "otel_env_flows", "--only", "otel_env_pay@1"),
                 ("start", "otel_env_pay", "missing-1", "--dsn", dsn)):  # fmt: skip
        out = interlock(*args, env=env)
        assert out.returncode == 2, (args, out.stderr)
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
        assert f"interlock {args[0]}: OTEL_TRACES_EXPORTER asks for the 'otlp_proto_grpc'" in (
            out.stderr
        )
        assert "pip install opentelemetry-exporter-otlp-proto-grpc" in out.stderr
    with Runtime(dsn) as rt:
        assert rt.list() == []  # refused before anything was written


def test_none_unset_and_sdk_disabled_configure_nothing(tmp_path: Path) -> None:
    probe = (
        "import json; from opentelemetry import trace; "
        "from interlock_runtime.telemetry_env import configure_from_env; "
        "print(json.dumps([configure_from_env('x'), type(trace.get_tracer_provider()).__name__]))"
    )
    cases = [({}, []), ({"OTEL_TRACES_EXPORTER": "none"}, []),
             ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, []),
             ({"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "console"}, ["metrics"]),
             ({"OTEL_TRACES_EXPORTER": "console"}, ["traces"])]  # fmt: skip
    for extra, expected in cases:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=60, env=clean_env(**extra))  # fmt: skip
        assert out.returncode == 0, out.stderr
        configured, provider = json.loads(out.stdout.strip().splitlines()[-1])
        assert configured == expected, extra
        assert (provider == "TracerProvider") == ("traces" in expected), (extra, provider)


def test_without_opentelemetry_an_exporter_asked_for_names_the_extra(tmp_path: Path) -> None:
    script = (
        "import sys; sys.modules['opentelemetry'] = None\n"  # as if it were not installed
        "from interlock_runtime.cli.worker import main\n"
        "sys.exit(main(['--dsn', 'postgresql://nobody@127.0.0.1:9/none', '--module', "
        "'otel_env_flows', '--only', 'otel_env_pay@1']))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=30, env=clean_env(OTEL_TRACES_EXPORTER="console"), cwd=TESTS)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        "interlock worker: OTEL_TRACES_EXPORTER is set but OpenTelemetry is not installed: "
        "pip install 'interlock-runtime[otel-sdk]' (or unset OTEL_TRACES_EXPORTER)"
    )
