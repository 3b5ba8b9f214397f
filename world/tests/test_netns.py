"""world/netns.py on real namespaces: each namespace reaches the root namespace through its own
link; a port partition cuts exactly that port in both directions and an open connection resumes
when it heals; a link partition cuts everything; nothing is left behind, and what a dead
process left is swept."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from world import netns

pytestmark = pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))


class Echo:
    """A TCP server in the root namespace that answers each message with 'ok:' + message."""

    def __init__(self, host: str) -> None:
        self.server = socket.create_server((host, 0))
        self.port = self.server.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        try:
            while data := conn.recv(100):
                conn.sendall(b"ok:" + data)
        except OSError:
            pass

    def close(self) -> None:
        self.server.close()
        for c in self.conns:
            c.close()


def _ask(sock: socket.socket, msg: bytes, timeout: float) -> bytes | None:
    sock.settimeout(timeout)
    sock.sendall(msg)
    try:
        return sock.recv(100)
    except TimeoutError:
        return None


def _leftovers(pid: int) -> list[str]:
    mine = [n for n in netns.namespaces() if n.startswith(f"{netns.PREFIX}{pid}-")]
    return mine + [link for link in netns.root_links() if link.startswith(f"ilr{pid}h")]


def test_each_namespace_is_a_host_and_leaves_nothing_behind() -> None:
    with netns.NetWorld("a", "b") as world:
        a, b = world["a"], world["b"]
        assert a.subnet != b.subnet and a.gateway in world.gateways
        echo = Echo(a.gateway)
        try:
            for space in (a, b):  # b reaches a's gateway through its default route
                with space.connect(a.gateway, echo.port) as s:
                    assert _ask(s, b"hi", 5) == b"ok:hi"
                    assert s.getsockname()[0] == space.address  # from the namespace's address
            out = a.run(["ip", "-o", "-4", "addr", "show", "dev", "eth0"], capture_output=True,
                        text=True, check=True).stdout  # fmt: skip
            assert a.address in out
        finally:
            echo.close()
        assert len(_leftovers(os.getpid())) == 4  # two namespaces, two links
    assert _leftovers(os.getpid()) == []


def test_a_port_partition_cuts_that_port_both_ways_and_an_open_connection_resumes() -> None:
    with netns.NetWorld("a") as world:
        a = world["a"]
        cut, other = Echo(a.gateway), Echo(a.gateway)
        try:
            held = a.connect(a.gateway, cut.port)
            assert _ask(held, b"1", 5) == b"ok:1"
            a.partition([cut.port])
            assert a.partitioned
            assert _ask(held, b"2", 1.5) is None  # the request does not get through
            cut.conns[0].sendall(b"push")  # nor does anything the server sends
            held.settimeout(1.5)
            with pytest.raises(TimeoutError):
                held.recv(100)
            with pytest.raises(OSError):
                a.connect(a.gateway, cut.port, timeout=2)
            with a.connect(a.gateway, other.port) as s:  # every other port still answers
                assert _ask(s, b"x", 5) == b"ok:x"
            a.heal()
            assert not a.partitioned
            held.settimeout(20)
            got = b""
            t0 = time.monotonic()
            while len(got) < len(b"pushok:2") and time.monotonic() - t0 < 20:
                got += held.recv(100)  # the retransmissions arrive once healed
            assert got in (b"pushok:2", b"ok:2push"), got
            held.close()
        finally:
            cut.close()
            other.close()


def test_a_link_partition_cuts_everything_until_healed() -> None:
    with netns.NetWorld("a") as world:
        a = world["a"]
        echo = Echo(a.gateway)
        try:
            a.partition()
            with pytest.raises(OSError):
                a.connect(a.gateway, echo.port, timeout=1)
            a.heal()
            with a.connect(a.gateway, echo.port) as s:
                assert _ask(s, b"back", 5) == b"ok:back"
        finally:
            echo.close()


def test_a_dead_process_leftovers_are_swept_and_a_relay_forwards() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(dead.stdout)
    stale = netns.Namespace(f"{netns.PREFIX}{pid}-x", 254, f"ilr{pid}h254")
    try:
        stale._create()
        assert len(_leftovers(pid)) == 2
        with netns.NetWorld("a") as world:
            assert _leftovers(pid) == []  # swept before anything was made
            a = world["a"]
            echo = Echo("127.0.0.1")  # a loopback-only service
            try:
                with netns.Relay(a.gateway, echo.port) as relay:
                    assert relay.url == f"http://{a.gateway}:{relay.port}"
                    with a.connect(a.gateway, relay.port) as s:
                        assert _ask(s, b"via", 5) == b"ok:via"
            finally:
                echo.close()
    finally:
        stale.destroy()
