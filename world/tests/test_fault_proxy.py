"""The fault proxy over real sockets: a tiny upstream started here, and Postgres if it answers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from world.fault_proxy import MODES, FaultProxy, ProxyControl, ProxyError


class Upstream:
    """A TCP server that records what each connection sends and (optionally) echoes it back."""

    def __init__(self, echo: bool = True) -> None:
        self.echo = echo
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.cond = threading.Condition()
        self.conns: list[socket.socket] = []
        self.received: list[bytearray] = []
        self.eof: list[bool] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.cond:
                i = len(self.conns)
                self.conns.append(c)
                self.received.append(bytearray())
                self.eof.append(False)
                self.cond.notify_all()
            threading.Thread(target=self._serve, args=(i, c), daemon=True).start()

    def _serve(self, i: int, c: socket.socket) -> None:
        while True:
            try:
                data = c.recv(65536)
            except OSError:
                data = b""
            with self.cond:
                if not data:
                    self.eof[i] = True
                    self.cond.notify_all()
                    break
                self.received[i] += data
                self.cond.notify_all()
            if self.echo:
                try:
                    c.sendall(data)
                except OSError:
                    break
        if self.echo:
            try:
                c.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def wait(self, pred, timeout: float = 3.0) -> bool:
        with self.cond:
            return self.cond.wait_for(pred, timeout)

    def got(self, i: int) -> bytes:
        with self.cond:
            return bytes(self.received[i]) if i < len(self.received) else b""

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


@pytest.fixture
def upstream():
    u = Upstream()
    yield u
    u.close()


@pytest.fixture
def proxy(upstream):
    with FaultProxy(("127.0.0.1", upstream.port)) as p:
        yield p


def connect(p: FaultProxy, timeout: float = 3.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", p.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s: socket.socket, n: int, timeout: float = 3.0) -> bytes:
    s.settimeout(timeout)
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def assert_silent(s: socket.socket, wait: float) -> None:
    s.settimeout(wait)
    with pytest.raises(socket.timeout):
        data = s.recv(100)
        pytest.fail(f"expected no bytes, got {data!r}")


def expect_reset_on_connect(p: FaultProxy) -> None:
    """A new connection is accepted and reset at once: the RST can beat connect() returning."""
    with pytest.raises(ConnectionResetError):
        s = connect(p)
        try:
            s.settimeout(2)
            s.recv(10)
        finally:
            s.close()


def test_pass_forwards_both_ways_in_order(proxy, upstream):
    payload = os.urandom(300_000)
    s = connect(proxy)
    threading.Thread(target=s.sendall, args=(payload,), daemon=True).start()
    assert recv_exact(s, len(payload), timeout=5) == payload
    assert upstream.got(0) == payload
    st = proxy.status()
    assert st["mode"] == "pass"
    assert st["bytes_up"] == len(payload) and st["bytes_down"] == len(payload)
    assert st["open_connections"] == 1 and st["connections_accepted"] == 1
    s.close()


def test_half_close_propagates_eof(proxy, upstream):
    s = connect(proxy)
    s.sendall(b"last words")
    s.shutdown(socket.SHUT_WR)
    assert upstream.wait(lambda: upstream.eof and upstream.eof[0])
    assert recv_exact(s, 100) == b"last words"  # echo, then the upstream's FIN reaches us
    assert proxy.status()["open_connections"] == 0 or upstream.wait(lambda: True, 0.2)
    s.close()


def test_delay_response_is_measured_and_requests_pass(proxy, upstream):
    s = connect(proxy)
    s.sendall(b"warm")
    assert recv_exact(s, 4) == b"warm"
    st = proxy.set_mode("delay_response", ms=400)
    assert st["mode"] == "delay_response" and st["params"] == {"ms": 400}
    t0 = time.monotonic()
    s.sendall(b"ping")
    assert upstream.wait(lambda: upstream.got(0) == b"warmping", 1.0)
    t_up = time.monotonic()
    assert t_up - t0 < 0.3, "client->upstream must not be delayed"
    assert recv_exact(s, 4, timeout=3) == b"ping"
    elapsed = time.monotonic() - t0
    assert elapsed >= 0.4, elapsed
    assert elapsed < 1.5, elapsed
    s.close()


def test_delay_held_bytes_released_at_once_on_pass(proxy, upstream):
    s = connect(proxy)
    proxy.set_mode("delay_response", ms=5000)
    t0 = time.monotonic()
    for part in (b"one;", b"two;", b"three;"):
        s.sendall(part)
        time.sleep(0.05)
    assert upstream.wait(lambda: upstream.got(0) == b"one;two;three;")
    assert_silent(s, 0.3)
    assert proxy.status()["held_bytes_down"] == len(b"one;two;three;")
    proxy.set_mode("pass")
    assert recv_exact(s, 14, timeout=1.0) == b"one;two;three;"
    assert time.monotonic() - t0 < 2.0
    s.close()


def test_drop_response_discards_replies_but_requests_arrive(proxy, upstream):
    s = connect(proxy)
    proxy.set_mode("drop_response")
    s.sendall(b"req-1")
    assert upstream.wait(lambda: upstream.got(0) == b"req-1")
    assert_silent(s, 0.4)
    assert proxy.status()["dropped_bytes"] == 5
    proxy.set_mode("pass")
    s.sendall(b"req-2")
    assert recv_exact(s, 5) == b"req-2"  # the first reply is gone for good
    assert_silent(s, 0.2)
    s.close()


def test_blackhole_holds_both_directions_then_flows_in_order(proxy, upstream):
    s = connect(proxy)
    s.sendall(b"hello")
    assert recv_exact(s, 5) == b"hello"
    proxy.set_mode("blackhole")
    s.sendall(b"held-up-1;")
    upstream.conns[0].sendall(b"pushed-down;")
    s.sendall(b"held-up-2;")
    late = connect(proxy)  # accepted, but not connected upstream while the partition lasts
    late.sendall(b"late-conn")
    assert not upstream.wait(lambda: len(upstream.got(0)) > 5 or len(upstream.conns) > 1, 0.5)
    assert_silent(s, 0.1)
    assert_silent(late, 0.1)
    st = proxy.status()
    assert st["connections_accepted"] == 2 and st["open_connections"] == 2
    proxy.set_mode("pass")
    want_up = b"hello" + b"held-up-1;held-up-2;"
    assert upstream.wait(lambda: upstream.got(0) == want_up)
    want_down = b"pushed-down;" + b"held-up-1;held-up-2;"
    assert recv_exact(s, len(want_down)) == want_down
    assert upstream.wait(lambda: upstream.got(1) == b"late-conn")
    assert recv_exact(late, 9) == b"late-conn"
    s.close()
    late.close()


def test_order_preserved_while_modes_switch_mid_connection(proxy, upstream):
    s = connect(proxy)
    msgs = [f"{i:06d};".encode() for i in range(1500)]
    sent = b"".join(msgs)
    got = bytearray()

    def reader() -> None:
        s.settimeout(10)
        while len(got) < len(sent):
            chunk = s.recv(65536)
            if not chunk:
                return
            got.extend(chunk)

    def writer() -> None:
        for m in msgs:
            s.sendall(m)
            time.sleep(0.0005)

    rt = threading.Thread(target=reader, daemon=True)
    wt = threading.Thread(target=writer, daemon=True)
    rt.start()
    wt.start()
    cycle = [("delay_response", {"ms": 80}), ("blackhole", {}), ("pass", {})] * 3
    for mode, params in cycle:
        time.sleep(0.1)
        assert proxy.set_mode(mode, **params)["mode"] == mode
    wt.join(10)
    proxy.set_mode("pass")
    rt.join(10)
    assert upstream.got(0) == sent
    assert bytes(got) == sent
    s.close()


def test_reset_existing_and_new_connections(proxy, upstream):
    s = connect(proxy)
    s.sendall(b"x")
    assert recv_exact(s, 1) == b"x"
    st = proxy.set_mode("reset")
    assert st["open_connections"] == 0
    s.settimeout(2)
    with pytest.raises(ConnectionResetError):
        s.recv(10)
    s.close()
    expect_reset_on_connect(proxy)
    assert proxy.status()["resets"] >= 2
    proxy.set_mode("pass")
    ok = connect(proxy)
    ok.sendall(b"again")
    assert recv_exact(ok, 5) == b"again"
    ok.close()


def test_upstream_refusing_resets_the_client(upstream):
    dead = socket.create_server(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()
    with FaultProxy(("127.0.0.1", port), control=None) as p:
        assert p.control_url is None
        expect_reset_on_connect(p)
        assert p.status()["upstream_connect_failures"] == 1


def _post(url: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=3) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_http_control_and_bad_input(proxy, upstream):
    ctl = ProxyControl(proxy.control_url)
    assert ctl.status()["mode"] == "pass"
    st = ctl.set_mode("delay_response", ms=250)
    assert st["mode"] == "delay_response" and st["params"] == {"ms": 250}
    assert proxy.status()["params"] == {"ms": 250}
    bad = [
        b'{"mode": "explode"}',
        b'{"mode": "delay_response"}',
        b'{"mode": "delay_response", "ms": -1}',
        b'{"mode": "delay_response", "ms": "100"}',
        b'{"mode": "delay_response", "ms": true}',
        b'{"mode": "pass", "ms": 5}',
        b"not json",
        b'["pass"]',
        b"{}",
    ]
    for body in bad:
        code, reply = _post(proxy.control_url + "/mode", body)
        assert code == 400, body
        assert reply["valid_modes"] == list(MODES)
        assert "valid modes" in reply["error"], reply
    code, _ = _post(proxy.control_url + "/nope", b"{}")
    assert code == 404
    assert proxy.status()["mode"] == "delay_response"  # bad input changed nothing
    with pytest.raises(ProxyError, match="valid modes"):
        ctl.set_mode("bogus")
    with pytest.raises(ProxyError):
        proxy.set_mode("delay_response", ms=-5)


def test_only_loopback_addresses(upstream):
    with pytest.raises(ProxyError, match="loopback"):
        FaultProxy(("127.0.0.1", upstream.port), listen=("0.0.0.0", 0))
    with pytest.raises(ProxyError, match="loopback"):
        FaultProxy(("127.0.0.1", upstream.port), control=("10.1.2.3", 0))


def test_cli_start_control_stop(upstream):
    cmd = [sys.executable, "-m", "world.fault_proxy", "--upstream", f"127.0.0.1:{upstream.port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert set(info) == {"port", "control_url"}
        s = socket.create_connection(("127.0.0.1", info["port"]), timeout=3)
        s.sendall(b"cli")
        assert recv_exact(s, 3) == b"cli"
        ctl = ProxyControl(info["control_url"])
        assert ctl.set_mode("blackhole")["mode"] == "blackhole"
        s.sendall(b"zz")
        assert_silent(s, 0.3)
        assert ctl.status()["held_bytes_up"] + len(upstream.got(0)) >= 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
        s.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    bad = subprocess.run(
        cmd + ["--listen", "0.0.0.0:0"], capture_output=True, text=True, timeout=20
    )
    assert bad.returncode == 2 and "loopback" in bad.stderr


def _pg_target():
    """The configured cluster (ILR_DSN, else the project's own on ILR_PG_PORT, started if
    needed: interlock_runtime.testing.admin_dsn). A cluster that does not answer fails the
    test: it is never skipped."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from interlock_runtime import testing

    dsn = testing.admin_dsn()
    psycopg.connect(dsn, connect_timeout=5).close()
    d = conninfo_to_dict(dsn)
    return psycopg, d, d.get("host") or "127.0.0.1", int(d.get("port") or 5432)


@pytest.mark.pg
def test_postgres_through_the_proxy():
    psycopg, d, host, port = _pg_target()
    with FaultProxy((host, port)) as p:
        d2 = dict(d, host="127.0.0.1", port=str(p.port), connect_timeout="3")
        conn = psycopg.connect(**d2, autocommit=True)
        assert conn.execute("select 41 + 1").fetchone() == (42,)

        p.set_mode("delay_response", ms=300)
        t0 = time.monotonic()
        assert conn.execute("select 1").fetchone() == (1,)
        assert time.monotonic() - t0 >= 0.3

        p.set_mode("blackhole")
        box = {}
        t = threading.Thread(target=lambda: box.update(r=conn.execute("select 7").fetchone()))
        t.start()
        t.join(0.5)
        assert t.is_alive(), "a query must not complete through a blackhole"
        p.set_mode("pass")
        t.join(3)
        assert box.get("r") == (7,)

        p.set_mode("reset")
        with pytest.raises(psycopg.OperationalError):
            conn.execute("select 1")
        conn.close()
        p.set_mode("pass")
        with psycopg.connect(**d2) as c2:
            assert c2.execute("select 2").fetchone() == (2,)
