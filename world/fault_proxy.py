"""A stdlib TCP fault proxy with real sockets, controlled over a small HTTP API (docs/design.md#test-world).

One proxy sits between the workers and the payment target, another between the workers and
Postgres (or the Temporal server) for partition scenarios. A single selector thread moves the
bytes; mode changes are handed to that thread and the control call returns only once the thread
has adopted the new mode, so every byte it reads or writes afterwards obeys it.

Modes (every decision is taken when a byte would be written, so bytes already read but not yet
delivered follow the mode in force at delivery time):

- ``pass``            forward bytes both ways.
- ``delay_response``  (``ms``) upstream->client bytes are delivered ``ms`` after they arrived at
                      the proxy; client->upstream passes. Switching to ``pass`` releases every
                      held byte at once, in order.
- ``drop_response``   client->upstream passes; upstream->client bytes are discarded (held ones
                      too). An upstream EOF is held, not discarded, so the client keeps waiting.
- ``reset``           every open connection is closed with an RST (SO_LINGER 0) on both sides;
                      new connections are accepted and reset at once.
- ``blackhole``       nothing is read or written in either direction (a partition whose TCP
                      retransmissions succeed when it heals); new connections are accepted but
                      not connected upstream until the mode changes. On ``pass`` the held bytes
                      flow in order.

Per direction the byte order never changes, and no byte is lost except in ``drop_response`` (or
when a connection is reset). Listen and control addresses must be loopback.

Control API: ``POST /mode`` with JSON ``{"mode": "delay_response", "ms": 2000}`` returns the
status; ``GET /status``. CLI: ``python -m world.fault_proxy --upstream HOST:PORT`` prints one
JSON line ``{"port": .., "control_url": ..}`` and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import collections
import errno
import ipaddress
import json
import selectors
import signal
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("pass", "delay_response", "drop_response", "reset", "blackhole")
_MODE_PARAMS = {"delay_response": {"ms"}}

UP = 0  # client -> upstream
DOWN = 1  # upstream -> client
_DATA, _EOF, _RST = 0, 1, 2
_RECV = 65536
_QUEUE_CAP = 4 * 1024 * 1024  # stop reading a side while this much is queued for the other
_CALL_TIMEOUT = 10.0


class ProxyError(ValueError):
    """Bad proxy configuration or control input."""


def validate_mode(mode: Any, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Check a mode and its parameters; return them normalised or raise ProxyError."""
    valid = ", ".join(MODES)
    if not isinstance(mode, str) or mode not in MODES:
        raise ProxyError(f"unknown mode {mode!r}; valid modes: {valid}")
    allowed = _MODE_PARAMS.get(mode, set())
    extra = set(params) - allowed
    if extra:
        raise ProxyError(
            f"mode {mode!r} takes no parameter(s) {sorted(extra)}"
            f" (allowed: {sorted(allowed) or 'none'}); valid modes: {valid}"
        )
    if mode == "delay_response":
        ms = params.get("ms")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or ms != ms or ms < 0:
            raise ProxyError(
                f"delay_response needs a number ms >= 0, got {ms!r}; valid modes: {valid}"
            )
        return mode, {"ms": ms}
    return mode, {}


def require_loopback(host: str, what: str) -> None:
    """Refuse anything but a loopback address (the proxy is a local test tool)."""
    if host == "localhost":
        return
    try:
        ok = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ProxyError(f"{what} address {host!r} is not loopback; only 127.0.0.0/8 or ::1")


def parse_hostport(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ProxyError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def _set_rst(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


def _nodelay(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass


class _Conn:
    def __init__(self, cid: int, client: socket.socket, peer: Any) -> None:
        self.id = cid
        self.peer = peer
        self.client = client
        self.upstream: socket.socket | None = None
        self.connecting = False
        self.closed = False
        # per direction: deque of [arrival, kind, data]
        self.q: list[collections.deque] = [collections.deque(), collections.deque()]
        self.qbytes = [0, 0]
        self.read_done = [False, False]  # source side EOF/error seen
        self.write_done = [False, False]  # EOF delivered to the destination
        self.events: dict[int, int] = {}  # fileno -> registered mask

    def src(self, d: int) -> socket.socket | None:
        return self.client if d == UP else self.upstream

    def dst(self, d: int) -> socket.socket | None:
        return self.upstream if d == UP else self.client


class FaultProxy:
    """A TCP proxy in front of ``upstream`` whose fault mode can change at any time."""

    def __init__(
        self,
        upstream: tuple[str, int],
        listen: tuple[str, int] = ("127.0.0.1", 0),
        control: tuple[str, int] | None = ("127.0.0.1", 0),
    ) -> None:
        require_loopback(listen[0], "listen")
        if control is not None:
            require_loopback(control[0], "control")
        self.upstream = (upstream[0], int(upstream[1]))
        self.listen = (listen[0], int(listen[1]))
        self.control = control
        self.mode = "pass"
        self.params: dict[str, Any] = {}
        self._stats = collections.Counter()
        self._conns: dict[int, _Conn] = {}
        self._next_id = 0
        self._calls: collections.deque = collections.deque()
        self._calls_lock = threading.Lock()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._sel: selectors.BaseSelector | None = None
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._upstream_addr: tuple[int, Any] | None = None
        self.port = 0
        self.control_url: str | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> FaultProxy:
        if self._thread is not None:
            return self
        info = socket.getaddrinfo(*self.upstream, type=socket.SOCK_STREAM)[0]
        self._upstream_addr = (info[0], info[4])
        fam = socket.AF_INET6 if ":" in self.listen[0] else socket.AF_INET
        self._listener = socket.create_server(self.listen, family=fam, backlog=128)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, "listener")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._loop, name="fault-proxy", daemon=True)
        self._thread.start()
        if self.control is not None:
            cfam = socket.AF_INET6 if ":" in self.control[0] else socket.AF_INET
            server_cls = type("_CtlServer", (ThreadingHTTPServer,), {"address_family": cfam})
            self._http = server_cls(self.control, _ControlHandler)
            self._http.daemon_threads = True
            self._http.proxy = self  # type: ignore[attr-defined]
            host, cport = self._http.server_address[:2]
            host = f"[{host}]" if ":" in host else host
            self.control_url = f"http://{host}:{cport}"
            self._http_thread = threading.Thread(
                target=self._http.serve_forever, name="fault-proxy-control", daemon=True
            )
            self._http_thread.start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._thread is not None:
            self._stopping = True
            self._wake()
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- public control

    def set_mode(self, mode: str, **params: Any) -> dict[str, Any]:
        """Switch mode; returns the status once the new mode is in force."""
        mode, params = validate_mode(mode, params)
        return self._call(lambda: self._apply_mode(mode, params))

    def status(self) -> dict[str, Any]:
        return self._call(self._status)

    # ----------------------------------------------------------------- loop plumbing

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run fn on the loop thread (or here when it is not running) and return its result."""
        t = self._thread
        if t is None or not t.is_alive() or threading.current_thread() is t:
            return fn()
        done = threading.Event()
        box: dict[str, Any] = {}
        with self._calls_lock:
            self._calls.append((fn, box, done))
        self._wake()
        if not done.wait(_CALL_TIMEOUT):
            raise TimeoutError("fault proxy loop did not answer")
        if "error" in box:
            raise box["error"]
        return box["result"]

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")  # type: ignore[union-attr]
        except (BlockingIOError, OSError):
            pass

    def _run_calls(self) -> None:
        while True:
            with self._calls_lock:
                if not self._calls:
                    return
                fn, box, done = self._calls.popleft()
            try:
                box["result"] = fn()
            except Exception as e:  # handed back to the caller
                box["error"] = e
            done.set()

    def _status(self) -> dict[str, Any]:
        held = [0, 0]
        for c in self._conns.values():
            held[UP] += c.qbytes[UP]
            held[DOWN] += c.qbytes[DOWN]
        return {
            "mode": self.mode,
            "params": dict(self.params),
            "open_connections": len(self._conns),
            "connections_accepted": self._stats["accepted"],
            "bytes_up": self._stats["bytes_up"],
            "bytes_down": self._stats["bytes_down"],
            "held_bytes_up": held[UP],
            "held_bytes_down": held[DOWN],
            "dropped_bytes": self._stats["dropped_bytes"],
            "resets": self._stats["resets"],
            "upstream_connect_failures": self._stats["connect_failures"],
            "upstream": f"{self.upstream[0]}:{self.upstream[1]}",
            "port": self.port,
            "control_url": self.control_url,
        }

    def _apply_mode(self, mode: str, params: dict[str, Any]) -> dict[str, Any]:
        self.mode, self.params = mode, params
        if mode == "reset":
            for c in list(self._conns.values()):
                self._abort(c)
        elif mode == "drop_response":
            for c in self._conns.values():
                self._purge_down(c)
        if mode != "blackhole":
            for c in list(self._conns.values()):
                if c.upstream is None and not c.closed:
                    self._connect_upstream(c)
        return self._status()

    # ----------------------------------------------------------------- the loop

    def _loop(self) -> None:
        sel = self._sel
        assert sel is not None
        try:
            while not self._stopping:
                self._run_calls()
                for c in list(self._conns.values()):
                    self._update_interest(c)
                timeout = self._next_timeout()
                for key, mask in sel.select(timeout):
                    tag = key.data
                    if tag == "listener":
                        self._accept()
                    elif tag == "wake":
                        try:
                            while self._wake_r.recv(4096):  # type: ignore[union-attr]
                                pass
                        except (BlockingIOError, OSError):
                            pass
                    else:
                        conn, side = tag
                        if not conn.closed:
                            self._on_event(conn, side, mask)
                if self.mode == "delay_response":
                    for c in list(self._conns.values()):
                        self._pump(c, DOWN)
        finally:
            self._run_calls()
            for c in list(self._conns.values()):
                self._close(c, rst=False)
            for s in (self._listener, self._wake_r, self._wake_w):
                if s is not None:
                    s.close()
            sel.close()

    def _next_timeout(self) -> float | None:
        if self.mode != "delay_response":
            return None
        delay = self.params["ms"] / 1000.0
        now = time.monotonic()
        best: float | None = None
        for c in self._conns.values():
            if c.q[DOWN]:
                wait = c.q[DOWN][0][0] + delay - now
                if wait > 0:  # due heads are handled by write interest
                    best = wait if best is None else min(best, wait)
        return best

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self._stats["accepted"] += 1
            if self.mode == "reset":
                _set_rst(client)
                client.close()
                self._stats["resets"] += 1
                continue
            client.setblocking(False)
            _nodelay(client)
            self._next_id += 1
            c = _Conn(self._next_id, client, peer)
            self._conns[c.id] = c
            if self.mode != "blackhole":
                self._connect_upstream(c)

    def _connect_upstream(self, c: _Conn) -> None:
        assert self._upstream_addr is not None
        fam, addr = self._upstream_addr
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setblocking(False)
        _nodelay(s)
        c.upstream = s
        err = s.connect_ex(addr)
        if err in (0,):
            c.connecting = False
        elif err in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            c.connecting = True
        else:
            self._stats["connect_failures"] += 1
            self._abort(c)

    def _want(self, c: _Conn, sock: socket.socket) -> int:
        if self.mode in ("blackhole", "reset"):
            return 0
        if sock is c.upstream and c.connecting:
            return selectors.EVENT_WRITE
        d_out = UP if sock is c.upstream else DOWN  # direction this socket is written in
        d_in = 1 - d_out  # direction this socket is read for
        mask = 0
        if not c.read_done[d_in] and c.qbytes[d_in] < _QUEUE_CAP:
            if d_in == UP or not c.connecting:
                mask |= selectors.EVENT_READ
        if self._deliverable(c, d_out):
            mask |= selectors.EVENT_WRITE
        return mask

    def _update_interest(self, c: _Conn) -> None:
        sel = self._sel
        assert sel is not None
        for sock, side in ((c.client, "client"), (c.upstream, "upstream")):
            if sock is None:
                continue
            fd = sock.fileno()
            if fd < 0:
                continue
            mask = self._want(c, sock)
            old = c.events.get(fd, 0)
            if mask == old:
                continue
            if old and mask:
                sel.modify(sock, mask, (c, side))
            elif mask:
                sel.register(sock, mask, (c, side))
            else:
                sel.unregister(sock)
            c.events[fd] = mask

    def _deliverable(self, c: _Conn, d: int) -> bool:
        q = c.q[d]
        if not q or self.mode in ("blackhole", "reset"):
            return False
        if d == UP and (c.upstream is None or c.connecting):
            return False
        if d == DOWN:
            if self.mode == "drop_response":
                return False
            if self.mode == "delay_response":
                return q[0][0] + self.params["ms"] / 1000.0 <= time.monotonic()
        return True

    def _on_event(self, c: _Conn, side: str, mask: int) -> None:
        if side == "upstream" and c.connecting:
            if mask & selectors.EVENT_WRITE:
                assert c.upstream is not None
                err = c.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    self._stats["connect_failures"] += 1
                    self._abort(c)
                    return
                c.connecting = False
                self._pump(c, UP)
            return
        d_in = UP if side == "client" else DOWN
        if mask & selectors.EVENT_READ:
            self._read(c, d_in)
            if c.closed:
                return
            self._pump(c, d_in)
        if mask & selectors.EVENT_WRITE and not c.closed:
            self._pump(c, 1 - d_in)

    def _read(self, c: _Conn, d: int) -> None:
        src = c.src(d)
        assert src is not None
        try:
            data = src.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            c.read_done[d] = True
            c.q[d].append([time.monotonic(), _RST, b""])
            return
        now = time.monotonic()
        if not data:
            c.read_done[d] = True
            c.q[d].append([now, _EOF, b""])
            return
        if d == DOWN and self.mode == "drop_response":
            self._stats["dropped_bytes"] += len(data)
            return
        c.q[d].append([now, _DATA, data])
        c.qbytes[d] += len(data)

    def _purge_down(self, c: _Conn) -> None:
        kept = collections.deque(item for item in c.q[DOWN] if item[1] != _DATA)
        self._stats["dropped_bytes"] += c.qbytes[DOWN]
        c.q[DOWN], c.qbytes[DOWN] = kept, 0

    def _pump(self, c: _Conn, d: int) -> None:
        q = c.q[d]
        while not c.closed and self._deliverable(c, d):
            dst = c.dst(d)
            assert dst is not None
            item = q[0]
            if item[1] == _DATA:
                try:
                    n = dst.send(item[2])
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    self._abort(c)
                    return
                self._stats["bytes_up" if d == UP else "bytes_down"] += n
                c.qbytes[d] -= n
                if n < len(item[2]):
                    item[2] = item[2][n:]
                    return
                q.popleft()
            elif item[1] == _EOF:
                q.popleft()
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                c.write_done[d] = True
                if c.write_done[UP] and c.write_done[DOWN]:
                    self._close(c, rst=False)
                    return
            else:  # the source side broke: pass the reset on
                self._abort(c)
                return

    def _abort(self, c: _Conn) -> None:
        self._stats["resets"] += 1
        self._close(c, rst=True)

    def _close(self, c: _Conn, *, rst: bool) -> None:
        if c.closed:
            return
        c.closed = True
        for sock in (c.client, c.upstream):
            if sock is None:
                continue
            try:
                if c.events.get(sock.fileno(), 0):
                    self._sel.unregister(sock)  # type: ignore[union-attr]
            except (KeyError, ValueError, OSError):
                pass
            if rst:
                _set_rst(sock)
            try:
                sock.close()
            except OSError:
                pass
        self._conns.pop(c.id, None)


class _ControlHandler(BaseHTTPRequestHandler):
    server_version = "ilr-fault-proxy/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.split("?")[0] == "/status":
            self._reply(200, self.server.proxy.status())  # type: ignore[attr-defined]
        else:
            self._reply(404, {"error": "not found", "paths": ["GET /status", "POST /mode"]})

    def do_POST(self) -> None:  # noqa: N802
        if self.path.split("?")[0] != "/mode":
            self._reply(404, {"error": "not found", "paths": ["GET /status", "POST /mode"]})
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
            if not isinstance(body, dict):
                raise ProxyError(
                    f'body must be a JSON object like {{"mode": "pass"}}; valid modes: '
                    f"{', '.join(MODES)}"
                )
            params = {k: v for k, v in body.items() if k != "mode"}
            proxy: FaultProxy = self.server.proxy  # type: ignore[attr-defined]
            status = proxy.set_mode(body.get("mode"), **params)
        except (ProxyError, json.JSONDecodeError, UnicodeDecodeError) as e:
            msg = str(e)
            if not isinstance(e, ProxyError):
                msg = f"body is not JSON ({msg}); valid modes: {', '.join(MODES)}"
            self._reply(400, {"error": msg, "valid_modes": list(MODES)})
            return
        self._reply(200, status)


class ProxyControl:
    """A small client for a proxy's HTTP control API (e.g. one started by the CLI)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            try:
                detail = json.loads(detail).get("error", detail)
            except (ValueError, AttributeError):
                pass
            raise ProxyError(f"proxy control {method} {path} -> {e.code}: {detail}") from None

    def set_mode(self, mode: str, **params: Any) -> dict[str, Any]:
        return self._request("POST", "/mode", {"mode": mode, **params})

    def status(self) -> dict[str, Any]:
        return self._request("GET", "/status")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m world.fault_proxy", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--listen", default="127.0.0.1:0", help="loopback HOST:PORT (default port 0)")
    ap.add_argument("--control", default="127.0.0.1:0", help="loopback HOST:PORT for the HTTP API")
    args = ap.parse_args(argv)
    try:
        proxy = FaultProxy(
            parse_hostport(args.upstream),
            listen=parse_hostport(args.listen),
            control=parse_hostport(args.control),
        )
        proxy.start()
    except (ProxyError, OSError) as e:
        print(f"fault_proxy: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(json.dumps({"port": proxy.port, "control_url": proxy.control_url}), flush=True)
    while not stop.wait(0.5):
        pass
    proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
