"""EMULATED model variance: a scripted stand-in for Claude in the Anthropic Messages API shape.

Claude cannot be reached from this machine (docs/design.md#emulated), so both systems' decision calls go
through the official ``anthropic`` SDK with ``base_url`` pointed at this loopback server. It is
labeled EMULATED everywhere: every response carries ``X-Emulated: model-variance``, the reply
body has ``"emulated": true`` beside the Messages fields, and ``/admin/config`` says so.

Script (docs/design.md#test-world): per case, the first call answers ``{"amount": 2000}``; later calls answer
``{"amount": 3000}`` when re-decision is on (``--redecide`` or ``POST /admin/config
{"redecide": true}``), else 2000 again. The case id is read from the request: the first JSON
object with a ``"case"`` key found in the user messages' text (``decide_amount`` sends
``{"case": ..., ...}``), else the ``X-ILR-Case`` header, else ``metadata.user_id``; a request
with no case is counted under ``""``.

HTTP:
- ``POST /v1/messages``: ``{id, type: "message", role: "assistant", model, content: [{type:
  "text", text: "{\\"amount\\": 2000}"}], stop_reason: "end_turn", stop_sequence: null, usage:
  {input_tokens, output_tokens}, emulated: true}``; errors use the API's error shape.
- ``GET /admin/config``, ``POST /admin/config {redecide?, first_amount?, redecide_amount?,
  delay_ms?}``: the script; ``delay_ms`` is a service delay per call (the bench's 50 ms stub).
- ``GET /admin/calls[?case=C]``: the call log, one entry per ``/v1/messages`` call in arrival
  order: ``{n, case, call (1-based per case), amount, model, redecide, arrival, end, worker}``
  (``worker`` from ``X-ILR-Worker``, or the SDK's user agent). ``POST /admin/reset`` clears it.

Python: ``ModelStub(port=0, redecide=False).start()`` / ``.stop()`` / ``.url`` / ``.calls()`` /
``.configure(...)``; ``decide_amount(base_url, case)`` calls it through the SDK.
CLI: ``python -m world.model_stub [--port 0] [--redecide] [--delay-ms N] [--log FILE]`` prints
one JSON line ``{"port", "url", "emulated"}`` and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from world.http_service import serve_in_thread, shut_down

MODEL = "claude-haiku-4-5-20251001"
FIRST_AMOUNT = 2000
REDECIDE_AMOUNT = 3000
EMULATED = (
    "EMULATED model variance: a scripted stub in the Anthropic Messages API shape answers "
    f"{FIRST_AMOUNT} on a case's first call and {REDECIDE_AMOUNT} on later calls when "
    "re-decision is on; Claude cannot be reached from this machine"
)
EMULATED_HEADER = ("X-Emulated", "model-variance")

_DECODER = json.JSONDecoder()


def _texts(body: dict) -> list[str]:
    """The text of the user messages (string content or text blocks), in order."""
    out: list[str] = []
    for m in body.get("messages") or []:
        if not isinstance(m, dict) or m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and isinstance(block.get("text"), str):
                    out.append(block["text"])
    return out


def case_of(body: dict, headers: Any = None) -> str:
    """The case id a Messages request is about (see the module doc)."""
    for text in _texts(body):
        for start in (i for i, ch in enumerate(text) if ch == "{"):
            try:
                obj, _ = _DECODER.raw_decode(text, start)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("case") is not None:
                return str(obj["case"])
    if headers is not None and headers.get("X-ILR-Case"):
        return str(headers.get("X-ILR-Case"))
    meta = body.get("metadata")
    if isinstance(meta, dict) and meta.get("user_id"):
        return str(meta["user_id"])
    return ""


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class _Handler(BaseHTTPRequestHandler):
    server_version = "ilr-model-stub/1"
    protocol_version = "HTTP/1.1"  # keep-alive, like the real API (the SDK pools connections)
    server: _StubHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def _reply(self, status: int, body: Any, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header(*EMULATED_HEADER)
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass

    def _error(self, status: int, kind: str, message: str) -> None:
        self._reply(
            status,
            {"type": "error", "error": {"type": kind, "message": message}, "emulated": True},
        )

    def _handle(self, method: str) -> None:
        stub = self.server.stub
        arrival = time.time()
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else {}
        except (ValueError, UnicodeDecodeError) as e:
            return self._error(400, "invalid_request_error", f"body is not JSON: {e}")
        if not isinstance(body, dict):
            return self._error(400, "invalid_request_error", "body must be a JSON object")
        if method == "POST" and path == "/v1/messages":
            return self._messages(stub, body, arrival)
        if method == "GET" and path == "/admin/config":
            return self._reply(200, stub.config())
        if method == "POST" and path == "/admin/config":
            try:
                return self._reply(200, stub.configure(**body))
            except (TypeError, ValueError) as e:
                return self._error(400, "invalid_request_error", str(e))
        if method == "GET" and path == "/admin/calls":
            return self._reply(200, stub.calls(query.get("case")))
        if method == "POST" and path == "/admin/reset":
            return self._reply(200, {"cleared": stub.reset()})
        return self._error(404, "not_found_error", f"no route {method} {path}")

    def _messages(self, stub: ModelStub, body: dict, arrival: float) -> None:
        if not isinstance(body.get("messages"), list) or not body.get("model"):
            return self._error(400, "invalid_request_error", "model and messages are required")
        case = case_of(body, self.headers)
        worker = self.headers.get("X-ILR-Worker") or self.headers.get("User-Agent")
        entry = stub._record_call(case, str(body["model"]), arrival, worker)
        if stub.delay_ms > 0:
            time.sleep(stub.delay_ms / 1000.0)
        text = json.dumps({"amount": entry["amount"]})
        prompt = " ".join(_texts(body))
        reply = {
            "id": f"msg_emulated_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": _tokens(prompt), "output_tokens": _tokens(text)},
            "emulated": True,
        }
        entry["end"] = time.time()
        entry["message_id"] = reply["id"]
        stub._log_line(entry)
        self._reply(200, reply, {"request-id": f"req_emulated_{uuid.uuid4().hex[:16]}"})


class _StubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # listen() backlog: socketserver's default of 5 overflows under the bench's 64
    # clients per worker (the kernel drops the SYN; the client retries after 1 s, 3 s...)
    request_queue_size = 128
    stub: ModelStub


class ModelStub:
    """EMULATED model variance: the scripted Messages API server (see the module doc)."""

    def __init__(
        self,
        port: int = 0,
        redecide: bool = False,
        *,
        host: str = "127.0.0.1",
        first_amount: int = FIRST_AMOUNT,
        redecide_amount: int = REDECIDE_AMOUNT,
        delay_ms: float = 0.0,
        log_path: str | None = None,
    ) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the model stub binds loopback only, not {host!r}")
        self.host, self.port = host, port
        self.redecide = bool(redecide)
        self.first_amount = int(first_amount)
        self.redecide_amount = int(redecide_amount)
        self.delay_ms = float(delay_ms)
        self.log_path = log_path
        self._lock = threading.Lock()
        self._calls: list[dict] = []
        self._per_case: dict[str, int] = {}
        self._http: _StubHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # -- the script

    def _record_call(self, case: str, model: str, arrival: float, worker: str | None) -> dict:
        with self._lock:
            n = self._per_case.get(case, 0) + 1
            self._per_case[case] = n
            amount = self.redecide_amount if (n > 1 and self.redecide) else self.first_amount
            entry = {
                "n": len(self._calls) + 1,
                "case": case,
                "call": n,
                "amount": amount,
                "model": model,
                "redecide": self.redecide,
                "arrival": arrival,
                "end": None,
                "worker": worker,
                "emulated": True,
            }
            self._calls.append(entry)
            return entry

    def _log_line(self, entry: dict) -> None:
        if self.log_path:
            with self._lock, open(self.log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")

    def config(self) -> dict:
        return {
            "redecide": self.redecide,
            "first_amount": self.first_amount,
            "redecide_amount": self.redecide_amount,
            "delay_ms": self.delay_ms,
            "model": MODEL,
            "emulated": True,
            "emulation": EMULATED,
        }

    def configure(
        self,
        redecide: bool | None = None,
        first_amount: int | None = None,
        redecide_amount: int | None = None,
        delay_ms: float | None = None,
        **unknown: Any,
    ) -> dict:
        if unknown:
            raise ValueError(f"unknown config keys: {sorted(unknown)}")
        with self._lock:
            if redecide is not None:
                if not isinstance(redecide, bool):
                    raise ValueError(f"redecide must be true or false, got {redecide!r}")
                self.redecide = redecide
            for name, value in (("first_amount", first_amount),
                                ("redecide_amount", redecide_amount)):  # fmt: skip
                if value is not None:
                    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                        raise ValueError(f"{name} must be a positive integer, got {value!r}")
                    setattr(self, name, value)
            if delay_ms is not None:
                if isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float)):
                    raise ValueError(f"delay_ms must be a number, got {delay_ms!r}")
                if delay_ms < 0:
                    raise ValueError("delay_ms must be >= 0")
                self.delay_ms = float(delay_ms)
        return self.config()

    def calls(self, case: str | None = None) -> list[dict]:
        with self._lock:
            return [dict(c) for c in self._calls if case is None or c["case"] == case]

    def reset(self) -> int:
        with self._lock:
            n = len(self._calls)
            self._calls.clear()
            self._per_case.clear()
            return n

    # -- serving

    def start(self) -> ModelStub:
        if self._http is not None:
            return self
        self._http = _StubHTTPServer((self.host, self.port), _Handler)
        self._http.stub = self
        self.port = self._http.server_address[1]
        self.url = f"http://{self.host}:{self.port}"
        self._thread = serve_in_thread(self._http)
        return self

    def stop(self) -> None:
        shut_down(self._http, self._thread)
        self._http = self._thread = None

    def __enter__(self) -> ModelStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def warm_sdk() -> None:
    """Import the anthropic SDK now (a worker calls this at start): its first import costs
    seconds of CPU on this machine, which would otherwise land inside the first decision and
    be measured as decision latency. Both systems' workers warm it before they are ready."""
    import anthropic  # noqa: F401


_CLIENTS: dict[tuple, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _client(base_url: str, api_key: str, timeout: float, max_retries: int,
            worker: str | None) -> Any:  # fmt: skip
    """One SDK client per process and settings, as an application would keep one: building a
    client (its HTTP pool and TLS context) costs tens of milliseconds of CPU, which made a new
    client per call the largest cost of the benchmark's refund shape on two cores."""
    import anthropic

    key = (base_url, api_key, timeout, max_retries, worker)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            headers = {"X-ILR-Worker": worker} if worker else None
            client = _CLIENTS[key] = anthropic.Anthropic(
                base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries,
                default_headers=headers,
            )  # fmt: skip
        return client


def _drop_client(base_url: str, api_key: str, timeout: float, max_retries: int,
                 worker: str | None) -> None:  # fmt: skip
    with _CLIENTS_LOCK:
        client = _CLIENTS.pop((base_url, api_key, timeout, max_retries, worker), None)
    if client is not None:
        client.close()


def decide_amount(
    base_url: str,
    case: str,
    api_key: str = "emulated",
    *,
    model: str = MODEL,
    context: dict | None = None,
    timeout: float = 10.0,
    max_retries: int = 0,
    worker: str | None = None,
) -> dict:
    """Ask the model for a refund amount through the official anthropic SDK.

    Against the stub this is EMULATED model variance (the reply says so: ``emulated``). The
    SDK's own retries are off by default (``max_retries=0``) so that each call here is one
    model call in the stub's log; retries belong to the workflow engine.
    Returns ``{"amount", "model", "usage", "id", "emulated"}``."""
    client = _client(base_url, api_key, timeout, max_retries, worker)
    facts = {"case": case, **(context or {})}
    prompt = (
        "Decide the refund amount in cents for this support case. "
        'Answer with JSON only: {"amount": <cents>}.\n' + json.dumps(facts, sort_keys=True)
    )
    try:
        raw = client.messages.with_raw_response.create(
            model=model, max_tokens=64, messages=[{"role": "user", "content": prompt}]
        )
        msg = raw.parse()
        emulated = raw.headers.get(EMULATED_HEADER[0])
    except Exception:
        _drop_client(base_url, api_key, timeout, max_retries, worker)  # no reuse after a fault
        raise
    text = "".join(getattr(b, "text", "") for b in msg.content)
    try:
        amount = json.loads(text)["amount"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"the model's answer is not {{'amount': int}}: {text!r}") from e
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise ValueError(f"the model's amount is not an integer: {amount!r}")
    return {
        "amount": amount,
        "model": msg.model,
        "usage": {"input_tokens": msg.usage.input_tokens, "output_tokens": msg.usage.output_tokens},
        "id": msg.id,
        "emulated": emulated,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m world.model_stub",
        description="EMULATED model variance: scripted amounts in the Anthropic Messages shape.",
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--redecide", action="store_true", help="answer 3000 after a case's 1st call")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="service delay per call")
    ap.add_argument("--log", default=None, help="also append each call as a JSON line here")
    args = ap.parse_args(argv)
    try:
        stub = ModelStub(
            args.port, args.redecide, host=args.host, delay_ms=args.delay_ms, log_path=args.log
        ).start()
    except (ValueError, OSError) as e:
        print(f"model_stub: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(json.dumps({"port": stub.port, "url": stub.url, "emulated": EMULATED}), flush=True)
    while not stop.wait(0.5):
        pass
    stub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
